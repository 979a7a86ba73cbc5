"""Data of ``%%cudafit``.

Data of ``%%cudafit``: the target GPU, the estimate, the verdict, the suggestions, the largest
batch. Byte counts are ints in bytes (field names end in ``_bytes``); text and HTML forms are in
:mod:`.render`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..core.display import Displayed
from ..core.na import jsonable, plain_data


class CannotFollow(Exception):
    """The cell does something a run without data cannot follow.

    Args:
        reason: what the cell does, in plain words. op: the ATen operator (or API) involved, or "".
        line: the cell's line (the magic line is line 1), or 0 when unknown.
    """

    def __init__(self, reason: str, op: str = "", line: int = 0):
        super().__init__(reason)
        self.reason, self.op, self.line = reason, op, line


@dataclass(frozen=True)
class Target:
    """The GPU the step is checked against.

    Attributes:
        name: ``"GPU 0 (NVIDIA H200)"``, a table name or ``"GPU of --device-memory"``.
        memory_total_bytes / memory_free_bytes: its memory and what is free for this step (NVML's
            ``memory.free`` plus what this process's allocator already holds).
        capability_major: compute capability major number, or None when unknown.
        source: where the figures come from (NVML, ``--gpu`` table, ``--device-memory``).
    """

    name: str
    memory_total_bytes: int
    memory_free_bytes: int
    capability_major: int | None
    source: str


@dataclass(frozen=True)
class Overhead:
    """Memory beside the tensors: a library workspace or the CUDA context.

    Attributes:
        name: what it is. nbytes: bytes (an int, or NA when it cannot be known in advance).
        in_reserved: it lives in the caching allocator's segments (counted in reserved).
        source: where the size comes from.
    """

    name: str
    nbytes: Any
    in_reserved: bool
    source: str


@dataclass(frozen=True)
class Suggestion:
    """One change and its re-estimated effect.

    Attributes:
        change: the change in plain words. how: the code or setting. peak_reserved_bytes: the
            predicted peak reserved with it. saving_bytes: bytes less than now. fits: it fits then
            (or None without a target).
    """

    change: str
    how: str
    peak_reserved_bytes: int
    saving_bytes: int
    fits: bool | None


@dataclass(frozen=True)
class MaxBatch:
    """The largest batch that fits.

    Attributes:
        names: the inputs whose leading dimension was scaled. batch: the largest fitting size (0:
            not even 1). peak_reserved_bytes: predicted at that size. runs: fake runs made.
        batch_now: the leading dimension the inputs have now.
    """

    names: tuple
    batch: int
    batch_now: int
    peak_reserved_bytes: int
    runs: int


@dataclass(frozen=True)
class Stopped:
    """Why the estimate stopped: ``reason`` in words, the ``op``, the cell ``line`` (0: unknown)."""

    reason: str
    op: str
    line: int


@dataclass(frozen=True, repr=False)
class FitEstimate(Displayed):
    """What ``%%cudafit`` found for one step. Renders as HTML (notebook) and text (terminal).

    Attributes:
        source: the cell's first line. dtype: ``"as written"`` or ``"bf16 autocast"``...
        tensor_peak_bytes: the peak of live tensor storages, unrounded (what a CPU run of the
            same step allocates at most).
        peak_allocated_bytes: predicted ``torch.cuda.max_memory_allocated()`` of the step (blocks
            rounded as the caching allocator does, workspaces included).
        peak_reserved_bytes: predicted ``torch.cuda.max_memory_reserved()`` (segments).
        process_total_bytes: predicted GPU memory of the process as ``nvidia-smi`` shows it
            (reserved plus the CUDA context when this process has none yet).
        peak_phase: ``forward``, ``backward``, ``optimizer step`` or ``before the cell``.
        categories: ``(name, bytes)`` live at the peak, largest first.
        modules: ``(module name, bytes)`` live at the peak made by that module's forward (its
            parameters and buffers included), largest first.
        overheads: :class:`Overhead` lines. target: :class:`Target` or NA (no GPU, none given).
        fits: True/False, or None without a target. spare_bytes: free minus needed (negative:
            missing). suggestions: :class:`Suggestion` s. max_batch: :class:`MaxBatch` or None.
        stopped: :class:`Stopped` when the cell could not be followed to its end (the figures are
            then those of the part before it, a lower bound), else None.
        checkpoint_candidates: the modules whose checkpointing the suggestion tries.
        verified: the real step of ``--verify`` (:class:`~.verify.Verified`), or None.
        notes: facts about how the estimate was made. estimate_s: seconds it took.
    """

    source: str
    dtype: str
    tensor_peak_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    process_total_bytes: int
    peak_phase: str
    categories: tuple
    modules: tuple
    overheads: tuple
    target: Any
    fits: bool | None
    spare_bytes: int | None
    suggestions: tuple = ()
    max_batch: MaxBatch | None = None
    stopped: Stopped | None = None
    checkpoint_candidates: tuple = ()
    verified: Any = None
    notes: tuple = field(default_factory=tuple)
    estimate_s: float = 0.0

    def to_dict(self) -> dict:
        """Plain data (JSON-ready: NA as ``{"na": reason}``)."""
        return jsonable(plain_data(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=1)

    def to_text(self) -> str:
        """The terminal form (:func:`.render.text`)."""
        from .render import text

        return text(self)

    def to_html(self) -> str:
        """The notebook form (:func:`.render.html`)."""
        from .render import html

        return html(self)
