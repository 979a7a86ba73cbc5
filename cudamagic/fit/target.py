"""The GPU a step is checked against.

The GPU a step is checked against: the memory it has free, from NVML (``nvidia-smi --query-gpu=
name,memory.total,memory.free``, other processes counted), or from ``--device-memory`` or ``--gpu``
on a machine without it.

Reading NVML never creates a CUDA context. No IPython import.
"""

from __future__ import annotations

import os

from ..core import nvml
from ..core.na import NA, is_na
from .result import Target


def nvml_index(cuda_ordinal: int, env: dict | None = None) -> int:
    """The NVML index of CUDA ordinal ``cuda_ordinal``.

    ``CUDA_VISIBLE_DEVICES=2,3`` makes cuda:0 NVML's GPU 2; UUIDs or an unset variable leave the
    ordinal as is.
    """
    env = os.environ if env is None else env
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_ordinal < len(visible) and visible[cuda_ordinal].isdigit():
        return int(visible[cuda_ordinal])
    return cuda_ordinal


def from_size(nbytes: int) -> Target:
    """The target given by ``--device-memory``: that many bytes, all free."""
    return Target(
        name="GPU of --device-memory",
        memory_total_bytes=nbytes,
        memory_free_bytes=nbytes,
        capability_major=None,
        source="--device-memory (assumed empty)",
    )


def from_table(entry) -> Target:
    """The target given by ``--gpu NAME`` (an entry of :func:`.gpus.lookup`), all memory free."""
    name, nbytes, major, source = entry
    return Target(
        name=name,
        memory_total_bytes=nbytes,
        memory_free_bytes=nbytes,
        capability_major=major,
        source=f"--gpu table: {source} (assumed empty)",
    )


def from_nvml(cuda_ordinal: int, this_process_reserved_bytes=0) -> Target | NA:
    """The target GPU as NVML sees it now, or NA with the reason (no driver, no such GPU).

    Args:
        cuda_ordinal: the CUDA ordinal of ``--device cuda:N``.
        this_process_reserved_bytes: what this process's caching allocator holds on it now (0
            when CUDA is not initialised): the step's estimate includes it, so it counts as free.
    """
    count = nvml.device_count()
    if is_na(count):
        return count
    index = nvml_index(cuda_ordinal)
    if index >= count:
        return NA(
            f"cuda:{cuda_ordinal} is NVML GPU {index}, but NVML sees {count} GPU(s)", "no_gpu"
        )
    got = nvml.device(index).read(["name", "memory.total", "memory.free", "compute_cap"])
    for field in ("memory.total", "memory.free"):
        if is_na(got[field]):
            return got[field]
    cap = got["compute_cap"]
    return Target(
        name=f"GPU {index} ({got['name']})",
        memory_total_bytes=int(got["memory.total"]),
        memory_free_bytes=int(got["memory.free"]) + int(this_process_reserved_bytes),
        capability_major=None if is_na(cap) else int(str(cap).split(".")[0]),
        source="NVML now (memory.free, other processes counted)",
    )
