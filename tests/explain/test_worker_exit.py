"""The message "DataLoader worker ... exited unexpectedly" means different things by start method.

With spawn / forkserver a worker could not import code defined in the notebook; with fork (Linux's
default) it inherits that code, and the worker ran out of shared memory (/dev/shm) or crashed / was
killed (OOM killer, a signal).
"""

from __future__ import annotations

import sys

import pytest

from .failing import SETUP, fail, notes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork start method")

DYING = (
    "import os, signal\n"
    "from torch.utils.data import DataLoader, Dataset\n"
    "class Dying(Dataset):\n"
    "    def __init__(self, how): self.how = how\n"
    "    def __len__(self): return 4\n"
    "    def __getitem__(self, i):\n"
    "        if self.how == 'exit':\n"
    "            os._exit(3)\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
)


def test_forked_worker_that_exits_is_not_diagnosed_as_spawn_real(ip):
    # real: a forked worker dies; torch raises "DataLoader worker (pid(s) N) exited unexpectedly"
    # from the SIGCHLD handler's "... exited unexpectedly with exit code 3 ..."
    # (torch/csrc/DataLoader.cpp)
    ip.run_cell(SETUP)
    ip.run_cell(
        DYING + "loader = DataLoader(Dying('exit'), num_workers=1, multiprocessing_context='fork', "
        "timeout=60)"
    )
    expl, result = fail(ip, "next(iter(loader))")
    assert "exited unexpectedly" in str(result.error_in_exec)
    assert expl.entry.id == "worker-exited", expl.entry.id
    facts = expl.context.facts
    assert facts["start_methods"] == ["fork"] and facts["exit_code"] == 3 and facts["signal"] == ""
    assert facts["loaders_with_workers"] == ["loader"] and facts["shm_total_bytes"] > 0
    text = expl.to_text()
    assert "Spawned workers" not in text and "cannot import" not in text and "mydata" not in text
    for advice in ("df -h /dev/shm", "--shm-size=8g", "num_workers=0"):
        assert advice in text
    assert "`loader` starts 1 worker(s) with fork" in notes(expl)
    assert "exited with code 3" in notes(expl)


def test_forked_worker_killed_points_at_the_oom_killer_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        DYING + "loader = DataLoader(Dying('kill'), num_workers=1, multiprocessing_context='fork', "
        "timeout=60)"
    )
    expl, _ = fail(ip, "next(iter(loader))")
    assert expl.entry.id == "worker-exited"
    assert expl.context.facts["signal"] == "Killed" and expl.context.facts["exit_code"] is None
    assert "OOM killer" in notes(expl) and "dmesg" in notes(expl)


@pytest.mark.parametrize(
    "method, entry_id",
    [("fork", "worker-exited"), ("spawn", "spawn-main"), ("forkserver", "spawn-main")],
)
def test_exited_unexpectedly_follows_the_loaders_start_method(ip, method, entry_id):
    # torch/utils/data/dataloader.py: _try_get_data (exact text); the loader's own
    # multiprocessing_context decides
    ip.run_cell(SETUP)
    ip.run_cell(
        DYING
        + f"loader = DataLoader(Dying('exit'), num_workers=2, multiprocessing_context={method!r})"
    )
    for message in (
        "DataLoader worker (pid(s) 10468, 10472) exited unexpectedly",
        "DataLoader worker (pid 10468) exited unexpectedly with exit code 1. Details are lost due "
        "to "
        "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
    ):
        expl, _ = fail(ip, f"raise RuntimeError({message!r})")
        assert expl.entry.id == entry_id, (method, message)
        if method != "fork":
            assert f"`loader` starts 2 worker(s) with {method}" in notes(expl)


@pytest.mark.parametrize("method, entry_id", [("fork", "worker-exited"), ("spawn", "spawn-main")])
def test_without_a_loader_the_process_start_method_decides(ip, monkeypatch, method, entry_id):
    import multiprocessing

    ip.run_cell(SETUP)
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: method)
    expl, _ = fail(ip, "raise RuntimeError('DataLoader worker (pid(s) 77) exited unexpectedly')")
    assert expl.entry.id == entry_id


def test_pickling_failure_in_the_text_is_spawn_whatever_the_method(ip):
    # the worker's own message (Lib/pickle.py Unpickler.find_class) names the spawn failure even on
    # a fork kernel
    ip.run_cell(SETUP)
    expl, _ = fail(
        ip,
        "raise AttributeError(\"Can't get attribute 'Squares' on <module '__main__' (built-in)>\")",
    )
    assert expl.entry.id == "spawn-main"
