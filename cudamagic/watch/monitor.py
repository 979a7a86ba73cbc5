"""The ``%gpuwatch`` monitor object and the one-monitor-per-process registry.

:class:`GpuWatch` wraps a :class:`~.sampler.Sampler` and (in a notebook) a view. It is what
``watch = %gpuwatch`` returns: ``watch.history`` (records with nvidia-smi keys, ready for
``pandas.DataFrame``), ``watch.running``, ``watch.stop()``. Its ``text/plain`` form is the snapshot
table.

:class:`Monitors` (one per ``WatchMagics``, created in its ``on_load``) keeps the one monitor of the
process: starting one stops the previous one; ``%unload_ext``, ``atexit`` and, in an ipykernel,
the kernel's ``shutdown_request`` (:meth:`Monitors.hook_kernel_shutdown`) stop it, the last before
the kernel answers, so the snapshot below reaches the front end while it still listens.

Saved notebooks: ipywidgets 8 saves a widget output as its view plus the ``text/plain`` and
``text/html`` given with it, so a monitor with a widget is displayed under a ``display_id``
(:meth:`GpuWatch.display`). The moment it stops (Stop button, ``--count`` reached, end of a replay,
``%gpuwatch --stop``, a new ``%gpuwatch``, ``%unload_ext``, kernel shutdown), every output showing
it is replaced by ``update_display_data`` with a static snapshot, and its widgets are closed.
``update_display_data`` targets outputs by display id, not the running cell, so the sampler thread
may send it. IPython is imported only inside the display methods.
"""

from __future__ import annotations

import inspect
import threading
import time
import uuid

from IPython.display import display

from ..core.fmt import plural
from .cluster import HostTracker
from .clusterview import ClusterViews
from .render import live_fallback_html, live_fallback_line
from .sampler import Sampler
from .samples import sample_rows
from .sources import EndOfTrace, Source
from .widget import MachineViews

#: The widget mimetype of ipywidgets 8 (what a saved notebook keeps of a widget output).
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

SPARKLINE_POINTS = 120


def views_for(source):
    """How a monitor draws ``source``: the cluster view or this machine's."""
    return ClusterViews(source) if isinstance(source, HostTracker) else MachineViews(source)


class GpuWatch:
    """One monitor; :meth:`Monitors.start` (or ``%gpuwatch``) creates it.

    Args:
        sampler: the :class:`~.sampler.Sampler` (not started yet).
        label: ``"live"`` or ``"replay of PATH"``.
        widget: build the ipywidgets tree (notebook) or not (terminal, ``--text``).
        options: the settings it was started with (compared when ``%gpuwatch`` runs again).
    """

    def __init__(
        self,
        sampler: Sampler,
        label: str = "live",
        widget: bool = True,
        options: dict | None = None,
    ):
        self.sampler = sampler
        self.label = label
        self.options = dict(options or {})
        self.views = views_for(sampler.source)
        self.view = None
        self.started_s = time.time()
        self._display_id = None  # set when first displayed with its widget
        self._ended = False  # the sampler finished: displays show the static snapshot
        self._replaced = False  # the outputs showing the widget were replaced by the snapshot
        self._display_lock = threading.RLock()
        if widget:
            self.view = self.views.view(label, on_stop=self.stop)
            sampler.on_sample = self._update
            sampler.on_finish = self._finished

    # -- public API --------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True while the sampler thread is alive and not asked to stop."""
        return self.sampler.running

    @property
    def history(self) -> list:
        """The kept samples as flat records, one dict per (sample, GPU).

        Keys are nvidia-smi's (``timestamp``, ``index``, ``utilization.gpu`` [%],
        ``memory.used`` and ``memory.reserved`` [bytes], ``power.draw`` [mW]...) plus ``host.*``
        and ``torch.*``. An unreadable number is ``nan`` and an unreadable text ``"N/A"``, with
        the reasons in the ``na_reasons`` column (:attr:`samples` keeps the NA objects).
        ``pandas.DataFrame(watch.history)`` gives one row per GPU per sample.
        """
        _, samples = self.sampler.snapshot()
        return [row for s in samples for row in sample_rows(s)]

    @property
    def samples(self) -> list:
        """The kept :class:`~.samples.Sample` objects (oldest first)."""
        return self.sampler.snapshot()[1]

    @property
    def latest(self):
        """The newest Sample, or None before the first."""
        return self.sampler.latest

    @property
    def samples_taken(self) -> int:
        """Samples taken since the start (not bounded by the history length)."""
        return self.sampler.samples_taken

    @property
    def error(self) -> str:
        """The last failure the sampler recorded (``""`` if none)."""
        return self.sampler.error

    def stop(self):
        """Stop the sampler thread (joins it) and mark the widget stopped. Idempotent."""
        self.sampler.stop()
        if not self.sampler.running:
            self.sampler.source.close()
        self._finished()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until the monitor stops by itself (``--count`` reached, end of a replay).

        Args:
            timeout_s: seconds to wait at most (None: no limit).

        Returns:
            True when the sampler thread has ended.
        """
        return self.sampler.wait(timeout_s)

    def state(self) -> str:
        """``'running, every 1 s'`` or ``'stopped (why)'``."""
        if self.running and not self.sampler.finished:
            return f"running, every {self.sampler.interval_s:g} s"
        return _stopped(self.sampler.finished or "not started")

    # -- display ------------------------------------------------------------------------
    def text(self, state: str | None = None) -> str:
        """The snapshot table (plain text)."""
        latest, hist = self.sampler.snapshot()
        state = self.state() if state is None else state
        return self.views.text(latest, hist, self.label, state, self.sampler.error)

    def _repr_html_(self):
        if self.view is None:
            return None  # text view (terminal or --text): the table only
        latest, hist = self.sampler.snapshot()
        return self.views.html(
            latest,
            hist[-SPARKLINE_POINTS:],
            self.label,
            self.state(),
            self.sampler.samples_taken,
            self.sampler.error,
        )

    def _shows_snapshot(self) -> bool:
        return self._ended or self._replaced or not self.running

    def static_bundle(self) -> dict:
        """The snapshot without the widget: ``text/plain`` table and ``text/html``."""
        data = {"text/plain": self.text()}
        if self.view is not None:
            data["text/html"] = self._repr_html_()
        return data

    def live_bundle(self) -> dict:
        """A running monitor's output: the widget view, and what stands in for it.

        Beside the view, for wherever the widget cannot be shown later (a saved notebook reopened,
        nbviewer, GitHub): HTML saying it was live and when it started, and the text table of the
        moment it was displayed, labelled as such.
        """
        line = live_fallback_line(self.label, self.started_s, self.sampler.interval_s)
        table = self.text(f"values at {time.strftime('%H:%M:%S')}, when displayed")
        return {
            "text/plain": line + "\n\n" + table,
            "text/html": live_fallback_html(self.label, self.started_s, self.sampler.interval_s),
            WIDGET_VIEW: {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.view.root.model_id,
            },
        }

    def _repr_mimebundle_(self, include=None, exclude=None):
        if self.view is None or self._shows_snapshot():
            return self.static_bundle()
        return self.live_bundle()

    @property
    def _ipython_display_(self):
        """IPython's display hook: :meth:`display` with a widget, else None.

        None keeps the plain ``Out[n]`` table in the terminal and with ``--text``.
        """
        return self.display if self.view is not None else None

    def display(self):
        """Display the widget under this monitor's ``display_id``, or the snapshot once stopped."""
        with self._display_lock:
            if self._shows_snapshot():
                display(self.static_bundle(), raw=True)
                return
            if self._display_id is None:
                self._display_id = f"cudamagic-gpuwatch-{uuid.uuid4().hex}"
            display(self.live_bundle(), raw=True, display_id=self._display_id)

    def _replace_display(self):
        """Replace every output showing the widget by the snapshot (once); close the widgets."""
        with self._display_lock:
            self._ended = True
            if self._display_id is None or self._replaced:
                return
            self._replaced = True
            bundle = self.static_bundle()
            try:
                display(bundle, raw=True, display_id=self._display_id, update=True)
            except Exception as exc:  # kernel shutting down: nothing to update any more
                self.sampler._record(
                    f"replacing the widget by its snapshot failed: {type(exc).__name__}: {exc}"
                )
                return
        self.view.close()

    def _repr_pretty_(self, p, cycle):
        p.text(self.text())

    def __repr__(self):
        return self.text()

    # -- widget updates (sampler thread) --------------------------------------------------
    def _update(self, sample):
        _, hist = self.sampler.snapshot()
        self.view.apply(
            sample,
            hist[-SPARKLINE_POINTS:],
            state=f"running, every {self.sampler.interval_s:g} s",
            samples_taken=self.sampler.samples_taken,
            error=self.sampler.error,
        )

    def _finished(self):
        if self.view is None:
            return
        latest, hist = self.sampler.snapshot()
        self.view.apply(
            latest,
            hist[-SPARKLINE_POINTS:],
            state=_stopped(self.sampler.finished),
            samples_taken=self.sampler.samples_taken,
            error=self.sampler.error,
            stopped=True,
        )
        self._replace_display()


def _stopped(why: str) -> str:
    """``'stopped (end of replay)'``; plain ``'stopped'`` when that is all there is to say."""
    return "stopped" if why in ("", "stopped") else f"stopped ({why})"


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
