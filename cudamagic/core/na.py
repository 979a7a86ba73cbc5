"""The "not available" value: a reading that could not be taken, with its reason.

A field that could not be read is never ``None`` or ``0``: it is an :class:`NA`
carrying why (not supported on this GPU, MIG mode, permission, GPU lost, no
driver). ``NA`` is falsy, compares equal to other NAs with the same reason,
prints as ``N/A`` and serialises to JSON as ``{"na": reason}``.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import TypeVar

T = TypeVar("T")


class NA:
    """A value that could not be read.

    Args:
        reason: plain-words cause, e.g. ``"not supported on this GPU"``.
        code: short machine code (``"not_supported"``, ``"gpu_lost"``, ``"no_permission"``,
            ``"mig"``, ``"no_driver"``, ``"error"``, ``"not_initialized"``...).
        fix: the step or command that restores the reading, when one is known (``""`` if not).
            Not part of equality: two NAs with the same reason and code are equal.
    """

    __slots__ = ("reason", "code", "fix")

    def __init__(self, reason: str, code: str = "error", fix: str = ""):
        object.__setattr__(self, "reason", str(reason))
        object.__setattr__(self, "code", str(code))
        object.__setattr__(self, "fix", str(fix))

    def __setattr__(self, name, value):  # immutable
        raise AttributeError("NA is immutable")

    def __reduce__(self):  # pickle / copy / deepcopy (dataclasses.asdict deep-copies)
        return (NA, (self.reason, self.code, self.fix))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __bool__(self):
        return False

    def __eq__(self, other):
        return isinstance(other, NA) and other.reason == self.reason and other.code == self.code

    def __hash__(self):
        return hash(("NA", self.reason, self.code))

    def __str__(self):
        return "N/A"

    def __repr__(self):
        return f"NA({self.reason!r}, code={self.code!r})"

    def describe(self) -> str:
        """``'N/A (reason)'``."""
        return f"N/A ({self.reason})"

    def to_json(self) -> dict:
        """JSON form: ``{"na": reason, "code": code}``."""
        return {"na": self.reason, "code": self.code}


def is_na(value) -> bool:
    """True if ``value`` is an :class:`NA`."""
    return isinstance(value, NA)


def jsonable(value):
    """Recursively convert NA values (and tuples) into JSON-friendly structures."""
    if isinstance(value, NA):
        return value.to_json()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


#: A reading of type ``T``, or the :class:`NA` that says why it could not be read:
#: ``NaOr[int]`` is ``int | NA``.
NaOr = T | NA


def plain_data(obj):
    """Dataclasses, lists, tuples and dicts as plain dicts and lists.

    Leaves are not copied (``dataclasses.asdict`` deep-copies, and cannot copy the immutable NA).
    """
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain_data(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [plain_data(v) for v in obj]
    if isinstance(obj, dict):
        return {k: plain_data(v) for k, v in obj.items()}
    return obj
