"""The base of every area's ``Magics`` class: parsing, settings and cleanups.

IPython's own ``IPython/core/magics/`` package is the model: each area has one small
:class:`AreaMagics` subclass in its ``magic.py``, and :mod:`cudamagic.extension` registers them
all. A magic method parses its line with :meth:`AreaMagics.parse` and calls one function of its
area; user settings live on the one ``CudaMagics`` configurable (``%config CudaMagics.<name>``),
reached here as ``self.settings``.
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.utils.process import arg_split


def split_line(line: str) -> list:
    """IPython's split of a magic line, with quoted values unquoted.

    ``magic_arguments.parse_argstring`` splits as this does (``arg_split``: backslashes stay, so
    Windows paths arrive intact) but keeps the quotes: ``--log "run 1.jsonl"`` would name the file
    ``"run 1.jsonl"`` with its quote characters. A quoted word, or a quoted value after ``=``
    (``--log="run.jsonl"``), loses one pair of quotes. A quoted word is a value: when it starts with
    a dash (``--nvcc-flags "-lcuda"``) it is joined to the option before it
    (``--nvcc-flags=-lcuda``), so argparse does not read it as an option.

    Args:
        line: the argument string after the magic's name.

    Raises:
        ValueError: an unclosed quote.
    """
    words: list = []
    for word in arg_split(line):
        flag, eq, value = word.partition("=")
        if not (eq and flag.startswith("-")):
            flag, eq, value = "", "", word
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
            after_option = words and words[-1].startswith("-") and "=" not in words[-1]
            if not eq and value.startswith("-") and after_option:
                flag, eq = words.pop(), "="
        words.append(flag + eq + value)
    return words


class AreaMagics(Magics):
    """One feature area's magics.

    Args:
        shell: the running ``InteractiveShell``.
        settings: the ``CudaMagics`` configurable holding every ``%config CudaMagics.<name>``.
        add_cleanup: registers a no-argument callable run on ``%unload_ext cudamagic``.
    """

    def __init__(self, shell, settings, add_cleanup):
        super().__init__(shell=shell)
        self.settings = settings
        self.add_cleanup = add_cleanup

    def on_load(self) -> None:
        """Run once after registration; the default does nothing."""

    def parse(self, func, line: str, usage: str | None = None, prefix: str = "%"):
        """Parse ``line`` with ``func``'s ``magic_arguments`` parser.

        Args:
            func: the magic method (decorated with ``@magic_arguments``).
            line: the argument string after the magic's name.
            usage: one-line usage, e.g. ``"%cudainfo [--json | -q]"``, added to argparse's message.
            prefix: ``"%"`` (line magic) or ``"%%"`` (cell magic), for the messages.

        Returns:
            The ``argparse.Namespace``.

        Raises:
            UsageError: an unknown flag, a bad value, an unclosed quote, or ``--flag=--`` (Python
                3.11's argparse gives the flag an empty list, not a value).
        """
        name = func.__name__
        help_hint = f"Type {prefix}{name}? for every option."
        try:
            words = split_line(line)
        except ValueError as exc:  # "No closing quotation"
            raise UsageError(
                f"{prefix}{name}: cannot split the arguments ({exc}); close every quote, "
                f'e.g. "my file.txt". {help_hint}'
            ) from None
        try:
            args = func.parser.parse_args(words)
        except UsageError as exc:
            if usage is None:
                raise
            raise UsageError(f"{prefix}{name}: {exc}. Usage: {usage}. {help_hint}") from None
        empty = next((w[:-3] for w in words if w.startswith("-") and w.endswith("=--")), None)
        if empty:
            raise UsageError(
                f"{prefix}{name}: {empty}=-- gives {empty} no value; type a value after it, e.g. "
                f"{empty}=VALUE. {help_hint}"
            )
        return args
