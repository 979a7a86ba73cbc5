"""PyTorch's C++ warnings and Kineto's log lines, collected from file descriptor 2.

C++ code writes its warnings straight to descriptor 2 (``[W1202 02:18:05.876 CPUAllocator.cpp:245]
Memory block of unknown size ...``), and Kineto writes a log line at each profiler start and stop
(``USDT:... profiler_start``): a notebook shows them as red stderr text. While a profiled cell runs,
:class:`Fd2Collector` points descriptor 2 at a temporary file and keeps those lines; every other
line (the user's own stderr, a progress bar) is passed on to the real descriptor 2 as it arrives,
by a thread that reads the file every :data:`POLL_S` seconds (at the end only, where the system
has no ``os.pread``).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading

from ..core import platform

#: seconds between two reads of the captured output (the delay of passed-on lines).
POLL_S = 0.05
#: Kineto's log lines (``USDT:2026-12-02 02:17:48 12940:12940 File.cpp:59] profiler_stop``): kept,
#: not shown.
KINETO_LOG = re.compile(r"^(USDT|STAGE|INFO|VERBOSE):\S* ")
#: Kineto's warnings and errors in its own format.
KINETO_WARNING = re.compile(r"^(WARNING|ERROR):\d{4}-\d\d-\d\d \S+ \d+:\d+ \S+:\d+\] ")
#: a warning of PyTorch's C++ logging (``[W1202 02:18:05.876278568 CPUAllocator.cpp:245] ...``;
#: older builds: ``[W CPUAllocator.cpp:245] ...``).
C10_WARNING = re.compile(r"^\[W(\d{4} \d\d:\d\d:\d\d\.\d+)?( \d+)? [^\s\]]+:\d+\] ")
_TOOLS = re.compile(r"kineto|cupti|roctracer", re.IGNORECASE)
#: starts of the collected lines: a partial line that could become one is held back.
_PREFIXES = (b"[W", b"USDT:", b"STAGE:", b"INFO:", b"VERBOSE:", b"WARNING:", b"ERROR:")


def is_log(line: str) -> bool:
    """A Kineto log line (start, stop, stage): collected, never shown."""
    return bool(KINETO_LOG.match(line))


def is_collected(line: str) -> bool:
    """A line that goes to the warnings notice or the log instead of the cell's stderr."""
    return bool(
        KINETO_LOG.match(line)
        or KINETO_WARNING.match(line)
        or C10_WARNING.match(line)
        or _TOOLS.search(line)
    )


def _may_become_collected(part: bytes) -> bool:
    """Whether a partial line (no newline yet) may still turn out to be a collected line."""
    return any(p.startswith(part[: len(p)]) for p in _PREFIXES)


class Fd2Collector(contextlib.AbstractContextManager):
    """Collect what C++ code writes to file descriptor 2 inside the block.

    Attributes:
        lines: the collected lines (Kineto's log, PyTorch's C++ warnings), in order.

    Other output is written to the real descriptor 2 as it arrives (within :data:`POLL_S`
    seconds), a partial line too unless it may start a collected line. Where descriptor 2 cannot
    be redirected (no ``fileno``), nothing is collected and output goes where it went.
    """

    def __init__(self):
        self.lines: list[str] = []
        self._saved = None
        self._tmp = None
        self._pos = 0
        self._buf = b""
        self._mid_line = False  # part of the current line was already passed on
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    def __enter__(self):
        try:
            self._fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
            sys.stderr.flush()
            self._saved = os.dup(self._fd)
        except (AttributeError, OSError, ValueError):
            return self
        self._tmp = tempfile.TemporaryFile()
        os.dup2(self._tmp.fileno(), self._fd)
        if platform.can_read_at():
            self._thread = threading.Thread(target=self._poll, name="cudamagic-fd2", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._saved is None:
            return None
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        with contextlib.suppress(AttributeError, OSError, ValueError):
            sys.stderr.flush()
        os.dup2(self._saved, self._fd)
        try:
            self._pump(final=True)
        finally:
            os.close(self._saved)
            self._tmp.close()
        return None

    def _poll(self):
        while not self._stop.wait(POLL_S):
            try:
                self._pump(final=False)
            except OSError:  # never raise into the kernel: the rest is read at the end
                return

    def _read_new(self) -> bytes:
        fd = self._tmp.fileno()
        chunks = []
        while True:
            chunk = platform.read_at(fd, 1 << 16, self._pos)
            if not chunk:
                return b"".join(chunks)
            self._pos += len(chunk)
            chunks.append(chunk)

    def _pump(self, final: bool) -> None:
        with self._lock:
            buf = self._buf + self._read_new()
            out = []
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                if self._mid_line:
                    self._mid_line = False
                    out.append(raw + b"\n")
                    continue
                line = raw.decode("utf-8", errors="replace")
                if is_collected(line):
                    self.lines.append(line)
                else:
                    out.append(raw + b"\n")
            if buf and (final or self._mid_line or not _may_become_collected(buf)):
                if final and not self._mid_line and is_collected(buf.decode("utf-8", "replace")):
                    self.lines.append(buf.decode("utf-8", errors="replace"))
                else:
                    out.append(buf)
                    self._mid_line = not final
                buf = b""
            self._buf = buf
            data = b"".join(out)
            while data:
                data = data[os.write(self._saved, data) :]
