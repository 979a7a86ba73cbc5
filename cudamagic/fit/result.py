"""Data of ``%%cudafit``: the estimate, the verdict, the suggestions. Text and HTML in :mod:`.render`."""

from __future__ import annotations


class CannotFollow(Exception):
    """The cell does something a run without data cannot follow.

    Args:
        reason: what the cell does, in plain words. op: the ATen operator (or API) involved, or "".
        line: the cell's line (the magic line is line 1), or 0 when unknown.
    """

    def __init__(self, reason: str, op: str = "", line: int = 0):
        super().__init__(reason)
        self.reason, self.op, self.line = reason, op, line
