"""Recorders for the ``torch.cuda`` calls that would do harm (a forced synchronisation, a new CUDA context, reset
counters), and stand-ins that make CUDA look initialised on a machine without a GPU. Shared by the do-no-harm tests
of the explainer (tests/explain) and of ``%%cudamem`` (tests/mem)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

HARMFUL = ("init", "_lazy_init", "synchronize", "current_device", "set_device", "mem_get_info", "empty_cache",
           "reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "ipc_collect")


@pytest.fixture
def recorder(monkeypatch):
    """Replace the harmful ``torch.cuda`` calls by recorders; returns the list of calls made."""
    calls = []
    for name in HARMFUL:
        if hasattr(torch.cuda, name):
            def record(*args, _name=name, **kwargs):
                calls.append((_name, args, kwargs))
            monkeypatch.setattr(torch.cuda, name, record)
    return calls


@pytest.fixture
def cuda_initialised(monkeypatch):
    """CUDA looks initialised with one GPU: the reads a GPU machine answers are answered by stand-ins."""
    reads = []
    stats = {"allocated_bytes": {"all": {"current": 3 << 20, "peak": 5 << 20, "allocated": 9 << 20}},
             "reserved_bytes": {"all": {"current": 8 << 20, "peak": 8 << 20}}, "num_alloc_retries": 0,
             "num_ooms": 0}

    def read(name, value):
        def f(*args, **kwargs):
            reads.append((name, args))
            return value
        return f

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", read("device_count", 1))
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", read("memory_stats_as_nested_dict", stats))
    monkeypatch.setattr(torch.cuda, "memory_allocated", read("memory_allocated", 3 << 20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", read("memory_reserved", 8 << 20))
    monkeypatch.setattr(torch.cuda, "get_device_capability", read("get_device_capability", (9, 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", read("get_device_name", "NVIDIA H100"))
    monkeypatch.setattr(torch.cuda, "get_arch_list", read("get_arch_list", ["sm_80", "sm_90"]))
    return reads
