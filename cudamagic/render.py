"""Shared text/HTML helpers: unit formatting, escaping and small tables.

Nothing heavy is imported here. Every string that came from outside (process
names, paths, error messages, variable names) goes through :func:`esc` before
it is placed in HTML.
"""

from __future__ import annotations

import html
from typing import Iterable, Sequence

from .values import NA, is_na


def esc(value) -> str:
    """HTML-escape ``str(value)`` (quotes included)."""
    return html.escape(str(value), quote=True)


def format_bytes(n) -> str:
    """Format a byte count with binary units (``1536`` -> ``'1.5 KiB'``); NA stays ``'N/A'``."""
    if is_na(n):
        return str(n)
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(n)} B"
            return f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"  # pragma: no cover


def format_value(value, unit: str = "") -> str:
    """Format a number with its unit, or NA as ``'N/A (reason)'``."""
    if is_na(value):
        return value.describe()
    if isinstance(value, float):
        text = f"{value:.1f}"
    else:
        text = str(value)
    return f"{text} {unit}".strip() if unit else text


def na_cell_html(value, formatted: str | None = None) -> str:
    """One HTML cell body: NA shows 'N/A' with the reason as tooltip and small text."""
    if is_na(value):
        return (f'<span class="cm-na" title="{esc(value.reason)}">N/A</span> '
                f'<small class="cm-na-reason">({esc(value.reason)})</small>')
    return esc(formatted if formatted is not None else value)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain monospace table (columns padded to the widest cell)."""
    rows = [[str(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip())
    return "\n".join(out)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "cm-table") -> str:
    """An HTML table; ``rows`` cells must already be escaped HTML fragments."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
