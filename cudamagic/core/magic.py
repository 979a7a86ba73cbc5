"""The base of every area's ``Magics`` class: argument parsing that fails only with ``UsageError``,
settings and cleanups.

IPython's own ``IPython/core/magics/`` package is the model: each area (``info``, ``watch``,
``graph``, ``mem``, ``explain``) has one small :class:`AreaMagics` subclass in its ``magic.py``, and
:mod:`cudamagic.extension` registers them all. A magic method parses its line with
:meth:`AreaMagics.parse` and calls one function of its area; user settings live on the one
``CudaMagics`` configurable (``%config CudaMagics.<name>``), reached here as ``self.settings``.
"""

from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics


def split_line(line: str) -> list:
    """Split a magic's argument line into words as a shell does: quotes group words and are removed
    (``--log "run 1.jsonl"`` gives the value ``run 1.jsonl``), while backslashes are kept as typed,
    so Windows paths (``C:\\Users\\me\\run.jsonl``) arrive intact. IPython's own splitter keeps the
    quote characters.

    Raises:
        ValueError: an unclosed quote (``shlex``'s "No closing quotation").
    """
    lexer = shlex.shlex(line, posix=True)
    lexer.whitespace_split = True
    lexer.escape = ""  # a backslash is a character, not an escape (Windows paths)
    lexer.commenters = ""  # `#` is a character too (a file name may contain one)
    return list(lexer)


def _attach_dash_values(parser, words: list) -> list:
    """``--nvcc-flags "-lineinfo -O3"`` once the quotes are gone reads as two options to argparse: a
    word that follows an option taking one value, starts with ``-`` and is not itself an option of
    this magic is that option's value, passed as ``--opt=VALUE`` (what argparse accepts for values that start with a dash).
    """
    out, i = [], 0
    while i < len(words):
        word = words[i]
        action = parser._option_string_actions.get(word)
        if (
            action is not None
            and action.nargs is None
            and action.option_strings
            and i + 1 < len(words)
            and words[i + 1].startswith("-")
            and words[i + 1] not in parser._option_string_actions
            and not _is_number(words[i + 1])
            and action.const is None
            and action.type not in (bool,)
            and not isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))
        ):
            out.append(f"{word}={words[i + 1]}")
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class AreaMagics(Magics):
    """One feature area's magics.

    Args:
        shell: the running ``InteractiveShell``.
        settings: the ``CudaMagics`` configurable holding every ``%config CudaMagics.<name>``
            setting.
        add_cleanup: registers a no-argument callable run on ``%unload_ext cudamagic`` (threads
            stopped, callbacks removed); the extension runs them in reverse order.
    """

    def __init__(self, shell, settings, add_cleanup):
        super().__init__(shell=shell)
        self.settings = settings
        self.add_cleanup = add_cleanup

    def on_load(self) -> None:
        """Called once after registration (install event callbacks, extra magic names). Default: nothing."""

    def parse(self, func, line: str, usage: str | None = None, prefix: str = "%"):
        """Parse ``line`` with ``func``'s ``magic_arguments`` parser; every failure is a one-line
        ``UsageError``.

        A trailing ``# comment`` is dropped first (:func:`strip_comment`), as in the README's
        examples.

        Args:
            func: the magic method (decorated with ``@magic_arguments``).
            line: the argument string after the magic's name.
            usage: one-line usage, e.g. ``"%cudainfo [--json | -q]"``; when given, argparse's
                message is followed by it and a pointer to ``%magic?``.
            prefix: ``"%"`` (line magic) or ``"%%"`` (cell magic), for the messages.

        Raises:
            UsageError: unknown flag, bad value, or a line that cannot be split into words (an
                unbalanced quote
                or a trailing backslash: ``shlex`` raises ``ValueError``, turned into a message that
                    says what to
                type), or ``--flag=--`` (Python 3.11's argparse then gives the flag an empty list,
                not a value).
        """
        name = func.__name__
        line = strip_comment(line)
        try:
            args = func.parser.parse_args(_attach_dash_values(func.parser, split_line(line)))
        except UsageError as exc:
            if usage is None:
                raise
            raise UsageError(
                f"{prefix}{name}: {exc}. Usage: {usage}. Type %{name}? for every option."
            ) from None
        except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
            raise UsageError(
                f"{prefix}{name}: cannot split the arguments into words ({exc}): {line.strip()!r}. Close every "
                'quote you open and quote a value with spaces as a whole, e.g. "my file.txt". '
                f"Type %{name}? for every option."
            ) from None
        flag = _flag_without_value(func.parser, args)
        if flag is not None:
            hint = f" Usage: {usage}." if usage else ""
            raise UsageError(
                f"{prefix}{name}: {flag}=-- gives {flag} no value; type a value after it, e.g. "
                f"{flag}=VALUE.{hint} Type %{name}? for every option."
            )
        return args


def strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` (a ``#`` at the start or after whitespace, outside
    quotes), so that ``%cudainfo -q   # display nothing`` works as pasted; ``run#1.jsonl`` and ``"a # b"`` are kept.
    """
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line


def _flag_without_value(parser, args) -> str | None:
    """The flag that ``--flag=--`` left holding an empty list instead of one value (Python 3.11's
    argparse drops the ``--`` and skips the flag's ``type``), or None.
    """
    for action in parser._actions:
        if not action.option_strings or action.nargs not in (None, "?"):
            continue
        value = getattr(args, action.dest, None)
        values = (
            value
            if isinstance(action, argparse._AppendAction) and isinstance(value, list)
            else [value]
        )
        if any(isinstance(v, list) and not v for v in values):
            return action.option_strings[-1]
    return None
