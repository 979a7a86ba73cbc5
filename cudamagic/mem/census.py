"""Which tensors the session keeps alive.

Storages reachable from the user namespace (``x``, ``model.fc.weight``, ``opt.state[0]['exp_avg']``,
``Out[7]``), every live tensor object, and the holders ``%cudamem free`` lists.

torch is read from ``sys.modules`` (never imported here); without it every function returns an empty
result. Types are tested with ``type()``, so lazy proxies in the namespace are never asked for their
``__class__``.
"""

from __future__ import annotations

import gc
import itertools
import sys
from dataclasses import dataclass

MiB = 1 << 20

#: How many items of a list/tuple/dict are looked into when scanning for tensors.
_CONTAINER_ITEMS = 64
#: How deep containers are followed (a module or optimizer counts as one level).
_SCAN_DEPTH = 3

# ---- tensors reachable from the namespace ------------------------------------------


@dataclass(frozen=True)
class TensorRow:
    """One tensor storage reachable from the user namespace.

    Attributes:
        name: how to reach it: ``x``, ``model.fc.weight``, ``model.fc.weight.grad``,
            ``opt.state[0]['exp_avg']``, ``batch[1]``, ``d['k']`` or ``Out[7]``.
        shape: tensor shape as a tuple of ints.
        dtype: e.g. ``'torch.float32'``.
        device: e.g. ``'cpu'``, ``'cuda:0'``.
        bytes: size of the whole underlying storage in bytes (what the name keeps alive;
            a view of a large tensor keeps the large storage).
        new: True when the storage was not reachable before the cell (``%%cudamem`` only).
    """

    name: str
    shape: tuple
    dtype: str
    device: str
    bytes: int
    new: bool = False


def storage_key_and_bytes(t):
    """``((device, data_ptr), nbytes)`` of a tensor's storage."""
    try:
        st = t.untyped_storage()
        return (str(t.device), st.data_ptr()), int(st.nbytes())
    except Exception:  # sparse, nested, meta or other storage-less tensors
        return (str(t.device), "id", id(t)), int(t.numel() * t.element_size())


def user_roots(user_ns: dict, hidden: dict | None):
    """(name, object) pairs worth scanning: visible user variables, then ``Out[n]`` entries."""
    hidden = hidden or {}
    for name, obj in list(user_ns.items()):
        if name.startswith("_") or name in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        if name in hidden and hidden[name] is obj:
            continue
        yield name, obj
    out = user_ns.get("Out")
    if isinstance(out, dict):
        for n, obj in list(out.items()):
            yield f"Out[{n}]", obj


def iter_tensors(roots, torch):
    """Yield ``(name, tensor)`` for every tensor reachable from ``roots`` (``(name, obj)`` pairs).

    Follows ``torch.nn.Module`` parameters and buffers (``model.layer.weight``), parameter and
    leaf-tensor ``.grad``, optimizer state (``opt.state[3]['exp_avg']``, numbered like
    ``opt.state_dict()['state']``: parameters in ``param_groups`` order) and lists, tuples and
    dicts (first 64 items, 3 levels deep). Types are tested with ``type()``, so lazy proxies in the
    namespace are never asked for their ``__class__``. Never calls anything that allocates.
    """
    Tensor = torch.Tensor
    Module = torch.nn.Module
    Optimizer = torch.optim.Optimizer
    skip = (str, bytes, int, float, complex, bool, type)

    def tensor_and_grad(name, t):
        yield name, t
        if t.is_leaf and t.requires_grad and t.grad is not None:
            yield f"{name}.grad", t.grad

    def optimizer_state(name, opt):
        index = {}
        for group in opt.param_groups:
            for p in group.get("params", ()):
                index.setdefault(id(p), len(index))
        for p, state in list(opt.state.items()):
            if type(state) is not dict:
                continue
            i = index.get(id(p), "?")
            for k, v in state.items():
                if issubclass(type(v), Tensor):
                    yield f"{name}.state[{i}][{k!r}]", v

    def walk(name, obj, depth):
        t = type(obj)
        if issubclass(t, Tensor):
            yield from tensor_and_grad(name, obj)
            return
        if depth >= _SCAN_DEPTH or obj is None or issubclass(t, skip):
            return
        if issubclass(t, Module):
            for pname, p in obj.named_parameters():
                yield from tensor_and_grad(f"{name}.{pname}", p)
            for bname, b in obj.named_buffers():
                yield f"{name}.{bname}", b
            return
        if issubclass(t, Optimizer):
            yield from optimizer_state(name, obj)
            return
        if issubclass(t, (list, tuple)):
            for i, v in enumerate(obj[:_CONTAINER_ITEMS]):
                yield from walk(f"{name}[{i}]", v, depth + 1)
        elif issubclass(t, dict):
            try:
                items = list(itertools.islice(obj.items(), _CONTAINER_ITEMS))
            except RuntimeError:  # changed size while we looked (another thread)
                return
            for k, v in items:
                yield from walk(f"{name}[{k!r}]", v, depth + 1)

    for name, obj in roots:
        yield from walk(name, obj, 0)


def scan_tensors(user_ns: dict, hidden: dict | None = None, before_keys=None) -> list:
    """Every tensor storage reachable from the user namespace, largest first, one row per storage.

    Args:
        user_ns: the shell's namespace (``shell.user_ns``); ``Out`` is read from it.
        hidden: ``shell.user_ns_hidden``: names IPython itself put there are skipped.
        before_keys: storage keys reachable before the cell (from :func:`storage_keys`); rows
            whose storage is not in it get ``new=True``. ``None``: nothing is marked new.

    Returns:
        list of :class:`TensorRow` sorted by ``bytes`` descending (the first name that reaches a
        storage wins: user variables before ``Out``). Empty when torch is not imported.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    rows = {}
    for name, t in iter_tensors(user_roots(user_ns, hidden), torch):
        key, nbytes = storage_key_and_bytes(t)
        if nbytes <= 0 or key in rows:
            continue
        rows[key] = TensorRow(
            name,
            tuple(t.shape),
            str(t.dtype),
            str(t.device),
            nbytes,
            new=before_keys is not None and key not in before_keys,
        )
    return sorted(rows.values(), key=lambda r: -r.bytes)


def storage_keys(user_ns: dict, hidden: dict | None = None) -> set:
    """Storage keys of the tensors reachable from the namespace (see :func:`scan_tensors`)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    return {
        storage_key_and_bytes(t)[0] for _, t in iter_tensors(user_roots(user_ns, hidden), torch)
    }


# ---- what keeps tensors alive (%cudamem free) -------------------------------------------


@dataclass(frozen=True)
class Holder:
    """Something in the session that still keeps tensors alive.

    Attributes:
        kind: ``"output cache"`` (``Out[n]``/``_n``), ``"last output"`` (``_``/``__``/``___``) or
            ``"variable"``.
        name: ``Out[7]``, ``_``, ``model`` ...
        bytes: tensor storage bytes reachable from it (unique storages).
        devices: devices of those storages, e.g. ``('cuda:0',)``.
        release: the flag that releases it: ``--out 7``, ``--out``, ``--var model``.
    """

    kind: str
    name: str
    bytes: int
    devices: tuple
    release: str


def tensor_census(torch) -> dict:
    """``{storage key: nbytes}`` over every tensor object alive in Python (``gc.get_objects``)."""
    Tensor = torch.Tensor
    out = {}
    objs = gc.get_objects()
    try:
        for o in objs:
            if issubclass(type(o), Tensor):  # type(): never triggers a lazy proxy's __class__
                key, nbytes = storage_key_and_bytes(o)
                out[key] = nbytes
    finally:
        del objs
    return out


def holder_bytes(name, obj, torch):
    """Unique storage bytes reachable from ``obj``, and their devices."""
    seen = {}
    for _, t in iter_tensors([(name, obj)], torch):
        key, nbytes = storage_key_and_bytes(t)
        seen[key] = nbytes
    devices = tuple(sorted({k[0] for k in seen}))
    return sum(seen.values()), devices


def find_holders(
    user_ns: dict, hidden: dict | None = None, min_var_bytes: int = 1 * MiB, limit: int = 10
) -> list:
    """What else keeps tensors alive: ``Out[n]`` entries, ``_``/``__``/``___``, large variables.

    Args:
        user_ns: ``shell.user_ns``.
        hidden: ``shell.user_ns_hidden``.
        min_var_bytes: variables holding fewer tensor bytes than this are not listed.
        limit: at most this many variables (largest first).

    Returns:
        list of :class:`Holder` (output cache first, then variables by size). Empty without torch.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    holders = []
    out = user_ns.get("Out")
    if isinstance(out, dict):
        for n, obj in list(out.items()):
            b, devs = holder_bytes(f"Out[{n}]", obj, torch)
            if b:
                holders.append(Holder("output cache", f"Out[{n}]", b, devs, f"--out {n}"))
    for u in ("_", "__", "___"):
        obj = user_ns.get(u)
        b, devs = holder_bytes(u, obj, torch)
        if b:
            holders.append(Holder("last output", u, b, devs, "--out"))
    variables = []
    for name, obj in user_roots(user_ns, hidden):
        if name.startswith("Out["):
            continue
        b, devs = holder_bytes(name, obj, torch)
        if b >= min_var_bytes:
            variables.append(Holder("variable", name, b, devs, f"--var {name}"))
    variables.sort(key=lambda h: -h.bytes)
    return holders + variables[:limit]
