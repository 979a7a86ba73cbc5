"""The ``%gpuwatch`` widget in a notebook: the ipywidgets tree and its updates.

:class:`WatchView` builds the widget tree once and :meth:`WatchView.apply` sets trait values
(the only thing the sampler thread does with widgets: no print, no display, no
``with output:``). The HTML it shows (cards, charts, the static snapshot) is built by
:mod:`.render`.

Look: one scoped stylesheet (:data:`cudamagic.core.style.CSS` + :data:`.style.WATCH_CSS`), colours
only from JupyterLab's ``--jp-*`` theme variables; a GPU row wraps its chart below the numbers in
a narrow output. ``ipywidgets`` is imported inside :meth:`WatchView.__init__` only.
"""

from __future__ import annotations

import collections

from ..core.fmt import NO_MATH
from ..core.style import CSS
from .render import (
    _polyline,
    _polylines,
    _time_axis,
    _x_of,
    ascii_html,
    chart_frame,
    gpu_html,
    gpu_row,
    host_html,
    sample_text,
    snapshot_html,
    spark_y,
    status_head_html,
    status_tick_html,
)
from .style import WATCH_CSS

#: The element around one widget's HTML (the stylesheet's scope, no math typesetting).
PART_OPEN = f'<div class="cudamagic {NO_MATH} cm-part">'


def part(fragment: str) -> str:
    """One widget's HTML: the fragment in a ``cudamagic`` element (:data:`PART_OPEN`)."""
    return f"{PART_OPEN}{fragment}</div>"


# ---- the widget tree ----------------------------------------------------------------------


def stylesheet_widget():
    """An invisible HTML widget holding the stylesheet once.

    The parts do not repeat it on every update.
    """
    import ipywidgets as W

    return W.HTML(value=f"<style>{CSS}{WATCH_CSS}</style>", layout=W.Layout(display="none"))


def header_box(status, button):
    """Status line and Stop button in one row that wraps (the button goes below, never cut off)."""
    import ipywidgets as W

    status.layout = W.Layout(flex="1 1 260px", min_width="0")
    button.layout = W.Layout(flex="0 0 auto", width="auto")
    return W.HBox(
        [status, button], layout=W.Layout(flex_flow="row wrap", align_items="center", width="100%")
    )


def root_box(children):
    """The outer VBox: the ``cudamagic`` scope of the stylesheet.

    No math typesetting, full output width.
    """
    import ipywidgets as W

    root = W.VBox(children, layout=W.Layout(width="100%", max_width="100%"))
    for cls in ("cudamagic", NO_MATH, "cm-watch"):
        root.add_class(cls)
    return root


class View:
    """The part every monitor widget tree shares: stylesheet, status line, Stop button.

    Subclasses build the rest in their ``__init__``, list the widgets they set in
    :meth:`widgets`, and set values in :meth:`show`. :meth:`apply` runs :meth:`show`: one
    message per changed widget (the sampler thread only sets traits, never displays).
    """

    def __init__(self, label: str, on_stop=None):
        import ipywidgets as W

        self.label = label
        self.style = stylesheet_widget()
        self.status = W.HTML()
        self.button = W.Button(
            description="Stop",
            icon="stop",
            tooltip="Stop the sampler thread (same as %gpuwatch --stop)",
        )
        self.header = header_box(self.status, self.button)
        self._on_stop = on_stop
        self.button.on_click(self._clicked)

    def _clicked(self, _button=None):
        if self._on_stop is not None:
            self._on_stop()

    def widgets(self) -> list:
        """Every widget whose value :meth:`apply` sets."""
        return [self.status, self.button]

    def show(self, sample, history, state: str, samples_taken: int, error: str) -> None:
        """Set the values for ``sample`` (trait assignments only)."""
        raise NotImplementedError

    def apply(
        self,
        sample,
        history,
        state: str = "running",
        samples_taken: int = 0,
        error: str = "",
        stopped: bool = False,
    ):
        """Set the widgets' traits for ``sample``; only trait assignments.

        A widget whose one trait changes sends its message as it is set; a widget that gets
        several traits at once holds them in one message (``hold_sync``): the button here, the
        cluster's host picker in :class:`~.clusterview.ClusterView`. Entering ``hold_sync`` on
        the widgets that do not change costs the sampler thread ~0.1 ms a tick in a kernel.
        """
        self.show(sample, history, state, samples_taken, error)
        if stopped and not self.button.disabled:
            with self.button.hold_sync():
                self.button.disabled = True
                self.button.description = "Stopped"

    def close(self):
        """Close every widget (frees the comms). Idempotent."""
        for w in [*self.widgets(), self.style, *self.root.children]:
            w.close()
        self.root.close()


def set_value(widget, value) -> None:
    """Set ``widget.value`` only when it changes (no message for an equal value)."""
    if widget.value != value:
        widget.value = value


class WatchView(View):
    """The ipywidgets tree of one monitor of this machine's GPUs, built once.

    Args:
        indices: NVML indices of the GPUs shown (one row each: card and chart).
        label: ``"live"`` or ``"replay of PATH"`` (shown, escaped, as a REPLAY badge).
        on_stop: called (in the kernel's main thread) when the Stop button is clicked.

    ``root`` is the VBox to display: the status row (the title line and the Stop button; it
    wraps, the button is never cut), one HTML widget ``gpus`` holding the latest sample's line
    (its time, the samples taken), a row per GPU (:func:`gpu_row`: the card grows, the chart
    is fixed at :data:`~.style.CHART_WIDTH_PX` and moves below the numbers in a narrow output)
    and the host line, and a hidden widget holding the stylesheet. A tick sets one trait
    whatever the number of GPUs (the title line changes with the monitor's state only): each
    message to the front end costs the sampler thread more than reading a GPU, and every GPU's
    chart moves at every tick anyway.
    """

    SPARK_POINTS = 120

    def __init__(self, indices, label: str = "live", on_stop=None):
        import ipywidgets as W

        super().__init__(label, on_stop)
        self.indices = list(indices)
        self.gpus = W.HTML(layout=W.Layout(width="100%", min_width="0"))
        # the stylesheet last: the first HTML widget of the tree stays the status line
        self.root = root_box([self.header, self.gpus, self.style])
        # the charts' series: sample times and their x, and per GPU the polyline points
        # ("x,y" texts, None: no value), each written once
        self._times = collections.deque(maxlen=self.SPARK_POINTS)
        self._xs = collections.deque(maxlen=self.SPARK_POINTS)
        self._t0 = None
        self._ys = {i: (_Line(self.SPARK_POINTS), _Line(self.SPARK_POINTS)) for i in indices}
        self._last_key = None
        self._cards = {}  # index -> (the GpuSample or None its card shows, the card's HTML)
        self._index_text = {i: str(int(i)) for i in self.indices}
        self._pieces = {}  # index -> the parts of its card, kept by the values they show

    def widgets(self) -> list:
        """Every widget whose value :meth:`apply` sets."""
        return [*super().widgets(), self.gpus]

    def _add_points(self, sample, history):
        """Extend the chart series with ``sample`` (once; seeded from ``history`` at first)."""
        key = (sample.seq, sample.timestamp_s)
        if key == self._last_key:
            return
        seed = history if self._last_key is None and history else [sample]
        lines = self._ys.items()
        for s in seed[-self.SPARK_POINTS :]:
            by_index = {g.index: g for g in s.gpus}
            if self._t0 is None:
                self._t0 = s.timestamp_s
            x = _x_of(s.timestamp_s, self._t0)
            self._times.append(s.timestamp_s)
            self._xs.append(x)
            xt = f"{x},"
            for i, (util, mem) in lines:
                u, m = spark_y(by_index.get(i))
                util.add(None if u is None else xt + u, u)
                mem.add(None if m is None else xt + m, m)
        self._last_key = key

    def _card(self, i, g) -> str:
        """GPU ``i``'s card, rendered again only when its GPU reads differently."""
        drawn = self._cards.get(i)
        if drawn is None or drawn[0] != g:  # GpuSamples (or None) that read the same: one card
            html = ascii_html(
                # the stylesheet is there: the inline look is not sent; parts kept per GPU
                gpu_html(g, live=True, memo=self._pieces.setdefault(i, {}))
                if g is not None
                else f"<div>GPU {int(i)}: not in this sample</div>"
            )
            drawn = self._cards[i] = (g, html)
        return drawn[1]

    def values_for(self, sample, history, state, samples_taken, error) -> dict:
        """``{widget: new value}`` for a sample (no widget touched; the chart series grows).

        A card whose GPU reads as the card shows it now is not rendered again. The charts share
        their time axis and all but the GPU's index and lines (:func:`~.render.chart_frame`):
        that part is written once for all GPUs. The GPUs' HTML is ASCII (:func:`ascii_html`).
        """
        out = {self.status: part(status_head_html(self.label, state, error))}
        tick = ascii_html(status_tick_html(sample, self.label, samples_taken))
        if sample is None:
            out[self.gpus] = part(tick)
        else:
            self._add_points(sample, history)
            by_index = {g.index: g for g in sample.gpus}
            head, label, body, close = chart_frame(self._xs, *_time_axis(self._times))
            pieces = [PART_OPEN, tick]  # joined once: a tick copies the HTML of every GPU once
            for i in self.indices:
                util, mem = self._ys[i]
                n = self._index_text[i]
                chart = [head, n, label, n, body]  # render._chart, its shared frame written once
                chart += (mem.polylines("cm-line-mem"), util.polylines("cm-line-util"), close)
                pieces += gpu_row(self._card(i, by_index.get(i)), chart)
            pieces += ("<div>", ascii_html(host_html(sample)), "</div></div>")
            out[self.gpus] = ascii_html("".join(pieces))  # ASCII already: no copy
        return out

    def show(self, sample, history, state, samples_taken, error) -> None:
        """Set the values for ``sample``."""
        for w, value in self.values_for(sample, history, state, samples_taken, error).items():
            set_value(w, value)


class _Line:
    """One chart line of the live view: its last points and their polyline text.

    The text is kept as points come and go (one point added, the oldest cut off), so a tick
    does not join every point of every GPU's chart again. A point between two of the same height
    is left out of it (:func:`_flat_cut`): the same line is drawn, and a flat stretch (memory in
    use that does not move, an idle or a saturated GPU) is two points long in the HTML.
    """

    def __init__(self, maxlen: int):
        self.points = collections.deque(maxlen=maxlen)  # "x,y" texts, None: no value
        self.ys = collections.deque(maxlen=maxlen)  # their y texts
        self.text = ""  # _flat_cut(points) while no point is None, else None

    def add(self, p: str | None, y: str | None = None) -> None:
        """Append ``"x,y"`` (or None: no value); ``y``: its y text, if known."""
        pts, ys = self.points, self.ys
        if y is None and p is not None:
            y = p[p.index(",") + 1 :]
        full = len(pts) == pts.maxlen
        if p is None or self.text is None or (full and pts[0] is None):
            pts.append(p)  # a gap comes, is there or goes: the text from all the points
            ys.append(y)
            self.text = None if None in pts else _flat_cut(pts, ys)
            return
        text = self.text
        if full:  # the oldest point goes; the next one starts the line (and the text) now
            gone, y0 = pts.popleft(), ys.popleft()
            if len(pts) >= 2 and y0 == ys[0] == ys[1]:  # it was left out: it comes back
                text = pts[0] + text[len(gone) :]
            else:
                text = text[len(gone) + 1 :]
        if len(pts) >= 2 and ys[-2] == ys[-1] == y:  # the last point is between two now
            text = text[: len(text) - len(pts[-1])] + p
        else:
            text = f"{text} {p}" if text else p
        pts.append(p)
        ys.append(y)
        self.text = text

    def polylines(self, cls: str) -> str:
        """The polylines' HTML (see :func:`_polylines`)."""
        if self.text is None or len(self.points) < 2:
            return _polylines(list(self.points), cls, "")
        return _polyline(self.text, cls, "")  # the look: in the stylesheet


def _flat_cut(points, ys) -> str:
    """``" ".join(points)`` without each point whose neighbours are as high as it."""
    last = len(points) - 1
    return " ".join(
        p for i, p in enumerate(points) if i in (0, last) or not ys[i - 1] == ys[i] == ys[i + 1]
    )


class MachineViews:
    """How a monitor draws this machine's GPUs, live or replayed: widget, text, HTML."""

    def __init__(self, source):
        self.source = source

    def view(self, label: str, on_stop=None) -> WatchView:
        """The widget tree."""
        return WatchView(self.source.devices, label=label, on_stop=on_stop)

    def text(self, sample, history, label, state, error) -> str:
        """The text table."""
        return sample_text(sample, label, state, error)

    def html(self, sample, history, label, state, samples_taken, error) -> str:
        """The static HTML snapshot."""
        return snapshot_html(sample, history, label, state, samples_taken, error)
