"""Shared text/HTML helpers: unit formatting, escaping and small tables.

Nothing heavy is imported here. Every string that came from outside (process
names, paths, error messages, variable names) goes through :func:`esc` before
it is placed in HTML.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable, Sequence

from .na import is_na

#: Class for the outer element of every HTML output: JupyterLab's math renderer otherwise typesets
#: text between two ``$`` signs (``$CUDA_HOME/bin``, process names, paths) as a formula.
NO_MATH = "mathjax_ignore"


_UNSAFE = "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ufeff]"
_UNSAFE_KEEP_LINES = (
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ufeff]"
)


@functools.cache
def _unsafe(keep_newlines: bool) -> re.Pattern:
    """The compiled pattern of :func:`terminal_safe`, compiled on first use.

    The compiled pattern of :func:`terminal_safe`, compiled on first use and kept (an output with no
    outside text to clean, such as ``%cudainfo``'s, never pays for it).
    """
    return re.compile(_UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE)


def terminal_safe(value, limit: int | None = None, keep_newlines: bool = False) -> str:
    r"""``str(value)`` safe to print in a terminal.

    ``str(value)`` safe to print in a terminal: control, zero-width and bidi characters shown as
    ``\\xNN``.

    Process names, command lines and tool messages come from outside (other users on shared GPU
    servers); an ``ESC [2J`` or a newline in them would otherwise clear the screen or forge table
    rows.

    Args:
        value: anything; ``str()`` is taken.
        limit: keep at most this many characters (None: all).
        keep_newlines: keep tab and newline (multi-line messages), escape the rest.
    """
    text = str(value) if limit is None else str(value)[:limit]
    return _unsafe(bool(keep_newlines)).sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def esc(value) -> str:
    """HTML-escape ``str(value)`` (quotes included)."""
    return html.escape(str(value), quote=True)


def md_code(text) -> str:
    """Escape ``text``, then turn its `code` spans into ``<code>`` elements (prose stays prose)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def format_bytes(n) -> str:
    """Format a byte count with binary units (``1536`` -> ``'1.5 KiB'``); NA stays ``'N/A'``."""
    if is_na(n):
        return str(n)
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{sign}{int(n)} B" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"


def plural(n: int, word: str, many: str = "") -> str:
    """``1 host``, ``3 hosts``: the count ``n`` and ``word``.

    ``1 host``, ``3 hosts``: the count ``n`` and ``word``, or ``many`` (default ``word + 's'``) when
    ``n`` is not 1.
    """
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def format_value(value, unit: str = "") -> str:
    """Format a number with its unit, or NA as ``'N/A (reason)'``."""
    if is_na(value):
        return value.describe()
    text = f"{value:.1f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip() if unit else text


def na_cell_html(value, formatted: str | None = None) -> str:
    """One HTML cell body: NA shows 'N/A' with the reason as tooltip and small text."""
    if is_na(value):
        return (
            f'<span class="cm-na" title="{esc(value.reason)}">N/A</span> '
            f'<small class="cm-na-reason">({esc(value.reason)})</small>'
        )
    return esc(formatted if formatted is not None else value)


def display_width(text) -> int:
    """Columns ``str(text)`` takes in a terminal.

    Columns ``str(text)`` takes in a terminal: East Asian wide characters count 2, combining marks 0
    (``wcwidth``'s Unicode tables; a character it cannot measure, such as a control character,
    counts 1).
    """
    text = str(text)
    if text.isascii() and text.isprintable():
        return len(
            text
        )  # the common case, without loading wcwidth's tables (~9 ms of CPU in a fresh process)
    from wcwidth import wcswidth, wcwidth

    width = wcswidth(text)
    return width if width >= 0 else sum(1 if wcwidth(ch) < 0 else wcwidth(ch) for ch in text)


def pad(text, width: int) -> str:
    """``str(text)`` padded with spaces on the right to ``width`` terminal columns."""
    text = str(text)
    return text + " " * max(0, width - display_width(text))


def clip(text, width: int) -> str:
    """``str(text)`` cut to at most ``width`` terminal columns, ending in ``…`` when cut."""
    text = str(text)
    if display_width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = display_width(ch)
        if used + w > max(1, width - 1):
            break
        out.append(ch)
        used += w
    return "".join(out) + "\u2026"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain monospace table, aligned in terminal columns.

    A plain monospace table: columns padded to the widest cell in terminal columns, so double-width
    (CJK) process and GPU names stay aligned; a dashed rule under the headers.
    """
    rows = [[str(c) for c in r] for r in rows]
    widths = [display_width(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], display_width(c))
    line = "  ".join(pad(h, widths[i]) for i, h in enumerate(headers)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(pad(c, widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    return "\n".join(out)


def html_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    cls: str = "cm-table",
    num: Iterable[int] = (),
    prose: Iterable[int] = (),
    titles: Sequence[str] | None = None,
    col_cls: dict | None = None,
) -> str:
    """An HTML table of the shared style (class ``cm-table``, see :mod:`cudamagic.core.style`).

    Args:
        headers: column titles (plain text, escaped here). When every title is empty the table has
            no header row.
        rows: cells as already escaped HTML fragments.
        cls: extra class(es) of the ``<table>``; ``cm-table`` is always added.
        num: 0-based indices of numeric columns: class ``cm-num`` (right-aligned, tabular digits, no
            wrap).
        prose: 0-based indices of prose columns: class ``cm-prose`` (left-aligned, wrapping).
        titles: a tooltip per header (plain text, escaped here; ``""`` or None for none).
        col_cls: more classes per column index (``{4: "cm-mono"}``).
    """
    num, prose = set(num), set(prose)
    col_cls = dict(col_cls or {})

    def klass(i):
        names = (
            (["cm-num"] if i in num else [])
            + (["cm-prose"] if i in prose else [])
            + ([col_cls[i]] if i in col_cls else [])
        )
        return f' class="{" ".join(names)}"' if names else ""

    def title(i):
        t = titles[i] if titles is not None and i < len(titles) else None
        return f' title="{esc(t)}"' if t else ""

    classes = cls.split()
    if "cm-table" not in classes:
        classes.insert(0, "cm-table")
    head = ""
    if any(str(h) for h in headers):
        head = (
            "<thead><tr>"
            + "".join(f"<th{klass(i)}{title(i)}>{esc(h)}</th>" for i, h in enumerate(headers))
            + "</tr></thead>"
        )
    body = "".join(
        "<tr>" + "".join(f"<td{klass(i)}>{c}</td>" for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    return f'<table class="{" ".join(classes)}">{head}<tbody>{body}</tbody></table>'


TEXT_WIDTH = 100  # columns of every text (terminal) report

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
}


def parse_bytes(text: str) -> int:
    """``'64MiB'`` -> 67108864, ``'1.5GB'`` -> 1500000000, ``'4096'`` -> 4096.

    Raises:
        ValueError: not a size (the magic turns it into a UsageError).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (write e.g. 64MiB, 1GiB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
