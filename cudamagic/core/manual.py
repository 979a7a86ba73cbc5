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


def usage(parser, prog: str, keep=None) -> str:
    """The usage line of ``parser`` under the name ``prog`` (``%%cudafit``), wrapped at 80.

    Args:
        parser: a magic's ``magic_arguments`` parser.
        prog: the name the line starts with, prefix included.
        keep: a test of an action's names (its option strings, or its dest for a positional):
            only the actions it passes are shown; None shows all.
    """
    actions = [a for a in parser._actions if keep is None or keep(a.option_strings or [a.dest])]
    formatter = argparse.HelpFormatter(prog, width=80)
    formatter.add_usage(None, actions, [], prefix="")
    return formatter.format_help().strip()


def page_text(
    name: str, prefixes: str, parser, traits: dict, description: str, line_only=()
) -> str:
    """The ``%magic?`` page: usage lines, the description, every option, the link.

    Args:
        name: the magic's name without prefix (``cudafit``); also its page's file name.
        prefixes: ``"%"``, ``"%%"`` or ``"%% %"``: one usage line per prefix.
        parser: its ``magic_arguments`` parser.
        traits: the settings' traits by name, for the defaults.
        description: the method's own docstring (the text and its examples).
        line_only: for a magic that is both, the options (or positional dests) only its line
            form takes: the ``%`` usage line shows just these, the ``%%`` line all the others.
    """
    lines = ["::", ""]
    for prefix in prefixes.split():

        def keep(names, line_form=prefix == "%"):
            return any(n in line_only for n in names) == line_form

        shown = usage(parser, prefix + name, keep if line_only else None)
        lines += ["  " + line for line in shown.splitlines()]
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


def manual(settings, prefixes: str = "%", line_only=()):
    """Decorator, above ``@magic_arguments()``: make the method's docstring its manual page.

    Args:
        settings: the area's settings class (its traits give the defaults of the options that
            fall back to a ``CudaMagics`` setting).
        prefixes: ``"%"``, ``"%%"``, or ``"%% %"`` for a magic that is both (its usage lines in
            that order).
        line_only: for a magic that is both, the options only its line form takes (a
            positional by its dest), so each usage line shows only what that form accepts.
    """

    def decorate(func):
        traits = settings.class_traits(config=True)
        func.__doc__ = page_text(
            func.__name__, prefixes, func.parser, traits, func.parser.description or "", line_only
        )
        return func

    return decorate
