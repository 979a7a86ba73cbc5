"""Context for running out of GPU memory.

The numbers in PyTorch's out-of-memory message, the biggest tensors the notebook still holds
(IPython's output cache included), the GPU memory when cuBLAS / cuDNN could not start.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.result.Context`. Every
``torch.cuda.memory_*`` call is gated by ``torch.cuda.is_initialized()``.
"""

from __future__ import annotations

import contextlib
import re

from ...core.fmt import format_bytes
from ..result import Context
from ..scene import (
    Scene,
    _is_module,
    _is_tensor,
    _output_cache_tensors,
    _shape,
    _tensor_bytes,
    _torch,
)

_UNITS = {"B": 1, "bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


def parse_size(text: str) -> int:
    """Parse PyTorch's ``format_size`` output (``'20.00 MiB'``, ``'0 bytes'``) into bytes."""
    m = re.match(r"\s*([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB)", text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


_SIZE = r"([\d.]+ (?:bytes|B|KiB|MiB|GiB|TiB))"
#: (pattern, the keys of its groups) of each number in an out-of-memory message, current and pre-2.1
_OOM_NUMBERS = (
    (r"Tried to allocate " + _SIZE, ("requested_bytes",)),
    (
        rf"GPU (\d+) has a total capac\w* of {_SIZE} of which {_SIZE} is free",
        ("gpu", "total_bytes", "free_bytes"),
    ),
    (rf"this process has {_SIZE} memory in use", ("process_bytes",)),
    (_SIZE + " is allocated by PyTorch", ("allocated_bytes",)),
    (_SIZE + " is reserved by PyTorch but unallocated", ("reserved_unallocated_bytes",)),
    (
        rf"\(GPU (\d+); {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free; "
        rf"{_SIZE} reserved in total by PyTorch",
        ("gpu", "total_bytes", "allocated_bytes", "free_bytes", "reserved_bytes"),
    ),
)


def parse_oom(message: str) -> dict:
    """Numbers from a CUDA out-of-memory message, in bytes.

    Understands the current caching-allocator message (``c10/cuda/CUDACachingAllocator.cpp``,
    ``DeviceCachingAllocator::malloc``: "Tried to allocate X. GPU 0 has a total capacity of T of
    which F is free. ... Of the allocated memory A is allocated by PyTorch, and R is reserved by
    PyTorch but unallocated.") and the pre-2.1 one ("(GPU 0; T total capacity; A already
    allocated; F free; R reserved in total by PyTorch)").

    Returns:
        dict with any of ``requested_bytes``, ``gpu`` (CUDA ordinal), ``total_bytes``,
        ``free_bytes``, ``process_bytes``, ``allocated_bytes``, ``reserved_bytes`` (total
        reserved by PyTorch) and ``reserved_unallocated_bytes``.
    """
    out = {}
    for pattern, keys in _OOM_NUMBERS:
        found = re.search(pattern, message)
        if found:
            for key, text in zip(keys, found.groups(), strict=True):
                out[key] = int(text) if key == "gpu" else parse_size(text)
    allocated, unallocated = out.get("allocated_bytes"), out.get("reserved_unallocated_bytes")
    if allocated is not None and unallocated is not None:
        out.setdefault("reserved_bytes", allocated + unallocated)
    elif allocated is not None and "reserved_bytes" in out:
        out["reserved_unallocated_bytes"] = out["reserved_bytes"] - allocated
    return out


def biggest_tensors(scene: Scene, limit: int = 5, cuda_only: bool = False):
    """``(name, nbytes, shape, dtype, device)`` of the largest tensors in the scene, biggest first.

    Tensors held by nn.Modules are summed per module (parameters and buffers).
    """
    rows = []
    for name, value in scene.variables():
        if _is_tensor(value):
            if cuda_only and value.device.type == "cpu":
                continue
            rows.append(
                (
                    name,
                    _tensor_bytes(value),
                    _shape(value),
                    str(value.dtype).replace("torch.", ""),
                    str(value.device),
                )
            )
        elif _is_module(value):
            try:
                ts = list(value.parameters()) + list(value.buffers())
            except Exception:
                continue
            if cuda_only:
                ts = [t for t in ts if t.device.type != "cpu"]
            if ts:
                rows.append(
                    (name, sum(_tensor_bytes(t) for t in ts), None, "module", str(ts[0].device))
                )
    rows.sort(key=lambda r: -r[1])
    return rows[:limit]


def ctx_oom(match, scene):
    """The requested, free and reserved bytes of the message, and the largest tensors."""
    message = match.string
    numbers = parse_oom(message)
    notes = []
    if "requested_bytes" in numbers:
        line = f"PyTorch asked for {format_bytes(numbers['requested_bytes'])}"
        if "free_bytes" in numbers:
            line += (
                f" while GPU {numbers.get('gpu', 0)} had {format_bytes(numbers['free_bytes'])} "
                f"free of "
                f"{format_bytes(numbers['total_bytes'])}"
            )
        notes.append(line + ".")
    if "allocated_bytes" in numbers and "reserved_bytes" in numbers:
        notes.append(
            f"Tensors held {format_bytes(numbers['allocated_bytes'])}; PyTorch's cache reserved "
            f"{format_bytes(numbers['reserved_bytes'])} in total "
            f"({format_bytes(numbers['reserved_unallocated_bytes'])} reserved but unused)."
        )
    if "process_bytes" in numbers and "total_bytes" in numbers and "reserved_bytes" in numbers:
        other = numbers["total_bytes"] - numbers.get("free_bytes", 0) - numbers["process_bytes"]
        if other > 0.1 * numbers["total_bytes"]:
            notes.append(
                f"Other processes use about {format_bytes(other)} of this GPU (another notebook?)."
            )
    big = biggest_tensors(scene, limit=5, cuda_only=True) or biggest_tensors(scene, limit=5)
    if big:
        parts = []
        for name, nbytes, shape, dtype, device in big:
            desc = f"`{name}` {format_bytes(nbytes)}"
            desc += (
                f" ({dtype}, {list(shape)}, {device})"
                if shape is not None
                else f" (module, {device})"
            )
            parts.append(desc)
        notes.append("Biggest tensors in your namespace: " + "; ".join(parts) + ".")
    cached = _output_cache_tensors(scene)
    if cached:
        notes.append(
            "IPython's output cache also holds CUDA tensors: "
            + ", ".join(f"`{c}`" for c in cached)
            + " (a cell that ends with a tensor keeps it alive in Out)."
        )
    numbers["biggest"] = [r[0] for r in big]
    numbers["output_cache"] = cached
    if "cudamem" in scene.line_magics:
        fix = (
            "Run `%cudamem free` to drop the saved traceback and empty PyTorch's cache (it reports "
            "the bytes "
            "it freed; `%cudamem free --out` also releases the output cache `Out`/`_`); then `del` "
            "the big "
            "tensors you no longer need, or lower the batch size."
        )
    else:
        fix = (
            "Free what the notebook still holds: `import sys, gc; sys.last_value = "
            "sys.last_traceback = None` "
            "(the saved traceback keeps the failing frame's tensors alive), `del` the big tensors "
            "and "
            "`Out` entries you no longer need, then `gc.collect(); torch.cuda.empty_cache()`; or "
            "lower the "
            "batch size."
        )
    numbers["mentions_cudamem_free"] = "cudamem" in scene.line_magics
    return Context(notes=tuple(notes), facts=numbers, fix=fix)


def ctx_gpu_memory(match, scene):
    """The allocator counters of each initialised device."""
    torch = _torch()
    notes, facts = [], {}
    if torch is not None and torch.cuda.is_initialized():
        # allocator counters of every device, each named by its ordinal: host-side reads that
        # neither wait for the GPU nor create a context (no mem_get_info, no current_device)
        with contextlib.suppress(Exception):
            devices = range(torch.cuda.device_count())
            facts["allocated_bytes"] = sum(int(torch.cuda.memory_allocated(d)) for d in devices)
            facts["reserved_bytes"] = sum(int(torch.cuda.memory_reserved(d)) for d in devices)
            notes.append(
                f"Your tensors hold {format_bytes(facts['allocated_bytes'])} of GPU memory, "
                f"PyTorch's "
                f"cache {format_bytes(facts['reserved_bytes'])} (`%gpuwatch` shows what the GPU "
                f"has free)."
            )
    big = biggest_tensors(scene, limit=3, cuda_only=True)
    if big:
        notes.append(
            "Biggest GPU tensors: "
            + "; ".join(f"`{n}` {format_bytes(b)}" for n, b, *_ in big)
            + "."
        )
    return Context(notes=tuple(notes), facts=facts)
