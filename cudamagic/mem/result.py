"""What ``%%cudamem`` and ``%cudamem free`` return.

Data only: the text and HTML forms are in :mod:`.render`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..core.display import Displayed
from ..core.fmt import clip
from ..core.na import NA, is_na, jsonable, plain_data
from . import render
from .stats import GpuCellStats, Snapshot, gpu_cell_stats, gpu_status


def first_line(text: str, width: int = 60) -> str:
    """The cell's first line other than ``%%cudamem``, clipped to ``width``."""
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith("%%cudamem"):
            return clip(line, width)
    return ""


def error_text(exc) -> str:
    """``"TypeName: first line of the message"`` of an exception, at most 200 characters."""
    msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}".rstrip(": ")
    return text if len(text) <= 200 else text[:199] + "\u2026"


@dataclass(repr=False)
class CellMemReport(Displayed):
    """What one cell did to memory. Renders as HTML (notebook) and text (terminal).

    Attributes:
        cell: execution count (``In[n]``) of the measured cell.
        source: first line of the cell, for tables.
        wall_s: wall-clock seconds of the cell.
        error: ``"TypeName: message"`` when the cell raised, else ``None``.
        cuda_initialized: CUDA initialised in this process after the cell.
        gpus: list of :class:`GpuCellStats` (empty without CUDA; see ``gpu_status``).
        gpu_status: ``"ok"`` or NA saying why there are no GPU figures.
        peak_reset: ``--reset-peak`` was used (the user's ``max_memory_allocated`` was reset).
        nvml_before: ``{"GPU <nvml index>": bytes}`` or NA (process memory per NVML), before.
        nvml_after: the same, after the cell.
        rss_before_bytes: process RSS in bytes (or NA) before the cell.
        rss_after_bytes: the same after the cell.
        rss_delta_bytes: after minus before (or NA).
        tensors: largest :class:`TensorRow` s reachable after the cell (``new`` = left by this
            cell).
        tensors_total: number of tensor storages reachable after the cell.
        kind: ``"cell"`` for ``%%cudamem``, ``"auto"`` for ``%cudamem on``.
    """

    cell: int
    source: str
    wall_s: float
    error: str | None
    cuda_initialized: bool
    gpus: list
    gpu_status: Any
    peak_reset: bool = False
    nvml_before: Any = None
    nvml_after: Any = None
    rss_before_bytes: Any = None
    rss_after_bytes: Any = None
    rss_delta_bytes: Any = None
    tensors: list = field(default_factory=list)
    tensors_total: int = 0
    kind: str = "cell"

    def to_dict(self) -> dict:
        """Plain data (NA values become ``{"na": reason, "code": code}``)."""
        return jsonable(plain_data(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    def gpu(self, device: str = "cuda:0") -> GpuCellStats:
        """The :class:`GpuCellStats` of ``device`` (``'cuda:0'``); ``KeyError`` if not measured."""
        for g in self.gpus:
            if g.device == device:
                return g
        raise KeyError(device)

    def exceeds(self, threshold_bytes: int) -> bool:
        """Whether the cell changed memory by more than ``threshold_bytes``.

        True when the cell changed GPU memory (allocated, peak over start or reserved) by more than
        ``threshold_bytes``; with no GPU figures, when RSS changed by more than that.
        """
        if self.gpus:
            return any(
                max(
                    abs(g.allocated_delta_bytes),
                    g.peak_over_start_bytes,
                    abs(g.reserved_delta_bytes),
                )
                > threshold_bytes
                for g in self.gpus
            )
        return (
            not is_na(self.rss_delta_bytes)
            and self.rss_delta_bytes is not None
            and abs(self.rss_delta_bytes) > threshold_bytes
        )

    def changed_gpus(self) -> list:
        """Devices whose memory figures moved during the cell.

        Devices whose allocated, peak-over-start or reserved figure moved during the cell (all
        devices holding memory when none moved).
        """
        moved = [
            g
            for g in self.gpus
            if g.allocated_delta_bytes or g.peak_over_start_bytes or g.reserved_delta_bytes
        ]
        return moved or [
            g
            for g in self.gpus
            if g.allocated_before_bytes
            or g.allocated_after_bytes
            or g.reserved_after_bytes
            or g.peak_allocated_bytes
        ]

    def summary_line(self) -> str:
        """What ``%cudamem on`` prints (see :func:`cudamagic.mem.render.summary_line`)."""
        return render.summary_line(self)

    to_text = render.cell_report_text
    to_html = render.cell_report_html


@dataclass(repr=False)
class FreeReport(Displayed):
    """What ``%cudamem free`` released and what still holds memory.

    Attributes:
        released: names released (``sys.last_traceback``, ``Out[7]``, ``_``, ``model`` ...).
        gpus: per CUDA device ``{"device", "allocated_before_bytes", "allocated_after_bytes",
            "allocated_freed_bytes", "reserved_before_bytes", "reserved_after_bytes",
            "reserved_freed_bytes"}``.
        gpu_status: ``"ok"`` or NA (why no GPU figures).
        empty_cache_called: whether ``torch.cuda.empty_cache()`` ran (only when CUDA was
            initialised).
        cpu_tensor_bytes_freed: bytes of CPU tensor storages that were alive in Python before and
            are gone after (found by scanning all live tensor objects); 0 without torch.
        tensor_bytes_freed: the same for every device.
        rss_before_bytes: process RSS before (the allocator may keep freed memory, so RSS can
            drop less than the tensors freed).
        rss_after_bytes: process RSS after.
        gc_collected: objects collected by ``gc.collect()``.
        holders: list of :class:`Holder` that still keep tensors alive, with the flag to release
            each.
    """

    released: list
    gpus: list
    gpu_status: Any
    empty_cache_called: bool
    cpu_tensor_bytes_freed: int
    tensor_bytes_freed: int
    rss_before_bytes: Any
    rss_after_bytes: Any
    gc_collected: int
    holders: list

    @property
    def gpu_allocated_freed_bytes(self) -> int:
        """Allocated bytes freed, summed over devices."""
        return sum(g["allocated_freed_bytes"] for g in self.gpus)

    def to_dict(self) -> dict:
        """Plain data."""
        return jsonable(plain_data(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=2)

    to_text = render.free_report_text
    to_html = render.free_report_html


def build_report(
    before: Snapshot,
    after: Snapshot,
    *,
    cell: int,
    source: str,
    error,
    kind: str,
    nvml_before=None,
    nvml_after=None,
    tensors=(),
    tensors_total=0,
) -> CellMemReport:
    """Assemble a :class:`CellMemReport` from two snapshots (no I/O)."""
    rb, ra = before.rss_bytes, after.rss_bytes
    delta = NA("RSS not readable", "no_binding") if is_na(rb) or is_na(ra) else ra - rb
    return CellMemReport(
        cell=cell,
        source=first_line(source),
        wall_s=after.time_s - before.time_s,
        error=error,
        cuda_initialized=after.cuda_initialized,
        gpus=gpu_cell_stats(before, after),
        gpu_status=gpu_status(after),
        peak_reset=before.peak_reset,
        nvml_before=nvml_before,
        nvml_after=nvml_after,
        rss_before_bytes=rb,
        rss_after_bytes=ra,
        rss_delta_bytes=delta,
        tensors=list(tensors),
        tensors_total=tensors_total,
        kind=kind,
    )
