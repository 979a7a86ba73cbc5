"""Where growing CUDA memory was allocated: PyTorch's memory snapshot grouped by site.

When ``%cudamem on`` sees allocated memory start to grow on a GPU, :func:`start_recording` turns on
PyTorch's allocation history with Python stacks only
(``torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python")``: a
Python stack per allocation, cheap; never ``stacks="all"``, whose C++ unwinding is slow). From then
on each block the caching allocator hands out carries the stack that asked for it, and
:func:`allocation_sites` groups the live blocks of ``torch.cuda.memory._snapshot()`` by the first
frame outside PyTorch (``train.py:42 in step``). ``%cudamem off`` and ``%unload_ext`` stop the
recording if ``%cudamem on`` started it.

Only ever called when CUDA is already initialised (nothing here creates a context); torch is read
from ``sys.modules``. Without CUDA, or on a PyTorch without these functions, everything is empty.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter

#: Frames in these paths are PyTorch's own; the site is the first frame outside them.
_TORCH_PATHS = ("/torch/", "\\torch\\")
#: What a block without a Python stack (allocated before the recording began) is counted as.
NO_STACK = "(allocated before the recording began, or from C++)"


def _memory():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_initialized():
            return None
    except Exception:
        return None
    memory = getattr(torch.cuda, "memory", None)
    if not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_snapshot"):
        return None
    return memory


def start_recording() -> bool:
    """Turn on the allocation history with Python stacks; True when it is on now.

    Does nothing (False) when CUDA is not initialised or this PyTorch lacks the function.
    """
    memory = _memory()
    if memory is None:
        return False
    try:
        memory._record_memory_history(
            enabled="all", context="alloc", stacks="python", max_entries=1000
        )
    except Exception:  # an allocator without history (a pluggable one): no sites, no error
        return False
    return True


def stop_recording() -> None:
    """Turn the allocation history off (``_record_memory_history(enabled=None)``)."""
    memory = _memory()
    if memory is not None:
        with contextlib.suppress(Exception):
            memory._record_memory_history(enabled=None)


def site_of(frames) -> str:
    """``"train.py:42 in step"``: the first frame outside PyTorch of a block's stack."""
    for f in frames or ():
        filename = str(f.get("filename", ""))
        if not any(p in filename for p in _TORCH_PATHS):
            return f"{filename}:{f.get('line', '?')} in {f.get('name', '?')}"
    return NO_STACK


def allocation_sites(snapshot: dict) -> dict:
    """``{site: bytes}`` of the live blocks (``state == "active_allocated"``) of a snapshot.

    Args:
        snapshot: ``torch.cuda.memory._snapshot()``: ``{"segments": [{"blocks": [{"size",
            "state", "frames": [{"filename", "line", "name"}]}]}]}`` (sizes in bytes).
    """
    sites = Counter()
    for segment in snapshot.get("segments", ()):
        for block in segment.get("blocks", ()):
            if block.get("state") == "active_allocated":
                sites[site_of(block.get("frames"))] += int(block.get("size", 0))
    return dict(sites)


def read_sites() -> dict:
    """:func:`allocation_sites` of the current snapshot; ``{}`` without CUDA or history."""
    memory = _memory()
    if memory is None:
        return {}
    try:
        return allocation_sites(memory._snapshot())
    except Exception:
        return {}


def grown_sites(now: dict, before: dict, min_bytes: int = 1 << 20, limit: int = 5) -> list:
    """``[(site, grown bytes, bytes now)]``: sites that grew by ``min_bytes`` or more.

    Largest growth first, at most ``limit`` rows.
    """
    rows = [(s, b - before.get(s, 0), b) for s, b in now.items()]
    rows = [r for r in rows if r[1] >= min_bytes]
    rows.sort(key=lambda r: -r[1])
    return rows[:limit]
