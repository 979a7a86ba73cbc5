"""Running a compiled %%cuda program, with real processes and no nvcc.

Running a compiled %%cuda program (cudamagic/cuda/run.py), with real processes and no nvcc: what
`make mutation` runs for that module. The programs are POSIX shell scripts that print what real CUDA
programs print: the exit check's marker line (build.exit_check), the reports of the common CHECK
macros, Nsight Compute's permission error.
"""

from __future__ import annotations

import errno
import io
import os
import re
import sys
import threading
import time
import traceback

import psutil
import pytest

from cudamagic.cuda.build import ERROR_MARKER
from cudamagic.cuda.errors import CudaProgramError
from cudamagic.cuda.run import RunResult, run_program, timeout_message

from .conftest import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell programs")

# : what build.exit_check's code prints on stderr when the program leaves a CUDA error (here: no
# driver, after a launch)
NO_DRIVER = "CUDA driver version is insufficient for CUDA runtime version"
EXIT_CHECK_LINE = f"\\n{ERROR_MARKER} 35 cudaErrorInsufficientDriver {NO_DRIVER}\\n"


def _sh(script: str) -> list:
    return ["/bin/sh", "-c", script]


def _gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def _run_failing(script: str, **kw) -> CudaProgramError:
    with pytest.raises(CudaProgramError, match=r"^the program ") as info:
        run_program(_sh(script), out=io.StringIO(), err=io.StringIO(), **kw)
    return info.value


def test_stdout_and_stderr_are_relayed_apart_in_order():
    out, err = io.StringIO(), io.StringIO()
    result = run_program(
        _sh("echo one; echo two >&2; echo three; sleep 0.2; echo four >&2"), out=out, err=err
    )
    assert (out.getvalue(), err.getvalue()) == ("one\nthree\n", "two\nfour\n")
    assert (result.returncode, result.lines, result.watched) == (0, 4, [])
    assert 0.2 <= result.elapsed_s < 10


def test_default_streams_are_sys_stdout_and_stderr_at_call_time(capsys):
    run_program(_sh("echo to-out; echo to-err >&2"))
    assert capsys.readouterr() == ("to-out\n", "to-err\n")


def test_bytes_that_are_not_utf8_are_shown_replaced():
    out = io.StringIO()
    run_program(_sh(r"printf 'caf\351 au lait\n'; echo next"), out=out)  # Latin-1 "café"
    assert out.getvalue() == "caf\ufffd au lait\nnext\n"


def test_the_program_reads_no_input():
    # the kernel's own stdin holds text here; the program must not get it (nor wait on a terminal):
    # /dev/null
    read_end, write_end = os.pipe()
    os.write(write_end, b"the kernel's input\n")
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        out = io.StringIO()
        run_program(_sh('read line; echo "read status $?: [$line]"'), timeout_s=10, out=out)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read_end)
    assert out.getvalue() == "read status 1: []\n"  # end of input at once


def test_exit_check_marker_is_the_cells_error_and_not_shown():
    err = io.StringIO()
    with pytest.raises(CudaProgramError, match=r"left a CUDA error") as info:
        # a static destructor still writes after the exit check
        run_program(
            _sh(f"echo result 3; printf '{EXIT_CHECK_LINE}~Buffer: freed\\n' >&2; exit 0"),
            out=io.StringIO(),
            err=err,
        )
    exc = info.value
    error = f"cudaErrorInsufficientDriver (35): {NO_DRIVER}"
    assert str(exc) == f"the program exited with status 0 but left a CUDA error: {error}"
    assert (exc.returncode, exc.cuda_error, exc.timed_out) == (0, error, False)
    assert (
        err.getvalue() == "\n~Buffer: freed\n"
    )  # the blank line before the marker, and what came after it


def test_exit_check_error_comes_before_a_printed_one_and_replaces_the_stderr_tail():
    # a CHECK macro printed a report and exited 1; the exit check then reported the sticky error
    exc = _run_failing(
        "echo 'loading' >&2; echo 'CUDA error at vec.cu:12 code=35(cudaErrorInsufficientDriver) "
        f"\"cudaMalloc(&d, n)\"' >&2; printf '{EXIT_CHECK_LINE}' >&2; exit 1"
    )
    error = f"cudaErrorInsufficientDriver (35): {NO_DRIVER}"
    assert str(exc) == f"the program exited with status 1. CUDA error: {error}"
    assert (exc.returncode, exc.cuda_error) == (1, error)


def test_printed_report_is_kept_stripped_and_at_most_300_characters():
    path = "/home/user/projects/" + "very-long-folder-name/" * 20 + "vec.cu"
    line = f'CUDA error at {path}:42 code=2(cudaErrorMemoryAllocation) "cudaMalloc(&d_a, bytes)"'
    exc = _run_failing(f"echo '   {line}  '; exit 0")
    assert exc.cuda_error == line[:300] and len(line) > 300
    assert str(exc) == f"the program exited with status 0 but printed a CUDA error: {line[:300]}"


def test_stderr_tail_is_the_last_five_stderr_lines():
    # the last two end in CR LF, as a Windows program writes them: shown without the CR
    exc = _run_failing(
        "echo 'on stdout'; for i in 1 2 3 4 5; do echo \"warning $i\" >&2; done; "
        "printf 'warning 6\\r\\nwarning 7\\r\\n' >&2; echo 'stdout again'; exit 3"
    )
    assert str(exc) == (
        "the program exited with status 3.\nLast lines on stderr:\n"
        "warning 3\nwarning 4\nwarning 5\nwarning 6\nwarning 7"
    )
    assert (exc.returncode, exc.cuda_error, exc.timed_out) == (3, "", False)


@pytest.mark.parametrize(
    "script,message,returncode,cuda_error",
    [
        ("kill -SEGV $$", "the program was killed by SIGSEGV.", -11, ""),
        (
            "kill -35 $$",
            "the program was killed by signal 35.",
            -35,
            "",
        ),  # a real-time signal: no name in Python
        (
            "echo 'CUDA error: an illegal memory access was encountered' >&2; kill -ABRT $$",
            "the program was killed by SIGABRT. CUDA error: an illegal memory access was "
            "encountered",
            -6,
            "CUDA error: an illegal memory access was encountered",
        ),
    ],
)
def test_death_by_a_signal_is_named(script, message, returncode, cuda_error):
    exc = _run_failing(script)
    assert (str(exc), exc.returncode, exc.timed_out, exc.cuda_error) == (
        message,
        returncode,
        False,
        cuda_error,
    )


def test_a_program_that_closes_its_output_but_keeps_running_is_ended():
    start = time.monotonic()
    exc = _run_failing("exec >&- 2>&-; sleep 30")
    assert str(exc) == "the program was killed by SIGKILL." and exc.returncode == -9
    assert time.monotonic() - start < 15  # it waited 2 s for the exit, then killed it, not 30 s


@pytest.mark.parametrize("timeout_from", ["--timeout", "config"])
def test_timeout_kills_the_tree_and_says_where_the_limit_came_from(timeout_from):
    out = io.StringIO()
    start = time.monotonic()
    with pytest.raises(CudaProgramError, match=r"ran longer than") as info:
        # a grandchild that left its parent (double fork): only the process group reaches it
        run_program(
            _sh("(sleep 30 & echo $!); sleep 30"),
            timeout_s=0.5,
            out=out,
            err=io.StringIO(),
            timeout_from=timeout_from,
        )
    exc = info.value
    assert time.monotonic() - start < 15
    assert str(exc) == timeout_message(0.5, timeout_from) and exc.timed_out and exc.returncode == -9
    orphan = int(out.getvalue())
    assert wait_until(lambda: _gone(orphan))


def test_timeout_from_defaults_to_the_cells_flag():
    exc = _run_failing("sleep 30", timeout_s=0.3)
    assert str(exc) == timeout_message(0.3) == timeout_message(0.3, "--timeout")


def test_timeout_messages():
    assert timeout_message(2.5) == (
        "the program ran longer than --timeout 2.5 s and was killed with all its child "
        "processes; give it a larger --timeout (0: no limit)."
    )
    assert timeout_message(30.0, "config") == (
        "the program ran longer than 30 s, the limit set by `%config CudaMagics.cuda_timeout_s = "
        "30`, and was killed with all its child processes; give this cell more time with "
        "`%%cuda --timeout 600` (0: no limit)."
    )


def test_no_timeout_lets_a_slow_program_finish():
    result = run_program(_sh("sleep 0.3; echo done"), None, out=io.StringIO())
    assert result.returncode == 0 and result.elapsed_s >= 0.3


def test_watched_lines_reach_the_caller_on_success_and_failure():
    from cudamagic.cuda.cell import _PERM_RE

    perm = (
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance "
        "Counters on the target device 0."
    )
    script = f"echo '==PROF== Connected to process 4242'; printf '{perm}\\r\\n'; echo 'hello'"
    result = run_program(_sh(script), out=io.StringIO(), watch=_PERM_RE)
    assert isinstance(result, RunResult) and result.watched == [perm] and result.lines == 3
    exc = _run_failing(script + "; exit 1", watch=_PERM_RE)
    assert exc.watched == [perm]


def test_interrupt_kills_the_program_and_says_so(capsys):
    import _thread
    import signal

    out = io.StringIO()
    # Ctrl-C as IPython gets it: Python's own SIGINT handler (a test runner such as mutmut may have
    # set another)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt, match=r"^$"):
            run_program(_sh("echo $$; sleep 30"), out=out)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 15  # killed, not waited for
    pid = int(out.getvalue())
    assert _gone(pid)
    assert (
        capsys.readouterr().err
        == f"%%cuda: interrupted; the program (pid {pid}) and its children were killed.\n"
    )


def test_a_flood_of_lines_is_relayed_whole():
    out = io.StringIO()
    result = run_program(_sh("seq 1 20000"), out=out)
    assert out.getvalue() == "".join(f"{i}\n" for i in range(1, 20001)) and result.lines == 20000


def test_every_runtime_error_text_is_a_report_after_a_failure_word():
    # the texts come from CUDA 13.0's cudaGetErrorString list (core.cuda_runtime_errors), read
    # afresh here
    from cudamagic.core.cuda_runtime_errors import RUNTIME_ERRORS
    from cudamagic.cuda import run

    run._text_res.cache_clear()
    try:
        texts = {text for _code, _name, text in RUNTIME_ERRORS}
        assert len(texts) > 50
        missed = [t for t in sorted(texts) if not run.printed_cuda_error(f"cudaMalloc failed: {t}")]
        assert missed == []
        assert not run.printed_cuda_error(
            "cudaMalloc failed: " + re.sub(r"\w", "z", min(texts, key=len))
        )
    finally:
        run._text_res.cache_clear()


def test_debugger_skips_the_runner_frames():
    # %debug after a failed cell (IPython's Pdb skips frames marked __tracebackhide__) lands outside
    # cudamagic
    from IPython.core.debugger import Pdb

    exc = _run_failing("exit 3")
    stack = list(traceback.walk_tb(exc.__traceback__))
    hidden = dict(zip((id(f) for f, _ in stack), Pdb().hidden_frames(stack), strict=True))
    (runner,) = [f for f, _ in stack if "readers" in f.f_locals]  # run_program's own frame
    raiser = stack[-1][0]  # _check, which raised
    assert "tail" in raiser.f_locals and (hidden[id(runner)], hidden[id(raiser)]) == (True, True)
    assert hidden[id(stack[0][0])] is False  # this test's frame is shown


# a program whose grandchild left its session (double fork + setsid): neither the process group nor
# the process tree reaches it, and it keeps the output pipes open after the time-out
ESCAPED_GRANDCHILD = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(20)
    os._exit(0)
time.sleep(20)
"""


def test_a_leftover_reader_does_not_hold_the_kernel_at_exit():
    before = set(threading.enumerate())
    out = io.StringIO()
    with pytest.raises(CudaProgramError, match=r"ran longer than --timeout 2 s"):
        run_program(
            [sys.executable, "-c", ESCAPED_GRANDCHILD], timeout_s=2.0, out=out, err=io.StringIO()
        )
    pid = int(out.getvalue())
    try:
        left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert len(left) == 2  # the stdout and stderr readers still wait on the grandchild's pipes
        assert all(
            t.daemon for t in left
        )  # daemon threads: the kernel's interpreter can still exit
    finally:
        psutil.Process(pid).kill()


# ---- output is never lost: stdout a terminal, what was printed before a kill still shown ---------
def test_stdout_is_a_terminal_and_stderr_stays_a_pipe_apart():
    out, err = io.StringIO(), io.StringIO()
    run_program(
        _sh("[ -t 1 ] && echo out-is-a-tty; [ -t 2 ] || echo err-is-a-pipe >&2"), out=out, err=err
    )
    assert (out.getvalue(), err.getvalue()) == ("out-is-a-tty\n", "err-is-a-pipe\n")


def test_line_ends_are_kept_as_printed_on_the_terminal():
    out = io.StringIO()
    run_program(_sh(r"printf 'unix\nwindows\r\nlast without an end'"), out=out)
    assert out.getvalue() == "unix\nwindows\r\nlast without an end"


# a Python child block-buffers a pipe but line-buffers a terminal (PYTHONUNBUFFERED unset, as
# a kernel has it); it prints two lines and hangs until it is killed
HANGS_AFTER_PRINTING = "import time\nprint('epoch 1 done')\nprint('epoch 2 done')\ntime.sleep(30)\n"


@pytest.fixture
def buffered_python(monkeypatch):
    """``argv`` of a Python child that buffers its stdout as the C library does."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    return [sys.executable, "-c", HANGS_AFTER_PRINTING]


def test_lines_printed_before_a_timeout_kill_are_shown(buffered_python):
    out = io.StringIO()
    with pytest.raises(CudaProgramError, match=r"ran longer than --timeout 1\.5 s"):
        run_program(buffered_python, timeout_s=1.5, out=out)
    assert out.getvalue() == "epoch 1 done\nepoch 2 done\n"


def test_an_unfinished_last_line_is_shown_after_a_kill():
    out = io.StringIO()
    with pytest.raises(CudaProgramError, match=r"ran longer than"):
        run_program(_sh("echo one; printf 'waiting for a lock...'; sleep 30"), 1.0, out=out)
    assert out.getvalue() == "one\nwaiting for a lock..."


def test_lines_arrive_before_the_program_ends(monkeypatch, tmp_path):
    # the program waits for a flag that the test writes only once "first" reached it
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    flag = tmp_path / "seen"

    class Relay(io.StringIO):
        def write(self, text):
            if "first" in text:
                flag.touch()
            return super().write(text)

    program = (
        "import os, time\nprint('first')\nend = time.monotonic() + 60\n"
        f"while not os.path.exists({str(flag)!r}) and time.monotonic() < end:\n"
        "    time.sleep(0.01)\n"
        f"print('seen' if os.path.exists({str(flag)!r}) else 'not seen')\n"
    )
    out = Relay()
    run_program([sys.executable, "-c", program], out=out)
    assert out.getvalue() == "first\nseen\n"


def test_lines_printed_before_an_interrupt_are_shown(buffered_python, capsys):
    import _thread
    import signal

    out = io.StringIO()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.5, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_program(buffered_python, out=out)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert out.getvalue() == "epoch 1 done\nepoch 2 done\n"


def _open_fds() -> set:
    return set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else set()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux /proc")
def test_no_terminal_or_pipe_is_left_open():
    run_program(_sh("true"), out=io.StringIO())  # the first run's imports open what they keep
    before = _open_fds()
    for _ in range(3):
        run_program(_sh("echo hi; echo there >&2"), out=io.StringIO(), err=io.StringIO())
        with pytest.raises(CudaProgramError):
            run_program(_sh("echo hi; sleep 30"), timeout_s=0.3, out=io.StringIO())
    assert wait_until(lambda: _open_fds() == before)


def test_no_free_terminal_falls_back_to_a_pipe(monkeypatch):
    def no_terminal():
        raise OSError(errno.EAGAIN, "out of pseudo-terminals")

    monkeypatch.setattr(os, "openpty", no_terminal)
    out = io.StringIO()
    run_program(_sh("[ -t 1 ] && echo terminal || echo pipe"), out=out)
    assert out.getvalue() == "pipe\n"
