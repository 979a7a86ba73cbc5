"""What ``%gpuwatch`` returns: :class:`GpuWatch`, the monitor, its samples and its display.

``watch = %gpuwatch`` gives ``watch.history`` (records with nvidia-smi keys, ready for
``pandas.DataFrame``), ``watch.samples`` (the :class:`~.samples.Sample` objects), ``watch.running``,
``watch.stop()``. Its ``text/plain`` form is the snapshot table; the text and HTML are built by
:mod:`.render` (through the views of :mod:`.widget` and :mod:`.clusterview`).

Saved notebooks: ipywidgets 8 saves a widget output as its view plus the ``text/plain`` and
``text/html`` given with it, so a monitor with a widget is displayed under a ``display_id``
(:meth:`GpuWatch.display`). The moment it stops (Stop button, ``--count`` reached, end of a replay,
``%gpuwatch --stop``, a new ``%gpuwatch``, ``%unload_ext``, kernel shutdown), every output showing
it is replaced by ``update_display_data`` with a static snapshot, and its widgets are closed.
``update_display_data`` targets outputs by display id, not the running cell, so the sampler thread
may send it.
"""

from __future__ import annotations

import threading
import time
import uuid

from IPython.display import display

from .cluster import HostTracker
from .clusterview import ClusterViews
from .render import live_fallback_html, live_fallback_line
from .sampler import Sampler
from .samples import sample_rows
from .widget import MachineViews

#: The widget mimetype of ipywidgets 8 (what a saved notebook keeps of a widget output).
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

SPARKLINE_POINTS = 120


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
        # drawn as a cluster or as this machine's GPUs
        self.views = (ClusterViews if isinstance(sampler.source, HostTracker) else MachineViews)(
            sampler.source
        )
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
        _, hist = self.sampler.snapshot(SPARKLINE_POINTS)
        self.view.apply(
            sample,
            hist,
            state=f"running, every {self.sampler.interval_s:g} s",
            samples_taken=self.sampler.samples_taken,
            error=self.sampler.error,
        )

    def _finished(self):
        if self.view is None:
            return
        latest, hist = self.sampler.snapshot(SPARKLINE_POINTS)
        self.view.apply(
            latest,
            hist,
            state=_stopped(self.sampler.finished),
            samples_taken=self.sampler.samples_taken,
            error=self.sampler.error,
            stopped=True,
        )
        self._replace_display()


def _stopped(why: str) -> str:
    """``'stopped (end of replay)'``; plain ``'stopped'`` when that is all there is to say."""
    return "stopped" if why in ("", "stopped") else f"stopped ({why})"
