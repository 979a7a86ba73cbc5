"""Memory warnings of ``%gpuwatch``'s samples: steady growth, and spill into system RAM.

The growth is this kernel's allocated memory rising sample after sample; the spill is Windows
moving GPU memory into shared system RAM when the card is full.

Both are plain words for :attr:`~.samples.Sample.hint`, computed by the source once per sample from
what the sample already holds (no extra read). Nothing here imports IPython or torch.

Windows spill
-------------
Under WDDM, when a process needs more GPU memory than the card has, the NVIDIA driver (since
536.40) does not raise out-of-memory: it puts the excess in *shared* GPU memory, which is system
RAM read over PCIe, and the training goes on 10 to 100 times slower. Task Manager shows it as
"Shared GPU memory"; Windows counts it per process in the ``GPU Process Memory`` counter set's
``Shared Usage`` (read by :mod:`cudamagic.core.wincounters`, carried in
``ProcessSample.shared_memory_bytes``). :class:`SpillWatch` warns on the first sample where the
card's dedicated memory is full and this kernel's shared usage rose above its lowest level seen.
"""

from __future__ import annotations

from ..core.fmt import format_bytes
from ..core.growth import GrowthDetector
from ..core.na import is_na

MiB = 1 << 20

#: Dedicated memory counts as full from this fraction of ``memory.total`` in use.
FULL_FRACTION = 0.95
#: Shared usage above the lowest level seen that counts as spilled (drivers keep a few MiB there).
SPILL_BYTES = 32 * MiB
#: NVIDIA Control Panel's setting that gives a clean out-of-memory error instead of a spill.
FALLBACK_POLICY = (
    'NVIDIA Control Panel > Manage 3D settings > "CUDA - Sysmem Fallback Policy" = '
    '"Prefer No Sysmem Fallback"'
)


class SpillWatch:
    """Tells when this kernel's GPU memory spills into shared system RAM (Windows, WDDM).

    Keeps the lowest shared usage seen per GPU; the spilled amount is the rise above it.
    """

    def __init__(self):
        self._lowest = {}  # GPU index -> lowest shared usage seen for this kernel, bytes

    def check(self, gpus) -> str:
        """The warning for this sample, or ``""``.

        Args:
            gpus: the sample's :class:`~.samples.GpuSample` tuple; rows of this kernel
                (``own``) with a ``shared_memory_bytes`` figure are looked at.
        """
        for g in gpus:
            procs = g.processes
            if is_na(procs):
                continue
            for p in procs:
                shared = p.shared_memory_bytes
                if not p.own or is_na(shared):
                    continue
                lowest = min(self._lowest.get(g.index, shared), shared)
                self._lowest[g.index] = lowest
                used, total = g.memory_used_bytes, g.memory_total_bytes
                if is_na(used) or is_na(total) or not total:
                    continue
                spilled = shared - lowest
                if used >= FULL_FRACTION * total and spilled >= SPILL_BYTES:
                    return spill_text(g.index, spilled, used, total)
        return ""


def spill_text(index: int, spilled_bytes: int, used_bytes: int, total_bytes: int) -> str:
    """The spill warning: how much, what it costs, the three fixes."""
    return (
        f"GPU {index}'s memory is full ({format_bytes(used_bytes)} of "
        f"{format_bytes(total_bytes)}) and Windows moved {format_bytes(spilled_bytes)} of this "
        "kernel's GPU memory into shared system RAM: every access to it crosses PCIe, so training "
        "runs 10-100x slower instead of stopping with an out-of-memory error. Fix: a smaller "
        f"batch, `%%cudafit` to find the largest batch that fits, or {FALLBACK_POLICY} to get a "
        "clean out-of-memory error instead."
    )


class AllocatorGrowth:
    """Steady growth of this kernel's allocated memory across ``%gpuwatch`` samples."""

    def __init__(self):
        self.detector = GrowthDetector(unit="sample")

    def check(self, torch_state) -> str:
        """The growth notice for this sample's :class:`~.samples.TorchSample`, or ``""``.

        The notice stays on every sample while the growth lasts (the live view shows the latest
        sample's hint). An NA allocator (no CUDA yet) starts the series again.
        """
        alloc = getattr(torch_state, "allocated_bytes", None)
        if alloc is None or is_na(alloc):
            self.detector.reset()
            return ""
        reserved = torch_state.reserved_bytes
        growth = self.detector.add(alloc, None if is_na(reserved) else reserved)
        return growth.line() if growth is not None else ""
