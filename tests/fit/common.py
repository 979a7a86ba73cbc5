"""Shared test helpers: a compiled cell without IPython, and an independent live-bytes counter."""

from __future__ import annotations

import ast
import weakref

from cudamagic.core.cell import CellCode


def compiled(src: str, filename: str = "<cudafit-test>"):
    """``(CellCode, tree)`` of ``src``, line 1 being the magic line (as the magic compiles it)."""
    tree = ast.parse("\n" + src)
    return CellCode(filename, compile(tree, filename, "exec"), None), tree


def live_peak_bytes(ns: dict, src: str, existing) -> int:
    """Run ``src`` for real in ``ns`` and return the peak of live tensor storage bytes.

    Independent of the product: a real-mode ``TorchDispatchMode`` keyed by storage ``data_ptr``
    (the product keys fake storages by object and replays nothing of this), starting from the
    storages of ``existing`` tensors.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Live(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live, self.now, self.peak = {}, 0, 0

        def add(self, t):
            st = t.untyped_storage()
            key = st.data_ptr()
            if st.nbytes() == 0 or key in self.live:
                return
            self.live[key] = st.nbytes()
            self.now += st.nbytes()
            self.peak = max(self.peak, self.now)
            weakref.finalize(st, self.drop, key)

        def drop(self, key):
            self.now -= self.live.pop(key)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.add(t)
            return out

    counter = Live()
    for t in existing:
        counter.add(t)
    with counter:
        exec(compile(src, "<real>", "exec"), ns)
    return counter.peak


def step_tensors(ns: dict) -> list:
    """Every tensor a reference step starts with.

    Parameters (and grads), buffers, optimizer state, the batch.
    """
    import torch

    out = list(ns["model"].parameters()) + list(ns["model"].buffers())
    out += [p.grad for p in ns["model"].parameters() if p.grad is not None]
    for state in ns["opt"].state.values():
        out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    return out + [ns["x"], ns["y"]]
