"""The ``%gpuwatch`` monitor: starting it, the one-monitor-per-process registry, the text loop.

:func:`start_watch` makes a :class:`~.result.GpuWatch` (what ``%gpuwatch`` returns) and starts its
sampler thread. :class:`Monitors` (one per ``WatchMagics``, created in its ``on_load``) keeps the
one monitor of the process: starting one stops the previous one; ``%unload_ext``, ``atexit`` and,
in an ipykernel, the kernel's ``shutdown_request`` (:meth:`Monitors.hook_kernel_shutdown`) stop
it, the last before the kernel answers, so the snapshot reaches the front end while it still
listens. :func:`run_foreground` is the terminal loop of ``--loop`` and ``--count``.
"""

from __future__ import annotations

import inspect
import threading

from IPython.display import display

from ..core.fmt import plural
from .result import GpuWatch
from .sampler import Sampler
from .sources import EndOfTrace, Source


def start_watch(
    source: Source,
    *,
    interval_s: float = 1.0,
    history_len: int = 600,
    count: int | None = None,
    writer=None,
    widget: bool = True,
    background: bool = True,
    options: dict | None = None,
) -> GpuWatch:
    """Create a monitor, take its first sample now, and start its thread.

    The first sample is synchronous (so the display has data at once); the sampler thread takes
    the following ones every ``interval_s`` seconds. :meth:`Monitors.start` also stops the
    previous monitor.

    Args:
        source: where samples come from (:class:`~.sources.Source`).
        interval_s: seconds between samples.
        history_len: samples kept.
        count: stop after this many samples (None: until stopped).
        writer: a :class:`~.trace.TraceWriter` or None.
        widget: build the widget tree.
        background: start the thread (False: one sample only).
        options: the settings it was started with.
    """
    sampler = Sampler(
        source, interval_s=interval_s, history_len=history_len, count=count, writer=writer
    )
    watch = GpuWatch(sampler, label=source.label, widget=widget, options=options)
    try:
        sampler.step()
    except EndOfTrace:  # an empty replay
        sampler.finished = "end of replay"
    if background and sampler.latest is not None and sampler.latest.gpus:
        newest = sampler.latest.timestamp_s
        older = [s for s in source.preload(history_len) if s.timestamp_s < newest]
        with sampler._lock:
            sampler.history.extendleft(reversed(older[-(history_len - 1) :]))
    if background and not sampler.done() and not sampler.finished:
        sampler.start(first_delay=interval_s)
    else:
        if not sampler.finished:
            sampler.finished = "single sample" if not background else "done"
        if writer is not None:
            writer.close()
        source.close()  # no thread will read it again (a one-off table is not kept anywhere)
        watch._finished()
    return watch


class Monitors:
    """The one monitor of this process: starts, replaces and stops it (thread-safe)."""

    def __init__(self):
        self._lock = threading.RLock()
        self.current: GpuWatch | None = None

    def start(self, source: Source, **kwargs) -> GpuWatch:
        """Stop the running monitor, then :func:`start_watch` a new one and keep it."""
        with self._lock:
            self.stop()
            self.current = start_watch(source, **kwargs)
            return self.current

    def stop(self) -> GpuWatch | None:
        """Stop the current monitor, if any; returns it (or None)."""
        with self._lock:
            if self.current is not None:
                self.current.stop()
            return self.current

    def stop_message(self) -> str:
        """``%gpuwatch --stop``: stop the running monitor and say what happened."""
        w = self.current
        if w is None or not w.running:
            return "No %gpuwatch is running."
        w.stop()
        return f"%gpuwatch stopped after {plural(w.samples_taken, 'sample')}."

    def _stop_before_kernel_end(self, kernel) -> None:
        """Stop the running monitor and wait (at most 2 s) until IOPub sent its snapshot.

        Never raises: the kernel's shutdown goes on whatever happens here.
        """
        try:
            if self.current is None or not self.current.running:
                return
            self.stop()
            thread = getattr(getattr(kernel, "iopub_socket", None), "io_thread", None)
            if thread is not None and hasattr(thread, "schedule"):
                sent = threading.Event()
                thread.schedule(sent.set)  # runs after the messages queued before it
                sent.wait(2.0)
        except Exception:  # a failing snapshot must not block the shutdown
            pass

    def hook_kernel_shutdown(self, shell):
        """Stop the monitor when an ipykernel is asked to shut down, before it answers.

        ``atexit`` alone sends the snapshot only after the kernel replied ``shutdown_reply``, so
        whether it reaches the front end depends on the client still listening. Here the kernel's
        ``shutdown_request`` handlers (ipykernel's ``control_handlers`` and ``shell_handlers``) are
        wrapped: the monitor is stopped, its ``update_display_data`` sent on IOPub, then the
        original handler runs. A restart asked from JupyterLab is not helped: Lab forgets the old
        kernel's display ids first (``tests/browser/test_kernel_end_page.py``, strict xfail).

        Args:
            shell: the running ``InteractiveShell``; one without an ipykernel ``kernel``
                (terminal IPython) is left alone.

        Returns:
            A no-argument callable that puts the original handlers back (for ``%unload_ext``); a
            handler that someone else replaced since is left alone.
        """
        kernel = getattr(shell, "kernel", None)
        installed = []
        for table in (
            getattr(kernel, "control_handlers", None),
            getattr(kernel, "shell_handlers", None),
        ):
            original = table.get("shutdown_request") if isinstance(table, dict) else None
            if original is None or getattr(original, "_cudamagic_wraps", None) is not None:
                continue

            async def handler(stream, ident, parent, _original=original):
                self._stop_before_kernel_end(kernel)
                result = _original(stream, ident, parent)
                if inspect.isawaitable(result):
                    result = await result
                return result

            handler._cudamagic_wraps = original
            table["shutdown_request"] = handler
            installed.append((table, handler, original))

        def restore():
            for table, handler, original in installed:
                if table.get("shutdown_request") is handler:
                    table["shutdown_request"] = original
            installed.clear()

        return restore


def run_foreground(
    source: Source,
    *,
    interval_s: float,
    history_len: int,
    count: int | None,
    writer=None,
    clear_screen: bool = False,
    in_place: bool = False,
) -> GpuWatch:
    """Print the text table every ``interval_s`` seconds until Ctrl-C or ``count`` samples.

    The terminal loop of ``%gpuwatch --loop`` or ``--count N``, in the calling thread; returns
    the finished monitor. In a notebook (``in_place``) one output is updated in place instead,
    from this thread: no widget and no background thread, for front ends whose widgets do not
    redraw from one.

    Args:
        source: where samples come from.
        interval_s: seconds between samples.
        history_len: samples kept.
        count: stop after this many samples (None: until Ctrl-C).
        writer: a ``TraceWriter`` or None.
        clear_screen: clear the terminal before each table (a TTY), else a blank line between.
        in_place: show the table as one display updated in place (a notebook).
    """
    sampler = Sampler(
        source, interval_s=interval_s, history_len=history_len, count=count, writer=writer
    )
    watch = GpuWatch(sampler, label=source.label, widget=False)
    state = f"refreshing every {interval_s:g} s; Ctrl-C stops"

    handle = None

    def show(sample):
        nonlocal handle
        table = watch.views.text(sample, sampler.snapshot()[1], source.label, state, sampler.error)
        if in_place:
            if handle is None:
                handle = display({"text/plain": table}, raw=True, display_id=True)
            else:
                handle.update({"text/plain": table}, raw=True)
            return
        print("\x1b[2J\x1b[H" if clear_screen else "\n", end="")
        print(table, flush=True)

    sampler.on_sample = show
    try:
        sampler.run_loop()
    except KeyboardInterrupt:
        sampler.finished = "stopped by Ctrl-C"
    return watch
