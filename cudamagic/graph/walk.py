"""Walking the autograd graph behind some tensors.

Walking the autograd graph behind some tensors into an
:class:`~cudamagic.graph.model.AutogradGraph`.

The walk is iterative (a chain of 100,000 ops needs no deep Python stack), reads
``grad_fn``, ``next_functions``, ``AccumulateGrad.variable`` and the saved
attributes, and counts the bytes of the distinct storages saved tensors keep
alive (parameters not counted; every layout, see :func:`storage_parts`). Saved
tensors are read through ``_raw_saved_*`` (``SavedTensor.data`` and
``.unpack_hook``), so a saved-tensor hook's unpack never runs (:func:`read_saved`):
a non-reentrant checkpoint's tensors are "recomputed in backward" (only the inputs
its frame keeps are counted), ``save_on_cpu``'s are "kept on CPU". No reference to a user tensor or
autograd node survives :func:`walk`. :func:`guard_deep_free` keeps the kernel alive when a deep
walked graph is freed later.

torch is imported inside the functions that need it.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import Counter
from collections.abc import Iterable, Sequence

from ..core import platform
from ..core.gcpause import paused_gc
from .model import (
    ACCUMULATE,
    BACKWARD,
    BASE,
    GRAD,
    LEAF,
    OUTPUT,
    PARAM,
    TO_OUTPUT,
    VARIABLE,
    VIEW,
    AutogradGraph,
    GraphEdge,
    GraphNode,
    SavedEntry,
)
from .views import add_saved_nodes, place_params, split_uses

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_FREED_HINTS = ("freed", "second time")
MAX_ATTR_CHARS = 50


@functools.cache
def _saved_attrs(cls) -> tuple:
    """The saved attributes of node class ``cls``, its name and kind, read once per class.

    ``(((attribute, name, raw attribute), ...), class name, custom Function)``:
    ``("_saved_self", "self", "_raw_saved_self")`` (the raw attribute ``''`` where the class has
    none: a non-tensor attribute); one string each per class however many nodes (``dir()`` of each
    node would cost a 100k-op chain seconds).
    """
    from torch.autograd.function import BackwardCFunction

    attrs = tuple(
        (a, a[len("_saved_") :], "_raw" + a if hasattr(cls, "_raw" + a) else "")
        for a in sorted(dir(cls))
        if a.startswith("_saved_")
    )
    return attrs, cls.__name__, issubclass(cls, BackwardCFunction)


def _dtype_str(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _shape(t):
    try:
        return tuple(t.shape)
    except Exception:  # jagged nested tensors, symbolic sizes
        return None


@functools.cache
def _fake_tensor_class():
    try:
        from torch._subclasses.fake_tensor import FakeTensor
    except ImportError:  # older torch
        return ()
    return FakeTensor


def _is_fake(t) -> bool:
    return isinstance(t, _fake_tensor_class())


def _components(t):
    """The plain tensors a sparse or subclass tensor is made of.

    The plain tensors a sparse tensor or a traceable subclass (``__tensor_flatten__``) is made of,
    or None.
    """
    import torch

    layout = t.layout
    if layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    if layout in (torch.sparse_csc, torch.sparse_bsc):
        return [t.ccol_indices(), t.row_indices(), t.values()]
    flatten = getattr(t, "__tensor_flatten__", None)  # subclasses only: torch.Tensor has none
    if flatten is not None:
        names, _ = flatten()
        return [v for v in (getattr(t, n, None) for n in names) if isinstance(v, torch.Tensor)]
    return None


_device_name = functools.cache(str)  # torch.device -> 'cuda:0', once per device


def storage_parts(t, _depth: int = 0) -> tuple:
    """The storages tensor ``t`` keeps alive, for every layout autograd can save.

    Strided tensors (views included: the whole storage counts), quantized tensors (plus per-channel
    scales and zero points), sparse COO/CSR/CSC/BSR/BSC (indices and values), strided and jagged
    nested tensors, tensor subclasses (their storage, else the inner tensors of
    ``__tensor_flatten__``), any device. Meta and fake tensors hold no data (no parts).

    Returns:
        ``(parts, why)``: ``parts`` is ``[((device, data_ptr), storage bytes, own bytes), ...]``
        (own
        bytes: numel x element size, the tensor's share of the storage); ``why`` is ``''``, or the
            reason
        the size cannot be known (then ``parts`` is ``None``: never a dense guess).
    """
    import torch

    if t.is_meta or (type(t) is not torch.Tensor and _is_fake(t)):
        return [], ""
    if _depth > 4:
        return None, f"{type(t).__name__} nested too deep"
    comps = None
    if t.layout != torch.strided:
        try:
            comps = _components(t)
        except Exception:
            comps = None
        if comps is None:
            return None, f"{t.layout} layout"
    if comps is None:
        try:
            st = t.untyped_storage()
            nbytes = st.nbytes()
            try:
                own = int(t.numel() * t.element_size())
            except Exception:
                own = nbytes
            parts = [((_device_name(t.device), st.data_ptr()), nbytes, min(own, nbytes))]
            if t.is_quantized and "per_channel" in str(t.qscheme()):
                for extra in (t.q_per_channel_scales(), t.q_per_channel_zero_points()):
                    p, why = storage_parts(extra, _depth + 1)
                    if p is None:  # nested too deep: unknown, never the data alone
                        return None, why
                    parts += p
            return parts, ""
        except Exception:
            try:
                comps = _components(t)
            except Exception:
                comps = None
    if not comps:
        return None, f"{type(t).__name__} with no readable storage"
    parts = []
    for c in comps:
        p, why = storage_parts(c, _depth + 1)
        if p is None:
            return None, why
        parts += p
    return parts, ""


_MISSING = object()
_new_tuple = tuple.__new__  # a named tuple made from a tuple, without its Python-level __new__


def hook_kind(unpack_hook) -> str:
    """How a saved-tensor hook holds a tensor, from its unpack hook (never called)."""
    module = getattr(unpack_hook, "__module__", "") or ""
    qual = getattr(unpack_hook, "__qualname__", "") or type(unpack_hook).__name__
    if module == "torch.utils.checkpoint":
        return "recomputed in backward"
    if qual.startswith("save_on_cpu"):
        return "kept on CPU"
    return f"packed by {qual.split('.<locals>')[0]}"


def _packed_tensors(data, _depth: int = 0) -> list:
    """Tensors inside what a pack hook returned (a tensor, or tuples/lists/dicts of them)."""
    import torch

    if isinstance(data, torch.Tensor):
        return [data]
    if _depth < 3 and isinstance(data, (tuple, list)):
        return [t for v in data for t in _packed_tensors(v, _depth + 1)]
    if _depth < 3 and isinstance(data, dict):
        return [t for v in data.values() for t in _packed_tensors(v, _depth + 1)]
    return []


def checkpoint_inputs(unpack_hook):
    """The inputs a non-reentrant checkpoint keeps, or None.

    ``(frame key, tensors)``: the inputs a non-reentrant checkpoint keeps to recompute its block, or
    None.

    Read from the ``frame`` its unpack hook closes over
    (``torch.utils.checkpoint._CheckpointFrame``, ``saved_args``: ``SavedTensor``s made without
    hooks, read through ``.data``, never unpacked). Private
    API: ``None`` when the layout of these objects changes (the size is then reported as unknown).
    """
    try:
        cells = dict(
            zip(unpack_hook.__code__.co_freevars, unpack_hook.__closure__ or (), strict=False)
        )
        frame = cells["frame"].cell_contents
        tensors = []
        for arg in frame.saved_args:
            # else a plain value (an int)
            data = arg.data if type(arg).__name__ == "SavedTensor" else arg
            tensors += _packed_tensors(data)
        return id(frame), tensors
    except Exception:
        return None


class Hooked:
    """A saved tensor behind saved-tensor hooks, read without unpacking.

    ``held``, the tensors held, ``known``.

    A non-reentrant checkpoint holds nothing per saved tensor until backward recomputes it, but its
    frame keeps the block's inputs: those are counted once per frame (``frame``), on the first entry
    seen.
    """

    __slots__ = ("frame", "held", "known", "tensors")

    def __init__(self, raw):
        self.held = hook_kind(raw.unpack_hook)
        self.frame = None
        data = raw.data
        if self.held == "recomputed in backward":
            found = checkpoint_inputs(raw.unpack_hook)
            self.known = found is not None
            self.frame, self.tensors = found if found else (None, [])
        else:
            self.tensors = _packed_tensors(data)
            self.known = bool(self.tensors) or data is None


def read_saved(fn, attr: str):
    """Saved attribute ``attr`` of ``fn``, without unpack hooks.

    Value of saved attribute ``attr`` (``_saved_self``) of node ``fn`` without running unpack hooks.

    Returns the tensor (or tuple of tensors / ``None`` / :class:`Hooked`), or the plain attribute
    for non-tensor attributes. Raises ``RuntimeError`` when ``backward()`` freed it.
    """
    raw = getattr(fn, "_raw" + attr, _MISSING)
    if raw is _MISSING:
        return getattr(fn, attr)
    many = isinstance(raw, (tuple, list))
    raws = list(raw) if many else [raw]
    # r: a SavedTensor or None
    hooked = any(r is not None and r.unpack_hook is not None for r in raws)
    out = []
    for r in raws:
        if r is None:
            out.append(None)
        elif r.unpack_hook is not None:
            out.append(Hooked(r))
        else:
            data = r.data
            if data is None and not hooked and attr != "_saved_tensors":
                # freed (raises) or an undefined tensor; no hook is set, none runs
                return getattr(fn, attr)
            out.append(data)
    return tuple(out) if many else out[0]


def _is_freed_error(exc: Exception) -> bool:
    text = str(exc)
    return any(h in text for h in _FREED_HINTS)


def _short(value) -> str:
    text = _ADDRESS.sub("0x…", str(value))
    return text if len(text) <= MAX_ATTR_CHARS else text[: MAX_ATTR_CHARS - 1] + "…"


def walk(outputs: Sequence, **kwargs) -> AutogradGraph:
    """Walk the graph behind ``outputs``, GC paused; see :func:`_walk` for the arguments."""
    with paused_gc(promote=True):
        graph = _walk(outputs, **kwargs)
    kinds = graph.kind_counts  # counted once: the views ask again
    note = guard_deep_free(kinds[BACKWARD] + kinds[ACCUMULATE])
    if note:
        graph.notes.append(note)
    return graph


# Bytes of C stack one level of PyTorch's recursive free of a Python-visited autograd node takes
# (measured about 150 on x86-64 Linux with torch 2.13; margin for bigger node types).
_STACK_PER_NODE_BYTES = 512
_DEEP_GRAPH_NODES = 10_000
_MAX_MAIN_STACK_BYTES = 120 * 1024 * 1024  # the kernel keeps ~128 MiB below the main stack free


def guard_deep_free(n_nodes: int) -> str:
    """Keep the kernel alive when the walked graph is freed later; returns a note or ``''``.

    Once Python has visited an autograd node (``grad_fn``, ``next_functions``), PyTorch frees that
    node through its Python object, recursively: the C stack needed grows with the depth of the
    graph, and freeing a chain of about 50,000 visited ops overflows the default 8 MiB main-thread
    stack (a segmentation fault that kills the kernel when the user deletes the tensor or reruns the
    cell). For graphs of more than ``_DEEP_GRAPH_NODES`` nodes (fewer where the main stack is
    smaller: 4,096 with the 2 MB of a Windows ``python.exe``, whose advice keeps half that) this
    asks :func:`cudamagic.core.platform.raise_stack_limit` for ``8 MiB + n_nodes * 512`` bytes, at
    most 120 MiB (POSIX raises the soft ``RLIMIT_STACK``, which Linux grows the main thread's stack
    up to; a Windows main thread's stack is fixed at start). Where the stack cannot be made large
    enough, the note warns the user.

    Args:
        n_nodes: Autograd nodes visited (count).

    Returns:
        ``''`` when nothing needed saying, else one paragraph for the result's notes.
    """
    stack = platform.main_stack_bytes()
    threshold = _DEEP_GRAPH_NODES
    if stack is not None and stack < 8 * 1024 * 1024:
        threshold = min(threshold, stack // _STACK_PER_NODE_BYTES)
    if n_nodes <= threshold:
        return ""
    need = 8 * 1024 * 1024 + n_nodes * _STACK_PER_NODE_BYTES
    ok, why = platform.raise_stack_limit(need, _MAX_MAIN_STACK_BYTES)
    if ok:
        return ""
    limit = (
        "under about 200,000 chained ops"
        if not platform.is_windows()
        else "under about 2,000 chained ops"
    )
    return (
        f"This graph has {n_nodes} autograd nodes: PyTorch frees a graph that Python has inspected "
        "recursively, and freeing one this deep can overflow the C stack and end the kernel "
        f"({why}). Keep "
        f"graphs you draw {limit}, or restart the kernel instead of deleting it."
    )


def _walk(
    outputs: Sequence,
    *,
    tensor_names: dict | None = None,
    show_saved: bool = False,
    show_attrs: bool = False,
    shared_params: bool = False,
    calls: Sequence = (),
    call_starts: Sequence = (),
    call_ends: Sequence = (),
    notes: Iterable = (),
) -> AutogradGraph:
    """Walk the autograd graph behind ``outputs`` iteratively into an :class:`AutogradGraph`.

    Each autograd node is visited once and each edge read once (a chain of ``n`` ops: ``n`` visits);
    saved entries that are equal (one per op of a long chain) are one object.

    Args:
        outputs: ``(path, tensor)`` pairs (tensors of any shape/dtype with a ``grad_fn`` or
            ``requires_grad``), from :func:`~cudamagic.graph.capture.flatten_outputs`.
        tensor_names: ``id(tensor) -> name`` from :func:`~cudamagic.graph.capture.namespace_names`.
        show_saved: Draw every saved tensor as a node (custom Functions' are always drawn).
        show_attrs: Keep non-tensor saved attributes (``alpha``, ``dim``, sizes) on the nodes.
        shared_params: Draw one node per leaf tensor; by default a leaf used by several
            consumers is drawn once per consumer (use ``k`` of ``n``), which keeps ``dot`` fast on
            unrolled RNNs.
        calls: Module calls, from :meth:`~cudamagic.graph.capture.ModuleCallRecorder.resolve`.
        call_starts: Their first sequence numbers (same source).
        call_ends: Their last sequence numbers (same source).
        notes: Notes to carry into the graph.

    Returns:
        The graph. Reading saved tensors that ``backward()`` already freed marks them ``freed``.
    """
    import torch
    from torch import Tensor
    from torch._C._autograd import SavedTensor

    names = tensor_names or {}
    customs = 0  # nodes of custom Functions
    # slot i holds node "n{i}": its GraphNode, or (backward nodes) its record until the end
    slots: list = []
    edges: list = []
    ids: dict = {}
    frames: set = set()
    leaf_storages: set = set()
    interned: dict = {}  # equal saved tuples are one object (a 100k-op chain: a few tuples)
    plain_saved: dict = {}  # ((name, bytes), ...) -> the saved entries of a plain node
    strided = torch.strided

    def tensor_node(kind, t, label):
        node = GraphNode(
            f"n{len(slots)}",
            kind,
            label,
            shape=_shape(t),
            dtype=_dtype_str(t),
            device=str(t.device),
        )
        slots.append(node)
        return node.id

    def add_tensor(name, t, detailed, entries, stor, counts):
        """Add saved tensor ``t``'s entry and storages; 1 when its size cannot be known, else 0."""
        held = ""
        if type(t) is Hooked:
            held = t.held
            counts[held] = counts.get(held, 0) + 1
            parts, known = [], t.known
            if t.frame is not None:
                if t.frame in frames:
                    t.tensors = []
                frames.add(t.frame)
            for inner in t.tensors:
                p, _ = storage_parts(inner)
                if p is None:
                    known = False
                else:
                    parts += p
            t = t.tensors[0] if len(t.tensors) == 1 and t.frame is None else None
        else:
            parts, _ = storage_parts(t)
            known = parts is not None
        stor += parts or ()
        nbytes = sum(p[1] for p in parts) if parts else 0
        if t is not None and detailed:
            entries.append(
                SavedEntry(name, _shape(t), _dtype_str(t), nbytes, held=held, size_known=known)
            )
        else:
            entries.append(SavedEntry(name, nbytes=nbytes, held=held, size_known=known))
        return 0 if known else 1

    def plain_record(fn, node_id, label, attr_names):
        """:func:`backward_record` of a node whose saved tensors are plain, or None.

        Plain: each saved tensor a strided ``torch.Tensor`` held by autograd itself (no hook, not
        freed), each other attribute no tensor; almost every node of a model. One read of each,
        inline: a 100,000-op chain spends most of its walk here. Anything else returns None, and
        the node is read again by :func:`backward_record`.
        """
        keys, stor = [], []  # (name, bytes) of each saved tensor; its storage parts
        for attr, name, raw_attr in attr_names:
            if not raw_attr:
                val = getattr(fn, attr)
                if isinstance(val, Tensor) or (
                    isinstance(val, (tuple, list)) and any(isinstance(v, Tensor) for v in val)
                ):
                    return None
                continue
            try:
                raw = getattr(fn, raw_attr)
                if type(raw) is not SavedTensor or raw.unpack_hook is not None:
                    return None
                t = raw.data
                if t is None:  # not saved (None), or freed (raises): only the former is plain
                    if getattr(fn, attr) is not None:
                        return None
                    continue
            except RuntimeError:
                return None
            if type(t) is not Tensor or t.layout is not strided or t.is_meta or t.is_quantized:
                return None
            try:
                st = t.untyped_storage()
            except Exception:  # functorch and functional wrappers have no storage
                return None
            nbytes = st.nbytes()
            stor.append(((_device_name(t.device), st.data_ptr()), nbytes, min(t.nbytes, nbytes)))
            keys.append((name, nbytes))
        keys = tuple(keys)
        saved = plain_saved.get(keys)
        if saved is None:  # made once per distinct list of (name, bytes): a few in a long chain
            saved = tuple(SavedEntry(name, nbytes=nbytes) for name, nbytes in keys)
            saved = plain_saved[keys] = interned.setdefault(saved, saved)
        call = _call_of(fn, calls, call_starts, call_ends) if calls else None
        return (node_id, label, call, saved, (), False, (), 0, stor)

    def backward_record(fn, node_id, label, attr_names, custom):
        """``(id, label, call, saved, attrs, freed, held, size unknown, storage parts)``."""
        entries, attrs, stor, counts = [], [], [], {}
        freed, unknown = False, 0
        detailed = show_saved or custom
        if custom:
            try:
                values = read_saved(fn, "_saved_tensors")
            except RuntimeError as exc:
                if not _is_freed_error(exc):
                    raise
                entries.append(SavedEntry("saved_tensors", freed=True))
                freed = True
                values = ()
            for i, t in enumerate(values):
                if t is None:
                    entries.append(SavedEntry(f"saved_tensors[{i}]", is_none=True))
                else:
                    unknown += add_tensor(f"saved_tensors[{i}]", t, detailed, entries, stor, counts)
        for attr, name, raw_attr in attr_names:
            try:
                if not raw_attr:  # not a tensor attribute: the value itself
                    val = getattr(fn, attr)
                else:
                    raw = getattr(fn, raw_attr)
                    if type(raw) is SavedTensor and raw.unpack_hook is None:
                        # no hook: the tensor at once; None when undefined or freed (then the
                        # plain attribute answers None or raises the freed error)
                        val = raw.data
                        if val is None:
                            val = getattr(fn, attr)
                    else:
                        val = read_saved(fn, attr)
            except RuntimeError as exc:
                if not _is_freed_error(exc):
                    raise
                entries.append(SavedEntry(name, freed=True))
                freed = True
                continue
            if isinstance(val, (Tensor, Hooked)):
                unknown += add_tensor(name, val, detailed, entries, stor, counts)
            elif isinstance(val, (tuple, list)) and any(
                isinstance(v, (Tensor, Hooked)) for v in val
            ):
                for i, v in enumerate(val):
                    if isinstance(v, (Tensor, Hooked)):
                        unknown += add_tensor(f"{name}[{i}]", v, detailed, entries, stor, counts)
            elif show_attrs:
                attrs.append((name, _short(val)))
        saved = tuple(entries)
        call = _call_of(fn, calls, call_starts, call_ends) if calls else None
        held = tuple(sorted(counts.items())) if counts else ()
        return (
            node_id,
            label,
            call,
            interned.setdefault(saved, saved),
            tuple(attrs),
            freed,
            held,
            unknown,
            stor,
        )

    stack = []

    def visit(fn):
        node_id = ids.get(fn)
        if node_id is None:
            node_id = ids[fn] = f"n{len(slots)}"
            stack.append((fn, len(slots), node_id))
            slots.append(None)
        return node_id

    for path, t in outputs:
        label = path or names.get(id(t)) or "output"
        out_id = tensor_node(OUTPUT, t, label)
        if t.grad_fn is not None:
            edges.append(GraphEdge(visit(t.grad_fn), out_id, TO_OUTPUT))
        base = t._base  # not None exactly when t is a view
        if base is not None:
            base_id = tensor_node(BASE, base, f"{label} (base)")
            edges.append(GraphEdge(base_id, out_id, VIEW))
            if base.grad_fn is not None:
                edges.append(GraphEdge(visit(base.grad_fn), base_id, TO_OUTPUT))
        while stack:
            fn, i, node_id = stack.pop()
            attr_names, cls_name, custom = _saved_attrs(type(fn))
            customs += custom
            # a custom ctx may have .variable too
            var = fn.variable if cls_name == "AccumulateGrad" else None
            if var is not None:
                name = names.get(id(var))
                kind = PARAM if name is not None and "." in name else LEAF
                edges.append(GraphEdge(tensor_node(kind, var, name or "(leaf)"), node_id, VARIABLE))
                parts, _ = storage_parts(var)  # its storage, whose saved uses are not counted
                leaf_storages.add(parts[0][0] if parts else None)
                slots[i] = GraphNode(node_id, ACCUMULATE, cls_name)
                continue
            rec = (
                None
                if custom or show_saved or show_attrs
                else plain_record(fn, node_id, cls_name, attr_names)
            )
            slots[i] = rec or backward_record(fn, node_id, cls_name, attr_names, custom)
            for u, _ in fn.next_functions:
                if u is not None:
                    src = ids.get(u)
                    if src is None:  # visit(u), inline: once per edge of a 100k-op chain
                        src = ids[u] = f"n{len(slots)}"
                        stack.append((u, len(slots), src))
                        slots.append(None)
                    edges.append(_new_tuple(GraphEdge, (src, node_id, GRAD)))
    ids.clear()
    total, held, unknown = _backward_nodes(slots, leaf_storages)
    graph = AutogradGraph(
        slots,
        edges,
        list(calls),
        list(notes) + _held_notes(held, unknown),
        total,
        saved_unknown=unknown,
    )
    if calls:
        graph = place_params(graph)
    # custom Functions' saved tensors always; every one with show_saved
    if show_saved or customs:
        graph = add_saved_nodes(graph, show_saved)
    return split_uses(graph) if not shared_params else graph


def _call_of(fn, calls: Sequence, call_starts: Sequence, call_ends: Sequence):
    """Index of the innermost module call that created ``fn``.

    Index of the innermost module call that created autograd node ``fn`` (``None``: outside every
    call).

    Found from ``fn._sequence_nr()`` and the calls' sequence-number intervals (see
    :class:`~cudamagic.graph.capture.ModuleCallRecorder`).
    """
    if not calls:
        return None
    try:
        seq = fn._sequence_nr()
    except Exception:
        return None
    i = bisect.bisect_right(call_starts, seq) - 1
    while i is not None and i >= 0:
        if call_starts[i] <= seq < call_ends[i]:
            return i
        i = calls[i].parent
    return None


def _backward_nodes(slots: list, leaf_storages: set) -> tuple:
    """Turn the backward nodes' records in ``slots`` into ``GraphNode``s, in place.

    Their saved-byte fields come from distinct storages per node, parameters (leaf storages) not
    counted; storages get small ids in walk order so collapsed boxes and folded runs count a shared
    storage once too.

    Args:
        slots: Nodes in walk order; a backward node's slot holds the record of ``_walk``.
        leaf_storages: Storage keys of leaf tensors (parameters), not counted.

    Returns:
        ``(bytes of the distinct storages held for backward, {how: count} of saved tensors behind
        hooks, saved tensors of unknown size)``.
    """
    sid_of: dict = {}
    total = unknown = 0
    held = Counter()
    for i, rec in enumerate(slots):
        if type(rec) is not tuple:
            continue
        node_id, label, call, saved, attrs, freed, hooks, n_unknown, parts = rec
        if len(parts) == 1 and parts[0][0] not in leaf_storages:  # one storage: most nodes
            key, nbytes, own = parts[0]
            sid = sid_of.get(key)
            if sid is None:
                sid = sid_of[key] = len(sid_of)
                total += nbytes
            storages, view_bytes = ((sid, nbytes),), own
        else:
            here, own_here = {}, {}
            for key, nbytes, own in parts:
                if key in leaf_storages:
                    continue
                sid = sid_of.get(key)
                if sid is None:
                    sid = sid_of[key] = len(sid_of)
                    total += nbytes
                here[sid] = nbytes
                own_here[sid] = max(own_here.get(sid, 0), own)
            storages, view_bytes = tuple(sorted(here.items())), sum(own_here.values())
            nbytes = sum(here.values())
        if hooks:
            held.update(dict(hooks))
        unknown += n_unknown
        # GraphNode's fields in order, without its Python-level __new__ (100,000 nodes)
        slots[i] = _new_tuple(
            GraphNode,
            (node_id, BACKWARD, label, None, "", "", nbytes, saved, attrs, call, None, 1, 0,
             freed, storages, view_bytes, hooks, n_unknown),
        )  # fmt: skip
    return total, held, unknown


def _held_notes(held: dict, unknown: int) -> list:
    """Notes on saved tensors behind saved-tensor hooks and of unknown size (one sentence each).

    Args:
        held: ``{how: count}`` of saved tensors behind saved-tensor hooks.
        unknown: Saved tensors whose size cannot be known (count).
    """
    notes = []
    if held:
        parts = ", ".join(f"{count} {how}" for how, count in sorted(held.items()))
        notes.append(
            f"Saved tensors behind saved-tensor hooks ({parts}) were read without unpacking them "
            "(unpacking would run the hook: a checkpointed block's forward again); only what "
            "autograd "
            "holds until backward is counted."
        )
    if unknown:
        notes.append(
            f"{unknown} saved tensor(s) have a size that cannot be known (a tensor subclass "
            "without "
            "readable storage, or a hook's packed object): not counted in the saved bytes."
        )
    return notes
