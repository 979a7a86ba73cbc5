"""The ``%gpuwatch`` display in a notebook: HTML fragments, sparklines and the ipywidgets tree.

:class:`WatchView` builds the widget tree once and :meth:`WatchView.apply` sets trait values
inside ``hold_sync()`` (the only thing the sampler thread does with widgets: no print, no
display, no ``with output:``, F13). :func:`snapshot_html` is the static ``text/html`` form.
The plain-text form is :mod:`.text`.

Every string that comes from outside (process names and command lines, GPU names,
file paths, NVML error text) goes through :func:`cudamagic.core.fmt.esc` before HTML.
``ipywidgets`` is imported inside :meth:`WatchView.__init__` only.
"""

from __future__ import annotations

import collections
import contextlib

from ..core.fmt import NO_MATH, esc, format_bytes
from ..core.na import is_na
from .samples import Sample
from .text import (PROCESS_LABELS, counter_notes, mem_text, no_process_line, num_text, pct_text, process_label,
                   process_memory_text, process_notes, reasons_text, torch_text)

_CSS = ("font-family:var(--jp-code-font-family,monospace);font-size:12px;line-height:1.35")


# ---- HTML -----------------------------------------------------------------------------------

def _w(mw):
    return str(mw) if is_na(mw) else f"{mw / 1000:.0f} W"


def _cell(v, text=None):
    """Escaped value; NA as 'N/A' with the reason as tooltip and beside it."""
    if is_na(v):
        return (f'<span title="{esc(v.reason)}" style="color:#888">N/A</span> '
                f'<small style="color:#888">({esc(v.reason)})</small>')
    return esc(v if text is None else text)


def _bar(frac, color, reserved_frac=None):
    """A 120 px bar filled to ``frac`` (0-1); with ``reserved_frac`` a grey segment after it for the driver's
    memory reserve (``memory.reserved``). Only called with plausible readings (see nvml.check_value)."""
    frac = 0.0 if frac is None else max(0.0, min(1.0, frac))
    extra = ""
    if reserved_frac is not None:
        r = max(0.0, min(1.0 - frac, reserved_frac))
        extra = (f'<span title="driver reserve (memory.reserved)" style="display:inline-block;width:{r * 100:.1f}%;'
                 f'height:100%;background:#9e9e9e"></span>')
    return (f'<span style="display:inline-block;width:120px;height:9px;background:#e6e6e6;vertical-align:middle;'
            f'white-space:nowrap;font-size:0">'
            f'<span style="display:inline-block;width:{frac * 100:.1f}%;height:100%;background:{color}"></span>'
            f'{extra}</span>')


def gpu_html(g) -> str:
    """One GPU card (escaped)."""
    title = ("MIG " if g.mig_enabled is True else "") + ("" if is_na(g.name) else str(g.name))
    head = f"<b>GPU {g.index}</b> {esc(title)} <small>{_cell(g.uuid)}</small>"
    if g.lost is not None:
        return f'<div style="{_CSS}">{head} <b style="color:#b00020">LOST</b> {_cell(g.lost)}</div>'
    util = g.gpu_util_pct
    mem_frac = None if is_na(g.memory_used_bytes) or is_na(g.memory_total_bytes) or not g.memory_total_bytes \
        else g.memory_used_bytes / g.memory_total_bytes
    rsv = g.memory_reserved_bytes
    rsv_frac = None if mem_frac is None or is_na(rsv) else rsv / g.memory_total_bytes
    rsv_text = (" · reserved by the driver " + _cell(rsv, format_bytes(rsv))) if not is_na(rsv) or \
        rsv.code != "error" else ""
    rows = [
        ("utilization", (_bar(None if is_na(util) else util / 100, "#3b7dd8") + " " if not is_na(util) else "")
         + _cell(util, pct_text(util)) + " · memory bandwidth " + _cell(g.mem_util_pct, pct_text(g.mem_util_pct))),
        ("memory", (_bar(mem_frac, "#2e9d5b", rsv_frac) + " " if mem_frac is not None else "")
         + _cell(g.memory_used_bytes, mem_text(g.memory_used_bytes, g.memory_total_bytes)) + rsv_text),
        ("temperature", _cell(g.temperature_c, num_text(g.temperature_c, " °C"))),
        ("power", _cell(g.power_draw_mw, _w(g.power_draw_mw)) + " / " + _cell(g.power_limit_mw, _w(g.power_limit_mw))),
        ("fan", _cell(g.fan_speed_pct, pct_text(g.fan_speed_pct))),
        ("clocks", "SM " + _cell(g.clock_sm_mhz, num_text(g.clock_sm_mhz, " MHz")) + " · memory "
         + _cell(g.clock_mem_mhz, num_text(g.clock_mem_mhz, " MHz"))),
        ("P-state", _cell(g.pstate, num_text(g.pstate) if is_na(g.pstate) else f"P{g.pstate}")),
        ("throttle", _cell(reasons_text(g))),
    ]
    body = "".join(f"<tr><td style='padding-right:8px;color:#555'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    migs = "".join(f"<div>MIG {m.index} <code>{esc(m.uuid)}</code>: "
                   f"{_cell(m.memory_used_bytes, mem_text(m.memory_used_bytes, m.memory_total_bytes))}</div>"
                   for m in g.mig_devices)
    return f'<div style="{_CSS}">{head}<table>{body}</table>{migs}{processes_html(g)}</div>'


def processes_html(g) -> str:
    """The process table of one GPU (escaped; own row bold; invisible pids labelled)."""
    if is_na(g.processes):
        return f"<div>processes: {_cell(g.processes)}</div>"
    if not g.processes:
        return f"<div style='color:#555'>{esc(no_process_line(g))}</div>"
    rows = []
    for p in g.processes:
        name = (f'<span title="{esc(p.name.reason)}">{esc(process_label(p))}</span>'
                if is_na(p.name) and (p.name.code in PROCESS_LABELS or not p.visible) else _cell(p.name))
        tip = "" if is_na(p.cmdline) else f' title="{esc(p.cmdline)}"'
        mine = " <b>(this kernel)</b>" if p.own else ""
        style = ' style="font-weight:bold"' if p.own else ""
        rows.append(f"<tr{style}{tip}><td>{p.pid}</td><td>{name}{mine}</td><td>{esc(p.type)}</td>"
                    f"<td>{_cell(p.used_memory_bytes, process_memory_text(p))}</td></tr>")
    note = "".join(f"<div style='color:#555'>{esc(n)}</div>"
                   for n in counter_notes(g.processes) + process_notes(g.processes))
    return ("<table><tr style='color:#555'><td>pid</td><td>process</td><td>type</td><td>GPU memory</td></tr>"
            + "".join(rows) + "</table>" + note)


def host_html(sample: Sample) -> str:
    """Host, PyTorch allocator and hint (escaped)."""
    h = sample.host
    parts = [f"<b>host</b> CPU {_cell(h.cpu_util_pct, pct_text(h.cpu_util_pct))} of {esc(h.cpu_count)} CPUs · "
             f"this kernel {_cell(h.kernel_cpu_pct, pct_text(h.kernel_cpu_pct))} of one core · RAM "
             f"{_cell(h.memory_used_bytes, mem_text(h.memory_used_bytes, h.memory_total_bytes))} · "
             f"DataLoader workers: {len(h.workers)}"]
    if h.workers:
        parts.append("<small>" + ", ".join(f"pid {w.pid}: {_cell(w.cpu_pct, pct_text(w.cpu_pct))} CPU, "
                                           f"{_cell(w.rss_bytes, format_bytes(w.rss_bytes))}" for w in h.workers)
                     + "</small>")
    t = sample.torch
    parts.append("<b>PyTorch</b> " + (_cell(t) if is_na(t) else esc(torch_text(t))))
    if sample.nvml_status is not None:
        parts.insert(0, f"<b style='color:#a15c00'>No GPU data:</b> {esc(sample.nvml_status.reason)}")
    if sample.hint:
        parts.append(f"<b style='color:#a15c00'>hint</b> {esc(sample.hint)}")
    return f'<div style="{_CSS}">' + "<br>".join(parts) + "</div>"


def spark_point(g):
    """``(utilization %, memory used %)`` of one GpuSample for the sparkline; None where NA or absent."""
    if g is None:
        return None, None
    u = None if is_na(g.gpu_util_pct) else float(g.gpu_util_pct)
    m = None
    if not is_na(g.memory_used_bytes) and not is_na(g.memory_total_bytes) and g.memory_total_bytes:
        m = 100.0 * g.memory_used_bytes / g.memory_total_bytes
    return u, m


def sparkline_svg(history, index: int, width: int = 240, height: int = 40) -> str:
    """Inline SVG of GPU ``index``'s utilization (blue) and memory used % (green) over ``history``
    (a list of Samples). Only numbers computed here go into the SVG; NA points break the line."""
    return sparkline_from_points([spark_point(next((g for g in s.gpus if g.index == index), None))
                                  for s in history], index, width, height)


def sparkline_from_points(points, index: int, width: int = 240, height: int = 40) -> str:
    """The sparkline SVG from ``[(util %, mem %), ...]`` (None = not available).

    The polylines use the point index as x and ``100 - value`` (whole percent) as y in a
    ``viewBox`` stretched to ``width`` x ``height``, so building it costs a few integer formats per point.
    """
    n = len(points)

    def lines(k, color):
        out, seg = [], []
        for i, p in enumerate(points):
            v = p[k]
            if v is None:
                if len(seg) > 1:
                    out.append(seg)
                seg = []
                continue
            seg.append(f"{i},{100 - (0 if v < 0 else 100 if v > 100 else round(v))}")
        if len(seg) > 1:
            out.append(seg)
        return "".join(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                       f'vector-effect="non-scaling-stroke" points="{" ".join(s)}"/>' for s in out)

    return (f'<svg width="{width}" height="{height}" viewBox="0 -2 {max(1, n - 1)} 104" preserveAspectRatio="none" '
            f'xmlns="http://www.w3.org/2000/svg" style="background:#fafafa;border:1px solid #ddd">'
            f'<title>GPU {int(index)}: utilization % (blue), memory used % (green), last {n} samples</title>'
            f'{lines(1, "#2e9d5b")}{lines(0, "#3b7dd8")}</svg>')


def status_html(sample, label: str, state: str, samples_taken: int, error: str) -> str:
    """Title line: live or REPLAY (clearly labelled), time, counters, last sampler error."""
    if label.startswith("replay of "):
        kind = (f"<b style='background:#a15c00;color:white;padding:0 4px'>REPLAY</b> of "
                f"<code>{esc(label[len('replay of '):])}</code>")
        when = "recorded at " + (esc(sample.timestamp) if sample else "-")
    else:
        kind = "<b style='background:#1b7f3b;color:white;padding:0 4px'>LIVE</b>"
        when = esc(sample.timestamp) if sample else "-"
    err = f"<br><span style='color:#b00020'>sampler error: {esc(error)}</span>" if error else ""
    return (f'<div style="{_CSS}"><b>gpuwatch</b> {kind} · {when} · samples: {int(samples_taken)} · '
            f'{esc(state)}{err}</div>')


def snapshot_html(sample, history, label, state, samples_taken, error) -> str:
    """Static HTML of the whole monitor (the ``text/html`` fallback and ``_repr_html_``)."""
    parts = [status_html(sample, label, state, samples_taken, error)]
    if sample is not None:
        for g in sample.gpus:
            parts.append(gpu_html(g) + sparkline_svg(history, g.index))
        parts.append(host_html(sample))
    return f'<div class="{NO_MATH}">' + "".join(parts) + "</div>"


# ---- the widget tree ----------------------------------------------------------------------

class WatchView:
    """The ipywidgets tree of one monitor, built once.

    Args:
        indices: NVML indices of the GPUs shown (one card + sparkline each).
        label: ``"live"`` or ``"replay of PATH"`` (shown, escaped, as a REPLAY badge).
        on_stop: called (in the kernel's main thread) when the Stop button is clicked.

    ``root`` is the VBox to display. :meth:`apply` only sets ``value`` traits, inside
    ``hold_sync()`` of each widget, and only when a value changed.
    """

    SPARK_POINTS = 120

    def __init__(self, indices, label: str = "live", on_stop=None):
        import ipywidgets as W

        self.label = label
        self.status = W.HTML()
        self.button = W.Button(description="Stop", button_style="warning", icon="stop",
                               tooltip="Stop the sampler thread (same as %gpuwatch --stop)")
        self.cards = {i: W.HTML() for i in indices}
        self.sparks = {i: W.HTML() for i in indices}
        self.host = W.HTML()
        rows = [W.HBox([self.cards[i], self.sparks[i]]) for i in indices]
        self.root = W.VBox([W.HBox([self.status, self.button]), *rows, self.host])
        self._on_stop = on_stop
        self.button.on_click(self._clicked)
        self._series = {i: collections.deque(maxlen=self.SPARK_POINTS) for i in indices}
        self._last_key = None

    def _clicked(self, _button=None):
        if self._on_stop is not None:
            self._on_stop()

    def widgets(self):
        """Every widget whose value :meth:`apply` sets."""
        return [self.status, self.button, self.host, *self.cards.values(), *self.sparks.values()]

    def _add_points(self, sample, history):
        """Extend the sparkline series with ``sample`` (once per sample; seeded from ``history`` at first)."""
        key = (sample.seq, sample.timestamp_s)
        if key == self._last_key:
            return
        seed = history if self._last_key is None and history else [sample]
        for s in seed[-self.SPARK_POINTS:]:
            by_index = {g.index: g for g in s.gpus}
            for i, series in self._series.items():
                series.append(spark_point(by_index.get(i)))
        self._last_key = key

    def values_for(self, sample, history, state, samples_taken, error) -> dict:
        """``{widget: new value}`` for a sample (no widget touched; the sparkline series grows by it)."""
        out = {self.status: status_html(sample, self.label, state, samples_taken, error)}
        if sample is not None:
            self._add_points(sample, history)
            by_index = {g.index: g for g in sample.gpus}
            for i, w in self.cards.items():
                g = by_index.get(i)
                out[w] = gpu_html(g) if g is not None else f"<div>GPU {int(i)}: not in this sample</div>"
                out[self.sparks[i]] = sparkline_from_points(list(self._series[i]), i)
            out[self.host] = host_html(sample)
        return out

    def apply(self, sample, history, state: str = "running", samples_taken: int = 0, error: str = "",
              stopped: bool = False):
        """Set the widgets' traits for ``sample`` (thread-safe: only trait assignments under hold_sync)."""
        new = self.values_for(sample, history, state, samples_taken, error)
        with contextlib.ExitStack() as stack:
            for w in self.widgets():
                stack.enter_context(w.hold_sync())
            for w, value in new.items():
                if w.value != value:
                    w.value = value
            if stopped and not self.button.disabled:
                self.button.disabled = True
                self.button.description = "Stopped"

    def close(self):
        """Close every widget (frees the comms)."""
        for w in [*self.widgets(), *self.root.children[0].children, *self.root.children]:
            w.close()
        self.root.close()
