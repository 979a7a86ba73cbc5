"""Text and HTML of a :class:`~.result.FitEstimate`.

Text (terminal) and HTML (notebook) forms of a :class:`~.result.FitEstimate`. Nothing here
computes a figure; every outside string (module and variable names, the cell line, GPU names) is
escaped before it goes into HTML.
"""

from __future__ import annotations

from ..core import style
from ..core.fmt import esc, format_bytes, html_table, text_table
from ..core.na import is_na


def verdict(e) -> str:
    """One sentence: fits or not, on which GPU, with what spare, and the source of the figures."""
    if e.stopped is not None:
        where = f" at line {e.stopped.line}" if e.stopped.line else ""
        op = f" ({e.stopped.op})" if e.stopped.op else ""
        return (
            f"cannot estimate this cell to its end: it {e.stopped.reason}{op}{where}. The part "
            f"before needs at least {format_bytes(e.process_total_bytes)} "
            f"({format_bytes(e.peak_reserved_bytes)} reserved); no verdict from a partial run. "
            "Move that line out of the cell (or compute it before), then run %%cudafit again."
        )
    if is_na(e.target):
        return (
            f"needs {format_bytes(e.process_total_bytes)} "
            f"(peak {format_bytes(e.peak_reserved_bytes)} reserved); no target GPU "
            f'({e.target.reason}): give one with --device-memory 24GiB or --gpu "RTX 4090".'
        )
    t = e.target
    gpu = (
        f"{t.name}, {format_bytes(t.memory_total_bytes)}, "
        f"{format_bytes(t.memory_free_bytes)} free [{t.source}]"
    )
    if e.fits:
        return (
            f"fits on {gpu}: peak {format_bytes(e.peak_reserved_bytes)} reserved, "
            f"{format_bytes(e.process_total_bytes)} in all, {format_bytes(e.spare_bytes)} to spare"
        )
    return (
        f"does not fit on {gpu}: needs {format_bytes(e.process_total_bytes)}, "
        f"{format_bytes(-e.spare_bytes)} too much"
    )


def _figure_rows(e) -> list:
    rows = [
        ("peak tensors (unrounded)", format_bytes(e.tensor_peak_bytes), "storages live at once"),
        (
            "peak allocated",
            format_bytes(e.peak_allocated_bytes),
            "torch.cuda.max_memory_allocated(): 512-byte blocks + workspaces",
        ),
        (
            "peak reserved",
            format_bytes(e.peak_reserved_bytes),
            "torch.cuda.max_memory_reserved(): caching-allocator segments",
        ),
    ]
    for o in e.overheads:
        rows.append(
            ("  " + o.name, format_bytes(o.nbytes), "in reserved" if o.in_reserved else "beside")
        )
    rows.append(
        ("process total", format_bytes(e.process_total_bytes), "nvidia-smi: reserved + context")
    )
    return rows


def _suggestion_rows(e) -> list:
    return [
        (
            s.change,
            format_bytes(s.peak_reserved_bytes),
            format_bytes(s.saving_bytes),
            {True: "yes", False: "no", None: ""}[s.fits],
            s.how,
        )
        for s in e.suggestions
    ]


def text(e) -> str:
    """The terminal form."""
    out = [f"%%cudafit: {e.source}  [{e.dtype}, {e.estimate_s:.1f} s]", verdict(e), ""]
    out.append(text_table(["figure", "bytes", "what"], _figure_rows(e)))
    out.append(f"\npeak in: {e.peak_phase}")
    if e.categories:
        out.append(
            text_table(["at the peak", "bytes"], [(c, format_bytes(b)) for c, b in e.categories])
        )
    if e.modules:
        out.append("")
        out.append(
            text_table(
                ["module", "bytes at the peak"], [(m, format_bytes(b)) for m, b in e.modules]
            )
        )
    if e.max_batch is not None:
        out.append("\n" + max_batch_line(e.max_batch))
    if e.verified is not None:
        out.append(verified_line(e))
    if e.suggestions:
        out.append("")
        out.append(
            text_table(["change", "peak reserved", "saves", "fits", "how"], _suggestion_rows(e))
        )
    out.append("")
    for o in e.overheads:
        out.append(f"source of {o.name}: {o.source}")
    for note in e.notes:
        out.append(f"note: {note}")
    return "\n".join(out)


def verified_line(e) -> str:
    """The real step of ``--verify`` beside the estimate."""
    v = e.verified
    if e.max_batch is not None and v.batch:
        predicted, at = e.max_batch.peak_reserved_bytes, f" at batch {v.batch}"
    else:
        predicted, at = e.peak_reserved_bytes, ""
    if v.error:
        return f"real step on the GPU{at} (--verify) failed: {v.error}"
    err = 100 * (predicted - v.peak_reserved_bytes) / max(v.peak_reserved_bytes, 1)
    return (
        f"real step on the GPU{at} (--verify): peak reserved {format_bytes(v.peak_reserved_bytes)}"
        f" (estimate {format_bytes(predicted)}, {err:+.1f} %), peak allocated "
        f"{format_bytes(v.peak_allocated_bytes)}; reserved {format_bytes(v.reserved_before_bytes)} "
        f"before, {format_bytes(v.reserved_after_bytes)} after"
    )


def max_batch_line(m) -> str:
    """``largest batch of x, y: 96 (now 32; 3.1 GiB reserved; 6 fake runs)``."""
    if m.batch == 0:
        return f"largest batch of {', '.join(m.names)}: none fits, not even 1 ({m.runs} fake runs)"
    return (
        f"largest batch of {', '.join(m.names)}: {m.batch} (now {m.batch_now}; "
        f"{format_bytes(m.peak_reserved_bytes)} reserved; {m.runs} fake runs)"
    )


def html(e) -> str:
    """The notebook form (inline styles only where it matters; see :mod:`cudamagic.core.style`)."""
    level = "info" if e.fits is None else ("ok" if e.fits else "error")
    parts = [
        f"<div><b>%%cudafit</b> <code>{esc(e.source)}</code> "
        f"<small>[{esc(e.dtype)}, {e.estimate_s:.1f} s]</small></div>",
        f"{style.box_open(level)}{esc(verdict(e))}</div>",
        style.scroll(
            html_table(
                ["figure", "bytes", "what"],
                [[esc(a), esc(b), esc(c)] for a, b, c in _figure_rows(e)],
                num=[1],
                prose=[2],
            )
        ),
        f"<div>peak in: <b>{esc(e.peak_phase)}</b></div>",
    ]
    if e.categories:
        parts.append(
            style.scroll(
                html_table(
                    ["at the peak", "bytes"],
                    [[esc(c), esc(format_bytes(b))] for c, b in e.categories],
                    num=[1],
                )
            )
        )
    if e.modules:
        parts.append(
            style.scroll(
                html_table(
                    ["module", "bytes at the peak"],
                    [[f"<code>{esc(m)}</code>", esc(format_bytes(b))] for m, b in e.modules],
                    num=[1],
                )
            )
        )
    if e.max_batch is not None:
        parts.append(f"<div>{esc(max_batch_line(e.max_batch))}</div>")
    if e.verified is not None:
        parts.append(f"<div>{esc(verified_line(e))}</div>")
    if e.suggestions:
        parts.append(
            style.scroll(
                html_table(
                    ["change", "peak reserved", "saves", "fits", "how"],
                    [
                        [esc(c) for c in row[:4]] + [f"<code>{esc(row[4])}</code>"]
                        for row in _suggestion_rows(e)
                    ],
                    num=[1, 2],
                    prose=[0],
                )
            )
        )
    for o in e.overheads:
        parts.append(f"<div><small>source of {esc(o.name)}: {esc(o.source)}</small></div>")
    for note in e.notes:
        parts.append(f"<div><small>note: {esc(note)}</small></div>")
    return style.page("".join(parts), "fit")
