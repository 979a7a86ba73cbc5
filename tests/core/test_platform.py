"""The platform module, on Linux and presenting Windows.

Tier 1: the platform module, on this Linux machine and presenting Windows (no os.killpg, no
signal.SIGKILL, no resource module, Windows paths).
"""

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
TREE = (
    "import subprocess, sys, time\n"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(c.pid, flush=True)\n"
    "time.sleep(60)\n"
)


class _Without:
    """A module as the platform module sees it on Windows.

    A module as the platform module sees it on Windows: the POSIX-only names are missing (the
    standard library itself keeps them, since subprocess and psutil still run on this Linux
    machine).
    """

    def __init__(self, module, *missing):
        self._module, self._missing = module, set(missing)

    def __getattr__(self, name):
        if name in self._missing:
            raise AttributeError(
                f"module {self._module.__name__!r} has no attribute {name!r} (presenting Windows)"
            )
        return getattr(self._module, name)


def present_windows(monkeypatch):
    """Present Windows to cudamagic.core.platform; returns ``monkeypatch``.

    No os.killpg/pread/sysconf/openpty, no signal.SIGKILL, no resource;
    ``CREATE_NEW_PROCESS_GROUP`` (0 here, which POSIX's Popen accepts). This process's reaper is
    started first, as on Linux (presented Windows would leave its launcher unwaited for).
    """
    platform._reaper_fd()
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    monkeypatch.setattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0, raising=False)
    monkeypatch.setattr(
        platform,
        "os",
        _Without(
            os, "killpg", "pread", "sysconf", "setsid", "getuid", "geteuid", "statvfs", "openpty"
        ),
    )
    monkeypatch.setattr(platform, "signal", _Without(signal, "SIGKILL"))
    monkeypatch.setitem(sys.modules, "resource", None)  # `import resource` raises ImportError
    return monkeypatch


@pytest.fixture
def windows(monkeypatch):
    """Windows presented to cudamagic.core.platform (:func:`present_windows`)."""
    return present_windows(monkeypatch)


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


# A parent that starts a child through platform.popen, prints its pid and waits for a line on
# its stdin (then it exits without ending the child).
STARTER = (
    "import sys\n"
    "from cudamagic.core import platform\n"
    "c = platform.popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(c.pid, flush=True)\n"
    "sys.stdin.readline()\n"
)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pipes(pid: int) -> set:
    """The pipes process ``pid`` holds open (Linux: the ``pipe:[inode]`` links in /proc)."""
    pipes = set()
    folder = f"/proc/{pid}/fd"
    for fd in os.listdir(folder):
        try:
            link = os.readlink(f"{folder}/{fd}")
        except OSError:  # closed meanwhile
            continue
        if link.startswith("pipe:"):
            pipes.add(link)
    return pipes


def _reapers_of(pid: int) -> set:
    """Pids of the reapers whose pipe process ``pid`` writes to.

    A reaper is no child of the process it serves (its launcher forked it and exited), and other
    reapers may run on the machine (another test run, a notebook): the pipe tells them apart.
    """
    pipes, found = _pipes(pid), set()
    for p in psutil.process_iter(["cmdline"]):
        if (p.info["cmdline"] or [])[-1:] != [platform.REAPER]:
            continue
        try:
            if os.readlink(f"/proc/{p.pid}/fd/0") in pipes:
                found.add(p.pid)
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.mark.parametrize("kill", [True, False], ids=["killed_with_sigkill", "normal_exit"])
def test_a_child_never_outlives_its_starter(kill):
    env = dict(os.environ, PYTHONPATH=str(PKG.parent))
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    child = int(starter.stdout.readline())
    assert not _gone(child)
    reapers = _reapers_of(starter.pid)
    assert reapers, "no reaper was started"
    if kill:
        starter.kill()  # SIGKILL: no exit hook runs
    else:
        starter.stdin.write(b"\n")  # it returns normally, leaving its child running
    starter.stdin.close()
    starter.wait(timeout=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (_gone(child) and all(map(_gone, reapers))):
        time.sleep(0.05)
    assert _gone(child), "the child outlived the process that started it"
    assert all(map(_gone, reapers)), "the reaper outlived its work"


def test_the_reaper_pipe_leaves_no_unclosed_file_warning():
    """A session that started programs ends without a ResourceWarning (warnings shown as errors)."""
    code = (
        "import sys\nfrom cudamagic.core import platform\n"
        "platform.popen([sys.executable, '-c', 'pass']).wait()\n"
    )
    env = dict(os.environ, PYTHONPATH=str(PKG.parent))
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0 and "ResourceWarning" not in run.stderr, run.stderr


def _reap(lines: list) -> None:
    """Run a reaper, tell it ``lines``, close its pipe and wait until it has done its work."""
    ours = _reapers_of(os.getpid())  # this process's own reaper, if it started programs
    launcher = subprocess.Popen([sys.executable, "-c", platform.REAPER], stdin=subprocess.PIPE)
    launcher.stdin.write("".join(lines).encode("ascii"))
    launcher.stdin.flush()
    launcher.wait(timeout=30)  # it forked the reaper, which reads our pipe, and exited
    reapers = _reapers_of(os.getpid()) - ours
    assert len(reapers) == 1
    launcher.stdin.close()  # end of file: the reaper acts now
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(map(_gone, reapers)):
        time.sleep(0.05)
    assert all(map(_gone, reapers))


def test_the_reaper_kills_only_the_process_it_was_told_of():
    """A pid with another creation time is another process (pids are reused): it is spared."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        created = psutil.Process(victim.pid).create_time()
        _reap([f"{victim.pid} {created + 1.0!r}\n"])
        assert victim.poll() is None, "a process with another creation time was killed"
        _reap([f"{victim.pid} {created!r}\n"])
        assert victim.wait(timeout=30) == -signal.SIGKILL
    finally:
        victim.kill()
        victim.wait()


def test_run_capped_returns_code_and_capped_text():
    code, text = platform.run_capped(
        [sys.executable, "-c", "print('x' * 100000); raise SystemExit(3)"], 10, limit_bytes=1000
    )
    assert code == 3 and text == "x" * 1000


def test_windows_popen_kwargs_and_stack(windows):
    assert "start_new_session" not in platform._group_kwargs()
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


def test_rss_on_linux_and_presented_windows(monkeypatch):
    linux = platform.rss_bytes()
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    win = platform.rss_bytes()  # psutil's figure: the same quantity
    assert linux and win and abs(linux - win) < 64 * 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_rss_when_other_code_closed_its_descriptor_and_the_number_went_to_another_file():
    import psutil

    assert platform.rss_bytes()
    fd = platform._statm["fd"]
    meminfo = os.open("/proc/meminfo", os.O_RDONLY)
    os.dup2(meminfo, fd)  # another library closed our descriptor; its number now reads meminfo
    try:
        rss = platform.rss_bytes()
        real = psutil.Process().memory_info().rss
        # meminfo's second word (MemTotal, kB) read as pages would be the machine's memory x 4096
        assert rss is not None and abs(rss - real) < 64 * 2**20, (rss, real)
        # the number is left to its new owner, open on the file it opened
        assert os.readlink(f"/proc/self/fd/{fd}") == "/proc/meminfo"
        assert platform._statm["fd"] != fd
    finally:
        os.close(meminfo)
        os.close(fd)


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
    r"""Psutil as on Windows.

    Psutil as on Windows: ``Process(pid).username()`` from ``users`` (pid -> ``DOMAIN\\user``, or
    DENIED for AccessDenied); no ``uids()``; an unknown pid raises NoSuchProcess.
    """

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
    monkeypatch.setattr(
        platform, "_my_username", {"pid": None, "name": None}, raising=False
    )  # a fresh cache


def test_same_user_on_windows_compares_account_names(windows):
    fake_windows_psutil(
        windows,
        {
            os.getpid(): "DESKTOP-7\\ana",
            101: "DESKTOP-7\\ana",
            102: "desktop-7\\ANA",
            103: "DESKTOP-7\\bob",
            104: "NT AUTHORITY\\SYSTEM",
            105: DENIED,
        },
    )
    assert platform.same_user(os.getpid()) is True
    assert platform.same_user(101) is True
    assert platform.same_user(102) is True  # Windows account names are case-insensitive
    assert platform.same_user(103) is False and platform.same_user(104) is False
    assert platform.same_user(105) is None  # AccessDenied: owner unknown, not "another user"
    assert platform.same_user(2**22 + 7) is False  # no such process


def test_same_user_on_windows_when_this_process_user_is_unreadable(windows):
    fake_windows_psutil(windows, {os.getpid(): DENIED, 101: "DESKTOP-7\\ana"})
    assert platform.same_user(101) is None


def test_same_user_on_linux_reads_the_real_uid():
    assert platform.same_user(os.getpid()) is True
    assert platform.same_user(2**22 + 7) is False
    if os.geteuid() == 0:
        assert platform.same_user(1) is True  # pid 1 runs as root here too
    elif psutil.Process(1).uids().real != os.getuid():
        assert platform.same_user(1) is False


def test_dev_shm_on_linux_and_presented_windows(windows):
    windows.setattr(platform, "SYSTEM", "linux")
    windows.setattr(platform, "os", os)
    total, free = platform.dev_shm_bytes()
    assert total == shutil.disk_usage("/dev/shm").total and 0 <= free <= total
    windows.setattr(platform, "SYSTEM", "windows")
    assert platform.dev_shm_bytes() is None


def test_windows_nvidia_tool_paths(windows, tmp_path):
    store = tmp_path / "Windows" / "System32" / "DriverStore" / "FileRepository"
    for folder in ("nvlti.inf_amd64_aaa", "nvlti.inf_amd64_bbb", "LastGood.Tmp"):
        (store / folder).mkdir(parents=True)
    (store / "nvlti.inf_amd64_aaa" / "nvidia-smi.exe").write_bytes(b"MZ")
    (store / "nvlti.inf_amd64_bbb" / "nvidia-smi.exe").write_bytes(b"MZ")
    found = platform.nvidia_tool_candidates(
        "nvidia-smi", env={"SystemRoot": str(tmp_path / "Windows")}
    )
    assert found[0] == os.path.join(tmp_path, "Windows", "System32", "nvidia-smi.exe")
    assert "NVSMI" in found[1]
    assert [pathlib.Path(p).parent.name for p in found[2:]] == [
        "nvlti.inf_amd64_aaa",
        "nvlti.inf_amd64_bbb",
    ]
    assert platform.executable_name("nvcc") == "nvcc.exe"


# ---- the scan: no POSIX-only call outside cudamagic/core/platform.py -----------------------------
#: Modules that do not exist on Windows.
POSIX_ONLY_MODULES = {
    "pwd",
    "grp",
    "fcntl",
    "termios",
    "resource",
    "tty",
    "pty",
    "posix",
    "spwd",
    "crypt",
    "syslog",
}
# : Names missing on Windows (or, for os.kill, with another meaning: os.kill(pid, 0) terminates the
# process there),
#: and sys.platform (the rest of the package never tests the platform itself).
POSIX_ONLY_NAMES = {
    "os": {
        "kill",
        "killpg",
        "pread",
        "pwrite",
        "sysconf",
        "sysconf_names",
        "confstr",
        "pathconf",
        "fpathconf",
        "setsid",
        "getsid",
        "getpgid",
        "setpgid",
        "getpgrp",
        "setpgrp",
        "fork",
        "forkpty",
        "register_at_fork",
        "getuid",
        "geteuid",
        "getgid",
        "getegid",
        "getgroups",
        "setuid",
        "seteuid",
        "setgid",
        "setegid",
        "getresuid",
        "getresgid",
        "statvfs",
        "fstatvfs",
        "uname",
        "nice",
        "getloadavg",
        "sched_getaffinity",
        "sched_setaffinity",
        "wait",
        "wait3",
        "wait4",
        "WNOHANG",
        "mkfifo",
        "chown",
        "lchown",
        "fchown",
        "getpriority",
        "setpriority",
        "openpty",
        "ttyname",
        "ctermid",
        "posix_spawn",
        "posix_spawnp",
    },
    "signal": {
        "SIGKILL",
        "SIGALRM",
        "SIGHUP",
        "SIGQUIT",
        "SIGUSR1",
        "SIGUSR2",
        "SIGCHLD",
        "SIGPIPE",
        "SIGSTOP",
        "SIGCONT",
        "SIGTSTP",
        "SIGBUS",
        "alarm",
        "setitimer",
        "getitimer",
        "ITIMER_REAL",
        "ITIMER_VIRTUAL",
        "ITIMER_PROF",
        "pause",
        "pthread_kill",
        "pthread_sigmask",
        "sigwait",
        "siginterrupt",
        "sigpending",
    },
    "sys": {"platform"},
}
# : psutil methods that exist only on POSIX (the object cannot be typed statically, so any attribute
# so named).
PSUTIL_POSIX_ONLY = {"uids", "gids", "num_fds", "terminal"}
#: subprocess.Popen arguments that are POSIX-only.
POSIX_ONLY_KEYWORDS = {"start_new_session", "preexec_fn", "process_group"}


def _imported_names(tree) -> dict:
    """Local name -> the dotted name it stands for.

    Local name -> the dotted name it stands for, from every import in ``tree`` (``import os as _o``:
    ``_o`` -> ``os``; ``from os import path as p``: ``p`` -> ``os.path``; relative imports keep
    their dots).
    """
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for a in node.names:
                names[a.asname or a.name] = (
                    f"{base}.{a.name}" if node.module or node.level else a.name
                )
    return names


def _dotted(node, names):
    """``os.path`` for an ``ast.Attribute``/``ast.Name`` chain.

    ``os.path`` for an ``ast.Attribute``/``ast.Name`` chain, with the root resolved through
    ``names``; None for anything else (a call, a subscript).
    """
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, names)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _posix_only(module, name) -> bool:
    return module in POSIX_ONLY_NAMES and name in POSIX_ONLY_NAMES[module]


def posix_only_uses(source: str, where: str = "<snippet>") -> list:
    """Every POSIX-only (or platform-testing) use in Python ``source``.

    Every POSIX-only (or platform-testing) use in Python ``source``, as ``"where:line what"``
    strings.

    Caught: imports of POSIX-only modules (also through ``importlib.import_module``/``__import__``
        with a string),
    ``from os import killpg`` / ``from signal import SIGKILL``, attribute access on a module under
    any alias (``import os as _o; _o.killpg``), ``getattr``/``hasattr`` with a constant name
    (``getattr(os, "killpg")``), psutil's POSIX-only methods (``.uids()``), POSIX-only ``Popen``
    arguments, ``/proc/`` paths, ``sys.platform``.
    """
    tree = ast.parse(source)
    names = _imported_names(tree)
    found = []

    def hit(node, what):
        found.append(f"{where}:{getattr(node, 'lineno', 0)} {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in POSIX_ONLY_MODULES:
                    hit(node, f"import {a.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] in POSIX_ONLY_MODULES:
                hit(node, f"from {node.module} import ...")
            for a in node.names:
                if _posix_only(node.module, a.name):
                    hit(node, f"from {node.module} import {a.name}")
        elif isinstance(node, ast.Attribute):
            base = _dotted(node.value, names)
            if base is not None and _posix_only(base, node.attr):
                hit(node, f"{base}.{node.attr}")
            elif node.attr in PSUTIL_POSIX_ONLY:
                hit(node, f".{node.attr} (psutil, POSIX only)")
        elif isinstance(node, ast.Call):
            func = _dotted(node.func, names)
            consts = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            attr = (
                node.args[1].value
                if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                else None
            )
            if func in ("getattr", "hasattr") and isinstance(attr, str):
                base = _dotted(node.args[0], names)
                if (base is not None and _posix_only(base, attr)) or attr in PSUTIL_POSIX_ONLY:
                    hit(node, f"{func}({base}, {attr!r})")
            elif (
                func in ("importlib.import_module", "__import__")
                and consts
                and consts[0].split(".")[0] in POSIX_ONLY_MODULES
            ):
                hit(node, f"{func}({consts[0]!r})")
        elif isinstance(node, ast.keyword) and node.arg in POSIX_ONLY_KEYWORDS:
            hit(node, f"{node.arg}=")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("/proc/")
        ):
            hit(node, repr(node.value))
        elif (
            isinstance(node, ast.JoinedStr)
            and node.values
            and isinstance(node.values[0], ast.Constant)
            and str(node.values[0].value).startswith("/proc/")
        ):
            hit(node, "f'/proc/...'")
    return found


@pytest.mark.parametrize(
    "snippet",
    [
        "from os import killpg\nkillpg(1, 9)",
        "from os import killpg as kp",
        "from signal import SIGKILL",
        "import os as _o\n_o.killpg(1, 9)",
        "import signal as s\ns.SIGKILL",
        "import os\ngetattr(os, 'killpg')(1, 9)",
        "import os\nkill = getattr(os, 'killpg', None)",
        "import os as o\nhasattr(o, 'getuid')",
        "import signal\nsignal.alarm(3)",
        "import os\nos.getpgrp()",
        "import os\nos.setpgrp()",
        "import pwd",
        "import grp",
        "import fcntl",
        "import termios",
        "import resource",
        "from resource import getrlimit",
        "import importlib\nimportlib.import_module('resource')",
        "__import__('pwd')",
        "import os\nos.getuid()",
        "import os\nos.geteuid()",
        "import os\nos.getgid()",
        "import os\nos.statvfs('/dev/shm')",
        "import os\nos.uname()",
        "import os\nos.fork()",
        "import os\nos.setsid()",
        "import os\nos.killpg(1, 9)",
        "import os\nos.kill(1, 0)",
        "import psutil\npsutil.Process(1).uids().real",
        "def f(p):\n    return p.uids()",
        "import os.path\nos.getuid()",
        "from os import path, getuid",
        "def f():\n    import os as q\n    return q.sysconf('SC_PAGE_SIZE')",
        "import subprocess\nsubprocess.Popen(['x'], start_new_session=True)",
        "open('/proc/self/statm')",
        "pid = 1\nopen(f'/proc/{pid}/statm')",
        "import sys\nsys.platform == 'win32'",
        "import sys as _s\n_s.platform",
        "from sys import platform",
    ],
)
def test_the_scan_catches_every_form(snippet):
    assert posix_only_uses(snippet), f"not caught: {snippet!r}"


@pytest.mark.parametrize(
    "snippet",
    [
        "import os\nos.path.join('a', 'b')",
        "import os\nos.getpid()",
        "import signal\nsignal.SIGINT",
        "import os\ngetattr(os, 'path')",
        "from os import path\npath.join('a')",
        "from cudamagic.core import platform\nplatform.SYSTEM",
        "from ..core import platform\nplatform.same_user(1)",
        "import psutil\npsutil.Process(1).username()",
        "x = '/proc is mentioned in prose'",
    ],
)
def test_the_scan_lets_portable_code_be(snippet):
    assert posix_only_uses(snippet) == []


def test_no_posix_only_call_outside_the_platform_module():
    offenders = []
    for path in sorted(PKG.rglob("*.py")):
        if path == PKG / "core" / "platform.py":
            continue
        offenders += posix_only_uses(path.read_text(encoding="utf-8"), str(path.relative_to(PKG)))
    assert offenders == [], (
        "platform-specific code outside cudamagic/core/platform.py:\n" + "\n".join(offenders)
    )


@pytest.mark.parametrize("system", ["posix", "windows"])
def test_read_at_reads_from_an_offset_on_both_platforms(tmp_path, monkeypatch, system):
    if system == "windows":
        present_windows(monkeypatch)
    assert platform.can_read_at() is (system == "posix")
    with open(tmp_path / "f", "w+b") as fh:
        fh.write(b"0123456789")
        fh.flush()
        assert platform.read_at(fh.fileno(), 4, 3) == b"3456"
        assert platform.read_at(fh.fileno(), 100, 8) == b"89"
        assert platform.read_at(fh.fileno(), 4, 10) == b""
