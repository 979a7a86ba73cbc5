"""Text and HTML forms of the ``%cudamem`` reports.

Text (terminal, within :data:`~cudamagic.core.fmt.TEXT_WIDTH` columns) and HTML forms of the
``%cudamem`` reports: one cell (:class:`~.report.CellMemReport`), the history
(:class:`~.history.MemHistory`) and ``free`` (:class:`~.free.FreeReport`).

The report objects call these functions from ``__repr__`` / ``_repr_html_``; nothing here computes a
figure. Every outside string (variable names, cell source, error messages) is escaped before it goes
into HTML.
"""

from __future__ import annotations

import textwrap

from ..core import style
from ..core.fmt import (
    TEXT_WIDTH,
    clip,
    display_width,
    esc,
    format_bytes,
    html_table,
    na_cell_html,
    text_table,
)
from ..core.na import is_na

# ---- text within TEXT_WIDTH columns ---------------------------------------------------


def wrap(text: str, indent: int = 2, width: int = TEXT_WIDTH) -> str:
    """``text`` wrapped to ``width`` columns, continuation lines indented by ``indent`` spaces."""
    return "\n".join(
        textwrap.wrap(
            str(text),
            width=width,
            subsequent_indent=" " * indent,
            break_long_words=True,
            break_on_hyphens=False,
        )
    ) or str(text)


def fit_table(headers, rows, shrink, width: int = TEXT_WIDTH, min_width: int = 8) -> str:
    """A text table clipped to ``width`` terminal columns.

    :func:`~cudamagic.core.fmt.text_table` within ``width`` terminal columns: cells of the columns
    in ``shrink`` (indices, in order) are clipped with an ellipsis, each down to ``min_width`` at
    most, until the table fits. Newlines and tabs in cells (names from outside) are shown escaped,
    so a row stays one line.
    """
    rows = [
        [str(c).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") for c in r]
        for r in rows
    ]
    widths = [
        max([display_width(h)] + [display_width(r[i]) for r in rows]) for i, h in enumerate(headers)
    ]
    for col in shrink:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess <= 0:
            break
        new = max(min_width, display_width(headers[col]), widths[col] - excess)
        if new < widths[col]:
            widths[col] = new
            for r in rows:
                r[col] = clip(r[col], new)
    return text_table(headers, rows)


def signed(n) -> str:
    """A byte delta with its sign (``+1.5 KiB``, ``-2 B``, ``0 B``); NA as ``'N/A'``."""
    if is_na(n):
        return str(n)
    return ("+" if n > 0 else "") + format_bytes(n)


def _peak(g, text: bool) -> str:
    """The in-cell peak of a :class:`~.stats.GpuCellStats`.

    An upper bound is marked ``<=`` (text) or ``(upper bound)`` (HTML).
    """
    if text:
        return ("" if g.peak_exact else "<=") + format_bytes(g.peak_allocated_bytes)
    return format_bytes(g.peak_allocated_bytes) + ("" if g.peak_exact else " (upper bound)")


def _status_text(status) -> str:
    return f"GPU: {status.describe() if is_na(status) else status}"


def _html(body: str) -> str:
    """One themed output (:func:`cudamagic.core.style.page`, kind ``mem``)."""
    return style.page(body, "mem")


def _cells(row, code=()) -> list:
    """Escaped cells; the columns in ``code`` (indices) as ``<code>`` (names, shapes, commands)."""
    return [
        f"<code>{esc(c)}</code>" if i in code and c != "" else esc(c) for i, c in enumerate(row)
    ]


# ---- the report of one cell -----------------------------------------------------------

GPU_HEADERS = [
    "device",
    "allocated before",
    "after",
    "delta",
    "peak in cell",
    "reserved before",
    "after",
    "retries",
    "OOMs",
]
TENSOR_HEADERS = ["name", "shape", "dtype", "device", "bytes", "new"]


def summary_line(r) -> str:
    """What ``%cudamem on`` prints after a cell.

    Cell, wall time, then per device that changed ``cuda:0 +<allocated delta> → <allocated after>
    (peak <in-cell peak>, reserved <after>)`` (``<=`` marks a peak that is an upper bound), or the
    CPU RSS delta without CUDA, and the error type. Parts that do not fit in
    :data:`~cudamagic.core.fmt.TEXT_WIDTH` columns go on indented continuation lines.
    """
    parts = [f"[cudamem] In[{r.cell}] {r.wall_s:.2f} s"]
    for g in r.changed_gpus():
        parts.append(
            f"{g.device} {signed(g.allocated_delta_bytes)} \u2192 "
            f"{format_bytes(g.allocated_after_bytes)} (peak {_peak(g, True)}, "
            f"reserved {format_bytes(g.reserved_after_bytes)}"
            + (f", {g.ooms} OOM" if g.ooms else "")
            + ")"
        )
    if not r.gpus:
        parts.append(
            f"CPU RSS {signed(r.rss_delta_bytes)} \u2192 {format_bytes(r.rss_after_bytes)}"
            " (no CUDA in use)"
        )
    if r.error:
        parts.append(f"error: {r.error.split(':')[0]}")
    lines = [parts[0]]
    for part in parts[1:]:
        if display_width(lines[-1]) + 2 + display_width(part) <= TEXT_WIDTH:
            lines[-1] += "  " + part
        else:
            lines.append(clip("    " + part, TEXT_WIDTH))
    return "\n".join(lines)


def _gpu_rows(r, text=False):
    for g in r.gpus:
        row = [
            g.device,
            format_bytes(g.allocated_before_bytes),
            format_bytes(g.allocated_after_bytes),
            signed(g.allocated_delta_bytes),
            _peak(g, text),
            format_bytes(g.reserved_before_bytes),
            format_bytes(g.reserved_after_bytes),
        ]
        yield row if text else row + [g.alloc_retries, g.ooms]


def _retries_text(r) -> str:
    busy = [
        f"{g.device}: {g.alloc_retries} allocator retries, {g.ooms} OOMs"
        for g in r.gpus
        if g.alloc_retries or g.ooms
    ]
    return "during the cell: " + ("; ".join(busy) if busy else "no allocator retries, no OOMs")


def _tensor_rows(r):
    for t in r.tensors:
        yield [
            t.name,
            "x".join(map(str, t.shape)) or "()",
            t.dtype.replace("torch.", ""),
            t.device,
            format_bytes(t.bytes),
            "new" if t.new else "",
        ]


def _nvml_text(value) -> str:
    if value is None:
        return "not read"
    if is_na(value):
        return value.describe()
    return ", ".join(
        f"{k}: {format_bytes(v) if not is_na(v) else v.describe()}" for k, v in value.items()
    )


def _peak_note(r) -> str:
    if r.peak_reset:
        return (
            "peak: exact; --reset-peak reset torch.cuda peak counters "
            "(max_memory_allocated) for these devices"
        )
    if any(not g.peak_exact for g in r.gpus):
        return (
            "peak: upper bound (the cell stayed below an earlier peak; the user's "
            "max_memory_allocated is left intact; use --reset-peak for an exact figure)"
        )
    return "peak: exact; max_memory_allocated left intact"


def _tensors_title(r) -> str:
    if not r.tensors_total:
        return "no tensors reachable from the namespace"
    if not r.tensors:
        return (
            f"{r.tensors_total} tensor storages reachable from the namespace "
            "(table hidden: --top 0)"
        )
    return (
        f"largest tensors reachable from the namespace ({len(r.tensors)} of "
        f"{r.tensors_total}; new = left by this cell)"
    )


def cell_report_text(r) -> str:
    """A :class:`~.report.CellMemReport` as text, no line wider than ``TEXT_WIDTH`` columns."""
    lines = [
        wrap(
            f"%%cudamem In[{r.cell}]  wall {r.wall_s:.3f} s"
            + (f"  (cell raised {r.error})" if r.error else "")
        )
    ]
    if r.gpus:
        lines.append("GPU (PyTorch caching allocator):")
        lines.append(fit_table(GPU_HEADERS[:7], _gpu_rows(r, text=True), shrink=()))
        lines.append(wrap(_retries_text(r)))
        lines.append(wrap(_peak_note(r)))
    else:
        lines.append(wrap(_status_text(r.gpu_status)))
    if r.nvml_after is not None:
        lines.append(wrap(f"process GPU memory (NVML): {_nvml_text(r.nvml_after)}"))
    lines.append(
        f"CPU RSS: {format_bytes(r.rss_before_bytes)} \u2192 {format_bytes(r.rss_after_bytes)} "
        f"({signed(r.rss_delta_bytes)}){rss_hint(r)}"
    )
    if r.kind == "cell":
        lines.append(wrap(_tensors_title(r) + (":" if r.tensors else "")))
        if r.tensors:
            lines.append(fit_table(TENSOR_HEADERS, _tensor_rows(r), shrink=(0, 1)))
    return "\n".join(lines)


def rss_hint(r) -> str:
    """Why RSS grew less than the cell's new CPU tensors, when it did; else ``""``.

    The allocator reuses pages that freed tensors left, so RSS counts pages taken from the OS.
    """
    new_cpu = sum(t.bytes for t in r.tensors if t.new and t.device == "cpu")
    delta = r.rss_delta_bytes if isinstance(r.rss_delta_bytes, int) else None
    if delta is None or new_cpu < (1 << 20) or new_cpu <= 2 * max(delta, 0):
        return ""
    return (
        f"; the new CPU tensors hold {format_bytes(new_cpu)}: RSS counts the pages the process "
        "took from the OS, and the allocator reused pages it already had"
    )


def cell_report_html(r) -> str:
    """A :class:`~.result.CellMemReport` as one themed HTML page.

    A :class:`~.report.CellMemReport` as one themed HTML page (byte columns right-aligned, tables
    that are wider than the output scroll with a visible cue).
    """
    parts = [
        f"<div class='cm-cellmem'><span class='cm-title'>%%cudamem In[{r.cell}]</span> wall "
        f"{r.wall_s:.3f} s"
    ]
    if r.error:
        parts.append(" " + style.badge(f"cell raised {r.error}", "error"))
    parts.append("</div>")
    if r.gpus:
        parts.append(
            style.scroll(
                html_table(
                    GPU_HEADERS,
                    [_cells(row) for row in _gpu_rows(r)],
                    num=range(1, len(GPU_HEADERS)),
                )
            )
        )
        parts.append(f"<div class='cm-note'>{esc(_peak_note(r))}</div>")
    else:
        parts.append(f"<div>GPU: {na_cell_html(r.gpu_status)}</div>")
    if r.nvml_after is not None:
        if is_na(r.nvml_after):
            parts.append(f"<div>process GPU memory (NVML): {na_cell_html(r.nvml_after)}</div>")
        else:
            parts.append(f"<div>process GPU memory (NVML): {esc(_nvml_text(r.nvml_after))}</div>")
    parts.append(
        f"<div>CPU RSS: {esc(format_bytes(r.rss_before_bytes))} &rarr; "
        f"{esc(format_bytes(r.rss_after_bytes))} ({esc(signed(r.rss_delta_bytes))})"
        f"{esc(rss_hint(r))}</div>"
    )
    if r.kind == "cell":
        parts.append(f"<div>{esc(_tensors_title(r))}</div>")
        if r.tensors:
            parts.append(
                style.scroll(
                    html_table(
                        TENSOR_HEADERS,
                        [_cells(row, code=(0, 1)) for row in _tensor_rows(r)],
                        num=(4,),
                        prose=(0,),
                    )
                )
            )
    return _html("".join(parts))


# ---- the history ------------------------------------------------------------------------

HISTORY_HEADERS = [
    "cell",
    "how",
    "wall s",
    "device",
    "allocated delta",
    "peak in cell",
    "reserved after",
    "RSS delta",
    "error",
    "source",
]
HISTORY_TITLES = {
    "cell": "the cell's execution count, In[N]",
    "how": "%%: measured by a %%cudamem cell; on: by %cudamem on",
    "peak in cell": "<= / (upper bound): the cell stayed below an earlier peak",
}
HISTORY_TEXT_HEADERS = [
    "cell",
    "how",
    "wall s",
    "device",
    "alloc delta",
    "peak",
    "reserved",
    "RSS delta",
    "error",
    "source",
]


def _history_rows(h, text=False):
    for r in h.records:
        gpus = r.changed_gpus() or r.gpus[:1]
        how = "%%" if r.kind == "cell" else "on"
        common = [r.cell, how, f"{r.wall_s:.3f}"]
        tail = [signed(r.rss_delta_bytes), (r.error or "").split(":")[0], r.source]
        if not gpus:
            yield common + ["cpu", "", "", ""] + tail
        for g in gpus:
            yield (
                common
                + [
                    g.device,
                    signed(g.allocated_delta_bytes),
                    _peak(g, True),
                    format_bytes(g.reserved_after_bytes),
                ]
                + tail
            )


def _history_title(h) -> str:
    more = (
        f"; {h.dropped} older dropped, CudaMagics.cudamem_history_cells = {h.limit()}"
        if h.dropped
        else ""
    )
    n = len(h.records)
    return f"cudamem history ({n} cell{'' if n == 1 else 's'}{more})"


def history_text(h) -> str:
    """A :class:`~.history.MemHistory` as a text table."""
    if not h.records:
        return "cudamem history: no cells measured yet (`%cudamem on`, or `%%cudamem` on a cell)"
    headers, rows = HISTORY_TEXT_HEADERS, list(_history_rows(h, text=True))
    if not any(r.gpus for r in h.records):  # CPU only: no empty GPU columns
        keep = [
            i for i, name in enumerate(headers) if name not in ("alloc delta", "peak", "reserved")
        ]
        headers, rows = [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]
    shrink = (headers.index("error"), headers.index("source"))
    return wrap(_history_title(h)) + "\n" + fit_table(headers, rows, shrink=shrink, min_width=12)


def history_html(h) -> str:
    """A :class:`~.history.MemHistory` as an HTML table."""
    if not h.records:
        return _html("<div>cudamem history: no cells measured yet</div>")
    headers, rows = HISTORY_HEADERS, list(_history_rows(h))
    num = {"cell", "wall s", "allocated delta", "peak in cell", "reserved after", "RSS delta"}
    if not any(r.gpus for r in h.records):  # CPU only: no empty GPU columns (as the text form)
        keep = [
            i
            for i, name in enumerate(headers)
            if name not in ("allocated delta", "peak in cell", "reserved after")
        ]
        headers, rows = [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]
    src = headers.index("source")
    cells = [_cells(row) for row in rows]
    for row, raw in zip(cells, rows, strict=True):
        row[src] = f'<code class="cm-pre">{esc(raw[src])}</code>' if raw[src] else ""
    titles = [HISTORY_TITLES.get(name, "") for name in headers]
    table = html_table(
        headers,
        cells,
        num=[i for i, name in enumerate(headers) if name in num],
        prose=(headers.index("error"), src),
        titles=titles,
    )
    return _html(f"<div class='cm-title'>{esc(_history_title(h))}</div>" + style.scroll(table))


# ---- %cudamem free ------------------------------------------------------------------------

HOLDER_HEADERS = ["holder", "name", "tensor bytes", "devices", "to release"]
FREE_GPU_HEADERS = [
    "device",
    "allocated before",
    "after",
    "freed",
    "reserved before",
    "after",
    "returned",
]


def _holder_rows(f):
    for h in f.holders:
        yield [
            h.kind,
            h.name,
            format_bytes(h.bytes),
            ", ".join(h.devices),
            f"%cudamem free {h.release}",
        ]


def _free_gpu_rows(f):
    for g in f.gpus:
        yield [
            g["device"],
            format_bytes(g["allocated_before_bytes"]),
            format_bytes(g["allocated_after_bytes"]),
            format_bytes(g["allocated_freed_bytes"]),
            format_bytes(g["reserved_before_bytes"]),
            format_bytes(g["reserved_after_bytes"]),
            format_bytes(g["reserved_freed_bytes"]),
        ]


def _released_text(f) -> str:
    return ", ".join(f.released) if f.released else "nothing (no saved traceback, nothing named)"


def free_report_text(f) -> str:
    """A :class:`~.free.FreeReport` as text, no line wider than ``TEXT_WIDTH`` columns."""
    lines = [
        wrap(f"%cudamem free: released {_released_text(f)}; gc collected {f.gc_collected} objects")
    ]
    if f.gpus:
        lines.append(fit_table(FREE_GPU_HEADERS, _free_gpu_rows(f), shrink=()))
        lines.append("torch.cuda.empty_cache() called" if f.empty_cache_called else "")
    else:
        lines.append(wrap(_status_text(f.gpu_status)))
    lines.append(
        wrap(
            f"tensor storage freed: {format_bytes(f.tensor_bytes_freed)} "
            f"(CPU {format_bytes(f.cpu_tensor_bytes_freed)}); RSS "
            f"{format_bytes(f.rss_before_bytes)}"
            f" \u2192 {format_bytes(f.rss_after_bytes)}"
        )
    )
    if f.holders:
        lines.append("still holding tensors (released only when you name them):")
        lines.append(fit_table(HOLDER_HEADERS, _holder_rows(f), shrink=(1, 4), min_width=12))
    else:
        lines.append("nothing else in the namespace or output cache holds tensors")
    return "\n".join(x for x in lines if x)


def free_report_html(f) -> str:
    """A :class:`~.free.FreeReport` as HTML."""
    parts = [
        "<div class='cm-free'><span class='cm-title'>%cudamem free</span>: released "
        f"{esc(_released_text(f))}; "
        f"gc collected {f.gc_collected} objects</div>"
    ]
    if f.gpus:
        parts.append(
            style.scroll(
                html_table(
                    FREE_GPU_HEADERS,
                    [_cells(r) for r in _free_gpu_rows(f)],
                    num=range(1, len(FREE_GPU_HEADERS)),
                )
            )
        )
        if f.empty_cache_called:
            parts.append("<div class='cm-note'>torch.cuda.empty_cache() called</div>")
    else:
        parts.append(f"<div>GPU: {na_cell_html(f.gpu_status)}</div>")
    parts.append(
        f"<div>tensor storage freed: {esc(format_bytes(f.tensor_bytes_freed))} (CPU "
        f"{esc(format_bytes(f.cpu_tensor_bytes_freed))}); RSS "
        f"{esc(format_bytes(f.rss_before_bytes))}"
        f" &rarr; {esc(format_bytes(f.rss_after_bytes))}</div>"
    )
    if f.holders:
        parts.append("<div>still holding tensors (released only when you name them):</div>")
        parts.append(
            style.scroll(
                html_table(
                    HOLDER_HEADERS,
                    [_cells(r, code=(1, 4)) for r in _holder_rows(f)],
                    num=(2,),
                    prose=(1, 4),
                )
            )
        )
    return _html("".join(parts))
