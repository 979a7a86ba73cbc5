"""The ``%gpuwatch`` sampler thread.

The ``%gpuwatch`` sampler: one daemon thread that reads a source every ``interval_s`` into a bounded
history.

The :class:`Sampler` is driven by ``Event.wait(interval)``; clock and wait are injectable so tests
run it
with a fake clock. It never prints and never raises: failures are recorded in ``Sampler.error``.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from typing import TYPE_CHECKING

from ..core.fmt import plural
from .sources import EndOfTrace

if TYPE_CHECKING:
    from .trace import TraceWriter

#: Longest interval the sampler accepts (``Event.wait`` overflows for huge timeouts).
MAX_INTERVAL_S = 3600.0


class Sampler:
    """Takes a sample every ``interval_s`` seconds into a bounded history.

    Args:
        source: object with ``read(seq, timestamp_s) -> Sample`` (:class:`~.sources.LiveSource`,
            :class:`~.sources.ReplaySource`); raising :class:`~.sources.EndOfTrace` ends the run.
        interval_s: seconds between samples (deadline-based: no drift; missed ticks are skipped).
        history_len: samples kept (``collections.deque(maxlen=...)``): constant memory for runs of
            days.
        count: stop after this many samples (None = until stopped).
        writer: a :class:`~.trace.TraceWriter` or None.
        on_sample: ``callback(sample)`` after each sample (widget update); its errors are recorded.
        on_finish: ``callback()`` when the loop ends, in the sampler's thread; its errors are
            recorded.
        clock: monotonic seconds (injectable for tests). wall: epoch seconds for timestamps.

    State (read from any thread): ``latest``, ``history``, ``samples_taken``, ``error`` (last
        failure text,
    ``""`` if none), ``errors`` (count), ``finished`` (why it ended, ``""`` while running),
    ``thread_cpu_s`` (CPU seconds the sampler thread used).
    """

    def __init__(
        self,
        source,
        *,
        interval_s: float = 1.0,
        history_len: int = 600,
        count: int | None = None,
        writer: TraceWriter | None = None,
        on_sample=None,
        on_finish=None,
        clock=time.monotonic,
        wall=time.time,
        name: str = "cudamagic-gpuwatch",
    ):
        self.source = source
        self.interval_s = float(interval_s)
        if not 0 < self.interval_s <= MAX_INTERVAL_S:  # also NaN; inf would overflow Event.wait
            raise ValueError(
                f"interval_s must be in (0, {MAX_INTERVAL_S:g}] seconds, not {interval_s!r}"
            )
        self.history = collections.deque(maxlen=int(history_len))
        self.count = count
        self.writer = writer
        self.on_sample = on_sample
        self.on_finish = on_finish
        self.clock, self.wall = clock, wall
        self.name = name
        self.latest = None
        self.samples_taken = 0
        self.error = ""
        self.errors = 0
        self.finished = ""
        self.thread_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    # -- one step ----------------------------------------------------------------------
    def step(self):
        """Take one sample now; returns it.

        None after a recorded failure; raises EndOfTrace at the end of a replay.
        """
        try:
            s = self.source.read(self.samples_taken + 1, self.wall())
        except EndOfTrace:
            raise
        except Exception as exc:
            self._record(f"reading failed: {type(exc).__name__}: {exc}")
            return None
        with self._lock:
            self.history.append(s)
            self.latest = s
            self.samples_taken += 1
        if self.writer is not None:
            try:
                self.writer.write(s)
            except Exception as exc:
                self._record(
                    f"writing {self.writer.path} failed: {type(exc).__name__}: {exc}; logging "
                    "stopped"
                )
                self.writer = None
        if self.on_sample is not None:
            try:
                self.on_sample(s)
            except Exception as exc:
                self._record(f"display update failed: {type(exc).__name__}: {exc}")
        return s

    def _record(self, text):
        self.errors += 1
        self.error = f"{time.strftime('%H:%M:%S')} {text}"

    def done(self) -> bool:
        """True once ``count`` samples were taken."""
        return self.count is not None and self.samples_taken >= self.count

    # -- the loop ------------------------------------------------------------------------
    def run_loop(self, wait=None, first_delay: float = 0.0):
        """Sample until stopped, ``count`` reached or the trace ends (runs in the calling thread).

        Args:
            wait: ``wait(seconds) -> bool`` returning True when asked to stop (default: the stop
                Event's wait).
            first_delay: seconds to wait before the first sample.
        """
        wait = wait or self._stop.wait
        t_cpu = time.thread_time()
        cpu0 = self.thread_cpu_s
        try:
            next_t = self.clock() + first_delay
            if first_delay and wait(first_delay):
                self.finished = "stopped"
                return
            while not self.done():
                try:
                    self.step()
                except EndOfTrace:
                    self.finished = "end of replay"
                    return
                self.thread_cpu_s = cpu0 + time.thread_time() - t_cpu
                if self.done():
                    break
                next_t += self.interval_s
                now = self.clock()
                if next_t < now:  # fell behind (suspended laptop, slow NVML): skip missed ticks
                    next_t = now
                if wait(next_t - now):
                    self.finished = "stopped"
                    return
            self.finished = f"{plural(self.samples_taken, 'sample')} taken (--count)"
        except BaseException as exc:  # KeyboardInterrupt in the foreground loop, or a bug
            self.finished = (
                "interrupted"
                if isinstance(exc, KeyboardInterrupt)
                else f"sampler crashed: {type(exc).__name__}: {exc}"
            )
            if not isinstance(exc, Exception):
                raise
            self._record(self.finished)
        finally:
            self.thread_cpu_s = cpu0 + time.thread_time() - t_cpu
            if self.writer is not None:
                self.writer.close()
            if self.on_finish is not None:
                try:
                    self.on_finish()
                except Exception as exc:
                    self._record(f"display update failed: {type(exc).__name__}: {exc}")

    def start(self, first_delay: float = 0.0):
        """Start the daemon thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self.run_loop, kwargs={"first_delay": first_delay}, name=self.name, daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0):
        """Ask the thread to stop and wait for it, at most ``timeout_s``.

        Safe from any thread, idempotent.
        """
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        if not self.finished:
            self.finished = "stopped"
        if self.writer is not None and (t is None or not t.is_alive()):
            self.writer.close()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the thread ends (``count`` reached, end of replay, stopped).

        True if it did.
        """
        t = self._thread
        if t is not None:
            t.join(timeout_s)
        return t is None or not t.is_alive()

    @property
    def running(self) -> bool:
        """True while the thread is alive and not asked to stop."""
        t = self._thread
        return t is not None and t.is_alive() and not self._stop.is_set()

    def snapshot(self, last: int | None = None):
        """``(latest sample, list of history samples)`` taken consistently.

        ``last``: only the newest ``last`` samples of the history (a tick's chart needs 120 of
        the 600 kept).
        """
        with self._lock:
            h = self.history
            if last is None or last >= len(h):
                return self.latest, list(h)
            return self.latest, list(itertools.islice(reversed(h), last))[::-1]
