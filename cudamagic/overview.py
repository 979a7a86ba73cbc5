"""``%cudamagic``: the front page of the extension, one line per magic."""

from __future__ import annotations

from dataclasses import dataclass

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class

from .core.display import Displayed
from .core.fmt import esc, html_table, terminal_safe, text_table
from .core.magic import AreaMagics
from .core.style import page, scroll
from .core.version import __version__


@dataclass(frozen=True)
class MagicEntry:
    """One registered magic.

    Attributes:
        name: the magic with its prefix, ``%cudainfo`` or ``%%cudafit``.
        summary: the first line of its docstring.
    """

    name: str
    summary: str

    @property
    def help(self) -> str:
        """The IPython command that shows its manual (``%%cudafit?``)."""
        return f"{self.name}?"


@dataclass(frozen=True, repr=False)
class Overview(Displayed):
    """What ``%cudamagic`` returns: every magic of cudamagic, in registration order.

    Attributes:
        version: cudamagic's version.
        magics: one :class:`MagicEntry` per magic (a line and a cell magic of the same name are
            two entries).
    """

    version: str
    magics: tuple[MagicEntry, ...]

    def to_text(self) -> str:
        """The overview as a plain table."""
        rows = [(m.name, terminal_safe(m.summary), m.help) for m in self.magics]
        head = f"cudamagic {self.version}: {len(self.magics)} magics. Each one's manual: NAME?"
        return head + "\n" + text_table(["magic", "what it does", "manual"], rows)

    def to_html(self) -> str:
        """The overview as an HTML table."""
        rows = [
            [f"<code>{esc(m.name)}</code>", esc(m.summary), f"<code>{esc(m.help)}</code>"]
            for m in self.magics
        ]
        table = html_table(["magic", "what it does", "manual"], rows, prose=[1])
        head = f"<div><b>cudamagic {esc(self.version)}</b>: each magic's manual is NAME?</div>"
        return page(head + scroll(table), "overview")  # scrolls with a cue in a narrow output


def first_line(doc: str | None) -> str:
    """The first line of a magic's own text, stripped; ``""`` without one.

    ``magic_arguments`` puts ``::`` and the usage paragraph before the text: both are skipped.
    """
    paragraphs = [p.strip() for p in (doc or "").split("\n\n") if p.strip()]
    if paragraphs and paragraphs[0] == "::":
        paragraphs = paragraphs[2:]
    return paragraphs[0].splitlines()[0].strip() if paragraphs else ""


def collect(areas) -> Overview:
    """The :class:`Overview` of the given ``Magics`` instances (their ``magics`` tables).

    Args:
        areas: registered ``Magics`` instances, in registration order.
    """
    entries = []
    for magics in areas:
        for kind, prefix in (("line", "%"), ("cell", "%%")):
            for name, func in magics.magics[kind].items():
                entries.append(MagicEntry(prefix + name, first_line(func.__doc__)))
    return Overview(__version__, tuple(entries))


def load_message(overview: Overview) -> str:
    """The one line ``%load_ext cudamagic`` prints."""
    names = ", ".join(m.name for m in overview.magics if m.name != "%cudamagic")
    return f"cudamagic {overview.version} added {names}. Overview: %cudamagic"


@magics_class
class OverviewMagics(AreaMagics):
    """``%cudamagic``; the extension passes it the other areas after loading."""

    areas: tuple = ()

    @line_magic
    def cudamagic(self, line: str = "") -> Overview:
        """Every cudamagic magic in one line each, with the command that shows its manual.

        Usage: ``%cudamagic`` (no options). Each row names a magic, says what it does (the first
        line of its manual) and gives ``%name?`` / ``%%name?``, which shows every option.

        Examples::

            %cudamagic
            %%cudafit?
        """
        if line.strip():
            raise UsageError(f"%cudamagic takes no options (got {line.strip()!r}); run %cudamagic.")
        return collect(self.areas)
