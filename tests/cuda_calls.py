"""Observe torch.cuda calls that would do harm, on any build of torch.

- :func:`record` replaces every context-creating entry point (``_lazy_init`` in the modules that
  bind it, and the public functions that need a context) with recorders that note the call, then
  raise what a CPU build raises. ``torch.cuda.is_initialized()`` stays False on a CPU build
  whatever our code calls, so a check of it cannot fail; this can. Usable in the test process
  (``cuda_calls`` fixture in conftest.py) and inside a real kernel
  (``from tests.cuda_calls import record``).
- The ``recorder`` fixture records the calls that would do harm (a forced synchronisation, a new
  CUDA context, reset counters) without raising, and ``cuda_initialised`` makes CUDA look
  initialised on a machine without a GPU: shared by the do-no-harm tests of the explainer
  (tests/explain) and of ``%%cudamem`` (tests/mem).
"""

from __future__ import annotations

import pytest

PUBLIC = (
    "init",
    "current_device",
    "set_device",
    "synchronize",
    "mem_get_info",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_allocated",
    "memory_reserved",
    "max_memory_allocated",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
    "memory_snapshot",
    "ipc_collect",
    "empty_cache",
)


def record(torch, setattr_=setattr):
    """Replace the context-creating ``torch.cuda`` functions with recorders.

    The recorders append to the list this returns.

    Args:
        torch: the imported torch module.
        setattr_: ``setattr`` or ``monkeypatch.setattr`` (so a test undoes the patch).

    Returns:
        list of str: names called so far (``"_lazy_init"``, ``"memory_stats"``, ...), in call order.
    """
    import sys

    calls = []

    def recorder(name, real):
        def fn(*a, **k):
            calls.append(name)
            raise RuntimeError(f"recorded call torch.cuda.{name}: it would create a CUDA context")

        fn.__wrapped__ = real
        return fn

    for modname in ("torch.cuda", "torch.cuda.memory", "torch.cuda.random", "torch.cuda.streams"):
        mod = sys.modules.get(modname)
        if mod is not None and hasattr(mod, "_lazy_init"):
            setattr_(mod, "_lazy_init", recorder("_lazy_init", mod._lazy_init))
    for name in PUBLIC:
        if hasattr(torch.cuda, name):
            setattr_(torch.cuda, name, recorder(name, getattr(torch.cuda, name)))
    return calls


torch = pytest.importorskip("torch")

HARMFUL = (
    "init",
    "_lazy_init",
    "synchronize",
    "current_device",
    "set_device",
    "mem_get_info",
    "empty_cache",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "ipc_collect",
)


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
    """CUDA looks initialised with one GPU.

    The reads a GPU machine answers are answered by stand-ins.
    """
    reads = []
    stats = {
        "allocated_bytes": {"all": {"current": 3 << 20, "peak": 5 << 20, "allocated": 9 << 20}},
        "reserved_bytes": {"all": {"current": 8 << 20, "peak": 8 << 20}},
        "num_alloc_retries": 0,
        "num_ooms": 0,
    }

    def read(name, value):
        def f(*args, **kwargs):
            reads.append((name, args))
            return value

        return f

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", read("device_count", 1))
    monkeypatch.setattr(
        torch.cuda, "memory_stats_as_nested_dict", read("memory_stats_as_nested_dict", stats)
    )
    monkeypatch.setattr(torch.cuda, "memory_allocated", read("memory_allocated", 3 << 20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", read("memory_reserved", 8 << 20))
    monkeypatch.setattr(torch.cuda, "get_device_capability", read("get_device_capability", (9, 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", read("get_device_name", "NVIDIA H100"))
    monkeypatch.setattr(torch.cuda, "get_arch_list", read("get_arch_list", ["sm_80", "sm_90"]))
    return reads
