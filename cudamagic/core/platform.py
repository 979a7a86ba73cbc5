"""Everything that differs between Linux, Windows and macOS, in one place.

The rest of the package never tests ``sys.platform``, never calls a POSIX-only function
(``os.killpg``, ``signal.SIGKILL``, ``resource``, ``os.pread``, ``os.sysconf``, ``os.getuid``,
``os.statvfs``, psutil's ``uids()``) and never reads ``/proc`` itself (tests/core/test_platform.py
scans for them): it calls these functions, each with a branch per platform. Tests present another
platform by setting :data:`SYSTEM` (``"linux"``, ``"windows"``, ``"darwin"``).

Facts and their sources:
- Killing a process tree: ``psutil`` (``Process.children(recursive=True)``), plus the process
  group on POSIX (children that left their parent still share the group).
- The deep-graph stack guard: POSIX raises the soft ``RLIMIT_STACK``; a Windows main thread's
  stack is fixed when ``python.exe`` starts (about 2 MB reserved).
- Process memory: Linux ``/proc/PID/statm``; elsewhere ``psutil.Process.memory_info().rss``.
- The C heap's bytes in use (where CPU tensors live): glibc's ``mallinfo2()``, Linux only.
- A process's owner: the real uid on POSIX; on Windows the account name
  (``psutil.Process.username()``).
- ``/dev/shm`` size (DataLoader workers' shared memory): ``os.statvfs``; Windows has none.
- NVIDIA tools: ``nvidia-smi`` / ``nvml`` paths as the NVIDIA driver installs them.
- Programs: Windows programs end in ``.exe``; Windows command lines keep backslashes.
- A program's stdout as a terminal: a pseudo-terminal (``os.openpty``, ``termios``) on POSIX, so
  its C library line-buffers it; Windows has none (its programs are line-buffered another way).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref

import psutil


def _detect() -> str:
    if sys.platform.startswith("win"):
        return "windows"
    if sys.platform == "darwin":
        return "darwin"
    return "linux"


#: ``"linux"``, ``"windows"`` or ``"darwin"`` (any other POSIX counts as ``"linux"``). Tests set it.
SYSTEM = _detect()


def is_windows() -> bool:
    """True on Windows, where processes, stacks and GPU memory work differently."""
    return SYSTEM == "windows"


# ---- processes with a time limit
# ----------------------------------------------------------------------------
#: The reaper: a small process started once per Python process by :func:`popen`, in a session of
#: its own and (POSIX) no longer this process's child. It reads one ``PID CREATE_TIME`` line per
#: child started; at end of file (this process has exited, however it died: a kernel killed with
#: ``kill -9`` runs no exit hook) it kills every such child that is still the process it was
#: (same creation time), with its process group (POSIX) and everything it started.
REAPER = r"""
import os, signal, sys
if hasattr(os, "fork") and os.fork():
    os._exit(0)
import psutil
started = {}
for line in sys.stdin:
    pid, created = line.split()
    started[int(pid)] = float(created)
for pid, created in started.items():
    try:
        p = psutil.Process(pid)
        if p.create_time() != created:
            continue
        victims = p.children(recursive=True) + [p]
    except psutil.Error:
        continue
    if hasattr(os, "killpg"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    for v in victims:
        try:
            v.kill()
        except psutil.Error:
            pass
"""


def _group_kwargs() -> dict:
    """``Popen`` arguments for a group of its own: a new session (POSIX), a new process group."""
    if is_windows():
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


#: this process's pid -> (the pipe's write end, the launcher: on Windows the reaper itself, kept so
#: that its ``Popen`` is not collected while it runs)
_reapers: dict = {}


def _reaper_fd() -> int:
    """The write end of the pipe to this process's reaper, started on first use.

    A plain file descriptor, not a file object: it stays open until this process ends, when the
    operating system closes it (which is what the reaper waits for), with no unclosed-file warning.
    """
    fd, _ = _reapers.get(os.getpid(), (None, None))
    if fd is None:
        launcher = subprocess.Popen(
            [sys.executable, "-c", REAPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **_group_kwargs(),
        )
        fd = os.dup(launcher.stdin.fileno())  # not inheritable
        launcher.stdin.close()
        _reapers[os.getpid()] = (fd, launcher)
        if not is_windows():
            launcher.wait()  # it forked the reaper, which keeps the pipe, and exited
    return fd


def popen(argv, **kwargs) -> subprocess.Popen:
    """Start ``argv`` in a group of its own that cannot outlive this process.

    The child gets a process group of its own (a new session on POSIX,
    ``CREATE_NEW_PROCESS_GROUP`` on Windows), so :func:`kill_tree` can end it with everything it
    started; and it is registered with this process's reaper (:data:`REAPER`), which kills it when
    this process exits without having ended it, even after ``kill -9``.

    Args:
        argv: the program and its arguments.
        **kwargs: passed to ``subprocess.Popen`` (stdin, stdout, stderr, cwd, env).

    Raises:
        OSError: the program could not be started.
    """
    proc = subprocess.Popen(argv, **kwargs, **_group_kwargs())
    try:
        line = f"{proc.pid} {psutil.Process(proc.pid).create_time()!r}\n"
        os.write(_reaper_fd(), line.encode("ascii"))
    except (psutil.Error, OSError, ValueError):
        pass  # ended already, or no reaper (it was killed): nothing more can be done
    return proc


def kill_tree(proc) -> None:
    """Kill ``proc`` (a ``subprocess.Popen``) and every process it started; never raises.

    Children are found with ``psutil`` before the parent dies (on every platform); on POSIX the
    process group (made by :func:`popen`) is killed too, which catches children that
    re-parented themselves.
    """
    try:
        victims = psutil.Process(proc.pid).children(recursive=True)
    except (psutil.Error, OSError):
        victims = []
    if not is_windows():
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.kill()  # TerminateProcess on Windows, SIGKILL on POSIX
    for child in victims:
        with contextlib.suppress(Exception):  # already gone, or not ours
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        proc.wait(timeout=5)


def output_terminal() -> tuple | None:
    """A pseudo-terminal for a child's stdout: ``(parent_fd, child_fd)``, or None.

    The child's C library sees a terminal and line-buffers its stdout (so do programs it starts).
    Output processing is off (a line ends in LF, not CR LF), and the size is 120x40
    (not 0x0, which some programs divide by). None on Windows, which has no pseudo-terminal, and
    where none can be opened (all in use): the caller falls back to a pipe. The caller passes
    ``child_fd`` to ``Popen`` and closes it at once; reading ``parent_fd`` raises ``OSError``
    (``EIO``) instead of returning ``b""`` on Linux once every writer is gone.
    """
    if is_windows():
        return None
    try:
        import termios

        parent, child = os.openpty()
    except (ImportError, OSError):
        return None
    try:
        attrs = termios.tcgetattr(child)
        attrs[1] &= ~termios.OPOST  # oflag: no "\n" -> "\r\n"
        attrs[3] &= ~termios.ECHO  # lflag
        termios.tcsetattr(child, termios.TCSANOW, attrs)
        termios.tcsetwinsize(child, (40, 120))
    except (termios.error, OSError, AttributeError):  # tcsetwinsize: Python 3.11+
        pass
    return parent, child


def run_capped(
    argv, timeout_s: float | None, limit_bytes: int = 64 * 1024, cwd=None, tick=None
) -> tuple:
    """Run ``argv`` (stdin closed, stderr merged into stdout) for at most ``timeout_s`` seconds.

    Output goes to a temporary file, so a chatty program cannot fill memory or block on a pipe.

    Args:
        argv: the command and its arguments.
        timeout_s: seconds before the whole process tree is killed; None: no limit.
        limit_bytes: bytes of output kept; the rest is discarded.
        cwd: the working folder (default: this process's).
        tick: called about every 0.1 s while the program runs (a progress display).

    Returns:
        ``(returncode, text)``; text decoded as UTF-8 with replacement.

    Raises:
        subprocess.TimeoutExpired: it ran past ``timeout_s`` (the tree has been killed).
        KeyboardInterrupt: interrupted (the tree has been killed).
        OSError: the program could not be started.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with tempfile.TemporaryFile() as out:
        proc = popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
        try:
            while True:
                step = timeout_s if tick is None else 0.1
                try:
                    proc.wait(timeout=step)
                    break
                except subprocess.TimeoutExpired:
                    if tick is None or (deadline is not None and time.monotonic() > deadline):
                        raise
                    tick()
        except BaseException:  # TimeoutExpired, KeyboardInterrupt: leave nothing running
            kill_tree(proc)
            raise
        out.seek(0)
        text = out.read(limit_bytes).decode("utf-8", "replace")
    return proc.returncode, text


# ---- the deep-graph stack guard
# -------------------------------------------------------------------------------
#: Bytes reserved for the main thread's stack by ``python.exe`` on Windows (fixed at start).
WINDOWS_MAIN_STACK_BYTES = 2 * 1024 * 1024


def main_stack_bytes() -> int | None:
    """The main thread's stack size now, in bytes (None: unlimited or unknown)."""
    if is_windows():
        return WINDOWS_MAIN_STACK_BYTES
    import resource  # POSIX only

    soft, _hard = resource.getrlimit(resource.RLIMIT_STACK)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def raise_stack_limit(need_bytes: int, cap_bytes: int) -> tuple:
    """Raise the main thread's stack to ``need_bytes`` where the platform allows.

    Make the main thread's stack at least ``need_bytes`` (at most ``cap_bytes``) if the platform
    allows.

    Args:
        need_bytes: bytes of stack wanted.
        cap_bytes: never raise the limit above this.

    Returns:
        ``(ok, why)``: ``ok`` True when the stack is now at least ``need_bytes``; ``why`` says why
        not (``""`` when ok). Called from another thread it changes nothing (only the main thread
        grows).
    """
    if threading.current_thread() is not threading.main_thread():
        return False, "not on the main thread"
    if is_windows():
        if need_bytes <= WINDOWS_MAIN_STACK_BYTES:
            return True, ""
        return (
            False,
            "a Windows main thread's stack is fixed when python.exe starts (about 2 MB) and "
            "cannot be raised",
        )
    import resource  # POSIX only

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY or soft >= need_bytes:
            return True, ""
        target = min(need_bytes, cap_bytes)
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
        if target >= need_bytes:
            return True, ""
        return False, f"the stack limit can be raised only to {target // 2**20} MiB"
    except (ValueError, OSError) as exc:
        return False, f"the stack limit cannot be raised ({exc})"


# ---- this process's memory and children
# -----------------------------------------------------------------------
_statm = {"pid": None, "fd": None, "page": 0, "id": None}
_psutil_process = {"pid": None, "proc": None}


def _rss_statm():
    """Linux: RSS from ``/proc/PID/statm`` through a kept-open descriptor (about 2 us), or None.

    Other code in the process may close a descriptor it does not own, and the number then comes
    back for the next file opened (``/proc/stat``, ``/proc/meminfo``: numbers too, which would read
    as a constant RSS). So each reading first checks, by ``fstat``, that the descriptor is still the
    file opened here; when it is not, the file is opened again and the number is left alone (it is
    somebody else's now).
    """
    if SYSTEM != "linux":
        return None
    pid = os.getpid()
    fd = _statm["fd"]
    if _statm["pid"] != pid:
        if fd is not None:  # inherited from the parent: it reads the parent's figures
            with contextlib.suppress(OSError):
                os.close(fd)
        fd = None
    elif fd is not None:
        try:
            st = os.fstat(fd)
            same = (st.st_dev, st.st_ino) == _statm["id"]
        except OSError:
            same = False
        if not same:
            fd = None
    if fd is None:
        _statm.update(pid=pid, fd=None, id=None)
        try:
            fd = os.open(f"/proc/{pid}/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            st = os.fstat(fd)
            _statm.update(fd=fd, id=(st.st_dev, st.st_ino), page=os.sysconf("SC_PAGE_SIZE"))
        except (OSError, AttributeError, ValueError):
            return None
    try:
        return int(os.pread(fd, 256, 0).split()[1]) * _statm["page"]
    except (OSError, IndexError, ValueError):
        _statm["fd"] = None
        return None


def rss_bytes() -> int | None:
    """Resident set size of this process in bytes, or None.

    Resident set size of this process in bytes (what Task Manager calls the working set on Windows),
    or None when it cannot be read. Linux: ``/proc/self/statm``; elsewhere ``psutil``.
    """
    rss = _rss_statm()
    if rss is not None:
        return rss
    try:
        pid = os.getpid()
        if _psutil_process["pid"] != pid:
            _psutil_process.update(pid=pid, proc=psutil.Process(pid))
        return int(_psutil_process["proc"].memory_info().rss)
    except Exception:
        return None


_mallinfo = {"fn": None, "tried": False}


def malloc_in_use_bytes() -> int | None:
    """Bytes the C heap has handed out and not taken back, or None where it cannot be read.

    glibc's ``mallinfo2()`` (glibc 2.33 and later): ``uordblks`` (in-use heap chunks) plus
    ``hblkhd`` (in-use ``mmap`` chunks), about 1 us. This is what CPU tensors occupy (PyTorch
    allocates them with ``posix_memalign``): unlike RSS it falls as soon as memory is freed and
    does not rise when freed memory is reused. None on other C libraries and systems, or when
    another allocator (jemalloc, tcmalloc) replaced malloc (its figures are then near zero).
    """
    if not _mallinfo["tried"]:
        _mallinfo["tried"] = True
        if SYSTEM == "linux":
            try:
                import ctypes

                class MallInfo2(ctypes.Structure):
                    _fields_ = [
                        (name, ctypes.c_size_t)
                        for name in (
                            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks "
                            "fordblks keepcost"
                        ).split()
                    ]

                fn = ctypes.CDLL(None).mallinfo2
                fn.restype = MallInfo2
                _mallinfo["fn"] = fn
            except (OSError, AttributeError):
                _mallinfo["fn"] = None
    fn = _mallinfo["fn"]
    if fn is None:
        return None
    info = fn()
    used = int(info.uordblks) + int(info.hblkhd)
    return used if used >= 1 << 20 else None


def child_pids(pid: int, proc=None) -> set:
    """Pids of the direct children of ``pid``.

    Linux: ``/proc/PID/task/*/children`` (cheap); elsewhere (or when that file is missing)
    ``psutil``'s scan. ``proc``: a ``psutil.Process`` for ``pid`` to reuse.
    """
    try:  # os.listdir, not glob: glob's matching cost 10x the reads in a kernel of 12 threads
        tasks = os.listdir(f"/proc/{pid}/task") if SYSTEM == "linux" else []
    except OSError:
        tasks = []
    files = [f"/proc/{pid}/task/{t}/children" for t in tasks]
    if not files:
        try:
            proc = proc if proc is not None else psutil.Process(pid)
            return {c.pid for c in proc.children(recursive=False)}
        except psutil.Error:
            return set()
    pids = set()
    for name in files:
        try:
            pids.update(int(x) for x in pathlib.Path(name).read_text(encoding="ascii").split())
        except (OSError, ValueError):
            continue
    return pids


# ---- NVIDIA driver and tools
# ----------------------------------------------------------------------------------
def nvidia_kernel_module_text() -> str | None:
    """Linux: the text of ``/proc/driver/nvidia/version`` (the loaded kernel module), or None."""
    if SYSTEM != "linux":
        return None
    try:
        return pathlib.Path("/proc/driver/nvidia/version").read_text("utf-8", "replace")
    except OSError:
        return None


def _windows_dirs(env) -> dict:
    root = env.get("SystemRoot") or env.get("windir") or r"C:\Windows"
    program_files = env.get("ProgramFiles") or r"C:\Program Files"
    system32 = os.path.join(root, "System32")
    return {
        "system32": system32,
        "nvsmi": os.path.join(program_files, "NVIDIA Corporation", "NVSMI"),
        "driverstore": os.path.join(system32, "DriverStore", "FileRepository"),
    }


def nvidia_tool_candidates(tool: str, env=None) -> list:
    r"""Every place the NVIDIA driver may install ``tool``.

    Every place ``tool`` (``"nvidia-smi"`` or ``"nvml"``) may be installed by the NVIDIA driver, in
    the order the system searches them, existing or not (callers check). Windows: ``System32``, the
    legacy ``NVSMI`` folder and each ``DriverStore\FileRepository\nv*`` package folder (one per
    installed driver, including leftovers such as ``LastGood.Tmp`` copies); Linux/macOS: PATH and
    the usual library folders.
    """
    env = os.environ if env is None else env
    if is_windows():
        d = _windows_dirs(env)
        name = "nvidia-smi.exe" if tool == "nvidia-smi" else "nvml.dll"
        found = [os.path.join(d["system32"], name), os.path.join(d["nvsmi"], name)]
        found += sorted(glob.glob(os.path.join(d["driverstore"], "nv*", name)))
        return found
    if tool == "nvidia-smi":
        on_path = shutil.which("nvidia-smi", path=env.get("PATH"))
        return [p for p in [on_path, "/usr/bin/nvidia-smi"] if p]
    return [
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib64/libnvidia-ml.so.1",
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/wsl/lib/libnvidia-ml.so.1",
    ]


def nvidia_driver_present() -> bool:
    """True when an NVIDIA driver seems installed.

    True when an NVIDIA driver seems installed: the Linux kernel module, or ``nvml.dll`` /
    ``nvidia-smi`` on Windows, or ``nvidia-smi`` on PATH.
    """
    if nvidia_kernel_module_text() is not None:
        return True
    if is_windows():
        return any(os.path.exists(p) for p in nvidia_tool_candidates("nvml")[:2])
    return shutil.which("nvidia-smi") is not None


def executable_name(name: str) -> str:
    """``name`` as the platform spells a program file: ``nvcc`` -> ``nvcc.exe`` on Windows."""
    return name + ".exe" if is_windows() and not name.lower().endswith(".exe") else name


def windows_file_version(path: str) -> str | None:
    """Windows: the file version of ``path``, or None.

    Windows: the file version of ``path`` (``"31.0.15.4633"``) from its version resource, read with
    pywin32's ``win32api.GetFileVersionInfo``; None elsewhere, without pywin32, or when the file has
    none.
    """
    if not is_windows():
        return None
    try:
        import win32api  # pywin32, Windows only

        info = win32api.GetFileVersionInfo(path, "\\")
        ms, ls = info["FileVersionMS"], info["FileVersionLS"]
        return f"{ms >> 16}.{ms & 0xFFFF}.{ls >> 16}.{ls & 0xFFFF}"
    except Exception:
        return None


def driver_version_from_file_version(version: str | None) -> str | None:
    """The NVIDIA driver version a Windows file version stands for.

    The NVIDIA driver version a Windows file version stands for: ``"31.0.15.4633"`` -> ``"546.33"``
    (the last digit of the third part and the four digits of the fourth, as NVIDIA numbers its
    Windows drivers).
    """
    try:
        parts = [int(x) for x in str(version).split(".")]
        digits = f"{parts[2] % 10}{parts[3]:04d}"
    except (ValueError, IndexError):
        return None
    return f"{digits[:3]}.{digits[3:]}"


def nvidia_tool_copies(tool: str, env=None) -> list:
    """Windows: every existing copy of ``tool``, with its driver version.

    Windows: every existing copy of ``tool`` (``"nvidia-smi"`` or ``"nvml"``) among
    :func:`nvidia_tool_candidates`, as ``{"path", "file_version", "driver_version"}`` dicts
    (versions None when unreadable); ``[]`` elsewhere (Linux installs one copy, from the driver
    package).
    """
    if not is_windows():
        return []
    out = []
    for path in nvidia_tool_candidates(tool, env):
        if os.path.exists(path):
            fv = windows_file_version(path)
            out.append(
                {
                    "path": path,
                    "file_version": fv,
                    "driver_version": driver_version_from_file_version(fv),
                }
            )
    return out


def which(name: str, env=None) -> str | None:
    """``name`` on PATH (``executable_name`` spelling: ``nvidia-smi.exe`` on Windows), or None."""
    env = os.environ if env is None else env
    return shutil.which(executable_name(name), path=env.get("PATH"))


def pid_exists(pid: int) -> bool:
    """True when ``pid`` exists here, even if this user may not read it.

    POSIX: ``kill(pid, 0)`` (EPERM: it exists and belongs to another user; ESRCH: no such pid).
    Windows: ``psutil.pid_exists`` (``os.kill`` there would terminate the process).
    """
    if is_windows():
        try:
            return bool(psutil.pid_exists(pid))
        except Exception:
            return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (ProcessLookupError, OSError, OverflowError, ValueError):
        return False
    return True


_my_username = {"pid": None, "name": None}


def _current_username():
    r"""Windows: this process's user as psutil names it, or None.

    Windows: this process's user as psutil names it (``"DESKTOP-1\ana"``), read once per process;
    None when unreadable.
    """
    pid = os.getpid()
    if _my_username["pid"] != pid:
        try:
            name = psutil.Process(pid).username()
        except Exception:
            name = None
        _my_username.update(pid=pid, name=name)
    return _my_username["name"]


def same_user(pid: int) -> bool | None:
    r"""Whether process ``pid`` runs as this process's user.

    POSIX: its real uid (``psutil.Process.uids().real``) against ``os.getuid()``. Windows has
    neither: the owner's account name (``psutil.Process.username()``, ``DOMAIN\user``, from the
    process token) against this process's, compared case-insensitively.

    Returns:
        True (this user's), False (another user's, or no such process), or None when the owner
        cannot be read (``psutil.AccessDenied``: on Windows, processes of other users and of the
        system).
    """
    try:
        proc = psutil.Process(pid)
        if is_windows():
            theirs, mine = proc.username(), _current_username()
            if mine is None:
                return None
            return str(theirs).casefold() == str(mine).casefold()
        return proc.uids().real == os.getuid()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return None
    except (psutil.Error, OSError, AttributeError):
        return None


def dev_shm_bytes() -> tuple | None:
    """``(total_bytes, free_bytes)`` of ``/dev/shm``, or None.

    ``(total_bytes, free_bytes)`` of ``/dev/shm``, the tmpfs PyTorch's DataLoader workers pass
    tensors through on Linux (``os.statvfs``: blocks x fragment size; free = blocks available to
    this user); None where it cannot be read. Windows has no ``/dev/shm`` (workers share tensors
    through file mappings backed by the page file), so None there.
    """
    if is_windows():
        return None
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def in_container() -> bool:
    """Best guess that this process runs in a Linux container.

    Best guess that this process runs in its own PID namespace (a Linux container): ``/.dockerenv``,
    ``/run/.containerenv`` (podman) or a docker/kubepods/containerd/lxc cgroup of pid 1. False on
    Windows.
    """
    if SYSTEM != "linux":
        return False
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        text = pathlib.Path("/proc/1/cgroup").read_text("utf-8", "replace")
    except OSError:
        return False
    return any(word in text for word in ("docker", "kubepods", "containerd", "lxc", "libpod"))


# ---- %%cuda's build
# ------------------------------------------------------------------------------------------
def extension_suffix() -> str:
    """The file suffix of a compiled Python extension.

    File suffix of a compiled Python extension as ``torch.utils.cpp_extension`` names it: ``.pyd``
    on Windows, ``.so`` elsewhere.
    """
    return ".pyd" if is_windows() else ".so"


def linker_can_wrap() -> bool:
    """True where nvcc links with GNU ld (Linux), which has ``--wrap=SYMBOL``."""
    return SYSTEM == "linux"


def split_command_line(text: str) -> list:
    r"""Split ``--args``/``--nvcc-flags`` text into words as the shell would.

    Split ``--args``/``--nvcc-flags`` text into words as the platform's shell would: POSIX rules on
    Linux and macOS; on Windows quotes group words but backslashes stay (``C:\data\x.bin`` is a
    path, not escapes).

    Raises:
        ValueError: an unclosed quote.
    """
    if not is_windows():
        return shlex.split(text)
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.commenters = ""
    lex.escape = ""
    return list(lex)


#: NTSTATUS codes a crashed Windows program exits with (a POSIX program would die by a signal
#: instead).
WINDOWS_CRASH_CODES = {
    0xC0000005: "STATUS_ACCESS_VIOLATION, a bad pointer (segmentation fault)",
    0xC00000FD: "STATUS_STACK_OVERFLOW",
    0xC0000094: "STATUS_INTEGER_DIVIDE_BY_ZERO",
    0xC000001D: "STATUS_ILLEGAL_INSTRUCTION",
    0xC0000409: "STATUS_STACK_BUFFER_OVERRUN (abort)",
    0xC000013A: "STATUS_CONTROL_C_EXIT",
    0xC0000135: "STATUS_DLL_NOT_FOUND, a DLL is missing",
}


def windows_crash_name(returncode: int) -> str | None:
    """Windows: the NTSTATUS name of a crash exit code, or None.

    Windows: the name of the NTSTATUS crash code a program exited with (``3221225477`` ->
    ``STATUS_ACCESS_VIOLATION...``); None elsewhere or for an ordinary exit status.
    """
    if not is_windows() or returncode is None:
        return None
    return WINDOWS_CRASH_CODES.get(returncode & 0xFFFFFFFF)


def can_read_at() -> bool:
    """True where a file can be read at an offset while another thread writes it (``os.pread``).

    POSIX has ``os.pread``; Windows does not: a reader there reads once, after the writer is done.
    """
    return not is_windows() and hasattr(os, "pread")


def read_at(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes of the open file ``fd`` from byte ``offset`` (0-based).

    POSIX: ``os.pread`` (the file position stays). Windows: a seek then a read (it moves).
    """
    if can_read_at():
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


# ---- host readings from /proc (Linux) ------------------------------------------------
def _kib_field(text: bytes, key: bytes):
    """The number after ``key`` in ``/proc/meminfo`` text (kB), or None."""
    i = text.find(key)
    if i < 0:
        return None
    return int(text[i + len(key) : text.index(b"\n", i)].split()[0])


class ProcFiles:
    """``/proc/stat`` and ``/proc/meminfo`` kept open and read with one ``pread`` each (Linux).

    The same numbers as ``psutil.cpu_times()`` (the same fields summed, in clock ticks rather
    than seconds: CPU % is their ratio) and ``psutil.virtual_memory()`` (``MemTotal``, and
    ``MemAvailable`` where the kernel has a plausible one, else None: the caller asks psutil),
    without a Python file object per reading nor the fields the monitor does not show.
    """

    def __init__(self, root: str = "/proc"):
        self._n_cpu_fields = len(psutil.cpu_times())  # the fields psutil sums on this kernel
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        fds = []
        try:
            for name in ("stat", "meminfo"):
                fds.append(os.open(f"{root}/{name}", flags))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        self._stat, self._meminfo = fds
        self._close = weakref.finalize(self, _close_fds, fds)

    def cpu_busy_total(self) -> tuple:
        """``(busy, total)`` CPU clock ticks of all CPUs since boot (idle: idle + iowait)."""
        fields = read_at(self._stat, 4096, 0).split(b"\n", 1)[0].split()
        if fields[0] != b"cpu":
            raise ValueError(f"/proc/stat starts with {fields[0]!r}")
        ticks = [int(v) for v in fields[1 : 1 + self._n_cpu_fields]]
        total = sum(ticks)
        return total - ticks[3] - (ticks[4] if len(ticks) > 4 else 0), total

    def memory(self):
        """``(used, total)`` bytes (used: total - available), or None where psutil must say."""
        text = read_at(self._meminfo, 4096, 0)
        total, avail = _kib_field(text, b"MemTotal:"), _kib_field(text, b"MemAvailable:")
        if total is None or avail is None or not 0 < avail <= total:
            return None  # an old kernel, or a reading psutil corrects: psutil's own answer
        return (total - avail) * 1024, total * 1024

    def close(self) -> None:
        """Close both files (idempotent); a later reading raises OSError.

        (Never reads another file that got the same descriptor number.)
        """
        self._close()
        self._stat = self._meminfo = -1


def _close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def proc_files():
    """A :class:`ProcFiles` where the host has Linux's ``/proc``, else None."""
    if not sys.platform.startswith("linux") or psutil.PROCFS_PATH != "/proc":
        return None
    try:
        return ProcFiles()
    except (OSError, ValueError):
        return None
