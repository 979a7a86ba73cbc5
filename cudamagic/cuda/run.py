"""Running a compiled cell, its output streamed line by line.

A time limit and a kernel interrupt kill the whole process tree; a non-zero exit, a signal, a
time-out or a CUDA error is an exception.
"""

from __future__ import annotations

import functools
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from ..core.cuda_runtime_errors import RUNTIME_ERRORS
from ..core.platform import kill_tree, output_terminal, popen, windows_crash_name
from .build import ERROR_MARKER
from .errors import CudaProgramError

_NAME = r"cudaError(?!_t\b)[A-Z]\w*"
#: What a report line starts with before ``: cudaErrorXxx``: a location (``vec.cu(12)``,
#: ``main.cu:42``), a CUDA API function (``cudaMalloc``, ``cublasCreate``), or a call
#: (``cudaMalloc(&d, n)``, ``check()``), maybe in brackets.
_PREFIX = (
    r"(?:[\w./\\-]+\.\w+(?:\(\d+\)|:\d+)(?::\d+)?|cu(?:da|blas|fft|rand|sparse|solver|dnn)?[A-Z]\w*"
    r"(?:\([^()]*\))?|\w+\([^()]*\))"
)
#: Report shapes that need no runtime text: ``CUDA error: ...``, ``CUDA Runtime Error (2): ...``,
#: ``CUDA error at f.cu:42 code=35(...)`` (NVIDIA's samples), ``Cuda error in file 'f.cu' in
#: line 12 : ...``; ``vec.cu(12): cudaErrorNoDevice`` / ``cudaMalloc: cudaErrorMemoryAllocation``
#: at a line start; a name right after ``error``, ``failed``, ``returned`` or ``code=N(``.
_REPORT_RES = (
    re.compile(
        r"\bCUDA(?:\s+runtime)?\s+error\b\s*(?:\(\s*-?\d+\s*\)|[:=#]|at\b|in\s+file\b)", re.I
    ),
    re.compile(rf"^\s*(?:\[[^\]]*\]\s*)?{_PREFIX}\s*(?:\w+\s*)?[:=-]\s*(?:error\s*:?\s*)?{_NAME}"),
    re.compile(
        r"(?i:\b(?:error|failed|failure|returned|code\s*=?\s*-?\d+)\b)"
        rf"[\s:=(,'\"#\[-]*(?:-?\d+[\s:=(,'\"-]*)?{_NAME}"
    ),
)


@functools.lru_cache(maxsize=1)
def _text_res() -> tuple:
    """Report shapes around an exact ``cudaGetErrorString`` text (CUDA 13.0's list).

    Returns:
        ``(after a word of failure, after its name, the value that ends the line)``.
    """
    runtime_texts = {text for _code, _name, text in RUNTIME_ERRORS}
    texts = "|".join(re.escape(t) for t in sorted(runtime_texts, key=len, reverse=True))
    return (
        # after "error", "failed", "assert" (GPUassert: ...), "returned", maybe with a code:
        # "failed: <text>"
        re.compile(
            r"(?i:error|fail(?:ed|ure)?|assert(?:ion)?|returned)"
            r"(?:\s+with)?(?:\s*(?:code\s*)?-?\d+)?"
            rf"\s*[:=(\[\"'-]?\s*(?:{texts})\b"
        ),
        # after its name: "cudaErrorNoDevice (100): no CUDA-capable device is detected"
        re.compile(rf"{_NAME}\s*(?:\(\s*-?\d+\s*\))?\s*[:=-]\s*(?:{texts})\b"),
        # the value that ends the line: "devices: 0 (<text>)", "status = <text>."
        re.compile(rf"(?:[:(=]|\s-)\s*[\"']?(?:{texts})[\"']?\s*\)?\.?\s*$"),
    )


def printed_cuda_error(line: str) -> bool:
    """True when a printed ``line`` is shaped like a CUDA error report, not text mentioning one.

    Reports: ``CUDA error: ...``, ``CUDA Runtime Error (2): ...``, ``CUDA error at f.cu:42
    code=35(...)``; ``vec.cu(12): cudaErrorNoDevice`` or ``cudaMalloc(&d, n):
    cudaErrorMemoryAllocation`` (a location or a function, then the name); ``error
    cudaErrorNoDevice``, ``failed: cudaError...``; an exact ``cudaGetErrorString`` text after
    ``error``/``failed``/``assert`` (``cudaMalloc failed: out of memory``, ``GPUassert: out of
    memory f.cu 12``) or after its name; and such a text printed as the value that ends a line
    mentioning CUDA (``devices: 0 (CUDA driver version is insufficient for CUDA runtime
    version)``). Not reports: ``note: cudaErrorMemoryAllocation is what you get when OOM``,
    ``cudaSuccess``, ``CUDA error checking enabled``, ``out of memory handling: none``.
    """
    if any(r.search(line) for r in _REPORT_RES):
        return True
    after_failure, after_name, value = _text_res()
    if after_failure.search(line) or after_name.search(line):
        return True
    return "cuda" in line.lower() and bool(value.search(line))


@dataclass
class RunResult:
    """A finished run.

    Attributes:
        returncode: 0.
        elapsed_s: wall seconds.
        lines: the number of output lines.
        watched: the lines that matched ``run_program``'s ``watch``, without their line end.
    """

    returncode: int
    elapsed_s: float
    lines: int
    watched: list


def _reader(stream, name: str, q: queue.Queue) -> None:
    """Put each line read from ``stream`` on ``q`` as it arrives, then ``(name, None)``.

    Reads what is there (``os.read``), so a line is passed on as soon as its end arrives; the
    last line without an end goes at the end. A pseudo-terminal's end is ``EIO`` (Linux), not
    ``b""``. The stream is closed here, by the one thread that reads it.
    """
    pending = b""
    try:
        while True:
            try:
                data = os.read(stream.fileno(), 65536)
            except OSError:  # EIO: the pseudo-terminal's last writer is gone
                data = b""
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                q.put((name, line.decode("utf-8", "replace") + "\n"))
        if pending:
            q.put((name, pending.decode("utf-8", "replace")))
    finally:
        q.put((name, None))
        stream.close()


def _write(name, chunk, out, err) -> None:
    if chunk:
        stream = (out or sys.stdout) if name == "out" else (err or sys.stderr)
        stream.write("".join(chunk))
        stream.flush()


#: Seconds to wait, after a time-out or an interrupt killed the program, for the output it printed
#: before (already written, so it arrives at once unless a process that escaped the kill holds the
#: stream open).
DRAIN_S = 1.0


class _Relay:
    """The output relayed so far, and what was found in it."""

    def __init__(self, out, err, watch) -> None:
        self.out, self.err, self.watch = out, err, watch
        self.open_streams, self.count = 2, 0
        self.cuda_errors, self.printed, self.tail, self.watched = [], [], [], []

    def take(self, q: queue.Queue, wait_s: float) -> None:
        """Relay what has arrived on ``q`` (waiting up to ``wait_s`` for the first item)."""
        try:
            items = [q.get(timeout=wait_s)]
        except queue.Empty:
            return
        while len(items) < 4096:  # what else has arrived goes out in the same write
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                break
        chunk_name, chunk = None, []
        for name, text in items:
            if text is None:
                self.open_streams -= 1
                continue
            if text.startswith(ERROR_MARKER):
                _, code, ename, *words = text.split()
                self.cuda_errors.append(f"{ename} ({code}): {' '.join(words)}")
                continue
            self.count += 1
            if self.watch is not None and self.watch.search(text):
                self.watched.append(text.rstrip())
            if printed_cuda_error(text):
                self.printed.append(text.strip()[:300])
            if name == "err":
                self.tail = (self.tail + [text.rstrip()])[-5:]
            if name != chunk_name:
                _write(chunk_name, chunk, self.out, self.err)
                chunk_name, chunk = name, []
            chunk.append(text)
        _write(chunk_name, chunk, self.out, self.err)

    def drain(self, q: queue.Queue, limit_s: float) -> None:
        """Relay the rest, until both streams end or ``limit_s`` seconds have passed."""
        end = time.monotonic() + limit_s
        while self.open_streams and time.monotonic() < end:
            self.take(q, 0.05)


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def run_program(
    argv: list,
    timeout_s: float | None = None,
    out=None,
    err=None,
    watch=None,
    timeout_from: str = "--timeout",
) -> RunResult:
    """Run ``argv``, writing each line of its output as soon as it is printed.

    Args:
        argv: the program and its arguments.
        timeout_s: seconds before the process tree is killed (None: no limit).
        out: where stdout lines go (default ``sys.stdout`` at call time).
        err: where stderr lines go (default ``sys.stderr`` at call time).
        watch: a compiled pattern; matching lines are collected in ``watched``.
        timeout_from: where the limit came from, for the message: ``"--timeout"`` or
            ``"config"`` (``CudaMagics.cuda_timeout_s``).

    Returns:
        :class:`RunResult` when the program exits with status 0 and reports no CUDA error.

    Raises:
        CudaProgramError: non-zero exit status, death by a signal, time-out, or a CUDA error: one
            the exit check found, or one the program printed itself (:func:`printed_cuda_error`),
            even with exit status 0 (the message carries the CUDA error text so the error explainer
            can match it).
        KeyboardInterrupt: the kernel was interrupted; the process tree was killed first.
    """
    __tracebackhide__ = True  # noqa: F841
    start = time.monotonic()
    terminal = output_terminal()  # POSIX: stdout is a terminal, so C stdio line-buffers it
    try:
        proc = popen(
            argv,
            stdout=terminal[1] if terminal else subprocess.PIPE,
            stderr=subprocess.PIPE,  # apart from stdout, as it is today
            stdin=subprocess.DEVNULL,
        )
    except BaseException:
        if terminal:
            os.close(terminal[0])
        raise
    finally:
        if terminal:
            os.close(terminal[1])  # the child's copy is its own now
    stdout = open(terminal[0], "rb", buffering=0) if terminal else proc.stdout
    q: queue.Queue = queue.Queue()
    readers = [
        threading.Thread(target=_reader, args=(stdout, "out", q), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, "err", q), daemon=True),
    ]
    for t in readers:
        t.start()
    relay = _Relay(out, err, watch)
    timed_out = False
    try:
        while relay.open_streams:
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                timed_out = True
                kill_tree(proc)
                relay.drain(q, DRAIN_S)  # what it printed before the kill is shown
                break
            relay.take(q, 0.05)
    except KeyboardInterrupt:
        kill_tree(proc)
        proc.wait()
        relay.drain(q, DRAIN_S)
        print(
            f"%%cuda: interrupted; the program (pid {proc.pid}) and its children were killed.",
            file=sys.stderr,
        )
        raise
    try:
        rc = proc.wait(timeout=2)
    except subprocess.TimeoutExpired:  # closed its output but still running: end it
        kill_tree(proc)
        rc = proc.wait()
    for t in readers:
        t.join(timeout=1)
    elapsed = time.monotonic() - start
    try:
        _check(rc, timed_out, timeout_s, relay.cuda_errors, relay.printed, relay.tail, timeout_from)
    except CudaProgramError as exc:
        exc.watched = relay.watched
        raise
    return RunResult(rc, elapsed, relay.count, relay.watched)


def timeout_message(timeout_s: float, timeout_from: str = "--timeout") -> str:
    """The message of a cell killed after ``timeout_s`` seconds: the limit and how to change it.

    Args:
        timeout_s: the limit.
        timeout_from: ``"--timeout"`` (the cell's flag) or ``"config"``.
    """
    if timeout_from == "config":
        return (
            f"the program ran longer than {timeout_s:g} s, the limit set by `%config "
            f"CudaMagics.cuda_timeout_s = {timeout_s:g}`, and was killed with all its child "
            "processes; give this cell more time with `%%cuda --timeout 600` (0: no limit)."
        )
    return (
        f"the program ran longer than --timeout {timeout_s:g} s and was killed with all its child "
        "processes; give it a larger --timeout (0: no limit)."
    )


def _as_cuda_error(text: str) -> str:
    """``text`` introduced once as ``CUDA error: ...`` (kept when it says so already)."""
    return (
        text if re.search(r"\bcuda(?:\s+runtime)?\s+error\b", text, re.I) else f"CUDA error: {text}"
    )


def _check(rc, timed_out, timeout_s, cuda_errors, printed, tail, timeout_from="--timeout") -> None:
    __tracebackhide__ = True  # noqa: F841
    if timed_out:
        raise CudaProgramError(
            timeout_message(timeout_s, timeout_from), returncode=rc, timed_out=True
        )
    seen = cuda_errors + printed  # the exit check's error first; only read for a failed exit below
    cuda = f" {_as_cuda_error(seen[0])}" if seen else ""
    if rc < 0:
        raise CudaProgramError(
            f"the program was killed by {_signal_name(-rc)}.{cuda}",
            returncode=rc,
            cuda_error=seen[0] if seen else "",
        )
    if rc != 0:
        last = ("\nLast lines on stderr:\n" + "\n".join(tail)) if tail and not cuda else ""
        crash = windows_crash_name(rc)
        status = f"{rc} (0x{rc:08X}: {crash})" if crash else str(rc)
        raise CudaProgramError(
            f"the program exited with status {status}.{cuda}{last}",
            returncode=rc,
            cuda_error=seen[0] if seen else "",
        )
    if cuda_errors:
        raise CudaProgramError(
            f"the program exited with status 0 but left a CUDA error: {cuda_errors[0]}",
            returncode=rc,
            cuda_error=cuda_errors[0],
        )
    if printed:
        # a program that catches a CUDA error, prints it and returns 0 still failed at CUDA: fail
        # the cell (so Run All stops) and let the explainer match the printed text
        raise CudaProgramError(
            f"the program exited with status 0 but printed a CUDA error: {printed[0]}",
            returncode=rc,
            cuda_error=printed[0],
        )
