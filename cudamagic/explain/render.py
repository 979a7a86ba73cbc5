"""Text and HTML of the explainer's results: the box, the catalogue list, no match.

Everything that came from outside (the exception message, variable names in context notes) is
escaped before it enters HTML.
"""

from __future__ import annotations

import shutil
import sys
import textwrap

from ..core import style
from ..core.fmt import esc, html_table, md_code, text_table

WIDTH = 96
MIN_WIDTH = 40
_FOOTER = (
    "%cudaexplain --list shows every known case; "
    "%config CudaMagics.explain_errors = False turns this off."
)
_ONE_ENTRY = "`%cudaexplain ID` shows one entry in full."


def text_width() -> int:
    """Columns for the text box: the terminal's, between MIN_WIDTH and WIDTH.

    Output that does not go to a terminal gets :data:`WIDTH`.
    """
    try:
        tty = sys.stdout.isatty()
    except Exception:  # a replaced stdout without isatty
        tty = False
    if not tty:
        return WIDTH
    columns = shutil.get_terminal_size((WIDTH, 24)).columns
    return max(MIN_WIDTH, min(WIDTH, columns - 1))


def _wrap(label: str, text: str, width: int) -> list:
    # no break at hyphens: a command such as `--shm-size=8g` stays whole on one line, ready to copy
    return textwrap.wrap(
        f"{label}: {text}", width=width - 2, subsequent_indent="  ", break_on_hyphens=False
    )


def explanation_text(expl, width: int | None = None) -> str:
    """The explanation as a box of ``│``-prefixed lines, at most ``width`` columns."""
    width = width or text_width()
    entry = expl.entry
    body = []
    body += _wrap("What happened", entry.what, width)
    body += _wrap("Why", entry.why, width)
    if expl.context.notes:
        body.append("In your session:")
        for note in expl.context.notes:
            body += [
                "  " + ln
                for ln in textwrap.wrap(
                    "- " + note, width=width - 4, subsequent_indent="  ", break_on_hyphens=False
                )
            ]
    if expl.context.fix:
        body += _wrap("Fix", expl.context.fix, width)
        body += _wrap("In general", entry.fix, width)
    else:
        body += _wrap("Fix", entry.fix, width)
    if entry.localise:
        body += _wrap("Localise", entry.localise, width)
    head_lines = textwrap.wrap(f"cudamagic explains: {entry.title}", width=width - 4)
    out = []
    for i, text in enumerate(head_lines):
        line = ("╭─ " if i == 0 else "│ ") + text + " "
        out.append(
            line + "─" * max(0, width - len(line)) if i == len(head_lines) - 1 else line.rstrip()
        )
    out += ["│ " + ln for ln in body]
    if len(_FOOTER) <= width - 3:
        footer = [_FOOTER]
    else:  # one clause a line, so neither command is split
        footer = [
            ln
            for part in _FOOTER.split("; ")
            for ln in textwrap.wrap(part.rstrip(".") + ".", width=width - 3)
        ]
    out += ["│ " + ln for ln in footer[:-1]]
    out.append("╰─ " + footer[-1])
    return "\n".join(out)


def explanation_html(expl) -> str:
    """The explanation as one themed HTML box.

    What happened, why, the user's own session, the fix; the exception and where PyTorch raises
    it in a collapsible section. The catalogue id is kept only as ``data-id``.
    """
    entry = expl.entry
    rows = [("What happened", entry.what), ("Why", entry.why)]
    notes = ""
    if expl.context.notes:
        items = "".join(f"<li>{md_code(n)}</li>" for n in expl.context.notes)
        notes = f'<div class="cm-explain-context"><b>In your session:</b><ul>{items}</ul></div>'
    fix = f'<p class="cm-explain-fix"><b>Fix:</b> {md_code(expl.context.fix or entry.fix)}</p>'
    if expl.context.fix:
        fix += f"<p><b>In general:</b> {md_code(entry.fix)}</p>"
    if entry.localise:
        fix += f'<p class="cm-explain-localise"><b>Localise:</b> {md_code(entry.localise)}</p>'
    body = "".join(f"<p><b>{esc(k)}:</b> {md_code(v)}</p>" for k, v in rows)
    detail = f"<p>Exception: <code>{esc(expl.exc_type)}: {esc(expl.message)}</code></p>"
    if entry.source:
        detail += f"<p>Where it is raised: <code>{esc(entry.source)}</code></p>"
    return style.page(
        f'<div class="cm-box cm-warn cm-explain" data-id="{esc(entry.id)}">'
        f'<div class="cm-title">{style.icon("warn")} cudamagic explains: {esc(entry.title)}</div>'
        f"{body}{notes}{fix}{style.details('Technical detail', detail)}"
        f'<div class="cm-note">{esc(_FOOTER)}</div></div>',
        "explain",
    )


def catalogue_text(entries) -> str:
    """Id, title and exception types of each entry; without the types when too wide."""
    rows = [(e.id, e.title, "/".join(e.types)) for e in entries]
    headers = ("id", "case", "exception")
    table = text_table(headers, rows)
    if max(len(ln) for ln in table.splitlines()) > text_width():
        # the exception types are in the HTML form and in `%cudaexplain ID`
        table = text_table(headers[:2], [r[:2] for r in rows])
    return f"{table}\n{_ONE_ENTRY}"


def catalogue_html(entries) -> str:
    """One table row per entry, the fix behind a fold."""
    rows = [
        (
            f"<code>{esc(e.id)}</code>",
            style.details(e.title, f"<p><b>Fix:</b> {md_code(e.fix)}</p>"),
            "<br>".join(f"<code>{esc(t)}</code>" for t in e.types),
        )
        for e in entries
    ]
    table = html_table(("id", "case (open for the fix)", "exception"), rows, prose=(1,))
    return style.page(
        f"<div class='cm-title'>{len(entries)} known errors</div>"
        + style.scroll(table)
        + f"<div class='cm-note'>{md_code(_ONE_ENTRY)}</div>",
        "explain",
    )


def no_match_text(no_match) -> str:
    """One line naming the error, then where the known cases are listed."""
    return (
        f"cudamagic: no catalogue entry matches {no_match.exc_type}: {no_match.message}\n"
        "(%cudaexplain --list shows the known cases.)"
    )


def no_match_html(no_match) -> str:
    """:func:`no_match_text` as HTML."""
    return style.page(
        f"{style.badge('no match', 'info')} cudamagic: no catalogue entry matches "
        f"<code>{esc(no_match.exc_type)}: {esc(no_match.message)}</code>"
        " (<code>%cudaexplain --list</code> shows the known cases).",
        "explain",
    )
