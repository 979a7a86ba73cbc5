"""Option checks of ``%cudaexplain``."""

from __future__ import annotations

from IPython.core.error import UsageError

from .result import Entry


def catalogue_entry(entry_id: str) -> Entry:
    """The catalogue entry ``entry_id`` names (``cuda-oom``), or a ``UsageError``."""
    from .match import entry_by_id

    entry = entry_by_id(entry_id)
    if entry is None:
        raise UsageError(
            f"There is no catalogue entry {entry_id!r}. Type `%cudaexplain --list` to see the ids."
        )
    return entry
