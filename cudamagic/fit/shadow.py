"""The shadow namespace: the user's namespace with fake twins.

The shadow namespace: a copy of the user's namespace in which every object the cell names that
holds tensors (an ``nn.Module``, an optimizer, an LR scheduler, a tensor, a list/tuple/dict of them)
is replaced by a twin made of fake tensors.

A twin has the same structure, shapes, dtypes, ``requires_grad``, ``.grad`` and optimizer state as
the original, on fake CPU tensors (no memory, no data). It is made by ``copy.deepcopy`` with the
deep-copy memo filled beforehand with a fake for every tensor, so the originals are only read, never
written, and shared tensors (tied weights, the optimizer's parameters) stay shared in the twins.
Functions defined in the notebook are re-bound to the shadow namespace, so ``train_step(x, y)``
reaches the twins, not the user's objects. Assignments in the cell land in the shadow namespace.

No IPython import.
"""

from __future__ import annotations

import ast
import collections
import copy
import types
from dataclasses import dataclass, field

import torch

COMPILED = (
    "a torch.compile'd submodule (torch._dynamo's OptimizedModule), which cannot be traced on fake "
    "tensors; estimate the module before compiling it"
)
#: what the report says of a compiled module or a torch.compile call it estimated as eager code.
EAGER = (
    "estimated as the eager module (compiled code usually needs as much memory or less, so the "
    "figures are most often an upper bound)"
)


@dataclass
class Shadow:
    """The shadow namespace and what it holds.

    Attributes:
        namespace: the dict the cell runs in. modules: ``{qualified name: twin module}`` of the
            named modules (``model``, ``model.encoder``...). module_names: ``{id(twin module):
            qualified name}``. optimizers: the twin optimizers. existing: ``(fake tensor, category,
            module name)`` of every tensor that exists before the cell. inputs: the names of tensors
            given by the user. notes: what the report should say about the copies.
    """

    namespace: dict
    modules: dict = field(default_factory=dict)
    module_names: dict = field(default_factory=dict)
    optimizers: list = field(default_factory=list)
    existing: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def names_used(tree: ast.AST) -> list:
    """The global names a cell reads (``ast.Name`` loads), in order of first use."""
    seen = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            seen.setdefault(node.id, None)
    return list(seen)


def _holds_tensors(value, depth: int = 0) -> bool:
    from torch.optim.lr_scheduler import LRScheduler

    if isinstance(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, LRScheduler)):
        return True
    if depth < 2 and isinstance(value, (list, tuple)):
        return any(_holds_tensors(v, depth + 1) for v in value)
    if depth < 2 and isinstance(value, dict):
        return any(_holds_tensors(v, depth + 1) for v in value.values())
    return False


def compiled_module(value) -> bool:
    """``value`` is (or holds) a ``torch.compile``'d module."""
    mod = getattr(torch, "_dynamo", None)
    opt = getattr(getattr(mod, "eval_frame", None), "OptimizedModule", None)
    if opt is None:
        return False
    if isinstance(value, opt):
        return True
    return isinstance(value, torch.nn.Module) and any(isinstance(m, opt) for m in value.modules())


class FakeFactory:
    """Fake CPU twins of real tensors, one per tensor (the memo of ``copy.deepcopy``).

    Args:
        mode: the ``FakeTensorMode`` the twins belong to.
    """

    def __init__(self, mode):
        self.mode = mode
        self.memo: dict = {}
        self.pairs: list = []  # (original, twin): keeps originals alive so ids stay unique

    def fake(self, t):
        """The fake twin of tensor ``t``, on the CPU whatever ``t``'s device.

        Same shape, strides, dtype, ``requires_grad``, class (``nn.Parameter``) and ``.grad``
        (itself a twin); a 0-dim tensor keeps its value (read once, with ``.item()``).
        """
        key = id(t)
        if key in self.memo:
            return self.memo[key]
        # a scalar keeps its value (an optimizer's `step` is read with `.item()`)
        scalar = t.dim() == 0 and not t.requires_grad and t.device.type != "meta"
        value = t.item() if scalar else None
        with self.mode:
            if value is not None:
                f = torch.tensor(value, dtype=t.dtype, device="cpu")
            else:
                f = torch.empty_strided(
                    tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="cpu"
                )
        if isinstance(t, torch.nn.Parameter):
            f = torch.nn.Parameter(f, requires_grad=t.requires_grad)
        elif t.requires_grad:
            f.requires_grad_(True)
        self.memo[key] = f
        self.pairs.append((t, f))
        if t.is_leaf and t.grad is not None:
            f.grad = self.fake(t.grad)
        return f

    def twin(self, value):
        """A deep copy of ``value`` in which every tensor is its fake twin."""
        for t in _tensors_in(value):
            self.fake(t)
        return copy.deepcopy(value, self.memo)


def _tensors_in(value, seen=None) -> list:
    """Every tensor reachable from a module, optimizer, scheduler, tensor or container."""
    from torch.optim.lr_scheduler import LRScheduler

    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value]
    out = []
    if isinstance(value, torch.nn.Module):
        for sub in value.modules():
            out += list(sub._parameters.values()) + list(sub._buffers.values())
            for attr in vars(sub).values():  # plain tensor attributes (masks, constants)
                if isinstance(attr, torch.Tensor):
                    out.append(attr)
    elif isinstance(value, torch.optim.Optimizer):
        for group in value.param_groups:
            out += [v for v in group.values() if isinstance(v, torch.Tensor)]
            out += list(group["params"])
        for state in value.state.values():
            out += [v for v in state.values() if isinstance(v, torch.Tensor)]
    elif isinstance(value, LRScheduler):
        out += _tensors_in(value.optimizer, seen)
    elif isinstance(value, (list, tuple)):
        for v in value:
            out += _tensors_in(v, seen)
    elif isinstance(value, dict):
        for v in value.values():
            out += _tensors_in(v, seen)
    elif _mutable(value):  # a GradScaler's `_scale`, a notebook object's tensors and modules
        for v in vars(value).values():
            out += _tensors_in(v, seen)
    return [t for t in out if t is not None]


def _mutable(value) -> bool:
    """An object a cell may change in place that holds no tensors yet, so is copied too.

    A list, dict, set or deque (``losses.append(loss)``), a ``GradScaler`` (its scale is made on
    first use), or an instance of a class defined in the notebook (a meter, an EMA helper).
    """
    if isinstance(value, (list, dict, set, collections.deque)):
        return True
    if isinstance(value, torch.amp.GradScaler):
        return True
    kind = type(value)
    return kind.__module__ == "__main__" and hasattr(value, "__dict__")


def build(user_ns: dict, tree: ast.AST, mode) -> Shadow:
    """The shadow namespace for a cell (see the module docstring).

    Args:
        user_ns: the user's namespace (only read).
        tree: the cell's AST (for the names it reads).
        mode: the ``FakeTensorMode``.

    Returns:
        :class:`Shadow`.

    Raises:
        CannotFollow: a named object is a ``torch.compile``'d module.
    """
    from .result import CannotFollow

    factory = FakeFactory(mode)
    ns = dict(user_ns)
    shadow = Shadow(ns)
    used = reachable_names(names_used(tree), user_ns)
    values = {n: user_ns[n] for n in used if n in user_ns}
    for name, value in values.items():
        if compiled_module(value):
            if not isinstance(getattr(value, "_orig_mod", None), torch.nn.Module):
                raise CannotFollow(f"`{name}` holds {COMPILED}", op="torch.compile", line=0)
            values[name] = value._orig_mod
            shadow.notes.append(f"`{name}` is torch.compile'd: {EAGER}")
    # modules and optimizers first, so that a tensor named in the cell that is also a parameter
    # keeps its parameter twin
    order = sorted(
        (n for n in values if _holds_tensors(values[n])),
        key=lambda n: not isinstance(values[n], torch.nn.Module),
    )
    for name in order:
        value = values[name]
        ns[name] = twin = factory.twin(value)
        if isinstance(twin, torch.nn.Module):
            for sub_name, sub in twin.named_modules():
                qual = f"{name}.{sub_name}" if sub_name else name
                shadow.module_names.setdefault(id(sub), qual)
                shadow.modules.setdefault(qual, sub)
        elif isinstance(twin, torch.optim.Optimizer):
            shadow.optimizers.append(twin)
            if as_on_cuda(twin):
                shadow.notes.append(f"`{name}`: {FOREACH}")
        elif isinstance(value, torch.Tensor):
            shadow.inputs.append(name)
    for name, value in values.items():
        if name not in order and _mutable(value):
            try:  # a copy, so what the cell puts there (fake tensors) stays out of the user's
                ns[name] = factory.twin(value)
            except Exception:  # noqa: BLE001 - an object deepcopy cannot copy is used as is
                shadow.notes.append(f"`{name}` could not be copied: the cell ran on the original")
    for key, value in list(ns.items()):
        if isinstance(value, types.FunctionType) and value.__globals__ is user_ns:
            ns[key] = rebind(value, ns)
    shadow.existing = _existing(factory, shadow)
    return shadow


FOREACH = (
    "estimated with the foreach implementation, PyTorch's default for parameters on a GPU (it "
    "makes temporaries for all parameters at once); give foreach=False to estimate the loop"
)


def as_on_cuda(optimizer) -> bool:
    """Give ``foreach=True`` to the param groups that leave it to PyTorch (None, not fused).

    That is the implementation PyTorch picks for parameters on a GPU. Returns True when a group
    was changed.
    """
    changed = False
    for group in optimizer.param_groups:
        if "foreach" in group and group["foreach"] is None and not group.get("fused"):
            group["foreach"] = True
            changed = True
    return changed


def reachable_names(names, user_ns: dict) -> list:
    """``names`` and the globals read by the notebook functions among them, transitively.

    So ``train_step(x, y)`` copies the ``model`` and ``opt`` that ``train_step`` reads.
    """
    out = list(dict.fromkeys(names))
    i = 0
    while i < len(out):
        value = user_ns.get(out[i])
        i += 1
        if isinstance(value, types.FunctionType) and value.__globals__ is user_ns:
            for name in _code_names(value.__code__):
                if name in user_ns and name not in out:
                    out.append(name)
    return out


def _code_names(code) -> list:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _code_names(const)
    return names


def rebind(func, namespace: dict):
    """``func`` with ``namespace`` as its globals (same code, defaults, closure, name)."""
    new = types.FunctionType(
        func.__code__, namespace, func.__name__, func.__defaults__, func.__closure__
    )
    new.__kwdefaults__ = copy.copy(func.__kwdefaults__)
    new.__dict__.update(func.__dict__)
    return new


def _existing(factory: FakeFactory, shadow: Shadow) -> list:
    """``(fake, category, module)`` of every twin tensor, for the tracker's starting state."""
    params, buffers = {}, {}
    for qual, mod in shadow.modules.items():
        for p in mod._parameters.values():
            if p is not None:
                params.setdefault(id(p), qual)
        for b in mod._buffers.values():
            if b is not None:
                buffers.setdefault(id(b), qual)
    grads = {id(f.grad) for _, f in factory.pairs if f.grad is not None}
    state = {
        id(v)
        for opt in shadow.optimizers
        for s in opt.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor)
    }
    out = []
    for _, f in factory.pairs:
        if id(f) in params:
            out.append((f, "parameters", params[id(f)]))
        elif id(f) in buffers:
            out.append((f, "buffers", buffers[id(f)]))
        elif id(f) in grads:
            out.append((f, "gradients", ""))
        elif id(f) in state:
            out.append((f, "optimizer state", ""))
        else:
            out.append((f, "inputs", ""))
    return out
