"""The shape of ``torch.cuda.memory_stats()`` / ``memory_stats_as_nested_dict()`` for fakes.

Built from PyTorch's ``c10/cuda/CUDACachingAllocator`` statistics (``torch/cuda/memory.py``:
``memory_stats`` flattens the nested dict with ``.`` between levels). Every counter gets a DISTINCT
value, so a reader that picks the wrong counter (``active_bytes`` for ``allocated_bytes``,
``large_pool`` for ``all``, ``peak`` for ``current``) reads a wrong number and the test fails,
instead of reading a lucky 0 from a three-key dict.
"""

from __future__ import annotations

STAT_TYPES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)
POOLS = ("all", "small_pool", "large_pool")
METRICS = ("current", "peak", "allocated", "freed")
SCALARS = (
    "num_alloc_retries",
    "num_ooms",
    "num_sync_all_streams",
    "num_device_alloc",
    "num_device_free",
    "max_split_size",
)


def nested_stats(**chosen) -> dict:
    """``memory_stats_as_nested_dict()``-shaped dict; ``chosen`` sets flat keys.

    E.g. ``nested_stats(**{"allocated_bytes.all.current": 5})``. Every other counter is a distinct
    odd number.
    """
    out, n = {}, 1
    for stat in STAT_TYPES:
        out[stat] = {}
        for pool in POOLS:
            out[stat][pool] = {}
            for metric in METRICS:
                out[stat][pool][metric] = chosen.pop(f"{stat}.{pool}.{metric}", 1000 * n + 7)
                n += 1
    for kind in ("oversize_allocations", "oversize_segments"):
        out[kind] = {}
        for metric in METRICS:
            out[kind][metric] = chosen.pop(f"{kind}.{metric}", 1000 * n + 7)
            n += 1
    for key in SCALARS:
        out[key] = chosen.pop(key, 1000 * n + 7)
        n += 1
    assert not chosen, f"unknown torch memory_stats keys: {sorted(chosen)}"
    return out


def flat_stats(**chosen) -> dict:
    """``torch.cuda.memory_stats()``-shaped dict, sorted by key as torch does.

    It is the nested one flattened with ``.``.
    """
    flat = {}

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat[prefix] = obj

    walk("", nested_stats(**chosen))
    return dict(sorted(flat.items()))
