"""The progress line of a long build, in the magic's cells.

A slow nvcc wrapper first on PATH for the terminal line and an interrupt (tier 2), and a real
Jupyter kernel for the in-place display (tier 3); the line's rules with a fake clock are in
``tests/core/test_progress.py``. The wrapper sleeps before compiling, so every build here takes
over a second on any machine, however loaded.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from cudamagic.core.fmt import NO_MATH
from cudamagic.core.progress import ProgressLine

from .conftest import NVCC, cuda_magics, needs_nvcc

HELLO = (
    '%%cuda\n#include <cstdio>\nint main() { printf("hello after a slow build\\n"); return 0; }\n'
)


def _slow_nvcc(tmp_path, sleep_s: float, marker=None) -> str:
    """A folder holding an nvcc that sleeps before compiling.

    A folder holding an nvcc that sleeps before compiling (after touching ``marker``); the version
    and architecture queries pass straight through.
    """
    folder = tmp_path / "slow bin"
    folder.mkdir(exist_ok=True)
    wrapper = folder / "nvcc"
    touch = f'touch "{marker}"; ' if marker else ""
    wrapper.write_text(
        '#!/bin/sh\ncase "$*" in *-V*|*--version*|*--list-gpu*) ;; *) '
        f'{touch}sleep {sleep_s} ;; esac\nexec "{os.path.realpath(NVCC)}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(folder)


@pytest.fixture
def slow_path(tmp_path, monkeypatch):
    from cudamagic.core import nvcc as nvcc_module

    def use(sleep_s, marker=None):
        monkeypatch.delenv("CUDA_HOME", raising=False)
        monkeypatch.delenv("CUDA_PATH", raising=False)
        monkeypatch.setenv(
            "PATH", f"{_slow_nvcc(tmp_path, sleep_s, marker)}{os.pathsep}{os.environ['PATH']}"
        )
        monkeypatch.setattr(nvcc_module, "_info_cache", {})

    return use


@needs_nvcc
def test_terminal_line_of_a_slow_build(cuda_ip, slow_path, capfd):
    slow_path(1.5)
    result = cuda_ip.run_cell(HELLO)
    assert result.success, result.error_in_exec
    err = capfd.readouterr().err.splitlines()
    assert err[0].startswith("%%cuda: compiling with nvcc... ")
    assert err[1].startswith("%%cuda: nvcc build done after ")
    assert float(err[1].split("after ")[1].split()[0]) >= 1.5
    assert cuda_ip.run_cell(HELLO).success  # cached: no build, no progress
    assert "%%cuda:" not in capfd.readouterr().err


@needs_nvcc
def test_interrupt_during_a_shown_build_leaves_no_cache_entry(
    cuda_ip, slow_path, tmp_path, monkeypatch, capfd
):
    import _thread
    import tempfile

    slow_path(60, tmp_path / "compiling")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the build's work folder goes
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    shown = threading.Event()
    say = ProgressLine.say

    def say_and_tell(self, step):
        say(self, step)
        if self.shown:
            shown.set()

    monkeypatch.setattr(ProgressLine, "say", say_and_tell)

    def interrupt_when_shown():
        shown.wait(120)  # the compile has run over a second: the progress line is showing
        _thread.interrupt_main()

    waiter = threading.Thread(target=interrupt_when_shown, daemon=True)
    waiter.start()
    result = cuda_ip.run_cell(HELLO)
    waiter.join()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    err = capfd.readouterr().err
    assert "%%cuda: compiling with nvcc... " in err
    assert "%%cuda: nvcc build interrupted, stopped cleanly after " in err
    prog = os.path.join(cuda_magics()._workspace().root, "prog")
    assert (
        not os.path.isdir(prog) or os.listdir(prog) == []
    )  # no entry, no half-published temporary folder
    assert [p.name for p in scratch.iterdir() if p.name.startswith("cudamagic-cell-")] == []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [
            p
            for p in psutil.Process().children(recursive=True)
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
        ]
        if not left:
            break
        time.sleep(0.1)
    assert not left, "the wrapper, nvcc or its compilers survived the interrupt"


@needs_nvcc
@pytest.mark.kernel
def test_progress_in_a_notebook_is_one_display_updated_in_place(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    import run_demo

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{_slow_nvcc(tmp_path, 1.5)}{os.pathsep}{os.environ['PATH']}")
    cells = ["%load_ext cudamagic", HELLO.rstrip("\n")]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    run_demo.execute_nb(nb, timeout_s=180)
    outputs = nb.cells[1].outputs
    shown = [o for o in outputs if o.output_type == "display_data"]
    assert (
        len(shown) == 1
    )  # one display, updated in place (update_display_data), not one output per tick
    text = shown[0].data["text/plain"]
    # it was created showing the step; only an update can have turned it into the final state
    assert (
        text.startswith("%%cuda: nvcc build done after ")
        and float(text.split("after ")[1].split()[0]) >= 1.5
    )
    assert (
        NO_MATH in shown[0].data["text/html"].split(">", 1)[0]
        and "cm-note" in shown[0].data["text/html"]
    )
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert (
        "hello after a slow build" in streams and "%%cuda:" not in streams
    )  # no terminal line in a notebook
