"""Tier 1: the platform module, on this Linux machine and presenting Windows (no os.killpg, no signal.SIGKILL,
no resource module, Windows paths)."""

from __future__ import annotations

import ast
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest

from cudamagic.core import platform

PKG = pathlib.Path(__file__).resolve().parents[2] / "cudamagic"

# A parent that starts a grandchild and both sleep: a time limit must end the whole tree.
TREE = ("import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n")


class _Without:
    """A module as the platform module sees it on Windows: the POSIX-only names are missing (the standard
    library itself keeps them, since subprocess and psutil still run on this Linux machine)."""

    def __init__(self, module, *missing):
        self._module, self._missing = module, set(missing)

    def __getattr__(self, name):
        if name in self._missing:
            raise AttributeError(f"module {self._module.__name__!r} has no attribute {name!r} (presenting Windows)")
        return getattr(self._module, name)


@pytest.fixture
def windows(monkeypatch):
    """Present Windows to cudamagic.core.platform: no os.killpg/pread/sysconf, no signal.SIGKILL, no resource."""
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    monkeypatch.setattr(platform, "os", _Without(os, "killpg", "pread", "sysconf", "setsid", "getuid", "geteuid",
                                                  "statvfs"))
    monkeypatch.setattr(platform, "signal", _Without(signal, "SIGKILL"))
    monkeypatch.setitem(sys.modules, "resource", None)  # `import resource` raises ImportError
    return monkeypatch


def _grandchild_of(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    return [sys.executable, str(script)]


def _run_tree_until_killed(argv, timeout_s=1.0):
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired, match=r"timed out after"):
        platform.run_capped(argv, timeout_s)
    return time.monotonic() - t0


def _no_sleepers_left(before):
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        me = psutil.Process()
        left = [p for p in me.children(recursive=True) if p.pid not in before]
        if not left:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("presented", ["linux", "windows"])
def test_time_limit_kills_the_whole_tree(tmp_path, request, presented):
    if presented == "windows":
        request.getfixturevalue("windows")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    took = _run_tree_until_killed(_grandchild_of(tmp_path), 1.0)
    assert took < 4
    assert _no_sleepers_left(before), "a child or grandchild survived the time limit"


def test_run_capped_returns_code_and_capped_text():
    code, text = platform.run_capped([sys.executable, "-c", "print('x' * 100000); raise SystemExit(3)"], 10,
                                     limit_bytes=1000)
    assert code == 3 and text == "x" * 1000


def test_windows_popen_kwargs_and_stack(windows):
    assert "start_new_session" not in platform.popen_group_kwargs()
    assert platform.main_stack_bytes() == platform.WINDOWS_MAIN_STACK_BYTES
    ok, why = platform.raise_stack_limit(64 * 2**20, 120 * 2**20)
    assert not ok and "cannot be raised" in why
    assert platform.raise_stack_limit(1 * 2**20, 120 * 2**20) == (True, "")


def test_linux_stack_limit_is_raised_within_the_cap():
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    try:
        need = (soft if soft != resource.RLIM_INFINITY else 8 * 2**20) + 4 * 2**20
        ok, why = platform.raise_stack_limit(need, need)
        now, _ = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY:
            assert ok and now == resource.RLIM_INFINITY
        elif hard == resource.RLIM_INFINITY or hard >= need:
            assert ok and why == "" and now == need
        else:
            assert not ok and "only to" in why
    finally:
        resource.setrlimit(resource.RLIMIT_STACK, (soft, hard))


def test_rss_on_linux_and_presented_windows(windows):
    windows.setattr(platform, "SYSTEM", "linux")
    linux = platform.rss_bytes()
    windows.setattr(platform, "SYSTEM", "windows")
    win = platform.rss_bytes()  # psutil's figure: the same quantity
    assert linux and win and abs(linux - win) < 64 * 2**20


def test_child_pids_by_proc_and_by_psutil(windows):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        windows.setattr(platform, "SYSTEM", "linux")
        assert proc.pid in platform.child_pids(os.getpid())
        windows.setattr(platform, "SYSTEM", "windows")
        assert proc.pid in platform.child_pids(os.getpid())
    finally:
        proc.kill()
        proc.wait()


DENIED = object()


def fake_windows_psutil(monkeypatch, users):
    """psutil as on Windows: ``Process(pid).username()`` from ``users`` (pid -> ``DOMAIN\\user``, or DENIED for
    AccessDenied); no ``uids()``; an unknown pid raises NoSuchProcess."""

    class Process:
        def __init__(self, pid=None):
            self.pid = os.getpid() if pid is None else pid
            if self.pid not in users:
                raise psutil.NoSuchProcess(self.pid)

        def username(self):
            if users[self.pid] is DENIED:
                raise psutil.AccessDenied(self.pid)
            return users[self.pid]

        def uids(self):
            raise AttributeError("'Process' object has no attribute 'uids' (psutil on Windows)")

    monkeypatch.setattr(psutil, "Process", Process)
    monkeypatch.setattr(platform, "_my_username", {"pid": None, "name": None}, raising=False)  # a fresh cache


def test_same_user_on_windows_compares_account_names(windows):
    fake_windows_psutil(windows, {os.getpid(): "DESKTOP-7\\ana", 101: "DESKTOP-7\\ana", 102: "desktop-7\\ANA",
                                  103: "DESKTOP-7\\bob", 104: "NT AUTHORITY\\SYSTEM", 105: DENIED})
    assert platform.same_user(os.getpid()) is True
    assert platform.same_user(101) is True
    assert platform.same_user(102) is True  # Windows account names are case-insensitive
    assert platform.same_user(103) is False and platform.same_user(104) is False
    assert platform.same_user(105) is None  # AccessDenied: owner unknown, not "another user"
    assert platform.same_user(2 ** 22 + 7) is False  # no such process


def test_same_user_on_windows_when_this_process_user_is_unreadable(windows):
    fake_windows_psutil(windows, {os.getpid(): DENIED, 101: "DESKTOP-7\\ana"})
    assert platform.same_user(101) is None


def test_same_user_on_linux_reads_the_real_uid():
    assert platform.same_user(os.getpid()) is True
    assert platform.same_user(2 ** 22 + 7) is False
    if os.geteuid() == 0:
        assert platform.same_user(1) is True  # pid 1 runs as root here too
    elif psutil.Process(1).uids().real != os.getuid():
        assert platform.same_user(1) is False


def test_windows_nvidia_tool_paths(windows, tmp_path):
    store = tmp_path / "Windows" / "System32" / "DriverStore" / "FileRepository"
    for folder in ("nvlti.inf_amd64_aaa", "nvlti.inf_amd64_bbb", "LastGood.Tmp"):
        (store / folder).mkdir(parents=True)
    (store / "nvlti.inf_amd64_aaa" / "nvidia-smi.exe").write_bytes(b"MZ")
    (store / "nvlti.inf_amd64_bbb" / "nvidia-smi.exe").write_bytes(b"MZ")
    found = platform.nvidia_tool_candidates("nvidia-smi", env={"SystemRoot": str(tmp_path / "Windows")})
    assert found[0].endswith("System32\\nvidia-smi.exe") and "NVSMI" in found[1]
    assert [pathlib.Path(p).parent.name for p in found[2:]] == ["nvlti.inf_amd64_aaa", "nvlti.inf_amd64_bbb"]
    assert platform.executable_name("nvcc") == "nvcc.exe"


POSIX_ONLY = {("os", "killpg"), ("os", "pread"), ("os", "sysconf"), ("os", "setsid"), ("os", "getpgid"),
              ("signal", "SIGKILL"), ("os", "fork"), ("os", "kill")}  # os.kill(pid, 0) terminates on Windows


def test_no_posix_only_call_outside_the_platform_module():
    offenders = []
    for path in PKG.rglob("*.py"):
        if path == PKG / "core" / "platform.py":
            continue
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
        for node in ast.walk(tree):
            where = f"{path.relative_to(PKG)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and (node.value.id, node.attr) in POSIX_ONLY:
                offenders.append(f"{where} {node.value.id}.{node.attr}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
                if "resource" in names or "fcntl" in names or "termios" in names:
                    offenders.append(f"{where} import {names}")
            elif isinstance(node, ast.keyword) and node.arg == "start_new_session":
                offenders.append(f"{where} start_new_session=")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/proc/"):
                offenders.append(f"{where} {node.value!r}")
            elif isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and str(v.value).startswith(
                    "/proc/") for v in node.values[:1]):
                offenders.append(f"{where} f'/proc/...'")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "sys" \
                    and node.attr == "platform":
                offenders.append(f"{where} sys.platform")
    assert offenders == [], "platform-specific code outside cudamagic/core/platform.py:\n" + "\n".join(offenders)
