"""The ``%gpuwatch`` display in a notebook: HTML fragments, charts and the ipywidgets tree.

:class:`WatchView` builds the widget tree once and :meth:`WatchView.apply` sets trait values
inside ``hold_sync()`` (the only thing the sampler thread does with widgets: no print, no
display, no ``with output:``). :func:`snapshot_html` is the static ``text/html`` form: the
monitor replaces its widget by it when it stops (see :mod:`.monitor`), so saved notebooks keep the
last values. :func:`live_fallback_html` is what a saved notebook shows for a monitor that was still
running when saved. The plain-text form is :mod:`.text`.

Look: one scoped stylesheet (:data:`cudamagic.core.style.CSS` + :data:`.style.WATCH_CSS`), colours
    only from
JupyterLab's ``--jp-*`` theme variables; a GPU row wraps its chart below the numbers in a narrow
output.

Every string that comes from outside (process names and command lines, GPU names,
file paths, NVML error text) goes through :func:`cudamagic.core.fmt.esc` before HTML.
``ipywidgets`` is imported inside :meth:`WatchView.__init__` only.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime as _dt

from ..core.fmt import NO_MATH, esc, format_bytes, na_cell_html
from ..core.na import is_na
from ..core.style import CSS, badge, page, scroll
from . import text as text_view
from .samples import Sample
from .style import CHART_WIDTH_PX, PLAIN, WATCH_CSS, bar_html, meter_html
from .text import (
    PROCESS_LABELS,
    counter_notes,
    mem_text,
    no_process_line,
    num_text,
    pct_text,
    process_label,
    process_memory_text,
    process_notes,
    reasons_text,
    torch_text,
)

#: Height of a chart's plot area (px).
CHART_HEIGHT_PX = 48
#: Width of a chart's y-axis labels (px); the plot is ``CHART_WIDTH_PX`` minus this and a 3 px gap.
_Y_AXIS_PX = 34


# ---- HTML -----------------------------------------------------------------------------------


#: The element around one widget's HTML (the stylesheet's scope, no math typesetting).
PART_OPEN = f'<div class="cudamagic {NO_MATH} cm-part">'


def part(fragment: str) -> str:
    """One widget's HTML: the fragment in a ``cudamagic`` element (:data:`PART_OPEN`)."""
    return f"{PART_OPEN}{fragment}</div>"


def _w(mw):
    return str(mw) if is_na(mw) else f"{mw / 1000:.0f} W"


def _cell(v, text=None):
    """Escaped value; NA as 'N/A' with the reason as tooltip and beside it.

    Not cached: :func:`_piece` keeps whole rows by the values they show.
    """
    return na_cell_html(v, None if text is None else str(text))


def _driver_model(g) -> str:
    """`` · WDDM`` where NVML reports a driver model (Windows), else ``""``."""
    model = getattr(g, "driver_model", None)
    if model is None or (is_na(model) and model.code == "not_supported"):
        return ""
    if is_na(model):
        return f' <span class="cm-muted">· driver model {_cell(model)}</span>'
    return (
        f' <span class="cm-muted" title="Windows driver model (nvmlDeviceGetDriverModel)">· '
        f"{esc(model)}</span>"
    )


_PIECES = {}  # (piece, its inputs with their types) -> HTML; see _piece


def _piece(name: str, values: tuple, build) -> str:
    """``build()``'s HTML, kept by ``values`` (a card's parts repeat tick after tick)."""
    key = (name, values, tuple(map(type, values)))  # 1 == 1.0 == True, written differently
    try:
        html = _PIECES.get(key)
    except TypeError:  # an input that cannot be a key
        return build()
    if html is None:
        html = build()
        if len(_PIECES) >= 20_000:
            _PIECES.clear()
        _PIECES[key] = html
    return html


def _head_html(g) -> str:
    title = ("MIG " if g.mig_enabled is True else "") + ("" if is_na(g.name) else str(g.name))
    return (
        f'<div class="cm-gpu-head">GPU {int(g.index)} {esc(title)}{_driver_model(g)} '
        f'<small class="cm-muted">{_cell(g.uuid)}</small></div>'
    )


#: A card's reading: key and value cells, styled inline (they read right where a sanitiser
#: dropped the stylesheet: an untrusted notebook, GitHub, nbviewer).
_KV = (
    '<tr><td class="cm-k" style="text-align:left;vertical-align:top;padding:0 10px 0 0">{}</td>'
    '<td style="text-align:left;vertical-align:top;padding:0">{}</td></tr>'
)


def _util_row(g) -> str:
    util = g.gpu_util_pct
    util_value = _cell(util, pct_text(util))
    return _KV.format(
        "utilization",
        (meter_html(bar_html(util / 100, "util"), util_value) if not is_na(util) else util_value)
        + " · memory bandwidth "
        + _cell(g.mem_util_pct, pct_text(g.mem_util_pct)),
    )


def _memory_row(g) -> str:
    mem_frac = (
        None
        if is_na(g.memory_used_bytes) or is_na(g.memory_total_bytes) or not g.memory_total_bytes
        else g.memory_used_bytes / g.memory_total_bytes
    )
    rsv = g.memory_reserved_bytes
    rsv_frac = None if mem_frac is None or is_na(rsv) else rsv / g.memory_total_bytes
    rsv_text = (
        (" · reserved by the driver " + _cell(rsv, format_bytes(rsv)))
        if not is_na(rsv) or rsv.code != "error"
        else ""
    )
    mem_value = _cell(g.memory_used_bytes, mem_text(g.memory_used_bytes, g.memory_total_bytes))
    return _KV.format(
        "memory",
        (
            meter_html(bar_html(mem_frac, "mem", rsv_frac), mem_value)
            if mem_frac is not None
            else mem_value
        )
        + rsv_text,
    )


def _other_rows(g) -> str:
    rows = [
        ("temperature", _cell(g.temperature_c, num_text(g.temperature_c, " °C"))),
        (
            "power",
            _cell(g.power_draw_mw, _w(g.power_draw_mw))
            + " / "
            + _cell(g.power_limit_mw, _w(g.power_limit_mw)),
        ),
        ("fan", _cell(g.fan_speed_pct, pct_text(g.fan_speed_pct))),
        (
            "clocks",
            "SM "
            + _cell(g.clock_sm_mhz, num_text(g.clock_sm_mhz, " MHz"))
            + " · memory "
            + _cell(g.clock_mem_mhz, num_text(g.clock_mem_mhz, " MHz")),
        ),
        ("P-state", _cell(g.pstate, num_text(g.pstate) if is_na(g.pstate) else f"P{g.pstate}")),
        ("throttle", _cell(reasons_text(g))),
    ]
    return "".join(_KV.format(k, v) for k, v in rows)


def _migs_html(g) -> str:
    return "".join(
        f"<div>MIG {m.index} <code>{esc(m.uuid)}</code>: "
        f"{_cell(m.memory_used_bytes, mem_text(m.memory_used_bytes, m.memory_total_bytes))}</div>"
        for m in g.mig_devices
    )


def gpu_html(g) -> str:
    """One GPU card (escaped).

    Name, driver model, bars with their values, the other readings, processes. Each part is
    built once for the values it shows (:func:`_piece`): a monitor tick where one reading moved
    renders that row only.
    """
    head = _piece(
        "head", (g.index, g.mig_enabled, g.name, g.uuid, g.driver_model), lambda: _head_html(g)
    )
    if g.lost is not None:
        return f'{head}<div class="cm-lost">{badge("LOST", "error")} {_cell(g.lost)}</div>'
    used, total, rsv = g.memory_used_bytes, g.memory_total_bytes, g.memory_reserved_bytes
    body = (
        _piece("util", (g.gpu_util_pct, g.mem_util_pct), lambda: _util_row(g))
        + _piece("memory", (used, total, rsv), lambda: _memory_row(g))
        + _piece(
            "rows",
            (
                g.temperature_c,
                g.power_draw_mw,
                g.power_limit_mw,
                g.fan_speed_pct,
                g.clock_sm_mhz,
                g.clock_mem_mhz,
                g.pstate,
                g.throttle_reasons_mask,
            ),
            lambda: _other_rows(g),
        )
    )
    migs = _piece("migs", g.mig_devices, lambda: _migs_html(g)) if g.mig_devices else ""
    procs = _piece("procs", (g.processes, used, rsv), lambda: processes_html(g))
    return f'{head}<table class="cm-rows"><tbody>{body}</tbody></table>{migs}{procs}'


def processes_html(g) -> str:
    """The process table of one GPU (escaped; own row bold; invisible pids labelled)."""
    if is_na(g.processes):
        return f"<div>processes: {_cell(g.processes)}</div>"
    if not g.processes:
        return f'<div class="cm-muted">{esc(no_process_line(g))}</div>'
    rows = []
    for p in g.processes:
        name = (
            f'<span title="{esc(p.name.reason)}">{esc(process_label(p))}</span>'
            if is_na(p.name) and (p.name.code in PROCESS_LABELS or not p.visible)
            else _cell(p.name)
        )
        tip = "" if is_na(p.cmdline) else f' title="{esc(p.cmdline)}"'
        mine = " (this kernel)" if p.own else ""
        cls = ' class="cm-own"' if p.own else ""
        rows.append(
            f'<tr{cls}{tip}><td class="cm-num">{p.pid}</td><td class="cm-prose">{name}{mine}</td>'
            f"<td>{esc(p.type)}</td><td "
            f'class="cm-num">{_cell(p.used_memory_bytes, process_memory_text(p))}'
            "</td></tr>"
        )
    note = "".join(
        f'<div class="cm-muted">{esc(n)}</div>'
        for n in counter_notes(g.processes) + process_notes(g.processes)
    )
    return (
        scroll(
            '<table class="cm-table cm-procs"><thead><tr><th>pid</th><th>process</th><th>type</th>'
            "<th>GPU memory</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
        + note
    )


def host_html(sample: Sample) -> str:
    """Host, PyTorch allocator and hint (escaped)."""
    h = sample.host
    parts = [
        f"<b>host</b> CPU {_cell(h.cpu_util_pct, pct_text(h.cpu_util_pct))} of {esc(h.cpu_count)} "
        "CPUs · "
        f"this kernel {_cell(h.kernel_cpu_pct, pct_text(h.kernel_cpu_pct))} of one core · RAM "
        f"{_cell(h.memory_used_bytes, mem_text(h.memory_used_bytes, h.memory_total_bytes))} · "
        f"DataLoader workers: {len(h.workers)}"
    ]
    if h.workers:
        parts.append(
            "<small>"
            + ", ".join(
                f"pid {w.pid}: {_cell(w.cpu_pct, pct_text(w.cpu_pct))} CPU, "
                f"{_cell(w.rss_bytes, format_bytes(w.rss_bytes))}"
                for w in h.workers
            )
            + "</small>"
        )
    t = sample.torch
    parts.append("<b>PyTorch</b> " + (_cell(t) if is_na(t) else esc(torch_text(t))))
    if sample.nvml_status is not None:
        status = sample.nvml_status
        fix = getattr(status, "fix", "")
        fix = f" <b>Fix:</b> {esc(fix)}" if fix else ""
        parts.insert(0, f"{badge('No GPU data', 'warn')} {esc(status.reason)}{fix}")
    if sample.hint:
        parts.append(f"{badge('hint', 'info')} {esc(sample.hint)}")
    return "<br>".join(parts)


# ---- charts ---------------------------------------------------------------------------------


def spark_point(g):
    """``(utilization %, memory used %)`` of one GpuSample for the chart.

    None where NA or absent.
    """
    if g is None:
        return None, None
    u = None if is_na(g.gpu_util_pct) else float(g.gpu_util_pct)
    m = None
    if not is_na(g.memory_used_bytes) and not is_na(g.memory_total_bytes) and g.memory_total_bytes:
        m = 100.0 * g.memory_used_bytes / g.memory_total_bytes
    return u, m


def chart_points(history, index: int) -> list:
    """``[(timestamp_s, util %, mem %), ...]`` of GPU ``index`` over ``history``.

    A list of Samples.
    """
    return [
        (s.timestamp_s, *spark_point(next((g for g in s.gpus if g.index == index), None)))
        for s in history
    ]


def _clock(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def span_text(seconds: float) -> str:
    """A duration in words: ``'45 s'``, ``'2 min 5 s'``, ``'1 h 3 min'``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


def _y_text(v) -> str | None:
    """A chart value (%) as its polyline y (0 at the top, 100 at the bottom); None stays None."""
    return None if v is None else str(100 - (0 if v < 0 else 100 if v > 100 else round(v)))


def _x_of(t: float, t0: float) -> int:
    """A chart's x of time ``t`` (s): centiseconds since ``t0``."""
    return round((t - t0) * 100)


def _polylines(points, cls: str) -> str:
    """The polylines of one line of a chart (``"x,y"`` texts), broken where a point is None."""
    if None not in points:
        segs = [" ".join(points)] if len(points) > 1 else []
    else:
        segs, seg = [], []
        for p in points:
            if p is None:
                if len(seg) > 1:
                    segs.append(" ".join(seg))
                seg = []
                continue
            seg.append(p)
        if len(seg) > 1:
            segs.append(" ".join(seg))
    return "".join(_polyline(s, cls) for s in segs)


def _polyline(points_text: str, cls: str) -> str:
    return (
        f'<polyline class="{cls}" fill="none" stroke-width="1.5" '
        f'vector-effect="non-scaling-stroke" points="{points_text}"/>'
    )


def _time_axis(times) -> tuple:
    """``(when, axis HTML)`` of a chart over ``times`` (the same for every GPU's chart)."""
    n = len(times)
    if not n:
        return "no samples yet", "<span>no samples yet</span>"
    t0, t1 = times[0], times[-1]
    when = f"{_clock(t0)} to {_clock(t1)}"
    axis = (
        f"<span>{_clock(t0)}</span><span>{span_text(t1 - t0)} shown</span><span>{_clock(t1)}</span>"
        if n > 1
        else f"<span>{_clock(t1)}</span><span>collecting...</span>"
    )
    return when, axis


def _chart(index: int, xs, when: str, axis: str, lines: list) -> list:
    """The live chart's HTML pieces around ``lines``, its polylines; ``xs``: their x (centiseconds).

    A key (utilization solid, memory used dashed), a 0-100 % scale with a 50 % grid line, and the
    time axis: first and last sample's clock time and the span between them. x is the time, so the
    charts of all GPUs (built from the same samples, with the same
    :data:`~.style.CHART_WIDTH_PX`) share one time axis. The polylines live in a ``viewBox`` from
    the first to the last sample (y 0-100) stretched to the plot; only numbers computed here go in
    it.
    """
    n = len(xs)
    x0 = xs[0] if n else 0
    span = max(1, xs[-1] - x0) if n else 1
    label = (
        f"GPU {int(index)}: utilization % (solid) and memory used % (dashed), {when}, {n} samples"
    )
    plot_w = CHART_WIDTH_PX - _Y_AXIS_PX - 3
    return [
        '<div class="cm-chart"><div class="cm-chart-key"><span><span '
        'class="cm-swatch"></span>utilization'
        '</span><span><span class="cm-swatch cm-mem"></span>memory used</span></div>'
        f'<div class="cm-chart-body"><div class="cm-chart-y" style="flex:0 0 {_Y_AXIS_PX}px">'
        "<span>100%</span><span>50%</span><span>0%</span></div>"
        f'<svg width="{plot_w}" height="{CHART_HEIGHT_PX}" viewBox="{x0} 0 {span} 100" '
        'preserveAspectRatio="none" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{label}"><title>{label}</title>'
        f'<line class="cm-grid" x1="{x0}" y1="50" x2="{x0 + span}" y2="50" '
        'vector-effect="non-scaling-stroke"/>',
        *lines,
        f'</svg></div><div class="cm-chart-x" style="margin-left:{_Y_AXIS_PX + 3}px">{axis}</div>'
        "</div>",
    ]


def chart_image_html(history, index: int) -> str:
    """GPU ``index``'s chart over ``history`` as one ``<img>`` (an SVG data URI).

    The same chart as the live one (key, 0-100 % scale, time axis), drawn whole in the
    image with plain colours (:data:`~.style.PLAIN`): what a saved notebook keeps, since a
    sanitiser (an untrusted notebook, GitHub, nbviewer) drops inline ``<svg>`` and stylesheets
    but keeps images.
    """
    points = chart_points(history, index)
    times = [p[0] for p in points]
    xs = [_x_of(t, times[0]) for t in times]
    x0 = xs[0] if xs else 0
    span = max(1, xs[-1] - x0) if xs else 1
    when, _ = _time_axis(times)
    label = (
        f"GPU {int(index)}: utilization % (solid) and memory used % (dashed), {when}, "
        f"{len(points)} samples"
    )
    lines = "".join(
        _polylines(
            [
                None if p[k] is None else f"{x},{_y_text(p[k])}"
                for x, p in zip(xs, points, strict=True)
            ],
            cls,
        )
        for k, cls in ((2, "cm-line-mem"), (1, "cm-line-util"))
    )
    left, w, mid = _Y_AXIS_PX + 3, CHART_WIDTH_PX - _Y_AXIS_PX - 3, CHART_HEIGHT_PX // 2
    if len(times) > 1:
        axis = (
            f'<text x="{left}" y="80">{_clock(times[0])}</text>'
            f'<text x="{left + w // 2}" y="80" text-anchor="middle">'
            f"{span_text(times[-1] - times[0])} shown</text>"
            f'<text x="{CHART_WIDTH_PX}" y="80" text-anchor="end">{_clock(times[-1])}</text>'
        )
    else:
        axis = f'<text x="{left}" y="80">{esc(when)}</text>'
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH_PX}" height="84">'
        f"<style>text{{font:11px sans-serif;fill:{PLAIN['text']}}}"
        f".cm-line-util{{stroke:{PLAIN['util']}}}"
        f".cm-line-mem{{stroke:{PLAIN['mem']};stroke-dasharray:4 2}}</style>"
        '<line class="cm-line-util" x1="0" y1="7" x2="16" y2="7" stroke-width="2"/>'
        '<text x="20" y="11">utilization</text>'
        '<line class="cm-line-mem" x1="100" y1="7" x2="116" y2="7" stroke-width="2"/>'
        '<text x="120" y="11">memory used</text>'
        f'<text x="{_Y_AXIS_PX}" y="24" text-anchor="end">100%</text>'
        f'<text x="{_Y_AXIS_PX}" y="{20 + mid}" text-anchor="end">50%</text>'
        f'<text x="{_Y_AXIS_PX}" y="{16 + CHART_HEIGHT_PX}" text-anchor="end">0%</text>'
        f'<rect x="{left}" y="16" width="{w}" height="{CHART_HEIGHT_PX}" fill="none" '
        'stroke="#888"/>'
        f'<line x1="{left}" y1="{16 + mid}" x2="{left + w}" y2="{16 + mid}" stroke="#888" '
        'stroke-dasharray="2 3"/>'
        f'<svg x="{left}" y="16" width="{w}" height="{CHART_HEIGHT_PX}" '
        f'viewBox="{x0} 0 {span} 100" preserveAspectRatio="none">{lines}</svg>{axis}</svg>'
    )
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")
    return (
        f'<img class="cm-chart" src="{uri}" width="{CHART_WIDTH_PX}" height="84" '
        f'alt="{esc(label)}" title="{esc(label)}" style="flex:0 0 {CHART_WIDTH_PX}px">'
    )


# ---- whole views ----------------------------------------------------------------------------


def status_html(sample, label: str, state: str, samples_taken: int, error: str) -> str:
    """Title line: live or REPLAY (clearly labelled), time, counters, last sampler error."""
    if label.startswith("replay of "):
        kind = f"{badge('REPLAY', 'warn')} of <code>{esc(label[len('replay of ') :])}</code>"
        when = "recorded at " + (esc(sample.timestamp) if sample else "-")
    else:
        kind = badge("LIVE", "ok")
        when = esc(sample.timestamp) if sample else "-"
    err = f"<div>{badge('sampler error', 'error')} {esc(error)}</div>" if error else ""
    return (
        f'<div class="cm-status"><b>gpuwatch</b> <span>{kind}</span> <span>· {when}</span> '
        f"<span>· samples: {int(samples_taken)}</span> <span>· {esc(state)}</span></div>{err}"
    )


def gpu_row(card: str, chart: list) -> list:
    """One GPU's row as pieces: its card and its chart (below the card in a narrow output)."""
    return ['<div class="cm-gpu-row"><div class="cm-card">', card, "</div>", *chart, "</div>"]


def snapshot_html(sample, history, label, state, samples_taken, error) -> str:
    """Static HTML of the whole monitor.

    The ``text/html`` form and the snapshot a stopped monitor leaves.
    """
    parts = [f"<style>{WATCH_CSS}</style>", status_html(sample, label, state, samples_taken, error)]
    if sample is not None:
        for g in sample.gpus:
            parts += gpu_row(gpu_html(g), [chart_image_html(history, g.index)])
        parts.append(f"<div>{host_html(sample)}</div>")
    return page("".join(parts), "watch")


def live_fallback_line(label: str, started_s: float, interval_s: float) -> str:
    """What a saved notebook says for a monitor that was running when saved.

    It was live, and how to see it.
    """
    what = (
        f"replay of {label[len('replay of ') :]}"
        if label.startswith("replay of ")
        else "live monitor"
    )
    return (
        f"gpuwatch: {what}, started {_clock(started_s)}, every {interval_s:g} s; its values were "
        "shown by a "
        "widget and not saved. Re-run the cell to watch again."
    )


def live_fallback_html(label: str, started_s: float, interval_s: float) -> str:
    """The ``text/html`` that accompanies the live widget.

    The ``text/html`` that accompanies the live widget (shown where the widget cannot be: a saved
    notebook opened elsewhere, nbviewer, GitHub).
    """
    return page(
        '<div class="cm-box '
        f'cm-info">{esc(live_fallback_line(label, started_s, interval_s))}</div>',
        "watch",
    )


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
    :meth:`widgets`, and set values in :meth:`show`. :meth:`apply` runs :meth:`show` inside
    ``hold_sync()`` of every widget (the sampler thread only sets traits, never displays).
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
        """Set the values for ``sample`` (called under ``hold_sync``)."""
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
        """Set the widgets' traits for ``sample``; only trait assignments, under ``hold_sync``."""
        with contextlib.ExitStack() as stack:
            for w in self.widgets():
                stack.enter_context(w.hold_sync())
            self.show(sample, history, state, samples_taken, error)
            if stopped and not self.button.disabled:
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

    ``root`` is the VBox to display: the status row (wraps: the Stop button is never cut), one
    HTML widget ``gpus`` holding a row per GPU (:func:`gpu_row`: the card grows, the chart
    is fixed at :data:`~.style.CHART_WIDTH_PX` and moves below the numbers in a narrow output)
    and the host line, and a hidden widget holding the stylesheet. A tick sets two traits
    whatever the number of GPUs: each message to the front end costs the sampler thread more
    than reading a GPU, and every GPU's chart moves at every tick anyway.
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

    def widgets(self) -> list:
        """Every widget whose value :meth:`apply` sets."""
        return [*super().widgets(), self.gpus]

    def _add_points(self, sample, history):
        """Extend the chart series with ``sample`` (once; seeded from ``history`` at first)."""
        key = (sample.seq, sample.timestamp_s)
        if key == self._last_key:
            return
        seed = history if self._last_key is None and history else [sample]
        for s in seed[-self.SPARK_POINTS :]:
            by_index = {g.index: g for g in s.gpus}
            if self._t0 is None:
                self._t0 = s.timestamp_s
            x = _x_of(s.timestamp_s, self._t0)
            self._times.append(s.timestamp_s)
            self._xs.append(x)
            xt = f"{x},"
            for i, (util, mem) in self._ys.items():
                u, m = spark_point(by_index.get(i))
                util.add(None if u is None else xt + _y_text(u))
                mem.add(None if m is None else xt + _y_text(m))
        self._last_key = key

    def _card(self, i, g) -> str:
        """GPU ``i``'s card, rendered again only when its GPU reads differently."""
        drawn = self._cards.get(i)
        if drawn is None or not _same(drawn[0], g):
            html = gpu_html(g) if g is not None else f"<div>GPU {int(i)}: not in this sample</div>"
            drawn = self._cards[i] = (g, html)
        return drawn[1]

    def values_for(self, sample, history, state, samples_taken, error) -> dict:
        """``{widget: new value}`` for a sample (no widget touched; the chart series grows).

        A card whose GPU reads as the card shows it now is not rendered again. The charts share
        their time axis: it is computed once for all GPUs.
        """
        out = {self.status: part(status_html(sample, self.label, state, samples_taken, error))}
        if sample is not None:
            self._add_points(sample, history)
            by_index = {g.index: g for g in sample.gpus}
            xs = list(self._xs)
            when, axis = _time_axis(list(self._times))
            pieces = [PART_OPEN]  # joined once: a tick copies the HTML of every GPU once
            for i in self.indices:
                util, mem = self._ys[i]
                lines = [mem.polylines("cm-line-mem"), util.polylines("cm-line-util")]
                pieces += gpu_row(self._card(i, by_index.get(i)), _chart(i, xs, when, axis, lines))
            pieces += [f"<div>{host_html(sample)}</div>", "</div>"]
            out[self.gpus] = "".join(pieces)
        return out

    def show(self, sample, history, state, samples_taken, error) -> None:
        """Set the values for ``sample``."""
        for w, value in self.values_for(sample, history, state, samples_taken, error).items():
            set_value(w, value)


class _Line:
    """One chart line of the live view: its last points and their polyline text.

    The text is kept as points come and go (one point added, the oldest cut off), so a tick
    does not join every point of every GPU's chart again.
    """

    def __init__(self, maxlen: int):
        self.points = collections.deque(maxlen=maxlen)
        self.text = ""  # " ".join(points) while no point is None, else None

    def add(self, p: str | None) -> None:
        """Append ``"x,y"`` (or None: no value)."""
        pts = self.points
        gone = pts[0] if len(pts) == pts.maxlen else ""
        pts.append(p)
        if p is None or gone is None or self.text is None:
            self.text = None if None in pts else " ".join(pts)
        else:
            text = self.text[len(gone) + 1 :] if gone else self.text
            self.text = f"{text} {p}" if text else p

    def polylines(self, cls: str) -> str:
        """The polylines' HTML (see :func:`_polylines`)."""
        if self.text is None or len(self.points) < 2:
            return _polylines(list(self.points), cls)
        return _polyline(self.text, cls)


def _same(a, b) -> bool:
    """Whether two GpuSamples (or None) read the same: the same card."""
    return a is b or (a is not None and b is not None and a == b)


class MachineViews:
    """How a monitor draws this machine's GPUs, live or replayed: widget, text, HTML."""

    def __init__(self, source):
        self.source = source

    def view(self, label: str, on_stop=None) -> WatchView:
        """The widget tree."""
        return WatchView(self.source.devices, label=label, on_stop=on_stop)

    def text(self, sample, history, label, state, error) -> str:
        """The text table."""
        return text_view.sample_text(sample, label, state, error)

    def html(self, sample, history, label, state, samples_taken, error) -> str:
        """The static HTML snapshot."""
        return snapshot_html(sample, history, label, state, samples_taken, error)
