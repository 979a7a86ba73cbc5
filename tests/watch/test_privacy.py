"""Privacy on shared servers: other users' command lines stay hidden.

Privacy on shared servers: %gpuwatch shows and --log records other users' process names, not their
command lines, unless --cmdline (or CudaMagics.watch_show_cmdlines) asks for them; this user's
processes keep theirs.
"""

import copy
import os
import subprocess

import psutil
import pytest

from cudamagic.core.na import is_na
from cudamagic.core.platform import same_user
from cudamagic.watch import trace
from cudamagic.watch.sources import PRIVATE_CMDLINE, UNKNOWN_OWNER_CMDLINE
from tests.core import test_platform
from tests.core.test_platform import DENIED, fake_windows_psutil
from tests.fake_nvml import GIB, SCENARIOS
from tests.watch.fakes import wait_until

from .fakes import live

windows = test_platform.windows  # the fixture that presents Windows, shared with core


def _pids(sample):
    return {p.pid: p for g in sample.gpus for p in g.processes}


def test_other_users_cmdlines_hidden_by_default(fake_nvml):
    scenario = copy.deepcopy(SCENARIOS["one_gpu"])
    scenario["gpus"][0]["processes"] = [(111, GIB), (222, GIB), (os.getpid(), GIB)]
    fake_nvml(scenario)
    mine = {222}
    procs = _pids(live(owner_is_me=mine.__contains__).read(1, 0.0))
    assert procs[111].name == "proc111" and procs[111].cmdline is PRIVATE_CMDLINE
    assert (
        "--cmdline" in procs[111].cmdline.reason
        and "watch_show_cmdlines" in procs[111].cmdline.reason
    )
    assert procs[222].cmdline == "python train222.py"  # this user's process
    assert procs[os.getpid()].cmdline == f"python train{os.getpid()}.py"  # this kernel
    shown = _pids(live(owner_is_me=mine.__contains__, show_cmdlines=True).read(1, 0.0))
    assert shown[111].cmdline == "python train111.py"


def test_same_user_reads_the_real_uid():
    assert same_user(os.getpid()) is True
    assert same_user(2**22 + 12345) is False  # no such pid: private


def test_windows_keeps_this_users_cmdlines(fake_nvml, windows):
    """Windows has no uids: the account name decides.

    Windows has no uids: the account name decides (README: "Your own user's processes always keep
    their command lines"); a process whose owner Windows will not tell is labelled as such, not as
    another user's.
    """
    scenario = copy.deepcopy(SCENARIOS["one_gpu"])
    scenario["gpus"][0]["processes"] = [(111, GIB), (222, GIB), (333, GIB), (os.getpid(), GIB)]
    fake_nvml(scenario)
    fake_windows_psutil(
        windows, {os.getpid(): "LAPTOP\\ana", 111: "LAPTOP\\bob", 222: "LAPTOP\\ana", 333: DENIED}
    )
    procs = _pids(live(counter_reader=lambda: {}).read(1, 0.0))
    assert procs[222].cmdline == "python train222.py"
    assert procs[111].cmdline is PRIVATE_CMDLINE
    assert (
        procs[333].cmdline is UNKNOWN_OWNER_CMDLINE
        and "owner cannot be read" in procs[333].cmdline.reason
    )
    assert "--cmdline" in procs[333].cmdline.reason


@pytest.fixture
def nobody_sleep():
    """A real process of another user (`nobody`); needs root to start one."""
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("starting another user's process needs root")
    import pwd

    uid = pwd.getpwnam("nobody").pw_uid
    proc = subprocess.Popen(
        ["sh", "-c", "sleep 60; :", "secret-token-123"], preexec_fn=lambda: os.setuid(uid)
    )
    # the shell has run (exec'd) once its command line is the one given
    assert wait_until(lambda: "secret-token-123" in " ".join(psutil.Process(proc.pid).cmdline()))
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize(
    "line, setting, shown", [("", False, False), ("--cmdline", False, True), ("", True, True)]
)
def test_log_records_other_users_cmdline_only_when_asked(
    ip, fake_nvml, tmp_path, nobody_sleep, line, setting, shown
):
    scenario = copy.deepcopy(SCENARIOS["one_gpu"])
    scenario["gpus"][0]["processes"] = [(nobody_sleep.pid, GIB), (os.getpid(), GIB)]
    fake_nvml(scenario)
    ip.run_line_magic("config", f"CudaMagics.watch_show_cmdlines = {setting}")
    try:
        log = tmp_path / "run.jsonl"
        watch = ip.run_line_magic("gpuwatch", f"--log {log} --interval 0.1 --count 2 {line}")
        assert watch.wait(10)
        raw = log.read_text()
        _header, samples = trace.read_trace(str(log))
    finally:
        ip.run_line_magic("gpuwatch", "--stop")
        ip.run_line_magic("config", "CudaMagics.watch_show_cmdlines = False")
    procs = _pids(samples[-1])
    other, own = procs[nobody_sleep.pid], procs[os.getpid()]
    assert other.name == "sh"
    assert own.cmdline == " ".join(psutil.Process().cmdline())[:200]
    if shown:
        assert other.cmdline == "sh -c sleep 60; : secret-token-123"
    else:
        assert is_na(other.cmdline) and other.cmdline.code == "private"
        assert "secret-token-123" not in raw
