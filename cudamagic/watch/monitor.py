"""The ``%gpuwatch`` monitor object and the one-sampler-per-kernel registry.

:class:`GpuWatch` wraps a :class:`~.sampler.Sampler` and (in a notebook) a
:class:`~.widget.WatchView`. It is what ``watch = %gpuwatch`` returns:
``watch.history`` (records with nvidia-smi-style keys, ready for ``pandas.DataFrame``),
``watch.running``, ``watch.stop()``. Its ``text/plain`` form is the snapshot table (F14).

At most one monitor runs per process: :func:`start_watch` stops the previous one;
:func:`stop_current` is registered with ``atexit`` and as the
``%unload_ext`` cleanup; in an ipykernel :func:`hook_kernel_shutdown` also stops it when the kernel
is asked to shut down, before the kernel answers, so the snapshot below reaches the front end while
it still listens.

Saved notebooks (ipywidgets 8 saves a widget output as ``application/vnd.jupyter.widget-view+json``
plus the ``text/plain``/``text/html`` given with it; the widget's state only when the user saves
widget state, so a reopened notebook otherwise shows "Error displaying widget: model not found"): a
monitor with a widget is displayed with a ``display_id`` (:meth:`GpuWatch._ipython_display_`), and
the moment it stops (Stop button, ``--count`` reached, end of a replay, ``%gpuwatch --stop``, a new
``%gpuwatch``, ``%unload_ext``, kernel shutdown) every output showing it is replaced by
``update_display_data`` with a static HTML snapshot of the final state and the text table, without
the widget; its widgets are then closed. While it runs, the HTML and text saved beside the widget
say it was a live monitor and when it started. ``update_display_data`` targets outputs by their
display id, not the cell running now, so sending it from the sampler thread when ``--count`` is
reached cannot put output in another cell (the reason the thread otherwise never displays, F13).
IPython is imported only inside the display methods.
"""

from __future__ import annotations

import atexit
import inspect
import threading
import time
import uuid

# the text view is called through its module (text.sample_text), so a replaced function takes effect
from ..core.fmt import plural
from . import text as text_view
from .sampler import Sampler
from .samples import sample_rows
from .sources import EndOfTrace
from .widget import WatchView, live_fallback_html, live_fallback_line, snapshot_html

#: The widget mimetype of ipywidgets 8 (what a saved notebook keeps of a widget output).
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

SPARKLINE_POINTS = 120

_lock = threading.RLock()
_current = None


class GpuWatch:
    """One monitor. Create it with :func:`start_watch` (or the ``%gpuwatch`` magic).

    Args:
        sampler: the :class:`~.sampler.Sampler` (not started yet).
        label: ``"live"`` or ``"replay of PATH"``.
        widget: build the ipywidgets tree (notebook) or not (terminal / ``--text``).
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
        self.view = None
        self.started_s = time.time()
        self._display_id = None  # set when first displayed with its widget
        self._ended = False  # the sampler finished: displays show the static snapshot
        self._replaced = False  # the outputs showing the widget were replaced by the snapshot
        self._display_lock = threading.RLock()
        if widget:
            make_view = getattr(
                sampler.source, "make_view", None
            )  # cluster sources have their own view
            self.view = (
                make_view(on_stop=self.stop)
                if make_view
                else WatchView(
                    getattr(sampler.source, "devices", []), label=label, on_stop=self.stop
                )
            )
            sampler.on_sample = self._update
            sampler.on_finish = self._finished

    # -- public API --------------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True while the sampler thread is alive and not asked to stop."""
        return self.sampler.running

    @property
    def history(self) -> list:
        """The kept samples as flat records: one dict per (sample, GPU), keys like nvidia-smi's
        (``timestamp``, ``index``, ``utilization.gpu`` [%], ``memory.used`` and ``memory.reserved``
        [bytes], ``power.draw`` [mW]...)
        plus ``host.*`` and ``torch.*``. Values are plain scalars: an unreadable number is ``nan``
        and an unreadable text ``"N/A"``, with the reasons in the ``na_reasons`` column
        (:attr:`samples` keeps the NA objects).

        ``pandas.DataFrame(watch.history)`` gives one row per GPU per sample, with numeric columns.
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
        """The last failure the sampler recorded (``""`` if none); the sampler never raises."""
        return self.sampler.error

    def stop(self):
        """Stop the sampler thread (joins it) and mark the widget stopped. Idempotent."""
        self.sampler.stop()
        close = getattr(self.sampler.source, "close", None)  # a cluster source's HTTP connections
        if close is not None and not self.sampler.running:
            close()
        self._finished()

    def state(self) -> str:
        """``'running, every 1 s'`` or ``'stopped (why)'``."""
        if self.running and not self.sampler.finished:
            return f"running, every {self.sampler.interval_s:g} s"
        return _stopped(self.sampler.finished or "not started")

    # -- display ------------------------------------------------------------------------
    def text(self) -> str:
        """The snapshot table (plain text)."""
        render = getattr(self.sampler.source, "render_text", None)
        if render is not None:
            latest, hist = self.sampler.snapshot()
            return render(latest, hist, self.label, self.state(), self.sampler.error)
        return text_view.sample_text(
            self.sampler.latest, self.label, self.state(), self.sampler.error
        )

    def _repr_html_(self):
        if self.view is None:
            return None  # text view (terminal or --text): the table only
        latest, hist = self.sampler.snapshot()
        render = getattr(self.sampler.source, "render_html", snapshot_html)
        return render(
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
        """The snapshot of the current state without the widget: ``text/plain`` table and ``text/html``."""
        data = {"text/plain": self.text()}
        if self.view is not None:
            data["text/html"] = self._repr_html_()
        return data

    def live_bundle(self) -> dict:
        """What a running monitor's output holds: the widget view, and beside it, for wherever the
        widget cannot be shown later (a saved notebook reopened, nbviewer, GitHub), HTML saying it
        was live and when it started, and the text table of the moment it was displayed, labelled as such.
        """
        line = live_fallback_line(self.label, self.started_s, self.sampler.interval_s)
        latest = self.sampler.latest
        when = time.strftime("%H:%M:%S")
        render = getattr(self.sampler.source, "render_text", None)
        state = f"values at {when}, when displayed"
        table = (
            render(latest, self.sampler.snapshot()[1], self.label, state, self.sampler.error)
            if render
            else text_view.sample_text(latest, self.label, state, self.sampler.error)
        )
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
        """IPython's display hook: with a widget, :meth:`display` (a property, None without a
        widget, so the terminal and ``--text`` keep the plain ``Out[n]`` table).
        """
        return self.display if self.view is not None else None

    def display(self):
        """Display the monitor: while it runs, the widget under this monitor's ``display_id``
        (replaced by the snapshot when it stops); once stopped, the static snapshot.
        """
        from IPython.display import display

        with self._display_lock:
            if self._shows_snapshot():
                display(self.static_bundle(), raw=True)
                return
            if self._display_id is None:
                self._display_id = f"cudamagic-gpuwatch-{uuid.uuid4().hex}"
            display(self.live_bundle(), raw=True, display_id=self._display_id)

    def _replace_display(self):
        """Replace every output showing the widget by the static snapshot (once), then close the widgets."""
        with self._display_lock:
            self._ended = True
            if self._display_id is None or self._replaced:
                return
            self._replaced = True
            bundle = self.static_bundle()
            try:
                from IPython.display import display

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


def current():
    """The monitor started last in this process (running or not), or None."""
    return _current


def start_watch(
    source,
    *,
    interval_s: float = 1.0,
    history_len: int = 600,
    count: int | None = None,
    writer=None,
    widget: bool = True,
    background: bool = True,
    options: dict | None = None,
) -> GpuWatch:
    """Stop any running monitor, then create and start a new one.

    The first sample is taken synchronously (so the display has data at once); the
    sampler thread takes the following ones every ``interval_s`` seconds.

    Args:
        source: :class:`~.sources.LiveSource` or :class:`~.sources.ReplaySource`.
        interval_s: seconds between samples. history_len: samples kept. count: stop after N samples.
        writer: a :class:`~.trace.TraceWriter` or None.
        widget: build the widget tree. background: start the thread (False: one sample only).

    Returns:
        GpuWatch
    """
    global _current
    with _lock:
        stop_current()
        sampler = Sampler(
            source, interval_s=interval_s, history_len=history_len, count=count, writer=writer
        )
        watch = GpuWatch(sampler, label=source.label, widget=widget, options=options)
        try:
            sampler.step()
        except EndOfTrace:  # pragma: no cover - read_trace guarantees one sample
            sampler.finished = "end of replay"
        preload = getattr(source, "preload", None)  # a cluster source: history from one range query
        if (
            preload is not None
            and background
            and sampler.latest is not None
            and sampler.latest.gpus
        ):
            older = [s for s in preload(history_len) if s.timestamp_s < sampler.latest.timestamp_s]
            with sampler._lock:
                sampler.history.extendleft(reversed(older[-(history_len - 1) :]))
        if background and not sampler.done() and not sampler.finished:
            sampler.start(first_delay=interval_s)
        else:
            if not sampler.finished:
                sampler.finished = "single sample" if not background else sampler.finished or "done"
            if writer is not None:
                writer.close()
            watch._finished()
        _current = watch
        return watch


def stop_current():
    """Stop the current monitor, if any; returns it (or None). Registered with ``atexit``."""
    with _lock:
        w = _current
        if w is not None:
            w.stop()
        return w


atexit.register(stop_current)


def _stop_before_kernel_end(kernel) -> None:
    """Stop the current monitor (its snapshot replaces its outputs) and wait until IOPub sent that,
    at most 2 s.
    Never raises: the kernel's shutdown goes on whatever happens here.
    """
    try:
        watch = current()
        if watch is None or not watch.running:
            return
        stop_current()
        thread = getattr(getattr(kernel, "iopub_socket", None), "io_thread", None)
        if thread is not None and hasattr(thread, "schedule"):
            sent = threading.Event()
            thread.schedule(sent.set)  # runs after the messages queued before it
            sent.wait(2.0)
    except Exception:  # noqa: BLE001 - a failing snapshot must not block the shutdown
        pass


def hook_kernel_shutdown(shell):
    """In an ipykernel, stop the monitor when the kernel is asked to shut down or restart, before it
    answers.

    ``atexit`` alone (:func:`stop_current`) sends the snapshot only after the kernel replied
    ``shutdown_reply`` and stopped its loops, so whether it reaches the front end depends on the
    client still listening. Here the kernel's ``shutdown_request`` handlers (``control_handlers``
    and ``shell_handlers`` of ipykernel's ``Kernel``)
    are wrapped: the monitor is stopped, its ``update_display_data`` sent on IOPub, then ipykernel's
        own handler
    runs. With no monitor running the wrapper only calls the original. A restart asked from
    JupyterLab is not
    helped: Lab forgets the old kernel's display ids before it asks for the restart, so it drops the
        update and a
    saved notebook keeps the widget view (``tests/browser/test_kernel_end_page.py`` records it,
    strict xfail).

    Args:
        shell: the running ``InteractiveShell``; anything without an ipykernel ``kernel`` (terminal
            IPython) is left alone.

    Returns:
        A no-argument callable that puts the original handlers back (for ``%unload_ext``); it leaves
        a handler that someone else replaced since alone.
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
            _stop_before_kernel_end(kernel)
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
    source,
    *,
    interval_s: float,
    history_len: int,
    count: int | None,
    writer=None,
    clear_screen: bool = False,
) -> GpuWatch:
    """Terminal loop (``%gpuwatch --loop`` or ``--count N``): print the text table every
    ``interval_s`` seconds in the calling thread until Ctrl-C or ``count`` samples; returns the
    finished monitor.

    Args:
        source: the sample source. interval_s: seconds between samples. history_len: samples kept.
        count: stop after this many samples (None: until Ctrl-C). writer: a ``TraceWriter`` or None.
        clear_screen: clear the terminal before each table (a TTY), else separate tables by a blank
            line.
    """
    stop_current()
    sampler = Sampler(
        source, interval_s=interval_s, history_len=history_len, count=count, writer=writer
    )
    watch = GpuWatch(sampler, label=source.label, widget=False)

    def show(sample):
        print("\x1b[2J\x1b[H" if clear_screen else "\n", end="")
        state = f"refreshing every {interval_s:g} s; Ctrl-C stops"
        render = getattr(source, "render_text", None)
        print(
            render(sample, sampler.snapshot()[1], source.label, state, sampler.error)
            if render
            else text_view.sample_text(sample, source.label, state, sampler.error),
            flush=True,
        )

    sampler.on_sample = show
    try:
        sampler.run_loop()
    except KeyboardInterrupt:
        sampler.finished = "stopped by Ctrl-C"
    return watch


def stop_message() -> str:
    """``%gpuwatch --stop``: stop the running monitor and say what happened."""
    w = current()
    if w is None or not w.running:
        return "No %gpuwatch is running."
    w.stop()
    return f"%gpuwatch stopped after {plural(w.samples_taken, 'sample')}."
