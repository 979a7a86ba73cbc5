"""Observe every torch.cuda call that would create a CUDA context, on any build of torch.

``torch.cuda.is_initialized()`` stays False on a CPU build whatever our code calls, so a check of it cannot fail
here. Instead :func:`record` replaces the context-creating entry points (``_lazy_init`` in the modules that bind it,
and the public functions that need a context) with recorders that note the call, then raise what a CPU build raises.
Usable in the test process (``cuda_calls`` fixture) and inside a real kernel (``from tests.cuda_calls import record``).
"""

from __future__ import annotations

PUBLIC = ("init", "current_device", "set_device", "synchronize", "mem_get_info", "memory_stats",
          "memory_stats_as_nested_dict", "memory_allocated", "memory_reserved", "max_memory_allocated",
          "max_memory_reserved", "reset_peak_memory_stats", "get_device_properties", "get_device_name",
          "get_device_capability", "memory_snapshot", "ipc_collect", "empty_cache")


def record(torch, setattr_=setattr):
    """Replace the context-creating ``torch.cuda`` functions with recorders; return the list they append to.

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
