"""Each magic's manual page (``%magic?``) and the site's option tables, from one source.

The ``magic_arguments`` parser of a magic and the ``CudaMagics`` traits it names are the only
source: :func:`options` gives every option's real form, default and meaning, :func:`manual`
writes the ``%magic?`` page from them, and the documentation site (``docs/_ext``) renders the same
rows, so the two cannot disagree.
"""

from __future__ import annotations

import argparse
import inspect
import re
import textwrap
from dataclasses import dataclass

#: Where a magic's page is in the source tree and in the site ``make docs`` builds.
PAGE = "docs/magics/{page}.md"
BUILT = "docs/_build/html/magics/{page}.html"


@dataclass(frozen=True)
class Option:
    """One option of a magic, as its manual and the site show it.

    Attributes:
        form: how it is typed, with every spelling: ``-i, --interval SECONDS``,
            ``--compare A B``, ``--out [N ...]``; a positional argument by its metavar.
        default: what applies when it is not given: what the help states as
            ``(default: ...)``, with the value of a ``CudaMagics.<name>`` setting it names; else
            ``off`` for a switch, the parser's default, or ``none``.
        meaning: the help text, units included, less its ``(default: ...)``.
    """

    form: str
    default: str
    meaning: str


def _form(action, formatter) -> str:
    if not action.option_strings:
        return formatter._format_args(action, action.metavar or action.dest.upper())
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flags
    metavar = formatter._get_default_metavar_for_optional(action)
    return f"{flags} {formatter._format_args(action, metavar)}"


_DEFAULT = re.compile(r" ?\(default: ([^()]+)\)")


def _default(action, traits: dict) -> str:
    stated = _DEFAULT.search(action.help or "")
    if stated:
        name = stated.group(1).removeprefix("CudaMagics.")
        if name in traits:
            return f"CudaMagics.{name} = {traits[name].default_value!r}"
        return stated.group(1)
    if action.nargs == 0:
        return "off"
    if action.default in (None, [], ""):
        return "none"
    return str(action.default)


def options(parser, traits: dict) -> tuple[Option, ...]:
    """Every option of ``parser`` (argparse's ``-h`` left out), in the parser's order.

    Args:
        parser: a magic's ``magic_arguments`` parser (``func.parser``).
        traits: the settings' traits by name (``CudaMagics.class_traits(config=True)``), for
            the defaults of options that fall back to a setting.
    """
    formatter = parser._get_formatter()
    return tuple(
        Option(
            _form(action, formatter),
            _default(action, traits),
            _DEFAULT.sub("", " ".join(formatter._expand_help(action).split())),
        )
        for action in parser._actions  # argparse keeps no public list of its actions
        if not isinstance(action, argparse._HelpAction)
    )


def usage(parser, prog: str) -> str:
    """The usage line of ``parser`` under the name ``prog`` (``%%cudafit``), wrapped at 80."""
    formatter = argparse.HelpFormatter(prog, width=80)
    formatter.add_usage(None, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def page_text(name: str, prefixes: str, parser, traits: dict, description: str) -> str:
    """The ``%magic?`` page: usage lines, the description, every option, the link.

    Args:
        name: the magic's name without prefix (``cudafit``); also its page's file name.
        prefixes: ``"%"``, ``"%%"`` or ``"%% %"``: one usage line per prefix.
        parser: its ``magic_arguments`` parser.
        traits: the settings' traits by name, for the defaults.
        description: the method's own docstring (the text and its examples).
    """
    lines = ["::", ""]
    for prefix in prefixes.split():
        lines += ["  " + line for line in usage(parser, prefix + name).splitlines()]
    lines += ["", inspect.cleandoc(description), "", "Options:"]
    for opt in options(parser, traits):
        lines.append(f"  {opt.form}")
        body = f"{opt.meaning} Default: {opt.default}."
        lines += textwrap.wrap(
            body, 76, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
        )
    link = (
        f"Manual: {PAGE.format(page=name)} in the cudamagic source; `make docs` builds it into "
        f"{BUILT.format(page=name)}."
    )
    lines += ["", *textwrap.wrap(link, 80, break_on_hyphens=False)]
    return "\n".join(lines) + "\n"


def manual(settings, prefixes: str = "%"):
    """Decorator, above ``@magic_arguments()``: make the method's docstring its manual page.

    Args:
        settings: the area's settings class (its traits give the defaults of the options that
            fall back to a ``CudaMagics`` setting).
        prefixes: ``"%"``, ``"%%"``, or ``"%% %"`` for a magic that is both (its usage lines in
            that order).
    """

    def decorate(func):
        traits = settings.class_traits(config=True)
        func.__doc__ = page_text(
            func.__name__, prefixes, func.parser, traits, func.parser.description or ""
        )
        return func

    return decorate
