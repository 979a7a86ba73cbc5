"""What the error explainer returns: an :class:`Explanation`, the catalogue, or no match.

Plain data with no IPython or torch import. An :class:`Explanation` holds strings and numbers
only (no exception, traceback or frame), so it cannot keep GPU memory alive.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..core.display import Displayed
from . import render


@dataclass(frozen=True)
class Context:
    """What a context function found.

    Attributes:
        notes: plain-text sentences about the user's own objects ("`h` is carried ...").
        facts: machine-readable findings for tests and callers (byte counts in ``*_bytes``,
            shapes as tuples of ints, variable names as str).
        fix: a fix specialised with the user's names; replaces the entry's generic fix
            when not empty (the generic fix is still shown below it).
    """

    notes: tuple = ()
    facts: Mapping = field(default_factory=dict)
    fix: str = ""


@dataclass(frozen=True)
class Entry:
    """One known failure.

    Attributes:
        id: short stable name (``"cuda-oom"``), used by ``%cudaexplain --list``.
        title: one-line name of the case.
        types: exception class names that PyTorch raises for it, matched against the
            exception's MRO by bare name (``"RuntimeError"`` also matches
            ``torch.OutOfMemoryError``, a subclass).
        patterns: regular expressions searched (``re.S``) in ``str(exc)``; taken from
            PyTorch's messages; named groups feed the context function.
        what, why, fix: the explanation in plain words.
        source: where PyTorch raises it (file / function), for maintainers and tests.
        context: optional ``context(match, scene) -> Context``.
        family: the family the entry belongs to (a key of :data:`.cudaerrors.FAMILIES` for CUDA
            errors, ``"autograd-engine"`` for the autograd engine's own errors), or ``""``.
        localise: how to find the operation that really failed, or ``""``.
        applies: optional ``applies(match, scene) -> bool`` (``scene`` may be ``None``): ``False``
            passes a matching error on to the next entry, for a message that means different things
            in different states ("DataLoader worker exited unexpectedly" under spawn and under
            fork).
    """

    id: str
    title: str
    types: tuple
    patterns: tuple
    what: str
    why: str
    fix: str
    source: str
    context: Callable | None = None
    family: str = ""
    localise: str = ""
    applies: Callable | None = None

    def match(self, exc: BaseException):
        """Return the ``re.Match`` of the first pattern found in ``str(exc)``, or None."""
        names = {cls.__name__ for cls in type(exc).__mro__}
        if not names.intersection(self.types):
            return None
        message = exception_text(exc)
        for pattern in self.patterns:
            found = re.search(pattern, message, re.S)
            if found:
                return found
        return None


@dataclass(frozen=True, repr=False)
class Explanation(Displayed):
    """The result of :func:`~cudamagic.explain.match.explain`: an entry plus the live context.

    Holds no exception object.

    Attributes:
        entry: the matched :class:`Entry`.
        exc_type: the exception's class name (``"OutOfMemoryError"``).
        message: the first line of the message, at most 300 characters.
        context: the :class:`Context` found (empty if the context function failed).
        context_error: why gathering context failed, or ``""``.
    """

    entry: Entry
    exc_type: str
    message: str
    context: Context = Context()
    context_error: str = ""

    def to_text(self, width: int | None = None) -> str:
        """The box as plain text, ``width`` columns (default: the terminal's, at most 96)."""
        return render.explanation_text(self, width)

    def to_html(self) -> str:
        """The box as HTML."""
        return render.explanation_html(self)


@dataclass(frozen=True, repr=False)
class CatalogueView(Displayed):
    """``%cudaexplain --list``: every catalogue entry.

    Attributes:
        entries: the :class:`Entry` tuple.
    """

    entries: tuple

    def __len__(self):
        return len(self.entries)

    def to_text(self) -> str:
        """Id, title and exception types, one entry a line."""
        return render.catalogue_text(self.entries)

    def to_html(self) -> str:
        """One table row per entry, the fix behind a fold."""
        return render.catalogue_html(self.entries)


@dataclass(frozen=True, repr=False)
class NoMatch(Displayed):
    """``%cudaexplain`` on an error that no catalogue entry matches.

    Attributes:
        exc_type: the exception's class name.
        message: the first line of its message.
    """

    exc_type: str
    message: str

    def to_text(self) -> str:
        """One line naming the error, and where the known cases are listed."""
        return render.no_match_text(self)

    def to_html(self) -> str:
        """The same as HTML."""
        return render.no_match_html(self)


def exception_chain(exc: BaseException, depth: int = 5):
    """The exception, then its ``__cause__``/``__context__`` chain (at most ``depth`` links)."""
    seen = set()
    while exc is not None and id(exc) not in seen and depth > 0:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
        depth -= 1


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or ``""`` when its ``__str__`` fails."""
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not break the explainer
        return ""
