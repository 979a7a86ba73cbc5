"""Who holds memory that keeps growing: each holder named as the user sees it, with its fix.

The search walks backwards from what the user can reach and change, never from the tensors up:

* notebook variables (``user_ns``, without IPython's own names), then the output history
  (``Out[12]``, and ``_``/``__``/``___`` when they hold something ``Out`` does not);
* inside them: ``nn.Module`` attributes and submodules (``model.cache['x']``), parameters and
  buffers, forward/backward hooks (``model.fc1._forward_hooks``), optimizer state, lists, tuples,
  sets, dicts, functions' closures and default arguments, ``functools.partial`` arguments,
  suspended generators' locals and plain objects' attributes;
* the saved traceback of the last error (``sys.last_traceback``: its frames' locals);
* through autograd: a tensor with a ``grad_fn`` keeps its graph alive, and the graph keeps its
  saved tensors (``_saved_self``, ``_saved_result``, ...); the nodes are counted by type
  (``running_loss`` holds 400 ``AddBackward0`` nodes);
* only when live tensors remain that none of those reach: module-level globals of every imported
  module (a library that keeps tensors on a list of its own).

Each tensor storage is counted once, for the first holder that reaches it (graphs are walked after
every variable, so parameters count for their model, not for a graph that saved them). A
:class:`Baseline` taken when the growth began gives each holder's growth since then.

Cost: one ``gc.get_objects()`` pass and one visit per reachable object: well under 2 s with
100,000 live tensors (``benchmarks/bench_holders.py``). Nothing is freed, moved or kept alive:
the search holds its temporaries only while it runs and returns names and numbers. Suspended
generators' locals are read through ``frame.f_locals``, whose snapshot dict (Python < 3.13) is
emptied again afterwards so it keeps nothing alive. torch is read from ``sys.modules`` (never
imported here); no CUDA call is made. Nothing here imports IPython.
"""

from __future__ import annotations

import functools
import gc
import sys
import time
import types
from collections import Counter, deque
from dataclasses import dataclass

MiB = 1 << 20

#: IPython's own names in the namespace (never holders themselves; ``Out`` is walked as history).
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
#: Hook tables of ``nn.Module`` and what each hook is called.
HOOK_DICTS = {
    "_forward_hooks": "forward hook",
    "_forward_pre_hooks": "forward pre-hook",
    "_backward_hooks": "backward hook",
    "_backward_pre_hooks": "backward pre-hook",
}
#: Objects followed at most this deep from a root (``a.b['k'][0].c`` is 4).
MAX_DEPTH = 12
#: Objects visited at most per search (a guard against huge object graphs).
MAX_VISITS = 3_000_000

#: Modules whose frames in a saved traceback are the shell's, not the user's.
_SHELL_MODULES = ("IPython.", "ipykernel.", "cudamagic.")
_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, memoryview)
_SKIP = (types.ModuleType, type, types.BuiltinFunctionType, types.CodeType)
_SEQUENCES = (list, tuple, deque)
_SETS = (set, frozenset)
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)


@dataclass(frozen=True)
class Holder:
    """Something the user can name that keeps tensor memory alive.

    Attributes:
        name: as the user sees it: ``running_loss``, ``losses``, ``model.cache``, ``Out``,
            ``sys.last_traceback``, ``history in the closure of log``, ``forward hook save on
            model.fc1``, ``generator gen``, ``mylib._seen``.
        kind: ``variable``, ``attribute``, ``list``, ``dict``, ``tuple``, ``set``, ``closure``,
            ``default argument``, ``hook``, ``generator``, ``traceback``, ``output history``,
            ``module global``, ``parameters``, ``optimizer state`` or ``object``.
        bytes: tensor storage bytes it holds (each storage counted once, for the first holder
            that reaches it): what releasing it would return.
        grown_bytes: growth of ``bytes`` since the baseline (``bytes`` when there is none).
        tensors: tensor storages it holds (saved tensors of its graph included).
        graph_nodes: autograd nodes kept alive through ``grad_fn`` (0 when none).
        node_types: the most common node types, ``(("AddBackward0", 400), ...)``, at most 3.
        graph_bytes: bytes of the saved tensors of those nodes.
        entries: how its contents are reached, first few (``Out[12]``, ``outs in train``).
        fix: what to run or change, in plain words with the command.
        expected: parameters, buffers and optimizer state (they do not leak; listed last).
    """

    name: str
    kind: str
    bytes: int
    grown_bytes: int
    tensors: int
    graph_nodes: int = 0
    node_types: tuple = ()
    graph_bytes: int = 0
    entries: tuple = ()
    fix: str = ""
    expected: bool = False


@dataclass(frozen=True)
class Baseline:
    """What held memory when the growth began: compared by the next search.

    Attributes:
        holder_bytes: ``{holder name: bytes}``.
        live_keys: storage keys of every tensor object alive then (the storages' identities).
        time_s: ``time.time()`` when it was taken.
    """

    holder_bytes: dict
    live_keys: frozenset
    time_s: float


@dataclass(frozen=True)
class Search:
    """One search's outcome (data only).

    Attributes:
        holders: :class:`Holder` rows, growing ones first, largest growth first.
        baseline: the :class:`Baseline` of this search (for the next one to compare with).
        live_tensor_bytes: bytes of every tensor storage alive as a Python object now, per device
            (``{"cpu": bytes}``); saved tensors that only a graph keeps have no Python object.
        unnamed_bytes: bytes of live tensor objects that no holder reached.
        visits: objects visited. elapsed_s: seconds the search took. truncated: the visit
            limit stopped it early.
    """

    holders: list
    baseline: Baseline
    live_tensor_bytes: dict
    unnamed_bytes: int
    visits: int
    elapsed_s: float
    truncated: bool = False


class _Acc:
    """A holder being filled during the walk."""

    __slots__ = ("name", "kind", "fix", "expected", "bytes", "tensors", "types", "graph_bytes")
    __slots__ += ("entries", "nodes", "root_type")

    def __init__(self, name, kind, fix, expected=False):
        self.name, self.kind, self.fix, self.expected = name, kind, fix, expected
        self.bytes = self.tensors = self.graph_bytes = self.nodes = 0
        self.types = Counter()
        self.entries = []
        self.root_type = None  # the type of the first grad_fn it holds (``AddBackward0``)

    def node_types(self) -> tuple:
        """The root node's type first, then the most common others (3 at most)."""
        top = self.types.most_common()
        if self.root_type is not None:
            top.sort(key=lambda kv: kv[0] != self.root_type)
        return tuple(top[:3])


@dataclass
class _Item:
    """One object on the walk's stack and where it was reached from."""

    obj: object
    path: str
    acc: object  # the holder it counts for, or None while the path is still a plain attribute path
    depth: int
    root: str
    frozen: bool = False
    entry: str = ""  # the holder's direct content this object is reached through (``Out[12]``)


class _Walk:
    def __init__(self, torch, max_visits):
        self.Tensor = torch.Tensor
        self.Module = torch.nn.Module
        self.Optimizer = torch.optim.Optimizer
        self.max_visits = max_visits
        self.seen = set()
        self.keep = []  # temporaries alive during the walk, so their ids stay unique
        self.storages = {}
        self.nodes_seen = set()
        self.holders = {}
        self.graphs = []  # (grad_fn, holder): walked after every root
        self.hooks = []  # (fn, module path, hook kind, hook table, hook id)
        self.saved_attrs = {}
        self.visits = 0
        self.truncated = False
        self.snapshots = []  # generator frames' f_locals snapshots to empty afterwards
        self.live = {}  # id(tensor) -> _storage_info(tensor) of every live tensor object

    # -- holders ------------------------------------------------------------------------
    def holder(self, name, kind, fix, expected=False):
        acc = self.holders.get(name)
        if acc is None:
            acc = self.holders[name] = _Acc(name, kind, fix, expected)
        return acc

    def add_storage(self, t, acc, graph=False):
        info = self.live.get(id(t))
        if info is None or info[3] is not t:  # a saved tensor unpacked from a graph node
            info = _storage_info(t)
        key, nbytes = info[0], info[1]
        if nbytes <= 0 or key in self.storages:
            return
        self.storages[key] = acc.name
        acc.bytes += nbytes
        acc.tensors += 1
        if graph:
            acc.graph_bytes += nbytes

    # -- the walk -------------------------------------------------------------------------
    def run(self, items):
        """Visit ``items`` and what they hold, breadth first.

        Each object is so named by its shortest path: ``features``, rather than ``features in the
        closure of`` a hook of a model that came first in the namespace.
        """
        queue = deque(items)
        while queue:
            if self.visits >= self.max_visits:
                self.truncated = True
                break
            children = self.visit(queue.popleft())
            if children:
                queue.extend(children)

    def visit(self, it):
        obj = it.obj
        t = type(obj)
        if issubclass(t, self.Tensor):
            self.tensor(obj, it)
            return None
        if issubclass(t, _ATOMS) or issubclass(t, _SKIP) or it.depth >= MAX_DEPTH:
            return None
        if id(obj) in self.seen:
            return None
        self.seen.add(id(obj))
        self.visits += 1
        try:
            return self.children(obj, t, it)
        except Exception:  # an object that refuses to be looked at: skip it, never raise
            return None

    def tensor(self, t, it):
        acc = it.acc or self.holder(
            it.path,
            "variable" if "." not in it.path else "attribute",
            _tensor_fix(it.path),
        )
        self.held_tensor(t, acc, (it.entry or it.path) if it.frozen else None)

    def held_tensor(self, t, acc, entry):
        """Count tensor ``t`` (and its ``.grad`` and graph) for ``acc``; ``entry``: how reached."""
        few = entry is not None and (len(acc.entries) < 5 or acc.name == "Out")
        if few and entry not in acc.entries:
            acc.entries.append(entry)
        self.add_storage(t, acc)
        try:  # no graph without requires_grad, and no gradient unless someone set one by hand
            grad, fn = (t.grad if t.is_leaf else None), (t.grad_fn if t.requires_grad else None)
        except Exception:
            return
        if grad is not None:
            self.add_storage(grad, acc)
        if fn is not None:
            self.graphs.append((fn, acc))

    def items_of(self, it, acc, pairs):
        """Children of a container: tensors counted at once, other values pushed with paths.

        A list of 100,000 tensors so makes no stack items.
        """
        out, Tensor, p = [], self.Tensor, it.path
        inherited = it.entry if it.frozen and it.entry else None
        for k, v in pairs:
            if issubclass(type(v), Tensor):
                few = len(acc.entries) < 5 or acc.name == "Out"
                self.held_tensor(v, acc, (inherited or f"{p}[{k}]") if few else None)
            elif not issubclass(type(v), _ATOMS):
                out.append(self.child(it, v, f"{p}[{k}]", acc=acc))
        return out

    def child(self, it, obj, path, *, acc=None, frozen=None):
        """An attribute step keeps the path open; giving ``acc`` freezes the holder."""
        if acc is None:
            acc, frozen = it.acc, it.frozen if frozen is None else frozen
        else:
            frozen = True
        entry = it.entry if it.frozen and it.entry else (path if frozen else "")
        return _Item(obj, path, acc, it.depth + 1, it.root, frozen, entry)

    def freeze(self, it, kind, fix, expected=False):
        """The holder for items of ``it``'s object: its own path unless already frozen."""
        if it.frozen:
            return it.acc
        return self.holder(it.path, kind, fix(it.path), expected)

    def children(self, obj, t, it):
        p = it.path
        if issubclass(t, self.Module):
            return self.module(obj, it)
        if issubclass(t, self.Optimizer):
            acc = self.freeze(it, "optimizer state", _expected_fix, expected=True)
            return [self.child(it, v, f"{p}.state[...]", acc=acc) for v in list(obj.state.values())]
        if issubclass(t, dict):
            acc = self.freeze(it, _container_kind(t), _dict_fix)
            return self.items_of(it, acc, ((_KeyText(k), v) for k, v in list(obj.items())))
        if issubclass(t, _SEQUENCES) or issubclass(t, _SETS):
            acc = self.freeze(it, _container_kind(t), _list_fix if t is list else _del_fix)
            return self.items_of(it, acc, enumerate(list(obj)))
        if issubclass(t, types.FunctionType):
            return self.function(obj, it)
        if issubclass(t, types.MethodType):
            return [self.child(it, obj.__self__, p)]
        if issubclass(t, functools.partial):
            return [self.child(it, v, p) for v in (obj.func, obj.args, obj.keywords)]
        if issubclass(t, _GENERATORS):
            return self.generator(obj, it)
        if issubclass(t, types.FrameType):
            return self.frame_locals(obj, it, it.acc)
        try:
            attrs = object.__getattribute__(obj, "__dict__")
        except Exception:
            return None
        if type(attrs) is not dict:
            return None
        return [self.child(it, v, f"{p}.{k}") for k, v in list(attrs.items())]

    def module(self, m, it):
        p, out = it.path, []
        attrs = object.__getattribute__(m, "__dict__")
        for name, value in list(attrs.items()):
            if name in ("_parameters", "_buffers") and type(value) is dict:
                acc = self.holder(
                    f"{it.root} (parameters, buffers)", "parameters", _expected_fix(it.root), True
                )
                out += [
                    self.child(it, v, f"{p}.{n}", acc=acc)
                    for n, v in list(value.items())
                    if v is not None
                ]
            elif name == "_modules" and type(value) is dict:
                out += [
                    self.child(it, v, f"{p}.{n}") for n, v in list(value.items()) if v is not None
                ]
            elif name in HOOK_DICTS and isinstance(value, dict):
                for hook_id, fn in list(value.items()):
                    self.hooks.append((fn, p, HOOK_DICTS[name], value, hook_id))
                    hook = f"{HOOK_DICTS[name]} {_callable_name(fn)} on {p}"
                    acc = self.holder(hook, "hook", f"`{p}.{name}.clear()` removes it")
                    self.keep.append(value)
                    out.append(self.child(it, fn, hook, acc=acc))
            elif not name.startswith("_"):
                out.append(self.child(it, value, f"{p}.{name}"))
        return out

    def function(self, fn, it):
        out = []
        code = fn.__code__
        for i, (var, cell) in enumerate(zip(code.co_freevars, fn.__closure__ or (), strict=False)):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            name = f"{var} in the closure of {it.path}"
            acc = it.acc if it.frozen else self.holder(name, "closure", _closure_fix(it.path, i))
            out.append(self.child(it, value, name, acc=acc))
        names = code.co_varnames[code.co_posonlyargcount : code.co_argcount]
        defaults = fn.__defaults__ or ()
        for i, value in enumerate(defaults):
            if issubclass(type(value), _ATOMS):
                continue
            var = names[len(names) - len(defaults) + i] if len(names) >= len(defaults) else i
            name = f"default argument {var} of {it.path}"
            fix = f"`{it.path}.__defaults__[{i}].clear()`; a mutable default keeps what it gets"
            acc = it.acc if it.frozen else self.holder(name, "default argument", fix)
            out.append(self.child(it, value, name, acc=acc))
        return out

    def generator(self, gen, it):
        frame = getattr(gen, "gi_frame", None) or getattr(gen, "cr_frame", None)
        frame = frame or getattr(gen, "ag_frame", None)
        if frame is None:  # finished: holds nothing
            return None
        acc = self.freeze(it, "generator", lambda p: f"`{p}.close()` or `del {p}`")
        return self.frame_locals(frame, it, acc, generator=True)

    def frame_locals(self, frame, it, acc, generator=False):
        local = frame.f_locals
        if local is frame.f_globals:  # a cell's own frame: its locals are the namespace
            return None
        if generator and type(local) is dict:
            self.snapshots.append(local)
        where = frame.f_code.co_name
        return [
            self.child(it, v, f"{k} in {where}", acc=acc or it.acc) for k, v in list(local.items())
        ]

    # -- autograd -------------------------------------------------------------------------
    def walk_graphs(self):
        for fn, acc in self.graphs:
            self.graph(fn, acc)

    def saved_names(self, node_type):
        names = self.saved_attrs.get(node_type)
        if names is None:
            names = tuple(n for n in dir(node_type) if n.startswith("_saved_"))
            if hasattr(node_type, "saved_tensors"):  # custom autograd.Function
                names += ("saved_tensors",)
            self.saved_attrs[node_type] = names
        return names

    def graph(self, root, acc):
        Tensor = self.Tensor
        if acc.root_type is None and id(root) not in self.nodes_seen:
            acc.root_type = type(root).__name__
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in self.nodes_seen:
                continue
            self.nodes_seen.add(id(node))
            self.keep.append(node)
            self.visits += 1
            acc.nodes += 1
            acc.types[type(node).__name__] += 1
            for name in self.saved_names(type(node)):
                try:
                    value = getattr(node, name)
                except Exception:  # freed by backward(), or not a tensor field
                    continue
                for v in value if type(value) in (tuple, list) else (value,):
                    if issubclass(type(v), Tensor):
                        self.add_storage(v, acc, graph=True)
            try:
                nxt = node.next_functions
            except Exception:
                continue
            stack.extend(child for child, _ in nxt if child is not None)

    def cleanup(self):
        for snap in self.snapshots:
            snap.clear()
        self.live.clear()
        self.keep.clear()
        self.graphs.clear()
        self.snapshots.clear()


# ---- fixes ------------------------------------------------------------------------------


def _tensor_fix(path):
    return (
        f"keep a number or a detached tensor, not the graph: `{path} += loss.item()` "
        f"(or `.detach()`); `{path} = {path}.detach()` releases what it holds now"
    )


def _list_fix(path):
    return f"`{path}.clear()` or `del {path}`"


def _dict_fix(path):
    return f"`{path}.clear()`, or bound it (a cache keyed by step never stops growing)"


def _del_fix(path):
    return f"`del {path}`"


def _expected_fix(path):
    return "expected: the model's weights and the optimizer's state do not leak"


def _closure_fix(fn, index):
    return f"`{fn}.__closure__[{index}].cell_contents.clear()` or `del {fn}`"


def _container_kind(t):
    bases = (dict, list, tuple, deque, set, frozenset)
    return next((base.__name__ for base in bases if issubclass(t, base)), "object")


class _KeyText:
    """A dict key shown as its ``repr`` (clipped to 40 characters), computed only when shown."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __format__(self, spec):
        text = repr(self.key)
        return text if len(text) <= 40 else text[:39] + "\u2026"


def _callable_name(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


# ---- the search ---------------------------------------------------------------------------


def _storage_info(t):
    """``(storage key, nbytes, device type, t)``; the key is the storage's identity while alive."""
    try:
        st = t.untyped_storage()
        return st._cdata, int(st.nbytes()), "cpu" if t.is_cpu else t.device.type, t
    except Exception:  # sparse, nested, meta or other storage-less tensors
        return ("id", id(t)), int(t.numel() * t.element_size()), t.device.type, t


def _live_tensors(Tensor) -> dict:
    """``{id(tensor): _storage_info(tensor)}`` over every tensor object alive (``gc``).

    Types are tested with ``type()`` (a lazy proxy is never asked for its ``__class__``), once per
    type.
    """
    is_tensor, live = {}, {}
    objs = gc.get_objects()
    try:
        for o in objs:
            t = type(o)
            hit = is_tensor.get(t)
            if hit is None:
                hit = is_tensor[t] = issubclass(t, Tensor)
            if hit:
                live[id(o)] = _storage_info(o)
    finally:
        del objs
    return live


def _user_items(user_ns, hidden):
    hidden = hidden or {}
    items = []
    for name, obj in list(user_ns.items()):
        if name.startswith("_") or name in IPYTHON_NAMES:
            continue
        if name in hidden and hidden[name] is obj:
            continue
        items.append(_Item(obj, name, None, 0, name))
    return items


def _history_items(walk, user_ns):
    out = user_ns.get("Out")
    items = []
    if isinstance(out, dict):
        nums = list(out)
        acc = walk.holder("Out", "output history", "")
        items += [_Item(out[n], f"Out[{n}]", acc, 1, "Out", True, f"Out[{n}]") for n in nums]
    for u in ("_", "__", "___"):
        obj = user_ns.get(u)
        if obj is not None and not isinstance(obj, str):
            items.append(
                _Item(obj, u, walk.holder(u, "output history", "`%cudamem free --out`"), 1, u, True)
            )
    return items


def last_error_tracebacks(extra=()) -> list:
    """The tracebacks the last error keeps alive, each holding its frames' locals.

    ``sys.last_traceback`` and the tracebacks of ``sys.last_value``/``sys.last_exc`` and of every
    exception chained to them (``__context__``, ``__cause__``), then ``extra`` (the shell's own
    copies). Entries may be None.
    """
    tbs, excs, seen = [getattr(sys, "last_traceback", None), *extra], [], set()
    for attr in ("last_value", "last_exc"):
        v = getattr(sys, attr, None)
        if isinstance(v, BaseException):
            excs.append(v)
    while excs:  # the exception, and the exceptions chained to it
        e = excs.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        tbs.append(e.__traceback__)
        excs.extend(x for x in (e.__context__, e.__cause__) if x is not None)
    return tbs


def _traceback_items(walk):
    acc = walk.holder("sys.last_traceback", "traceback", "`%cudamem free` drops it")
    items = []
    for tb in last_error_tracebacks():
        while tb is not None and hasattr(tb, "tb_frame"):
            module = tb.tb_frame.f_globals.get("__name__", "")
            if not module.startswith(_SHELL_MODULES):  # IPython's own frames: not the user's
                items.append(_Item(tb.tb_frame, "sys.last_traceback", acc, 1, "sys", True))
            tb = tb.tb_next
    return items


def _module_items(walk):
    items = []
    for mod_name, mod in list(sys.modules.items()):
        attrs = getattr(mod, "__dict__", None) if isinstance(mod, types.ModuleType) else None
        if type(attrs) is not dict or mod_name.startswith("cudamagic"):
            continue
        for k, v in list(attrs.items()):
            if issubclass(type(v), walk.Tensor) or type(v) in (list, dict, tuple, set, deque):
                path = f"{mod_name}.{k}"
                items.append(
                    _Item(v, path, walk.holder(path, "module global", _lib_fix(path, v)), 1, path)
                )
    return items


def _lib_fix(path, value):
    clear = f"`{path}.clear()`" if type(value) in (list, dict, set, deque) else f"`del {path}`"
    return f"{clear} (a library keeps them: look for its option to stop)"


def _hook_notes(walk, user_ns, hidden):
    """``{holder name: (note, fix)}`` for the variables that hook functions fill.

    A hook's fix names the variable holding its ``RemovableHandle`` when there is one.
    """
    handles = {}
    for name, obj in list(user_ns.items()):
        if type(obj).__name__ == "RemovableHandle" and not name.startswith("_"):
            table = getattr(obj, "hooks_dict_ref", lambda: None)()
            handles[(id(table), getattr(obj, "id", None))] = name
    notes = {}
    for fn, module_path, kind, table, hook_id in walk.hooks:
        handle = handles.get((id(table), hook_id))
        remove = f"`{handle}.remove()`" if handle else f"remove the hook on {module_path}"
        hook = f"{kind} {_callable_name(fn)} on {module_path}"
        if handle and hook in walk.holders:
            walk.holders[hook].fix = f"{remove} (or store `.detach()` copies)"
        code = getattr(fn, "__code__", None)
        for var in getattr(code, "co_names", ()):
            if var in walk.holders:
                notes[var] = (f"filled by the {hook}", remove)
    return notes


def find_holders(
    user_ns: dict,
    hidden: dict | None = None,
    baseline: Baseline | None = None,
    *,
    min_bytes: int = MiB,
    max_visits: int = MAX_VISITS,
) -> Search:
    """Name what keeps tensor memory alive, and how much each holder grew since ``baseline``.

    Args:
        user_ns: the notebook namespace (``shell.user_ns``); ``Out`` and ``_`` are read from it.
        hidden: ``shell.user_ns_hidden``: names IPython itself put there are skipped.
        baseline: an earlier search's :attr:`Search.baseline`; None lists holders by size.
        min_bytes: holders whose growth (without a baseline: size) is below this many bytes are
            left out (1 MiB).
        max_visits: stop after visiting this many objects (the result says it was truncated).

    Returns:
        :class:`Search`. Empty holders when torch is not imported.
    """
    start = time.perf_counter()
    torch = sys.modules.get("torch")
    if torch is None:
        empty = Baseline({}, frozenset(), time.time())
        return Search([], empty, {}, 0, 0, time.perf_counter() - start)
    walk = _Walk(torch, max_visits)
    walk.live = _live_tensors(torch.Tensor)
    live = {}
    for key, nbytes, device, _ in walk.live.values():
        live[key] = (nbytes, device)
    try:
        walk.run(_user_items(user_ns, hidden))
        walk.run(_history_items(walk, user_ns))
        walk.run(_traceback_items(walk))
        walk.walk_graphs()
        unnamed = [k for k in live if k not in walk.storages]
        if baseline is not None:
            unnamed = [k for k in unnamed if k not in baseline.live_keys]
        if sum(live[k][0] for k in unnamed) >= min_bytes:
            walk.run(_module_items(walk))
            walk.walk_graphs()
        notes = _hook_notes(walk, user_ns, hidden)
        holders = _rows(walk, baseline, min_bytes, notes)
        base = Baseline(
            {a.name: a.bytes for a in walk.holders.values()}, frozenset(live), time.time()
        )
        unnamed_bytes = sum(b for k, (b, _) in live.items() if k not in walk.storages)
    finally:
        walk.cleanup()
    per_device = Counter()
    for nbytes, device in live.values():
        per_device[device] += nbytes
    return Search(
        holders,
        base,
        dict(per_device),
        unnamed_bytes,
        walk.visits,
        time.perf_counter() - start,
        walk.truncated,
    )


def _rows(walk, baseline, min_bytes, notes) -> list:
    rows = []
    for acc in walk.holders.values():
        if not acc.bytes and not acc.nodes:
            continue
        grown = acc.bytes - (baseline.holder_bytes.get(acc.name, 0) if baseline else 0)
        if grown < min_bytes:
            continue
        fix = acc.fix
        if acc.kind == "output history":
            nums = " ".join(e[4:-1] for e in acc.entries if e.startswith("Out["))
            fix = f"`%cudamem free --out {nums}`" if acc.name == "Out" else acc.fix
        elif acc.kind in ("variable", "attribute") and not acc.nodes:
            fix = f"`del {acc.name}`"
        elif acc.nodes and acc.kind in ("list", "dict", "tuple", "deque"):
            fix = f"store `.item()` or `.detach()`, not the tensor; {fix}"
        note = notes.get(acc.name)
        entries = tuple(acc.entries)
        if note is not None:
            entries = (note[0],) + entries
            fix = f"{note[1]}; {fix}"
        rows.append(
            Holder(
                name=acc.name,
                kind=acc.kind,
                bytes=acc.bytes,
                grown_bytes=grown,
                tensors=acc.tensors,
                graph_nodes=acc.nodes,
                node_types=acc.node_types(),
                graph_bytes=acc.graph_bytes,
                entries=entries,
                fix=fix,
                expected=acc.expected,
            )
        )
    rows.sort(key=lambda h: (h.expected, -h.grown_bytes, -h.bytes))
    return rows
