"""A model of PyTorch's CUDA caching allocator.

A model of PyTorch's CUDA caching allocator: from the allocation/free order of a fake run to the
predicted ``torch.cuda.max_memory_reserved()`` (the segments ``cudaMalloc`` returned, which is what
``nvidia-smi`` and an out-of-memory error see), and the library workspaces that live in those
segments.

The rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` (default settings, one stream, no
``empty_cache()``): requests are rounded up to 512 bytes; requests up to 1 MiB come from a small
pool of 2 MiB segments, larger ones from a large pool whose new segments are 20 MiB for requests
under 10 MiB and the request rounded up to 2 MiB otherwise; a request takes the smallest free block
that fits (best fit), which is split when the rest is at least 512 bytes (small pool) or more than
1 MiB (large pool); a freed block merges with free neighbours of its segment. Segments are never
given back during a step, so the peak reserved is the reserved at the end.

No IPython import, no torch import.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

KIB, MIB = 1 << 10, 1 << 20
MIN_BLOCK_BYTES = 512  # kMinBlockSize
SMALL_SIZE_BYTES = 1 * MIB  # kSmallSize: largest "small" request
SMALL_BUFFER_BYTES = 2 * MIB  # kSmallBuffer: a small-pool segment
LARGE_BUFFER_BYTES = 20 * MIB  # kLargeBuffer: a large-pool segment for requests < kMinLargeAlloc
MIN_LARGE_ALLOC_BYTES = 10 * MIB  # kMinLargeAlloc
ROUND_LARGE_BYTES = 2 * MIB  # kRoundLarge
SOURCE = "c10/cuda/CUDACachingAllocator.cpp (kMinBlockSize, kSmallSize, kLargeBuffer, kRoundLarge)"


def round_size(nbytes: int) -> int:
    """A request of ``nbytes`` as the allocator rounds it (512-byte multiples; 0 stays 0)."""
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_size(nbytes: int) -> int:
    """The size of the segment ``cudaMalloc``'d for a rounded request that fits no cached block."""
    if nbytes <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if nbytes < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-nbytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass
class Block:
    """A piece of a segment. ``size`` and ``offset`` in bytes."""

    segment: int
    offset: int
    size: int
    free: bool = True


class CachingAllocatorModel:
    """Replays allocations and frees, counting reserved and allocated bytes as the allocator does.

    Attributes:
        reserved_bytes: sum of segment sizes. allocated_bytes / peak_allocated_bytes: sum of the
            blocks handed out now / at most (a block not split keeps its whole size).
    """

    def __init__(self):
        self.reserved_bytes = 0
        self.allocated_bytes = self.peak_allocated_bytes = 0
        self._segments: list = []  # per segment: its blocks in address order
        self._small: list = []  # per segment: it belongs to the small pool
        self._free: dict = {True: [], False: []}  # small pool?: sorted (size, segment, offset)

    def malloc(self, nbytes: int):
        """Hand out a block for a request of ``nbytes``; returns the block (or None for 0 bytes)."""
        if nbytes == 0:
            return None
        size = round_size(nbytes)
        small = size <= SMALL_SIZE_BYTES
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            _, seg, off = pool.pop(i)
            block = next(b for b in self._segments[seg] if b.offset == off)
        else:
            seg = len(self._segments)
            block = Block(seg, 0, segment_size(size))
            self._segments.append([block])
            self._small.append(small)
            self.reserved_bytes += block.size
        rest = block.size - size
        if rest >= MIN_BLOCK_BYTES if small else rest > SMALL_SIZE_BYTES:
            tail = Block(block.segment, block.offset + size, rest)
            blocks = self._segments[block.segment]
            blocks.insert(blocks.index(block) + 1, tail)
            block.size = size
            bisect.insort(pool, (tail.size, tail.segment, tail.offset))
        block.free = False
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return block

    def free(self, block) -> None:
        """Give ``block`` back to its pool, merged with free neighbours."""
        if block is None:
            return
        self.allocated_bytes -= block.size
        blocks = self._segments[block.segment]
        pool = self._free[self._small[block.segment]]
        i = blocks.index(block)
        block.free = True
        for j in (i + 1, i - 1):  # next first, so index i stays valid for the previous one
            if 0 <= j < len(blocks) and blocks[j].free and blocks[j] is not block:
                other = blocks[j]
                pool.remove((other.size, other.segment, other.offset))
                block.offset = min(block.offset, other.offset)
                block.size += other.size
                blocks.remove(other)
        bisect.insort(pool, (block.size, block.segment, block.offset))


def replay(events, extra=()) -> CachingAllocatorModel:
    """Replay a tracker's events.

    Args:
        events: ``(+1 | -1, record)`` pairs (records with ``nbytes``), in order.
        extra: bytes of allocations made first and never freed (library workspaces).
    """
    model = CachingAllocatorModel()
    for nbytes in extra:
        model.malloc(nbytes)
    blocks = {}
    for sign, rec in events:
        if sign > 0:
            blocks[id(rec)] = model.malloc(rec.nbytes)
        else:
            model.free(blocks.pop(id(rec), None))
    return model


def expandable_reserved(peak_allocated_bytes: int) -> int:
    """Reserved bytes under ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.

    About the peak allocated rounded up to the 2 MiB pages the expandable segment maps.
    """
    return -(-peak_allocated_bytes // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


# ---- library workspaces and the CUDA context --------------------------------------------

CUBLAS_SOURCE = (
    "aten/src/ATen/cuda/CublasHandlePool.cpp: one workspace per thread that calls cuBLAS, "
    "CUBLAS_WORKSPACE_CONFIG default :4096:8 (32 MiB) on compute capability 9.0+, "
    ":4096:2:16:8 (8.125 MiB) before"
)


def cublas_workspace_bytes(capability_major: int | None, env: dict | None = None) -> int:
    """Bytes of one cuBLAS workspace (``CUBLAS_WORKSPACE_CONFIG=:SIZE_KIB:COUNT[...]`` when set).

    Args:
        capability_major: the GPU's compute capability major number, or None (unknown: Hopper's
            32 MiB, the larger default).
        env: the environment (default ``os.environ``).
    """
    env = os.environ if env is None else env
    config = env.get("CUBLAS_WORKSPACE_CONFIG", "")
    parts = [p for p in config.split(":") if p]
    if parts and len(parts) % 2 == 0 and all(p.isdigit() for p in parts):
        return sum(int(s) * KIB * int(n) for s, n in zip(parts[::2], parts[1::2], strict=True))
    if capability_major is not None and capability_major < 9:
        return 4096 * KIB * 2 + 16 * KIB * 8
    return 4096 * KIB * 8


#: CUDA context (driver, runtime, kernels loaded lazily) in bytes, as NVML counts it for a process
#: that ran PyTorch kernels, by compute capability major; approximate: it varies with the driver,
#: the CUDA version and the libraries loaded (cuDNN adds when a convolution runs).
CONTEXT_BYTES = {7: 300 * MIB, 8: 420 * MIB, 9: 520 * MIB, 10: 560 * MIB}
CONTEXT_SOURCE = (
    "typical per-process CUDA context with lazy module loading (CUDA_MODULE_LOADING=LAZY, the "
    "default since CUDA 11.7) after PyTorch kernels ran; approximate, varies with driver and "
    "libraries; scripts/gpu_check_cudafit.py measures it"
)


def context_bytes(capability_major: int | None) -> int:
    """Approximate CUDA context bytes for this compute capability major (None: Hopper's)."""
    if capability_major is None:
        return CONTEXT_BYTES[9]
    return CONTEXT_BYTES.get(capability_major, CONTEXT_BYTES[max(CONTEXT_BYTES)])
