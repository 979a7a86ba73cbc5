"""Text and HTML forms of a profile.

Tables, the GPU breakdown, the steps, and an inline SVG timeline.

The HTML is self-contained (inline SVG and styles, no script, no external URL); colours are
JupyterLab theme variables with fallbacks, so a saved page renders outside JupyterLab too. Every
name from the profile (operator and kernel names, shapes, paths, error texts) is escaped.
"""

from __future__ import annotations

import heapq
import textwrap

from ..core import style
from ..core.display import Displayed
from ..core.fmt import (
    TEXT_WIDTH,
    esc,
    format_bytes,
    html_table,
    na_cell_html,
    terminal_safe,
    text_table,
)
from ..core.na import is_na

#: grouping -> column header of the detail column in tables.
DETAIL_HEADERS = {
    "op": "",
    "shape": "input shapes",
    "module": "module",
    "stack": "Python stack (innermost first)",
}

#: timeline colours: theme variables with a fallback for pages opened outside JupyterLab.
PALETTE = (
    "var(--jp-brand-color1, #1976d2)",
    "var(--jp-warn-color1, #f57c00)",
    "var(--jp-success-color1, #388e3c)",
    "var(--jp-error-color1, #d32f2f)",
    "var(--jp-accent-color1, #7b1fa2)",
    "var(--jp-info-color1, #0097a7)",
    "var(--jp-brand-color3, #90caf9)",
    "var(--jp-warn-color3, #ffcc80)",
)
OTHER_COLOUR = "var(--jp-layout-color3, #9e9e9e)"
MAX_RECTS = 1500  # per timeline: the longest events; shorter ones are under a pixel wide anyway

#: Text colours of the SVG pictures (labels, axis); bars use :data:`PALETTE`. Theme variables,
#: neutral fallbacks.
TEXT_FILL = "var(--jp-content-font-color1, currentColor)"
MUTED_FILL = "var(--jp-content-font-color2, currentColor)"
LINE_STROKE = "var(--jp-border-color2, currentColor)"
LINE_STROKE_NESTED = "var(--jp-border-color3, currentColor)"


def _page(body: str) -> str:
    """One themed output (:func:`cudamagic.core.style.page`, kind ``prof``)."""
    return style.page(body, "prof")


def ms(us: float) -> str:
    """Microseconds as milliseconds text (``1234.5`` -> ``'1.235'``)."""
    return f"{us / 1000:.3f}"


class Table(Displayed):
    """The top rows of an operator or kernel table, plus one "other" row for the rest.

    Attributes:
        group: ``op``/``shape``/``module``/``stack`` or ``"kernels"``. rows: every
            :class:`~.summary.TableRow`.
        top: rows shown.
    """

    def __init__(self, group: str, rows, top: int):
        self.group, self.rows, self.top = group, list(rows), top

    def shown(self):
        """(shown rows, the "other" row's (count, self_us, total_us, pct) or None)."""
        head, rest = self.rows[: self.top], self.rows[self.top :]
        if not rest:
            return head, None
        return head, (
            len(rest),
            sum(r.self_us for r in rest),
            sum(r.total_us for r in rest),
            sum(r.self_pct for r in rest),
        )

    def headers(self):
        """The column headers."""
        if self.group == "kernels":
            return ["#", "device %", "device ms", "calls", "kernel", "launched by"]
        detail = DETAIL_HEADERS.get(self.group, "")
        return ["#", "self %", "self ms", "total ms", "calls", "operator"] + (
            [detail] if detail else []
        )

    def _cells(self, i, r):
        if self.group == "kernels":
            return [str(i), f"{r.self_pct:.1f}", ms(r.self_us), str(r.calls), r.name, r.launcher]
        cells = [str(i), f"{r.self_pct:.1f}", ms(r.self_us), ms(r.total_us), str(r.calls), r.name]
        return cells + ([r.detail] if DETAIL_HEADERS.get(self.group) else [])

    def _other(self, other):
        n, s, t, p = other
        what = "kernels" if self.group == "kernels" else "rows"
        if self.group == "kernels":
            return ["", f"{p:.1f}", ms(s), "", f"(other {n} {what})", ""]
        cells = ["", f"{p:.1f}", ms(s), "", "", f"(other {n} {what})"]
        return cells + ([""] if DETAIL_HEADERS.get(self.group) else [])

    def text(self) -> str:
        """The table as text."""
        head, other = self.shown()
        rows = [[terminal_safe(c) for c in self._cells(i, r)] for i, r in enumerate(head, 1)]
        if other:
            rows.append(self._other(other))
        return text_table(self.headers(), rows)

    def html(self) -> str:
        """The table as HTML: numbers right-aligned, names wrapping, in a scroll box."""
        head, other = self.shown()
        headers = self.headers()
        first_name = 4 if self.group == "kernels" else 5
        rows = [self._cells(i, r) for i, r in enumerate(head, 1)]
        if other:
            rows.append(self._other(other))
        names = range(first_name, len(headers))
        return style.scroll(
            html_table(
                headers,
                [[esc(c) for c in r] for r in rows],
                num=range(first_name),
                prose=names,
                col_cls={j: "cm-mono" for j in names},
            )
        )

    def to_html(self) -> str:
        """The HTML form (notebook)."""
        return _page(self.html())

    to_text = text


# ---- summary
# --------------------------------------------------------------------------------------------


def _facts(res) -> list[tuple[str, str]]:
    facts = [
        ("cell wall time", f"{res.wall_s * 1000:.1f} ms"),
        ("profiled span", f"{res.span_s * 1000:.1f} ms"),
        ("activities", ", ".join(res.activities)),
        ("operator calls", f"{len(res.ops):,}"),
        ("device activities", f"{len(res.kernels):,}"),
    ]
    if isinstance(res.peak_memory_bytes, dict):
        facts.append(
            (
                "peak allocated (above start)",
                ", ".join(
                    f"{k} {format_bytes(v)}" for k, v in sorted(res.peak_memory_bytes.items())
                ),
            )
        )
    elif is_na(res.peak_memory_bytes):
        # NA: the text and HTML forms show the reason
        facts.append(("peak allocated", res.peak_memory_bytes))
    if res.memory_html_path:
        facts.append(("memory viewer", res.memory_html_path))
    if res.trace_path:
        facts.append(("trace", res.trace_path))
    return facts


def _breakdown_rows(res):
    rows = []
    for b in res.gpu:
        p = b.pct()
        rows.append(
            [
                f"cuda:{b.device}",
                ms(b.span_us),
                f"{p['kernel']:.1f}",
                f"{p['memcpy']:.1f}",
                f"{p['memset']:.1f}",
                f"{p['idle']:.1f}",
            ]
        )
    return rows


BREAKDOWN_HEADERS = ["device", "span ms", "kernel %", "memcpy %", "memset %", "idle %"]


def result_text(res) -> str:
    """The summary as plain text (names never cut: a long name makes its line longer)."""
    out = [
        f"{terminal_safe(res.header)}: {res.wall_s * 1000:.1f} ms, {len(res.ops):,} operator calls"
        + (f", stopped by {terminal_safe(res.error, 200)}" if res.error else "")
    ]
    for n in res.notices + res.trace_notes:
        out.append(
            textwrap.fill(
                "note: " + terminal_safe(n),
                TEXT_WIDTH,
                subsequent_indent="  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
        )
    out.append("")
    out.extend(f"  {k}: {terminal_safe(v.describe() if is_na(v) else v)}" for k, v in _facts(res))
    try:
        table = res.table()
        out += ["", f"Top operators by self time (grouped by {res.group}):", table.text()]
    except ValueError as exc:
        out += ["", f"operators: {exc}"]
    if res.kernels:
        out += ["", "Top GPU kernels by device time:", res.table(kind="kernels").text()]
    if is_na(res.gpu):
        out += ["", f"GPU breakdown: N/A ({res.gpu.reason})"]
    else:
        out += [
            "",
            "GPU breakdown of the profiled span:",
            text_table(BREAKDOWN_HEADERS, _breakdown_rows(res)),
        ]
    if res.steps:
        out += [
            "",
            "Steps:",
            text_table(["step", "ms"], [[s.step, ms(s.dur_us)] for s in res.steps]),
        ]
    if res.verdict is not None:
        out += ["", res.verdict.text()]
    out += [
        "",
        "(the timeline picture is in the HTML form: open it in a notebook or use .save_html(path))",
    ]
    return "\n".join(out)


def result_html(res) -> str:
    """The summary as one self-contained HTML fragment."""
    parts = [
        f"<div><span class='cm-title'>{esc(res.header)}</span> &mdash; {res.wall_s * 1000:.1f} ms"
    ]
    if res.error:
        parts.append(
            f" {style.badge('stopped by ' + res.error[:300], 'error')} (profile of the part that "
            "ran)"
        )
    parts.append("</div>")
    for n in res.notices + res.trace_notes:
        parts.append(f'<div class="cm-note">note: {esc(n)}</div>')
    parts.append(
        html_table(
            ["", ""],
            [[esc(k), na_cell_html(v)] for k, v in _facts(res)],
            cls="cm-facts",
            prose=(1,),
        )
    )
    try:
        table = res.table()
        parts.append(
            f"<h4>Top operators by self time (grouped by {esc(res.group)})</h4>{table.html()}"
        )
    except ValueError as exc:
        parts.append(f"<h4>Operators</h4><div>{esc(exc)}</div>")
    if res.kernels:
        parts.append(f"<h4>Top GPU kernels by device time</h4>{res.table(kind='kernels').html()}")
    if is_na(res.gpu):
        parts.append(f"<h4>GPU breakdown</h4><div>{na_cell_html(res.gpu)}</div>")
    else:
        parts.append(
            "<h4>GPU breakdown of the profiled span</h4>"
            + style.scroll(
                html_table(
                    BREAKDOWN_HEADERS,
                    [[esc(c) for c in r] for r in _breakdown_rows(res)],
                    num=range(1, len(BREAKDOWN_HEADERS)),
                )
            )
        )
    if res.steps:
        parts.append(
            "<h4>Steps</h4>"
            + html_table(
                ["step", "ms"], [[esc(s.step), ms(s.dur_us)] for s in res.steps], num=(0, 1)
            )
        )
    parts.append("<h4>Timeline</h4>" + timeline_svg(res))
    if res.memory_points:
        parts.append("<h4>Allocated memory over the span</h4>" + memory_svg(res))
    if res.verdict is not None:
        parts.append(res.verdict.html())
    return _page("".join(parts))


def page(fragment: str, title: str = "%%torchprof") -> str:
    """A standalone HTML page around ``fragment`` (no external resource)."""
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title></head>'
        f"<body>{fragment}</body></html>"
    )


def _colour_map(res) -> dict:
    names = []
    for r in res.rows("op")[: len(PALETTE)]:
        names.append(r.name)
    return {n: PALETTE[i] for i, n in enumerate(names)}


#: operator rows per CPU thread in the timeline: depth 0 (not enclosed by another operator), 1 and 2
#: (deeper ones lie inside a depth-2 box and are left out).
DEPTH_ROWS = 3
#: fill of operators outside the legend, per depth: a different theme shade per nesting level.
OTHER_BY_DEPTH = (
    OTHER_COLOUR,
    "var(--jp-layout-color4, #757575)",
    "var(--jp-border-color1, #bdbdbd)",
)
#: outline per depth (children get a thinner, dashed edge in the theme's text colour), opacity per
#: depth; one rule per depth class in the SVG's own stylesheet (not repeated on each of up to
#: MAX_RECTS rectangles).
DEPTH_STYLE = (
    "stroke:var(--jp-ui-font-color1,#222);stroke-width:0.6",
    "stroke:var(--jp-ui-font-color2,#555);stroke-width:0.5;stroke-dasharray:2 1;fill-opacity:0.8",
    "stroke:var(--jp-ui-font-color3,#777);stroke-width:0.4;stroke-dasharray:1 1;fill-opacity:0.65",
)
TIMELINE_CSS = "".join(f"svg.cm-tl .cm-depth{d}{{{style}}}" for d, style in enumerate(DEPTH_STYLE))


def timeline_svg(res, width: int = 900, lane_h: int = 20) -> str:
    """An inline SVG timeline of the profiled span.

    An inline SVG of the span: per CPU thread, one row per nesting level of operators (depth 0: not
    enclosed by another operator; then their children, then grandchildren), each level with its own
    shade and outline, and one row per GPU stream (kernels, memcpy, memset). At most
    :data:`MAX_RECTS` rectangles, the longest; hover shows the name, depth and duration. The legend
    colours the operators with the most self time.
    """
    start, end = res.span_us
    span = max(end - start, 1e-9)
    lanes: dict = {}
    for op in res.ops:
        depth = op.depth
        if depth < DEPTH_ROWS:
            lanes.setdefault(("cpu", op.thread, depth), []).append(
                (op.start_us, op.end_us, op.name)
            )
    for k in res.kernels:
        lanes.setdefault(("gpu", (k.device, k.stream), 0), []).append(
            (k.start_us, k.end_us, k.name)
        )
    if not lanes:
        return '<div class="cm-note">(no events to draw)</div>'
    keys = sorted(lanes, key=lambda k: (k[0] != "cpu", k[1], k[2]))
    every = [(e - s, i, (s, e, n)) for i, key in enumerate(keys) for (s, e, n) in lanes[key]]
    dropped = max(0, len(every) - MAX_RECTS)
    if dropped:
        every = heapq.nlargest(MAX_RECTS, every, key=lambda t: t[0])
    colours = _colour_map(res)
    label_w, top_pad = 130, 4
    plot_w = width - label_w - 10
    height = top_pad + lane_h * len(keys) + 44
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="cm-tl" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="timeline of the profiled span" '
        f'style="max-width:100%;height:auto;font-family:var(--jp-ui-font-family,sans-serif);font-size:11px">'
        f"<style>{TIMELINE_CSS}</style>"
    ]
    for i, (kind, where, depth) in enumerate(keys):
        y = top_pad + i * lane_h
        if kind == "gpu":
            label = f"cuda:{where[0]} stream {where[1]}"
        else:
            label = f"thread {where}" if depth == 0 else f"\u2003nested {depth}"
        last_of_thread = kind == "gpu" or i + 1 == len(keys) or keys[i + 1][:2] != (kind, where)
        out.append(
            f'<text x="2" y="{y + lane_h - 4}" '
            f'style="fill:{TEXT_FILL if depth == 0 else MUTED_FILL}">'
            f"{esc(label)}</text>"
            f'<line x1="{label_w}" x2="{width - 10}" y1="{y + lane_h - 0.5}" '
            f'y2="{y + lane_h - 0.5}" '
            f'style="stroke:{LINE_STROKE if last_of_thread else LINE_STROKE_NESTED}"/>'
        )
    for dur, i, (s, _end, n) in every:
        depth = keys[i][2]
        x = label_w + (s - start) / span * plot_w
        w = max(0.5, dur / span * plot_w)
        y = top_pad + i * lane_h + 1
        fill = colours.get(n, OTHER_BY_DEPTH[depth])
        what = f"{esc(n)}: {ms(dur)} ms" + (f" (nested {depth})" if depth else "")
        out.append(
            f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane_h - 3}" '
            f'class="cm-depth{depth}" '
            f'style="fill:{fill}"><title>{what}</title></rect>'
        )
    y = top_pad + lane_h * len(keys) + 14
    out.append(
        f'<text x="{label_w}" y="{y}" style="fill:{MUTED_FILL}">0 ms</text>'
        f'<text x="{width - 10}" y="{y}" text-anchor="end" style="fill:{MUTED_FILL}">'
        f"{ms(span)} ms</text>"
    )
    x = label_w
    for n, c in colours.items():
        room = (
            width - 10 - x - 12
        ) // 8  # characters that surely fit before the right edge (under 8 px at 11 px)
        if room < 6:
            break
        keep = min(28, room)
        label = n if len(n) <= keep else n[: keep - 1] + "\u2026"
        out.append(
            f'<rect x="{x}" y="{y + 8}" width="9" height="9" style="fill:{c}"/>'
            f'<text x="{x + 12}" y="{y + 16}" style="fill:{TEXT_FILL}">{esc(label)}</text>'
        )
        x += 12 + 8 * len(label) + 10
    out.append("</svg>")
    note = (
        f'<div class="cm-note">{dropped:,} shorter events not drawn (each under '
        f"{ms(min(t[0] for t in every))} ms).</div>"
        if dropped
        else ""
    )
    return "".join(out) + note


def memory_svg(res, width: int = 900, height: int = 120) -> str:
    """An inline SVG of allocated bytes over time, per device."""
    start, end = res.span_us
    span = max(end - start, 1e-9)
    series = res.memory_points
    peak = max((max(v for _, v in pts) for pts in series.values() if pts), default=0) or 1
    low = min((min(v for _, v in pts) for pts in series.values() if pts), default=0)
    rng = max(peak - min(low, 0), 1)
    label_w = 130
    plot_w, plot_h = width - label_w - 10, height - 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="allocated memory over time" '
        f'style="max-width:100%;height:auto;font-family:var(--jp-ui-font-family,sans-serif);font-size:11px">'
    ]
    for i, (dev, pts) in enumerate(sorted(series.items())):
        step = max(1, len(pts) // 2000)
        coords = []
        for t, v in pts[::step] + [pts[-1]]:
            x = label_w + (t - start) / span * plot_w
            y = 5 + plot_h - (v - min(low, 0)) / rng * plot_h
            coords.append(f"{x:.1f},{y:.1f}")
        out.append(
            f'<polyline points="{" ".join(coords)}" '
            f'style="fill:none;stroke:{PALETTE[i % len(PALETTE)]};'
            f'stroke-width:1.5"><title>{esc(dev)}</title></polyline>'
            f'<line x1="2" x2="14" y1="{11 + 12 * i}" y2="{11 + 12 * i}" '
            f'style="stroke:{PALETTE[i % len(PALETTE)]};stroke-width:3"/>'
            f'<text x="18" y="{15 + 12 * i}" style="fill:{TEXT_FILL}">{esc(dev)} peak '
            f"{esc(format_bytes(max(v for _, v in pts)))}</text>"
        )
    out.append(
        f'<text x="{label_w}" y="{height - 5}" style="fill:{MUTED_FILL}">0 ms</text>'
        f'<text x="{width - 10}" y="{height - 5}" text-anchor="end" '
        f'style="fill:{MUTED_FILL}">{ms(span)} ms</text></svg>'
    )
    return "".join(out)
