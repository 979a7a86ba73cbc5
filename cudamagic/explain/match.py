"""Matching an exception against the catalogue, and the explanation built from it.

The explainer keeps no reference to the exception, its traceback or its frames after
:func:`explain` returns: the result holds strings and numbers only, so it cannot keep GPU
memory alive.
"""

from __future__ import annotations

from . import catalogue
from .result import Context, Explanation, exception_chain, exception_text
from .scene import Scene


def _applies(entry, found, scene) -> bool:
    if entry.applies is None:
        return True
    try:
        return bool(entry.applies(found, scene))
    except Exception:  # a failing check must not hide the entry
        return True


def find_entry(exc: BaseException, scene: Scene | None = None):
    """``(entry, match)`` of the first catalogue entry matching ``exc``, or ``(None, None)``.

    The exception itself is tried first, then its ``__cause__``/``__context__`` chain, so
    an error re-raised by user code (``raise ValueError(...) from e``) is still explained.
    An entry whose ``applies(match, scene)`` says False is skipped.
    """
    for link in exception_chain(exc):
        for entry in catalogue.CATALOGUE:
            found = entry.match(link)
            if found and _applies(entry, found, scene):
                return entry, found
    return None, None


def explain(exc: BaseException, scene: Scene | None = None):
    """Explain ``exc`` with the live ``scene``.

    Args:
        exc: any exception instance.
        scene: the state to draw context from; ``None`` means no context.

    Returns:
        An :class:`Explanation`, or ``None`` when no entry matches or ``exc`` is not an
        ``Exception`` (a KeyboardInterrupt raised while handling a CUDA error is an interrupt,
        not that error): no box is shown.
        A failing context function never raises: its error is kept in
        ``Explanation.context_error`` and the generic text is shown.
    """
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit, GeneratorExit: never a box
        return None
    entry, found = find_entry(exc, scene)
    if entry is None:
        return None
    message = exception_text(exc).strip().splitlines()
    first = message[0][:300] if message else ""
    context, error = Context(), ""
    if entry.context is not None and scene is not None:
        try:
            context = entry.context(found, scene) or Context()
        except Exception as ctx_exc:  # context is a bonus; never break the box
            error = f"{type(ctx_exc).__name__}: {ctx_exc}"
    return Explanation(
        entry=entry,
        exc_type=type(exc).__name__,
        message=first,
        context=context,
        context_error=error,
    )


def entry_by_id(entry_id: str):
    """The catalogue entry with this id, or None."""
    return next((entry for entry in catalogue.CATALOGUE if entry.id == entry_id), None)
