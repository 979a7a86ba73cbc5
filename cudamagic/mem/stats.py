"""Memory readings: allocator counters, RSS, NVML process memory.

Memory readings: PyTorch's allocator counters (the one seam for them), RSS, NVML process memory, and
what one cell did to them (the in-cell peak).

Nothing here imports IPython or torch: torch is read from ``sys.modules`` only when already
    imported.

Where the numbers come from
---------------------------
* **GPU**: PyTorch's caching allocator, through :class:`TorchCudaStats`, which reads
  ``torch.cuda.memory_stats_as_nested_dict(device)`` (the same counters as
  ``torch.cuda.memory_stats()``: ``allocated_bytes.all.current``/``.peak``/``.allocated``,
  ``reserved_bytes.all.current``, ``num_alloc_retries``, ``num_ooms``). It is read
  **only** when ``torch`` is already in ``sys.modules`` and ``torch.cuda.is_initialized()``
  is true, so measuring never imports torch and never creates a CUDA context. Devices are
  CUDA ordinals (``cuda:0`` ...), the numbering of ``torch.cuda``.
* **Process GPU memory as NVML sees it** (CUDA context + non-PyTorch allocations):
  :func:`cudamagic.core.nvml.process_gpu_memory`, keyed by 0-based NVML index (``nvidia-smi`` order,
  which may differ from CUDA ordinals). Read only when CUDA is initialised in this process.
* **CPU**: the process resident set size in bytes (``/proc/self/statm`` on Linux, the figure
  ``psutil.Process().memory_info().rss`` reports; psutil elsewhere).

How the in-cell peak is measured (and what it does to ``max_memory_allocated``)
--------------------------------------------------------------------------------
By default nothing is reset: the user's own ``torch.cuda.max_memory_allocated()`` /
``memory_stats()["allocated_bytes.all.peak"]`` readings stay intact. The in-cell peak is
derived from the allocator's counters read before and after the cell:

* if the global peak rose during the cell, the new global peak *is* the in-cell peak (exact);
* if CUDA was first initialised by the cell, the counters started at zero (exact);
* if the cell allocated nothing (cumulative ``allocated_bytes.all.allocated`` unchanged),
  the peak is the allocation at the start (exact);
* otherwise the cell stayed below an earlier peak, and the counters only bound it:
  ``max(before, after) <= peak <= min(earlier peak, before + bytes allocated in the cell)``.
  The report gives the upper bound, marked as a bound (``peak_exact=False``).

``%%cudamem --reset-peak`` gets an exact figure in every case by calling
``torch.cuda.reset_peak_memory_stats(device)`` before the cell; that **does** reset the
user's ``max_memory_allocated`` (and every other ``.peak`` counter) for those devices,
and the report says so. There is no way to read an exact in-cell peak below an earlier
peak without that reset: PyTorch keeps one peak counter per device.

No polling thread is used and ``torch.cuda.empty_cache()`` is called only by
``%cudamem free`` (an explicit request).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from ..core import nvml, platform
from ..core.na import NA

# ---- the torch.cuda seam ----------------------------------------------------------


@dataclass(frozen=True)
class GpuStats:
    """One reading of PyTorch's caching allocator for one device.

    All sizes are bytes. ``allocated_total_bytes`` is the cumulative number of bytes ever
    allocated (``allocated_bytes.all.allocated``); it only grows and lets us tell whether a
    cell allocated at all. ``num_alloc_retries`` (cudaMalloc retried after freeing the cache)
    and ``num_ooms`` (out-of-memory errors raised) are cumulative counts.
    """

    device: int
    allocated_bytes: int
    peak_allocated_bytes: int
    allocated_total_bytes: int
    reserved_bytes: int
    peak_reserved_bytes: int
    num_alloc_retries: int
    num_ooms: int


class TorchCudaStats:
    """The real source of allocator statistics: ``torch.cuda``, read without side effects.

    Tests replace it with a fake through ``monkeypatch.setattr(stats, "SOURCE", fake)`` (the single
    seam for GPU memory statistics), or keep it and fake what is under ``torch.cuda``. Every method
    is safe on a machine without torch, CUDA or a GPU.
    """

    def initialized(self) -> bool:
        """True when torch is already imported and ``torch.cuda.is_initialized()``.

        Never imports torch and never initialises CUDA.
        """
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        try:
            return bool(torch.cuda.is_initialized())
        except Exception:
            return False

    def device_count(self) -> int:
        """Number of visible CUDA devices; call only when initialised."""
        return int(sys.modules["torch"].cuda.device_count())

    def read(self, device: int) -> GpuStats:
        """Allocator counters of CUDA ordinal ``device``.

        Allocator counters of CUDA ordinal ``device`` (``torch.cuda.memory_stats_as_nested_dict``).

        Call only when :meth:`initialized` is true. Reading creates no context on any device.
        """
        nested = sys.modules["torch"].cuda.memory_stats_as_nested_dict(device)
        alloc = nested.get("allocated_bytes", {}).get("all", {})
        resv = nested.get("reserved_bytes", {}).get("all", {})
        return GpuStats(
            device=device,
            allocated_bytes=int(alloc.get("current", 0)),
            peak_allocated_bytes=int(alloc.get("peak", 0)),
            allocated_total_bytes=int(alloc.get("allocated", 0)),
            reserved_bytes=int(resv.get("current", 0)),
            peak_reserved_bytes=int(resv.get("peak", 0)),
            num_alloc_retries=int(nested.get("num_alloc_retries", 0)),
            num_ooms=int(nested.get("num_ooms", 0)),
        )

    def reset_peak(self, device: int) -> None:
        """``torch.cuda.reset_peak_memory_stats(device)``: resets the user's peak counters too."""
        sys.modules["torch"].cuda.reset_peak_memory_stats(device)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()`` on all devices."""
        sys.modules["torch"].cuda.empty_cache()


#: The allocator-statistics source every ``mem`` module reads at call time.
SOURCE: Any = TorchCudaStats()


# ---- snapshots --------------------------------------------------------------------


def rss_bytes():
    """Resident set size of this process in bytes, or NA.

    Read by :func:`cudamagic.core.platform.rss_bytes` (Linux: ``/proc/self/statm``, resident pages x
    page size, what ``psutil.Process().memory_info().rss`` reports, through a kept-open descriptor;
    elsewhere ``psutil``).
    """
    rss = platform.rss_bytes()
    if rss is None:
        return NA(
            "process RSS could not be read (no /proc/self/statm, and psutil is missing or failed; "
            "`pip install psutil`)",
            "error",
        )
    return rss


@dataclass
class Snapshot:
    """Memory state at one instant.

    Attributes:
        time_s: ``time.perf_counter()`` seconds.
        gpus: ``{cuda ordinal: GpuStats}``; empty when CUDA is not initialised or the counters
            cannot be read.
        cuda_initialized: whether CUDA was initialised in this process at that instant.
        rss_bytes: process RSS in bytes, or NA.
        peak_reset: True when ``--reset-peak`` reset the peak counters right after reading.
        gpus_na: ``None``, or NA saying why CUDA is initialised but its allocator counters could not
            be read.
    """

    time_s: float
    gpus: dict
    cuda_initialized: bool
    rss_bytes: Any
    peak_reset: bool = False
    gpus_na: Any = None


def take_snapshot(source=None) -> Snapshot:
    """Read allocator counters (only if CUDA is initialised) and RSS. Never creates a context.

    An allocator that keeps no counters is not an error: one plugged in with
    ``torch.cuda.memory.change_current_allocator`` (RAPIDS RMM's ``rmm_torch_allocator``, a
    ``CUDAPluggableAllocator``) makes ``torch.cuda.memory_stats`` raise ``RuntimeError: ... does not
    yet support getDeviceStats``. The snapshot then has no GPU figures and ``gpus_na`` says why; the
    user's cell still runs and the CPU figures stay.
    """
    source = source or SOURCE
    gpus, gpus_na = {}, None
    init = source.initialized()
    if init:
        try:
            for d in range(source.device_count()):
                gpus[d] = source.read(d)
        except Exception as exc:  # the allocator's own refusal, never ours to raise into the cell
            gpus, gpus_na = (
                {},
                NA(
                    f"PyTorch's CUDA allocator gives no statistics ({type(exc).__name__}: {exc}); "
                    "an "
                    "allocator set with torch.cuda.memory.change_current_allocator (such as RMM's) "
                    "may "
                    "keep none; CPU figures below",
                    "no_stats",
                ),
            )
    return Snapshot(time.perf_counter(), gpus, init, rss_bytes(), gpus_na=gpus_na)


def gpu_status(after: Snapshot):
    """``'ok'``, or NA saying why a snapshot has no GPU figures."""
    if not after.cuda_initialized:
        return NO_CUDA
    return "ok" if after.gpus_na is None else after.gpus_na


# ---- one cell's measurement -------------------------------------------------------


@dataclass
class GpuCellStats:
    """What one cell did on one CUDA device. Sizes in bytes, counts are per-cell differences.

    ``allocated_before_bytes`` is 0 when CUDA was initialised by the cell. ``peak_allocated_bytes``
    is the highest allocation during the cell (exact when ``peak_exact``, else an upper bound,
    see the module docstring); ``peak_over_start_bytes = peak - before``.
    """

    device: str
    allocated_before_bytes: int
    allocated_after_bytes: int
    allocated_delta_bytes: int
    peak_allocated_bytes: int
    peak_over_start_bytes: int
    peak_exact: bool
    reserved_before_bytes: int
    reserved_after_bytes: int
    reserved_delta_bytes: int
    alloc_retries: int
    ooms: int


def in_cell_peak(before: GpuStats | None, after: GpuStats, peak_reset: bool = False):
    """The peak allocation during a cell from counters read before and after it.

    Args:
        before: reading before the cell, or ``None`` if CUDA was initialised by the cell.
        after: reading after the cell.
        peak_reset: the peak counters were reset right after ``before`` was read.

    Returns:
        ``(peak_bytes, exact)``: the exact peak, or (``exact=False``) an upper bound
        ``min(before.peak, before.current + bytes allocated in the cell)``.
    """
    if before is None:
        return after.peak_allocated_bytes, True
    if peak_reset or after.peak_allocated_bytes > before.peak_allocated_bytes:
        return max(after.peak_allocated_bytes, before.allocated_bytes), True
    allocated_in_cell = after.allocated_total_bytes - before.allocated_total_bytes
    if allocated_in_cell <= 0:
        return before.allocated_bytes, True
    upper = min(before.peak_allocated_bytes, before.allocated_bytes + allocated_in_cell)
    lower = max(before.allocated_bytes, after.allocated_bytes)
    return max(upper, lower), upper <= lower


def gpu_cell_stats(before: Snapshot, after: Snapshot) -> list:
    """Per-device :class:`GpuCellStats` between two snapshots (devices seen after the cell)."""
    rows = []
    for d, a in sorted(after.gpus.items()):
        b = before.gpus.get(d)
        peak, exact = in_cell_peak(b, a, before.peak_reset)
        ab = b.allocated_bytes if b else 0
        rb = b.reserved_bytes if b else 0
        rows.append(
            GpuCellStats(
                device=f"cuda:{d}",
                allocated_before_bytes=ab,
                allocated_after_bytes=a.allocated_bytes,
                allocated_delta_bytes=a.allocated_bytes - ab,
                peak_allocated_bytes=peak,
                peak_over_start_bytes=peak - ab,
                peak_exact=exact,
                reserved_before_bytes=rb,
                reserved_after_bytes=a.reserved_bytes,
                reserved_delta_bytes=a.reserved_bytes - rb,
                alloc_retries=a.num_alloc_retries - (b.num_alloc_retries if b else 0),
                ooms=a.num_ooms - (b.num_ooms if b else 0),
            )
        )
    return rows


def nvml_process_memory():
    """This process's GPU memory as NVML sees it: ``{"GPU <nvml index>": bytes-or-NA}``, or NA.

    Uses :func:`cudamagic.core.nvml.process_gpu_memory` (includes the CUDA context and
    allocations made outside PyTorch).
    """
    err = nvml.init()
    if err is not None:
        return err
    try:
        per = nvml.process_gpu_memory()  # this process
    except Exception as exc:  # the nvml module promises NA, never raises; be safe anyway
        return NA(f"NVML process query failed: {exc}", "error")
    if not per:
        return NA(
            "NVML lists no GPU memory for this process (or cannot list processes here)",
            "not_listed",
        )
    return {f"GPU {i}": v for i, v in sorted(per.items())}


#: Why there are no GPU figures: CUDA is not initialised (the ``gpu_status`` of reports).
NO_CUDA = NA(
    "CUDA is not initialised in this process (no CUDA tensor or call yet), so PyTorch's "
    "allocator has nothing to report; CPU figures below",
    "not_initialized",
)
