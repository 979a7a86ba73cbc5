"""Text and HTML forms of a profile.

Tables, the GPU breakdown, the steps, and the timeline and memory pictures.

The HTML is self-contained (no script, no external URL); the pictures are SVG documents in
``<img>`` data URIs, which an untrusted notebook's sanitiser keeps (it drops inline ``<svg>`` and
``<style>``). Every name from the profile (operator and kernel names, shapes, paths, error texts)
is escaped.
"""

from __future__ import annotations

import base64
import re
import textwrap
import zlib

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

#: Bar colours: distinct hues (Tableau 10 less its grey). An operator's hue comes from a hash of
#: its name (:func:`colours_of`), so it keeps its colour from run to run and process to process.
HUES = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
#: the operators (and kernels) outside the legend; runs of events too short to draw one by one.
OTHER_COLOUR, MERGED_COLOUR = "#c9c9c9", "#6f6f6f"
#: Pictures travel as ``<img>`` data URIs (a sanitiser drops inline ``<svg>``): no theme variable
#: reaches them, so they carry their own light background and dark text.
TEXT_FILL, MUTED_FILL, LINE_STROKE, BACKGROUND = "#1f1f1f", "#555555", "#d0d0d0", "#ffffff"
#: a run of events each narrower than this (pixels) is drawn as one merged bar.
MIN_BAR_PX = 2.0
#: the picture's text size in pixels; narrow outputs scroll instead of shrinking it.
FONT_PX = 12


def _page(body: str) -> str:
    """One themed output (:func:`cudamagic.core.style.page`, kind ``prof``)."""
    return style.page(body, "prof")


def name_html(name: str) -> str:
    """An operator or kernel name, escaped, breakable only after ``::``, ``_`` and ``/``.

    A narrow output then wraps ``aten::_log_softmax`` at its parts instead of shrinking the column
    to a letter wide and breaking mid-word (``overflow-wrap:normal`` inline, kept by a sanitiser).
    """
    parts = re.sub(r"(::|_|/)", r"\1<wbr>", esc(name))
    return f'<span style="overflow-wrap:normal;word-break:normal">{parts}</span>'


def ms(us: float) -> str:
    """Microseconds as milliseconds text (``1234.5`` -> ``'1.235'``)."""
    return f"{us / 1000:.3f}"


class Table(Displayed):
    """The top rows of an operator or kernel table, plus one "other" row for the rest.

    Attributes:
        group: ``op``/``shape``/``module``/``stack`` or ``"kernels"``. rows: every
            :class:`~.result.TableRow`.
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
        """The table as HTML: names first (wrapping at their parts), then the numbers; no rank.

        A narrow output then shows which operator before it scrolls to the numbers.
        """
        head, other = self.shown()
        first = 4 if self.group == "kernels" else 5  # the first name column of the text form
        n = len(self.headers()) - first
        rows = [
            [name_html(c) for c in cells[first:]] + [esc(c) for c in cells[1:first]]
            for cells in [self._cells(i, r) for i, r in enumerate(head, 1)]
            + ([self._other(other)] if other else [])
        ]
        headers = self.headers()[first:] + self.headers()[1:first]
        return style.scroll(
            html_table(
                headers,
                rows,
                num=range(n, len(headers)),
                prose=range(n),
                col_cls={j: "cm-mono" for j in range(n)},
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
        ("operator calls", f"{len(res.ops):,}" if not res.lost else _calls(res)),
        ("device activities", f"{len(res.kernels):,}"),
    ]
    if isinstance(res.peak_memory_bytes, dict):
        facts.append(
            (
                "peak allocated (above start)",
                ", ".join(
                    f"{k} {_bounded(format_bytes(v), res.peak_memory_bounds.get(k))}"
                    for k, v in sorted(res.peak_memory_bytes.items())
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


def _bounded(value: str, bound: str | None) -> str:
    """``value`` with its label when it is not exact (``"at most 12.0 MB (upper bound)"``)."""
    return f"at most {value} ({bound})" if bound else value


def _calls(res) -> str:
    """The summary line's count: operator calls, or that the profile was lost."""
    if res.lost:
        return "profile lost (the cell started its own profiler)"
    return f"{len(res.ops):,} operator calls"


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
        f"{terminal_safe(res.header)}: {res.wall_s * 1000:.1f} ms, {_calls(res)}"
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
    if res.lost:
        parts.append(f" {style.badge(_calls(res), 'error')}")
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
    timeline = timeline_svg(res)
    parts.append(
        "<h4>Timeline</h4>"
        + (
            picture(
                timeline, "timeline of the profiled span: operators by thread, kernels by stream"
            )
            if timeline
            else '<div class="cm-note">(no events to draw)</div>'
        )
    )
    if res.memory_points:
        parts.append(
            "<h4>Allocated memory over the span</h4>"
            + picture(memory_svg(res), "allocated memory over the profiled span")
        )
    if res.verdict is not None:
        parts.append(res.verdict.html())
    return _page("".join(parts))


def page(fragment: str, title: str = "%%torchprof") -> str:
    """A standalone HTML page around ``fragment`` (no external resource)."""
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{esc(title)}</title></head>'
        f"<body>{fragment}</body></html>"
    )


def colours_of(names) -> dict:
    """Operator name -> hue, from a hash of the name.

    ``crc32`` of the name picks the hue (the same in every process; Python's ``hash`` is salted per
    process); a hue taken by an earlier name passes to the next free one.

    Args:
        names: at most ``len(HUES)`` distinct names, the most important first.
    """
    out: dict = {}
    for name in names:
        i = zlib.crc32(name.encode()) % len(HUES)
        while HUES[i] in out.values():
            i = (i + 1) % len(HUES)
        out[name] = HUES[i]
    return out


#: operator rows per CPU thread in the timeline: depth 0 (not enclosed by another operator), 1 and 2
#: (deeper ones lie inside a depth-2 box and are left out).
DEPTH_ROWS = 3
#: operators with a hue of their own in the legend.
LEGEND_OPS = 8


def picture(svg: str, alt: str) -> str:
    """An SVG as an ``<img>`` data URI at its own size, in a box that scrolls when narrower.

    An inline ``<svg>`` is dropped by the sanitiser of an untrusted notebook, and its ``<title>``
    texts run into the page; an image is kept whole. ``max-width:none``: a narrow output scrolls
    instead of shrinking the text.
    """
    width, height = re.search(r'width="(\d+)" height="(\d+)"', svg).groups()
    data = base64.b64encode(svg.encode()).decode()
    return (
        '<div class="cm-scroll" style="max-width:100%;overflow-x:auto">'
        f'<img src="data:image/svg+xml;base64,{data}" width="{width}" height="{height}" '
        f'alt="{esc(alt)}" style="max-width:none"></div>'
    )


def _bars(events, start: float, scale: float, colours: dict) -> list:
    """(x, width, fill) of one row's bars, in pixels from the plot's left edge.

    An event at least :data:`MIN_BAR_PX` wide is one bar; neighbouring shorter ones (less than a
    pixel apart) make one merged bar: the operator's colour when they are all one operator, else
    :data:`MERGED_COLOUR`.
    """
    out, run = [], None  # run: [x0, x1, names]

    def flush():
        if run is not None:
            names = run[2]
            fill = colours.get(next(iter(names)), OTHER_COLOUR) if len(names) == 1 else None
            out.append((run[0], max(0.5, run[1] - run[0]), fill or MERGED_COLOUR))

    for s, e, name in sorted(events):
        x0, x1 = (s - start) * scale, (e - start) * scale
        if x1 - x0 >= MIN_BAR_PX:
            flush()
            run = None
            out.append((x0, x1 - x0, colours.get(name, OTHER_COLOUR)))
        elif run is not None and x0 - run[1] < 1.0:
            run[1] = max(run[1], x1)
            run[2].add(name)
        else:
            flush()
            run = [x0, x1, {name}]
    flush()
    return out


def _legend(entries, x0: int, y: int, width: int) -> tuple[list, int]:
    """Legend swatches and names in lines that wrap at ``width``; (SVG parts, bottom y)."""
    parts, x = [], x0
    for label, colour in entries:
        w = 16 + int(FONT_PX * 0.62 * len(label)) + 14
        if x > x0 and x + w > width - 10:
            x, y = x0, y + FONT_PX + 8
        parts.append(
            f'<rect x="{x}" y="{y}" width="11" height="11" fill="{colour}" stroke="{MUTED_FILL}" '
            f'stroke-width="0.5"/><text x="{x + 16}" y="{y + 10}" fill="{TEXT_FILL}">'
            f"{esc(label)}</text>"
        )
        x += w
    return parts, y + FONT_PX + 6


def timeline_svg(res, width: int = 900, lane_h: int = 20) -> str:
    """The timeline of the profiled span as a standalone SVG document.

    Per CPU thread, one row per nesting level of operators (the thread's outermost operators, then
    the operators they call, then those these call), and one row per GPU stream. An operator of the
    legend (the :data:`LEGEND_OPS` with the most self time) has its hue (:func:`colours_of`),
    every other operator and kernel :data:`OTHER_COLOUR`; runs of events too short to draw one by
    one are merged (:func:`_bars`). The legend names every colour drawn, and wraps.
    """
    start, end = res.span_us
    span = max(end - start, 1e-9)
    lanes: dict = {}
    for op in res.ops:
        if op.depth < DEPTH_ROWS:
            lanes.setdefault(("cpu", op.thread, op.depth), []).append(
                (op.start_us, op.end_us, op.name)
            )
    for k in res.kernels:
        lanes.setdefault(("gpu", (k.device, k.stream), 0), []).append(
            (k.start_us, k.end_us, k.name)
        )
    if not lanes:
        return ""
    keys = sorted(lanes, key=lambda k: (k[0] != "cpu", k[1], k[2]))
    colours = colours_of([r.name for r in res.rows("op")[:LEGEND_OPS]])
    label_w, top_pad = 170, 4
    plot_w = width - label_w - 10
    body, used = [], set()
    for i, (kind, where, depth) in enumerate(keys):
        y = top_pad + i * lane_h
        if kind == "gpu":
            label = f"cuda:{where[0]} stream {where[1]}"
        else:
            label = f"thread {where}" if depth == 0 else "\u21b3 called by the row above"
        body.append(
            f'<text x="{2 + 10 * depth}" y="{y + lane_h - 5}" '
            f'fill="{TEXT_FILL if depth == 0 else MUTED_FILL}">{esc(label)}</text>'
            f'<line x1="{label_w}" x2="{width - 10}" y1="{y + lane_h - 0.5}" '
            f'y2="{y + lane_h - 0.5}" stroke="{LINE_STROKE}"/>'
        )
        for x, w, fill in _bars(lanes[(kind, where, depth)], start, plot_w / span, colours):
            used.add(fill)
            body.append(
                f'<rect x="{label_w + x:.1f}" y="{y + 1}" width="{w:.1f}" height="{lane_h - 3}" '
                f'fill="{fill}"/>'
            )
    y = top_pad + lane_h * len(keys) + 15
    body.append(
        f'<text x="{label_w}" y="{y}" fill="{MUTED_FILL}">0 ms</text>'
        f'<text x="{width - 10}" y="{y}" text-anchor="end" fill="{MUTED_FILL}">'
        f"{ms(span)} ms</text>"
    )
    entries = [(n, c) for n, c in colours.items() if c in used]
    entries += [
        (label, c)
        for label, c in (
            ("other operators and kernels", OTHER_COLOUR),
            ("many short operators, merged", MERGED_COLOUR),
        )
        if c in used
    ]
    legend, height = _legend(entries, 10, y + 10, width)
    return _svg(width, height, body + legend)


def _svg(width: int, height: int, parts) -> str:
    """A standalone SVG document on its own background."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{FONT_PX}">'
        f'<rect width="{width}" height="{height}" fill="{BACKGROUND}"/>' + "".join(parts) + "</svg>"
    )


def memory_svg(res, width: int = 900, height: int = 120) -> str:
    """Allocated bytes over the span, one line per device, as a standalone SVG document."""
    start, end = res.span_us
    span = max(end - start, 1e-9)
    series = res.memory_points
    peak = max((max(v for _, v in pts) for pts in series.values() if pts), default=0) or 1
    low = min((min(v for _, v in pts) for pts in series.values() if pts), default=0)
    rng = max(peak - min(low, 0), 1)
    label_w = 170
    plot_w, plot_h = width - label_w - 10, height - 30
    parts = []
    for i, (dev, pts) in enumerate(sorted(series.items())):
        step = max(1, len(pts) // 2000)
        coords = " ".join(
            f"{label_w + (t - start) / span * plot_w:.1f},"
            f"{5 + plot_h - (v - min(low, 0)) / rng * plot_h:.1f}"
            for t, v in pts[::step] + [pts[-1]]
        )
        colour = HUES[i % len(HUES)]
        parts.append(
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="1.5"/>'
            f'<line x1="2" x2="14" y1="{11 + 14 * i}" y2="{11 + 14 * i}" stroke="{colour}" '
            f'stroke-width="3"/><text x="18" y="{15 + 14 * i}" fill="{TEXT_FILL}">{esc(dev)} peak '
            f"{esc(format_bytes(max(v for _, v in pts)))}</text>"
        )
    parts.append(
        f'<text x="{label_w}" y="{height - 5}" fill="{MUTED_FILL}">0 ms</text>'
        f'<text x="{width - 10}" y="{height - 5}" text-anchor="end" fill="{MUTED_FILL}">'
        f"{ms(span)} ms</text>"
    )
    return _svg(width, height, parts)
