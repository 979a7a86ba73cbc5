"""``%cudamem history``: the measured cells of the session (:class:`MemHistory`), bounded in size.

Data only: the text and HTML forms are in :mod:`.render`.
"""

from __future__ import annotations

import json

from ..core.display import Displayed
from . import render
from .result import CellMemReport


class MemHistory(Displayed):
    """The measured cells of this session (``%%cudamem`` cells and, while ``on``, every cell).

    ``records`` is a list of :class:`CellMemReport` (tensor rows hold names and sizes only, never
    tensors), oldest first. At most ``max_records`` are kept (an int, a callable returning one, read
    at each append, or ``None``: no limit); older ones are dropped and counted in ``dropped``, so a
    long session with ``%cudamem on`` does not grow without bound. ``to_json()`` / ``to_list()``
    for scripts; renders as a table.
    """

    def __init__(self, records=None, max_records=None, dropped: int = 0):
        self.records = list(records or [])
        self.max_records = max_records
        self.dropped = dropped
        self._trim()

    def limit(self) -> int | None:
        """The current maximum number of records (``None``: no limit)."""
        limit = self.max_records() if callable(self.max_records) else self.max_records
        return None if limit is None else max(0, int(limit))

    def _trim(self) -> None:
        limit = self.limit()
        if limit is not None and len(self.records) > limit:
            excess = len(self.records) - limit
            del self.records[:excess]
            self.dropped += excess

    def append(self, report: CellMemReport) -> None:
        """Add one measured cell (dropping the oldest beyond ``max_records``)."""
        self.records.append(report)
        self._trim()

    def clear(self) -> None:
        """Forget all records."""
        self.records.clear()
        self.dropped = 0

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def snapshot(self) -> MemHistory:
        """A copy that does not grow with later cells."""
        return MemHistory(self.records, self.limit(), self.dropped)

    def to_list(self) -> list:
        """One dict per record (:meth:`CellMemReport.to_dict`)."""
        return [r.to_dict() for r in self.records]

    def to_json(self) -> str:
        """:meth:`to_list` as JSON."""
        return json.dumps(self.to_list(), indent=2)

    to_text = render.history_text
    to_html = render.history_html
