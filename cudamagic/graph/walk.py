"""Running a cell like ``%%time`` and walking its autograd graph into a small graph model.

The model is plain data (:class:`AutogradGraph` of :class:`GraphNode` and
:class:`GraphEdge`): node ids are assigned in walk order (``n0``, ``n1``, ...),
never from memory addresses, so the same cell gives the same graph twice. The
model keeps only metadata (names, shapes, dtypes, byte counts); no reference to
a user tensor or autograd node survives :func:`walk`.

Vocabulary follows autograd and torchviz: backward nodes by class name
(``AddmmBackward0``), ``AccumulateGrad`` with the leaf tensor it accumulates
into, saved tensors, outputs and view bases.

This module imports no IPython; :func:`run_cell` receives the shell. torch is
imported inside the functions that need it.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import gc
import re
import threading
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

# ---- node and edge kinds ----------------------------------------------------------
BACKWARD = "backward"      # a grad_fn node (``MulBackward0``, custom ``MyFnBackward``)
ACCUMULATE = "accumulate"  # an ``AccumulateGrad`` node
PARAM = "param"            # a leaf tensor that requires grad and is a parameter of a module
LEAF = "leaf"              # any other leaf tensor that requires grad
OUTPUT = "output"          # a tensor the cell returned
BASE = "base"              # the base tensor of an output that is a view
SAVED = "saved"            # a tensor saved for backward (``--show-saved``; custom Functions always)
MODULE = "module"          # a collapsed module call (or several folded identical ones)
RUN = "run"                # a folded run of identical single-input ops in a chain

GRAD = "grad"          # edge: input grad_fn -> consumer (``next_functions``), as torchviz draws it
VARIABLE = "variable"  # edge: leaf tensor -> its AccumulateGrad
TO_OUTPUT = "output"   # edge: grad_fn -> output tensor
VIEW = "view"          # edge: base -> view (dotted)
SAVED_EDGE = "saved"   # edge: node -> saved tensor (no arrow)

_SKIP_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_FREED_HINTS = ("freed", "second time")
MAX_ATTR_CHARS = 50


class NothingToDraw(Exception):
    """The cell's value holds no autograd graph; ``str(exc)`` says why and what to type instead."""


# ---- the graph model --------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SavedEntry:
    """One tensor saved for backward by a node.

    Attributes:
        name: Attribute name without the ``_saved_`` prefix (``self``, ``other``, ``saved_tensors[1]``).
        shape: Tensor shape, ``None`` when the entry is ``None``, freed or has no regular shape.
        dtype: ``'float32'`` etc., ``''`` when unknown.
        nbytes: Bytes of the storage it keeps alive (0 when freed, ``None`` or a parameter's).
        freed: True when ``backward()`` already freed it.
        is_none: True for a ``None`` entry of a custom Function's ``saved_tensors``.
    """

    name: str
    shape: tuple | None = None
    dtype: str = ""
    nbytes: int = 0
    freed: bool = False
    is_none: bool = False


@dataclasses.dataclass(frozen=True)
class GraphNode:
    """One node of the drawn graph.

    Attributes:
        id: Deterministic id (``n0``, ``n1``, ... in walk order; ``n7u2`` for the 2nd use of a parameter;
            ``m3`` for a collapsed module call, ``r5`` for a folded run).
        kind: One of the module constants (``backward``, ``accumulate``, ``param``, ``leaf``, ``output``,
            ``base``, ``saved``, ``module``, ``run``).
        label: Class name for autograd nodes, the name for tensors, the module path for modules.
        shape: Tensor shape (tensor kinds only).
        dtype: Tensor dtype without ``torch.`` (tensor kinds only).
        device: ``'cpu'``, ``'cuda:0'`` ... (tensor kinds only).
        saved_bytes: Bytes of storage this node keeps alive for backward (parameters not counted).
        saved: The saved tensors (``SavedEntry``) of an autograd node.
        attrs: ``((name, text), ...)`` non-tensor saved attributes (``--show-attrs``).
        call: Index into ``AutogradGraph.calls`` of the innermost module call that created the node.
        use: ``(k, n)`` when a leaf is drawn once per use: this is use ``k`` of ``n`` (1-based).
        count: For ``module``/``run`` boxes, how many calls or ops were folded into it.
        ops: For ``module``/``run`` boxes, how many backward ops they stand for.
        freed: True when at least one saved tensor was already freed by ``backward()``.
        saved_view_bytes: Bytes of the saved tensors themselves (numel x element size); less than
            ``saved_bytes`` when they are views (a batch sliced from a bigger tensor) whose whole storage
            is kept alive.
        storages: ``((storage_id, nbytes), ...)`` the distinct non-parameter storages behind
            ``saved_bytes`` (ids ``0, 1, ...`` in walk order, never addresses): a box that stands for
            several nodes counts a storage they share once.
    """

    id: str
    kind: str
    label: str
    shape: tuple | None = None
    dtype: str = ""
    device: str = ""
    saved_bytes: int = 0
    saved: tuple = ()
    attrs: tuple = ()
    call: int | None = None
    use: tuple | None = None
    count: int = 1
    ops: int = 0
    freed: bool = False
    storages: tuple = dataclasses.field(default=(), repr=False)
    saved_view_bytes: int = 0


def distinct_saved_bytes(nodes: Iterable) -> tuple:
    """``(bytes, storages)`` of the distinct storages behind ``nodes`` (each counted once).

    Args:
        nodes: ``GraphNode``s (backward nodes, or boxes that carry their members' ``storages``).

    Returns:
        Total bytes, and the merged ``((storage_id, nbytes), ...)`` sorted by id.
    """
    merged = {}
    for n in nodes:
        for sid, nbytes in n.storages:
            merged[sid] = nbytes
    return sum(merged.values()), tuple(sorted(merged.items()))


@dataclasses.dataclass(frozen=True)
class GraphEdge:
    """A directed edge ``src -> dst`` (the direction torchviz draws: inputs towards outputs)."""

    src: str
    dst: str
    kind: str = GRAD


@dataclasses.dataclass(frozen=True)
class ModuleCall:
    """One ``nn.Module`` call recorded while the cell ran.

    Attributes:
        index: 0-based call order.
        path: The module's path in the user namespace (``model.encoder.layers.0``), or ``''``.
        type_name: The module class name (``TransformerEncoderLayer``).
        parent: Index of the enclosing call, ``None`` at top level.
        depth: 1 for a top-level call, 2 for a call inside it, ...
    """

    index: int
    path: str
    type_name: str
    parent: int | None
    depth: int

    @property
    def title(self) -> str:
        return f"{self.path} ({self.type_name})" if self.path else self.type_name


@dataclasses.dataclass
class AutogradGraph:
    """The graph model: nodes, edges, module calls and notes.

    Attributes:
        nodes: ``GraphNode`` list in walk order.
        edges: ``GraphEdge`` list (duplicates kept: ``x * x`` has two edges from ``x``'s AccumulateGrad).
        calls: ``ModuleCall`` list recorded while the cell ran.
        notes: Human-readable notes (skipped non-tensor outputs, per-use parameters, collapsing ...).
        saved_bytes_total: Bytes of distinct storages held for backward (parameters not counted).
        view: ``'full'``, ``'collapsed'`` ... how this graph was derived.
    """

    nodes: list
    edges: list
    calls: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    saved_bytes_total: int = 0
    view: str = "full"

    def __post_init__(self):
        self._by_id = {n.id: n for n in self.nodes}

    def node(self, node_id: str) -> GraphNode:
        """The node with id ``node_id`` (``KeyError`` when absent)."""
        return self._by_id[node_id]

    def of_kind(self, *kinds: str) -> list:
        """Nodes whose kind is one of ``kinds``, in walk order."""
        return [n for n in self.nodes if n.kind in kinds]

    def labels(self, *kinds: str) -> list:
        """Labels of the nodes of ``kinds`` (all nodes when none given)."""
        return [n.label for n in self.nodes if not kinds or n.kind in kinds]

    def op_counts(self) -> Counter:
        """``Counter`` of backward/AccumulateGrad class names (folded boxes count their ops by label)."""
        c = Counter()
        for n in self.nodes:
            if n.kind in (BACKWARD, ACCUMULATE):
                c[n.label] += 1
            elif n.kind == RUN:
                for op, count in n.attrs:
                    c[op] += int(count)
        return c

    def inputs_of(self, node_id: str, kind: str | None = None) -> list:
        """Ids of the nodes with an edge into ``node_id`` (optionally only edges of ``kind``)."""
        return [e.src for e in self.edges if e.dst == node_id and (kind is None or e.kind == kind)]

    def label_edges(self, kinds=(GRAD, VARIABLE, TO_OUTPUT)) -> Counter:
        """Multiset of ``(src label, dst label)`` for edges of ``kinds``: structure without ids."""
        return Counter((self._by_id[e.src].label, self._by_id[e.dst].label)
                       for e in self.edges if e.kind in kinds)


# ---- running the cell ---------------------------------------------------------------
def run_cell(shell, cell: str, magic_line: str = "") -> Any:
    """Run ``cell`` in the user namespace the way ``%%time`` does and return its last expression.

    The cell goes through IPython's input transformers and AST transformers; its
    source is registered in ``linecache`` (with the magic line first, so line
    numbers match the notebook cell) and tracebacks show the real source lines.
    No cell events fire (the outer ``run_cell`` already fired them).

    Args:
        shell: The ``InteractiveShell``.
        cell: The cell body (without the ``%%autograd_graph`` line).
        magic_line: The arguments after ``%%autograd_graph``, for the line-number offset.

    Returns:
        The value of the cell's last line when it is an expression, else ``None``.

    Raises:
        Exception: whatever the user's code raises, untouched; ``SyntaxError`` for bad source.
    """
    __tracebackhide__ = True  # noqa: F841 - IPython hides this frame in tracebacks
    source = shell.transform_cell(cell)
    header = f"%%autograd_graph {magic_line}".rstrip()
    filename = shell.compile.cache(f"{header}\n{source}", running_cell_number(shell),
                                   raw_code=f"{header}\n{cell}")
    # a leading newline: line numbers (of a SyntaxError too) count the magic line as line 1
    tree = shell.compile.ast_parse("\n" + source, filename=filename)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    ns = shell.user_ns
    if tree.body:
        exec(shell.compile(tree, filename, "exec"), ns, ns)
    if last is not None:
        return eval(shell.compile(last, filename, "eval"), ns, ns)
    return None


def running_cell_number(shell) -> int:
    """``n`` of the ``In[n]`` being executed, for ``Cell In[n]`` in tracebacks.

    Read from the display hook's ``ExecutionResult`` of the running cell (IPython 9 increments
    ``shell.execution_count`` before a cell runs, IPython 8 after it); outside a stored cell
    (a direct ``run_cell_magic``): ``shell.execution_count - 1``, as the display hook counts.
    """
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    if type(count) is int:
        return count
    return max(shell.execution_count - 1, 0)


class ModuleCallRecorder:
    """Context manager recording every ``nn.Module`` call of this thread with autograd sequence numbers.

    Each call keeps ``[module, parent, start_seq, end_seq]``: autograd nodes created
    during the call have ``start_seq <= node._sequence_nr() < end_seq``. Module
    objects are held only until :meth:`resolve` turns them into :class:`ModuleCall`.
    """

    def __init__(self, max_calls: int = 200_000):
        self.raw = []
        self._stack = []
        self._max = max_calls
        self._thread = threading.get_ident()
        self._handles = []

    def __enter__(self):
        import torch
        from torch.nn.modules import module as mod

        # private API; without it every call has an empty interval and nothing is grouped
        self._seq = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None) or (lambda: 0)
        self._handles = [mod.register_module_forward_pre_hook(self._pre),
                         mod.register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack = []
        return False

    def _pre(self, module, args):
        if threading.get_ident() != self._thread or len(self.raw) >= self._max:
            return None
        parent = self._stack[-1] if self._stack else None
        self.raw.append([module, parent, self._seq(), None])
        self._stack.append(len(self.raw) - 1)
        return None

    def _post(self, module, args, output):
        if threading.get_ident() != self._thread or not self._stack:
            return None
        while self._stack:
            idx = self._stack.pop()
            self.raw[idx][3] = self._seq()
            if self.raw[idx][0] is module:
                break
        return None

    def resolve(self, module_paths: dict) -> tuple:
        """Turn the raw records into ``ModuleCall``s and interval arrays; drops the module references.

        Args:
            module_paths: ``id(module) -> path`` from :func:`namespace_names`.

        Returns:
            ``(calls, starts, ends)``: ``ModuleCall`` list and their sequence-number intervals.
        """
        calls, starts, ends = [], [], []
        for i, (module, parent, start, end) in enumerate(self.raw):
            depth = 1 if parent is None else calls[parent].depth + 1
            calls.append(ModuleCall(i, module_paths.get(id(module), ""), type(module).__name__, parent, depth))
            starts.append(start)
            ends.append(end if end is not None else start)
        self.raw = []
        return calls, starts, ends


# ---- names ------------------------------------------------------------------------
def namespace_names(ns: dict) -> tuple:
    """Name tensors and modules by where the user can reach them.

    Parameters (and buffers) get their path inside every ``nn.Module`` in ``ns``
    (``model.encoder.0.weight``; the shortest path wins, then alphabetical);
    other tensors get their variable name. Names starting with ``_`` and
    IPython's ``In``/``Out`` are skipped. Modules inside a top-level list, tuple
    or dict are searched too (``layers[0].weight``).

    Args:
        ns: The user namespace.

    Returns:
        ``(tensor_names, module_paths)``: two dicts keyed by ``id()`` of live objects; only valid
        while those objects are alive (used within one walk).
    """
    import torch

    tensor_names, module_paths, var_names = {}, {}, {}

    def offer(table, obj, name):
        old = table.get(id(obj))
        if old is None or (len(name), name) < (len(old), old):
            table[id(obj)] = name

    def add_module(prefix, module):
        for sub_name, sub in module.named_modules(remove_duplicate=False):
            offer(module_paths, sub, f"{prefix}.{sub_name}" if sub_name else prefix)
        for p_name, p in module.named_parameters(remove_duplicate=False):
            offer(tensor_names, p, f"{prefix}.{p_name}")
        for b_name, b in module.named_buffers(remove_duplicate=False):
            offer(tensor_names, b, f"{prefix}.{b_name}")

    for key in sorted(k for k in ns if isinstance(k, str)):
        if key.startswith("_") or key in _SKIP_NAMES:
            continue
        value = ns[key]
        if isinstance(value, torch.nn.Module):
            add_module(key, value)
        elif isinstance(value, torch.Tensor):
            var_names.setdefault(id(value), key)
        elif isinstance(value, (list, tuple)) and 0 < len(value) <= 10_000:
            for i, item in enumerate(value):
                if isinstance(item, torch.nn.Module):
                    add_module(f"{key}[{i}]", item)
                elif isinstance(item, torch.Tensor):
                    var_names.setdefault(id(item), f"{key}[{i}]")
        elif isinstance(value, dict) and 0 < len(value) <= 10_000:
            for k, item in value.items():
                if isinstance(item, torch.nn.Module):
                    add_module(f"{key}[{k!r}]", item)
    for obj_id, name in var_names.items():
        tensor_names.setdefault(obj_id, name)
    return tensor_names, module_paths


# ---- outputs ----------------------------------------------------------------------
def flatten_outputs(value, prefix: str = "", _depth: int = 0, _seen=None) -> tuple:
    """Flatten a value into labelled tensors.

    Args:
        value: A Tensor, or any nesting of tuple/list/dict/namedtuple/dataclass of Tensors.
        prefix: Path prefix (a variable name with ``-o``, ``''`` for the last expression).

    Returns:
        ``(outputs, skipped)``: ``outputs`` is a list of ``(path, tensor)`` (path ``''`` for a bare
        tensor, else ``[0]``, ``['loss']``, ``.loss``, prefixed); ``skipped`` lists
        ``(path, type name)`` of non-tensor leaves.
    """
    import torch

    seen = set() if _seen is None else _seen
    if isinstance(value, torch.Tensor):
        return [(prefix, value)], []
    if _depth > 20 or id(value) in seen:
        return [], [(prefix, type(value).__name__)]
    outs, skipped = [], []
    items = None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f"{prefix}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        items = [(f"{prefix}.{f}", getattr(value, f)) for f in value._fields]
    elif isinstance(value, (list, tuple)):
        items = [(f"{prefix}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{prefix}[{k!r}]", v) for k, v in value.items()]
    if items is None:
        return [], [(prefix, type(value).__name__)]
    seen.add(id(value))
    for path, item in items:
        o, s = flatten_outputs(item, path, _depth + 1, seen)
        outs.extend(o)
        skipped.extend(s)
    return outs, skipped


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _is_drawable(t) -> bool:
    return t.grad_fn is not None or t.requires_grad


def diagnose(value, source: str = "", ns: dict | None = None, what: str = "The cell's last expression") -> str:
    """Explain why ``value`` has nothing to draw, naming the likely cause and what to type instead.

    Args:
        value: What the cell returned (or the ``-o`` variables, as a dict).
        source: The cell source, scanned for ``no_grad``/``inference_mode``/``detach``/``.item()``.
        ns: The user namespace, scanned for tensors that require grad.
        what: How to refer to the value in the message.

    Returns:
        One paragraph for a ``UsageError``.
    """
    import torch

    if value is None:
        return (f"{what} has no value to draw: end the cell with the tensor to draw (for example a line "
                "with just `loss`), or name variables with `%%autograd_graph -o loss`.")
    if isinstance(value, torch.nn.Module):
        return (f"{what} is an nn.Module ({type(value).__name__}), not the output of a forward pass, so "
                "there is no autograd graph yet. Call the module and end the cell with its output, for "
                "example `out = model(x)` then `out` (or `loss = loss_fn(model(x), y)` then `loss`).")
    outs, skipped = flatten_outputs(value)
    if not outs:
        kind = type(value).__name__
        hint = ""
        if isinstance(value, (int, float, complex, bool)) or ".item()" in source:
            hint = (" A Python number usually comes from `.item()` or `float(t)`, which leave the graph: "
                    "end the cell with the tensor itself (`loss`, not `loss.item()`).")
        return (f"{what} is {_article(kind)} {kind}, not a tensor (or a tuple/list/dict/dataclass of "
                f"tensors), so there is nothing to draw.{hint}")
    causes = []
    if any(t.is_inference() for _, t in outs):
        causes.append("it was made under `torch.inference_mode()`: run the forward pass outside that block")
    if re.search(r"\bno_grad\b|set_grad_enabled\(\s*False", source):
        causes.append("the cell uses `torch.no_grad()`: run the forward pass outside that block")
    if "inference_mode" in source and not causes:
        causes.append("the cell uses `torch.inference_mode()`: run the forward pass outside that block")
    if re.search(r"\.detach\(|\.data\b", source):
        causes.append("`.detach()` (or `.data`) returns a tensor cut from the graph: draw the tensor before "
                      "detaching it")
    if ns is not None and not causes:
        any_grad = any(isinstance(v, torch.Tensor) and v.requires_grad for v in ns.values()) or any(
            isinstance(v, torch.nn.Module) and any(p.requires_grad for p in v.parameters())
            for v in ns.values())
        if not any_grad:
            causes.append("no input requires grad: create inputs with `requires_grad=True` (for example "
                          "`x = torch.randn(3, requires_grad=True)`) or use an nn.Module's parameters")
    if not causes:
        causes.append("it was computed under `torch.no_grad()`/`inference_mode()`, detached "
                      "(`.detach()`), or from inputs none of which requires grad")
    names = ", ".join(p or "the value" for p, _ in outs[:5])
    return (f"{what} ({names}) has no autograd graph: no grad_fn and requires_grad=False. Likely cause: "
            + "; ".join(causes) + ".")


# ---- the walk ---------------------------------------------------------------------
_SAVED_ATTRS: dict = {}


def _saved_attr_names(cls) -> list:
    names = _SAVED_ATTRS.get(cls)
    if names is None:
        names = sorted(a for a in dir(cls) if a.startswith("_saved_"))
        _SAVED_ATTRS[cls] = names
    return names


def _dtype_str(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _shape(t):
    try:
        return tuple(t.shape)
    except Exception:  # jagged nested tensors, symbolic sizes
        return None


def _storage(t):
    """``(key, nbytes)`` of the storage ``t`` keeps alive; key ``None`` when it cannot be shared."""
    try:
        st = t.untyped_storage()
        return (t.device, st.data_ptr()), st.nbytes()
    except Exception:
        try:
            return None, int(t.numel() * t.element_size())
        except Exception:
            return None, 0


def _is_freed_error(exc: Exception) -> bool:
    text = str(exc)
    return any(h in text for h in _FREED_HINTS)


def _short(value) -> str:
    text = _ADDRESS.sub("0x…", str(value))
    return text if len(text) <= MAX_ATTR_CHARS else text[: MAX_ATTR_CHARS - 1] + "…"


def walk(outputs: Sequence, **kwargs) -> AutogradGraph:
    """Walk the autograd graph behind ``outputs``; see :func:`_walk` for the arguments.

    Python's cyclic GC is paused during the walk: with a deep graph alive, each
    collection traverses it and the walk slows down tenfold.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        graph = _walk(outputs, **kwargs)
    finally:
        if was_enabled:
            gc.enable()
    note = guard_deep_free(sum(1 for n in graph.nodes if n.kind in (BACKWARD, ACCUMULATE)))
    if note:
        graph.notes.append(note)
    return graph


# Bytes of C stack one level of PyTorch's recursive free of a Python-visited autograd node takes
# (measured about 150 on x86-64 Linux with torch 2.13; margin for bigger node types).
_STACK_PER_NODE_BYTES = 512
_DEEP_GRAPH_NODES = 10_000
_MAX_MAIN_STACK_BYTES = 120 * 1024 * 1024  # the kernel keeps ~128 MiB below the main stack free


def guard_deep_free(n_nodes: int, *, _resource=None, _is_main=None) -> str:
    """Keep the kernel alive when the walked graph is freed later; returns a note or ``''``.

    Once Python has visited an autograd node (``grad_fn``, ``next_functions``), PyTorch frees
    that node through its Python object, recursively: the C stack needed grows with the depth
    of the graph, and freeing a chain of about 50,000 visited ops overflows the default 8 MiB
    main-thread stack (a segmentation fault that kills the kernel when the user deletes the
    tensor or reruns the cell). For graphs of more than ``_DEEP_GRAPH_NODES`` nodes this raises
    the soft ``RLIMIT_STACK`` of the process (Linux grows the main thread's stack up to the
    current limit) to ``n_nodes * 512`` bytes, at most 120 MiB and the hard limit. Past that, or
    where the limit cannot be raised, the note warns the user.

    Args:
        n_nodes: Autograd nodes visited (count).

    Returns:
        ``''`` when nothing needed saying, else one sentence for the result's notes.
    """
    if n_nodes <= _DEEP_GRAPH_NODES:
        return ""
    need = 8 * 1024 * 1024 + n_nodes * _STACK_PER_NODE_BYTES
    warn = (f"This graph has {n_nodes} autograd nodes: PyTorch frees a graph that Python has inspected "
            "recursively, and freeing one this deep can overflow the C stack and end the kernel. Keep "
            "graphs you draw under about 200,000 chained ops, or restart the kernel instead of deleting it.")
    try:
        resource = _resource
        if resource is None:
            import resource  # noqa: PLC0415 - POSIX only
        is_main = _is_main if _is_main is not None else threading.current_thread() is threading.main_thread()
        if not is_main:
            return warn
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        if soft == resource.RLIM_INFINITY or soft >= need:
            return ""
        target = min(need, _MAX_MAIN_STACK_BYTES)
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard)
        if target > soft:
            resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
        return "" if target >= need else warn
    except (ImportError, ValueError, OSError):
        return warn


def _walk(outputs: Sequence, *, tensor_names: dict | None = None, show_saved: bool = False,
         show_attrs: bool = False, shared_params: bool = False, calls: Sequence = (),
         call_starts: Sequence = (), call_ends: Sequence = (), notes: Iterable = ()) -> AutogradGraph:
    """Walk the autograd graph behind ``outputs`` iteratively into an :class:`AutogradGraph`.

    Args:
        outputs: ``(path, tensor)`` pairs (tensors of any shape/dtype with a ``grad_fn`` or
            ``requires_grad``), from :func:`flatten_outputs`.
        tensor_names: ``id(tensor) -> name`` from :func:`namespace_names`.
        show_saved: Draw every saved tensor as a node (custom Functions' are always drawn).
        show_attrs: Keep non-tensor saved attributes (``alpha``, ``dim``, sizes) on the nodes.
        shared_params: Draw one node per leaf tensor; by default a leaf used by several
            consumers is drawn once per consumer (use ``k`` of ``n``), which keeps ``dot`` fast on
            unrolled RNNs.
        calls, call_starts, call_ends: From :meth:`ModuleCallRecorder.resolve`.
        notes: Notes to carry into the graph.

    Returns:
        The graph. Reading saved tensors that ``backward()`` already freed marks them ``freed``.
    """
    import torch
    from torch.autograd.function import BackwardCFunction

    names = tensor_names or {}
    nodes: list = []
    edges: list = []
    ids: dict = {}
    counter = [0]
    storages_by_node: dict = {}
    leaf_storages: set = set()
    out_notes = list(notes)

    def new_id():
        i = counter[0]
        counter[0] += 1
        return f"n{i}"

    def call_of(fn):
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

    def tensor_node(node_id, kind, t, label, call=None):
        return GraphNode(node_id, kind, label, shape=_shape(t), dtype=_dtype_str(t), device=str(t.device),
                         call=call)

    def saved_of(fn, node_id):
        entries, attrs, stor = [], [], []
        freed = False

        def add_tensor(name, t):
            key, nbytes = _storage(t)
            try:
                own = int(t.numel() * t.element_size())
            except Exception:
                own = nbytes
            stor.append((key, nbytes, min(own, nbytes)))
            if show_saved or custom:
                entries.append(SavedEntry(name, _shape(t), _dtype_str(t), nbytes))
            else:
                entries.append(SavedEntry(name, nbytes=nbytes))

        custom = isinstance(fn, BackwardCFunction)
        if custom:
            try:
                values = fn.saved_tensors
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
                    add_tensor(f"saved_tensors[{i}]", t)
        for attr in _saved_attr_names(type(fn)):
            name = attr[len("_saved_"):]
            try:
                val = getattr(fn, attr)
            except RuntimeError as exc:
                if not _is_freed_error(exc):
                    raise
                entries.append(SavedEntry(name, freed=True))
                freed = True
                continue
            if isinstance(val, torch.Tensor):
                add_tensor(name, val)
            elif isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val):
                for i, v in enumerate(val):
                    if isinstance(v, torch.Tensor):
                        add_tensor(f"{name}[{i}]", v)
            elif show_attrs:
                attrs.append((name, _short(val)))
        storages_by_node[node_id] = stor
        return tuple(entries), tuple(attrs), freed

    fn_nodes = {}  # id -> partial GraphNode kwargs for backward nodes (saved bytes filled later)
    stack = []

    def visit(fn):
        node_id = ids.get(fn)
        if node_id is None:
            node_id = ids[fn] = new_id()
            stack.append(fn)
        return node_id

    for path, t in outputs:
        out_id = new_id()
        label = path or names.get(id(t)) or "output"
        nodes.append(tensor_node(out_id, OUTPUT, t, label))
        if t.grad_fn is not None:
            edges.append(GraphEdge(visit(t.grad_fn), out_id, TO_OUTPUT))
        if t._is_view() and t._base is not None:
            base = t._base
            base_id = new_id()
            nodes.append(tensor_node(base_id, BASE, base, f"{label} (base)"))
            edges.append(GraphEdge(base_id, out_id, VIEW))
            if base.grad_fn is not None:
                edges.append(GraphEdge(visit(base.grad_fn), base_id, TO_OUTPUT))
        while stack:
            fn = stack.pop()
            node_id = ids[fn]
            cls_name = type(fn).__name__
            call = call_of(fn)
            var = getattr(fn, "variable", None) if cls_name == "AccumulateGrad" else None
            if var is not None:
                var_id = new_id()
                name = names.get(id(var))
                kind = PARAM if name is not None and "." in name else LEAF
                nodes.append(tensor_node(var_id, kind, var, name or "(leaf)"))
                edges.append(GraphEdge(var_id, node_id, VARIABLE))
                key, _ = _storage(var)
                leaf_storages.add(key)
                fn_nodes[node_id] = dict(kind=ACCUMULATE, label=cls_name, call=None)
                continue
            saved, attrs, freed = saved_of(fn, node_id)
            fn_nodes[node_id] = dict(kind=BACKWARD, label=cls_name, call=call, saved=saved, attrs=attrs,
                                     freed=freed)
            nexts = [u for u, _ in fn.next_functions if u is not None]
            for u in nexts:
                edges.append(GraphEdge(visit(u), node_id, GRAD))

    # saved bytes: distinct storages per node, parameters (leaf storages) not counted; storages get
    # small ids in walk order (a storage that cannot be shared gets its own) so collapsed boxes and
    # folded runs count a shared storage once too
    sid_of: dict = {}
    total = 0
    for node_id in sorted(storages_by_node, key=lambda i: int(i[1:])):
        here = {}
        own_here = {}
        for key, nbytes, own in storages_by_node[node_id]:
            if key is not None and key in leaf_storages:
                continue
            if key is None:
                sid = len(sid_of)
                sid_of[("unshared", sid)] = sid
            elif key in sid_of:
                sid = sid_of[key]
            else:
                sid = sid_of[key] = len(sid_of)
                total += nbytes
            if key is None:
                total += nbytes
            here[sid] = nbytes
            own_here[sid] = max(own_here.get(sid, 0), own)
        fn_nodes[node_id]["saved_bytes"] = sum(here.values())
        fn_nodes[node_id]["saved_view_bytes"] = sum(own_here.values())
        fn_nodes[node_id]["storages"] = tuple(sorted(here.items()))
    sid_of.clear()

    for node_id, kw in fn_nodes.items():
        nodes.append(GraphNode(node_id, **kw))
    nodes.sort(key=lambda n: int(n.id[1:]))
    graph = AutogradGraph(nodes, edges, list(calls), out_notes, total)
    if calls:
        graph = _place_params(graph)
    if show_saved or any(n.saved and _has_custom(n) for n in nodes):
        graph = _add_saved_nodes(graph, show_saved)
    graph = _split_uses(graph) if not shared_params else graph
    ids.clear()
    return graph


def _common_call(calls: Sequence, a, b):
    """Innermost call enclosing both call indexes ``a`` and ``b`` (``None``: top level)."""
    chain = set()
    while a is not None:
        chain.add(a)
        a = calls[a].parent
    while b is not None and b not in chain:
        b = calls[b].parent
    return b


def _place_params(graph: AutogradGraph) -> AutogradGraph:
    """Put each parameter (and its AccumulateGrad) in the module call that uses it."""
    by_id = {n.id: n for n in graph.nodes}
    var_of = {e.dst: e.src for e in graph.edges if e.kind == VARIABLE}
    place = {}
    for e in graph.edges:
        if e.kind == GRAD and e.src in var_of and by_id[var_of[e.src]].kind == PARAM:
            c = by_id[e.dst].call
            place[e.src] = c if e.src not in place else _common_call(graph.calls, place[e.src], c)
    if not place:
        return graph
    nodes = []
    for n in graph.nodes:
        if n.id in place:
            n = dataclasses.replace(n, call=place[n.id])
        nodes.append(n)
    moved = {var_of[a]: c for a, c in place.items()}
    nodes = [dataclasses.replace(n, call=moved[n.id]) if n.id in moved else n for n in nodes]
    return dataclasses.replace(graph, nodes=nodes)


def _has_custom(n: GraphNode) -> bool:
    return any(e.name.startswith("saved_tensors") for e in n.saved)


def _add_saved_nodes(graph: AutogradGraph, all_saved: bool) -> AutogradGraph:
    nodes, edges = list(graph.nodes), list(graph.edges)
    for n in graph.nodes:
        for k, s in enumerate(n.saved):
            if not all_saved and not s.name.startswith("saved_tensors"):
                continue
            sid = f"{n.id}s{k}"
            if s.freed:
                label = f"{s.name} (freed by backward)"
            elif s.is_none:
                label = f"{s.name} = None"
            else:
                label = s.name
            nodes.append(GraphNode(sid, SAVED, label, shape=s.shape, dtype=s.dtype, saved_bytes=s.nbytes,
                                   call=n.call, freed=s.freed))
            edges.append(GraphEdge(n.id, sid, SAVED_EDGE))
    return dataclasses.replace(graph, nodes=nodes, edges=edges)


def _split_uses(graph: AutogradGraph) -> AutogradGraph:
    """Draw each leaf (AccumulateGrad + its tensor) once per consumer node."""
    consumers = defaultdict(list)  # acc id -> ordered distinct consumer ids
    for e in graph.edges:
        if e.kind == GRAD:
            lst = consumers[e.src]
            if e.dst not in lst:
                lst.append(e.dst)
    var_of = {e.dst: e.src for e in graph.edges if e.kind == VARIABLE}
    multi = {a: c for a, c in consumers.items() if a in var_of and len(c) > 1}
    if not multi:
        return graph
    by_id = {n.id: n for n in graph.nodes}
    nodes, edges = [], []
    copy_of = {}  # (acc id, consumer id) -> copy acc id
    dropped = set()
    for acc, cons in multi.items():
        var = var_of[acc]
        dropped.update((acc, var))
        for k, consumer in enumerate(cons, 1):
            suffix = "" if k == 1 else f"u{k}"
            call = by_id[consumer].call if by_id[var].kind == PARAM else None
            copy_of[(acc, consumer)] = acc + suffix
            nodes.append(dataclasses.replace(by_id[var], id=var + suffix, use=(k, len(cons)), call=call))
            nodes.append(dataclasses.replace(by_id[acc], id=acc + suffix, use=(k, len(cons)), call=call))
            edges.append(GraphEdge(var + suffix, acc + suffix, VARIABLE))
    kept = [n for n in graph.nodes if n.id not in dropped]
    for e in graph.edges:
        if e.kind == VARIABLE and e.dst in multi:
            continue
        if e.kind == GRAD and e.src in multi:
            edges.append(GraphEdge(copy_of[(e.src, e.dst)], e.dst, GRAD))
        else:
            edges.append(e)
    n_leaves = len(multi)
    notes = list(graph.notes) + [
        f"{n_leaves} leaf tensor(s) used by several ops are drawn once per use (use k/n); "
        "--shared-params draws one node each."]
    return dataclasses.replace(graph, nodes=kept + nodes, edges=edges, notes=notes)


# ---- derived views ------------------------------------------------------------------
def _dedupe(edges: Iterable, mapping: dict) -> list:
    out, seen = [], set()
    for e in edges:
        src, dst = mapping.get(e.src, e.src), mapping.get(e.dst, e.dst)
        if src == dst:
            continue
        key = (src, dst, e.kind)
        if key in seen:
            continue
        seen.add(key)
        out.append(GraphEdge(src, dst, e.kind))
    return out


def max_depth(graph: AutogradGraph) -> int:
    """Deepest module-call nesting among the graph's nodes (0 when no module was called)."""
    used = {n.call for n in graph.nodes if n.call is not None}
    return max((graph.calls[c].depth for c in used), default=0)


def collapse(graph: AutogradGraph, depth: int, fold: bool = True) -> AutogradGraph:
    """Collapse module calls deeper than ``depth`` into one box each, then fold repeated blocks.

    Args:
        graph: A full graph from :func:`walk` (with ``calls``).
        depth: Module calls at depth ``> depth`` become boxes (0: every top-level call is one box).
        fold: Fold consecutive sibling boxes with the same type and contents, each feeding the next,
            into one box counted ``x N`` (``TransformerEncoderLayer x 12``).

    Returns:
        A new graph with ``module`` nodes (``ops`` = backward ops inside, ``saved_bytes`` summed);
        the input graph when nothing collapses.
    """
    calls = graph.calls
    target = {}
    for c in calls:
        if c.depth <= depth:
            target[c.index] = None
        elif c.depth == depth + 1:
            target[c.index] = c.index
        else:
            target[c.index] = target.get(c.parent)
    members = defaultdict(list)
    mapping = {}
    for n in graph.nodes:
        t = target.get(n.call) if n.call is not None else None
        if t is None:
            continue
        mapping[n.id] = f"m{t}"
        members[t].append(n)
    if not members:
        return graph
    boxes = {}
    for t, ms in members.items():
        c = calls[t]
        saved_bytes, storages = distinct_saved_bytes(m for m in ms if m.kind in (BACKWARD, RUN, MODULE))
        boxes[t] = GraphNode(f"m{t}", MODULE, c.path or c.type_name, attrs=(("type", c.type_name),),
                             saved_bytes=saved_bytes, storages=storages,
                             ops=sum(1 for m in ms if m.kind == BACKWARD), call=c.parent,
                             freed=any(m.freed for m in ms))
    edges = _dedupe(graph.edges, mapping)
    notes = list(graph.notes)
    if fold:
        signature = {t: (calls[t].type_name, frozenset(Counter(
            m.kind if m.kind in (PARAM, LEAF) else m.label for m in ms if m.kind != SAVED).items()))
                     for t, ms in members.items()}
        linked = {(e.src, e.dst) for e in edges}
        by_parent = defaultdict(list)
        for t in sorted(boxes):
            by_parent[calls[t].parent].append(t)
        fold_map = {}
        for sibs in by_parent.values():
            run = [sibs[0]]
            for t in sibs[1:] + [None]:
                prev = run[-1]
                if t is not None and signature[t] == signature[prev] and (f"m{prev}", f"m{t}") in linked:
                    run.append(t)
                    continue
                if len(run) > 1:
                    first, last = calls[run[0]], calls[run[-1]]
                    if first.path and first.path == last.path:
                        span = f"{first.path}, called {len(run)} times"  # one module, unrolled (RNN cell)
                    elif first.path and last.path:
                        span = f"{first.path} … {last.path}"
                    else:
                        span = ""
                    attrs = (("type", first.type_name),) + ((("calls", span),) if span else ())
                    saved_bytes, storages = distinct_saved_bytes(boxes[r] for r in run)
                    boxes[run[0]] = dataclasses.replace(
                        boxes[run[0]], label=f"{first.type_name} x {len(run)}", count=len(run), attrs=attrs,
                        ops=sum(boxes[r].ops for r in run), saved_bytes=saved_bytes, storages=storages)
                    for r in run[1:]:
                        fold_map[f"m{r}"] = f"m{run[0]}"
                        del boxes[r]
                    notes.append(f"{len(run)} identical {first.type_name} calls folded into one box.")
                run = [t]
        if fold_map:
            edges = _dedupe(edges, fold_map)
    nodes = [n for n in graph.nodes if n.id not in mapping] + [boxes[t] for t in sorted(boxes)]
    return AutogradGraph(nodes, edges, list(calls), notes, graph.saved_bytes_total, view=f"collapsed (depth {depth})")


def fold_runs(graph: AutogradGraph, min_run: int = 3) -> AutogradGraph:
    """Fold linear chains of ops (``SinBackward0 -> MulBackward0 -> SinBackward0 ...``) into one box.

    A link ``a -> b`` folds when both are backward nodes of the same module call, ``a`` feeds only
    ``b`` and ``b`` has no other input. Chains shorter than ``min_run`` stay as they are.

    Returns:
        A new graph with ``run`` nodes (``count`` ops, per-op counts in ``attrs``, ``saved_bytes``
        summed), or ``graph`` unchanged.
    """
    by_id = {n.id: n for n in graph.nodes}
    outdeg, indeg = Counter(), Counter()
    single_in = {}
    for e in graph.edges:
        outdeg[e.src] += 1
        if e.kind == GRAD:
            indeg[e.dst] += 1
            single_in[e.dst] = e.src
    nxt = {}
    for b, a in single_in.items():
        na, nb = by_id[a], by_id[b]
        if (indeg[b] == 1 and outdeg[a] == 1 and na.kind == BACKWARD and nb.kind == BACKWARD
                and na.call == nb.call):
            nxt[a] = b
    if not nxt:
        return graph
    targets = set(nxt.values())
    heads = [a for a in nxt if a not in targets]
    mapping, runs = {}, {}
    for head in sorted(heads, key=lambda i: int(re.sub(r"\D", "", i) or 0)):
        chain = [head]
        while chain[-1] in nxt:
            chain.append(nxt[chain[-1]])
        if len(chain) < min_run:
            continue
        rid = "r" + head[1:]
        for m in chain:
            mapping[m] = rid
        counts = Counter(by_id[m].label for m in chain)
        label = next(iter(counts)) if len(counts) == 1 else f"chain of {len(chain)} ops"
        saved_bytes, storages = distinct_saved_bytes(by_id[m] for m in chain)
        runs[rid] = GraphNode(rid, RUN, label, count=len(chain), ops=len(chain), call=by_id[head].call,
                              attrs=tuple((op, str(c)) for op, c in sorted(counts.items())),
                              saved_bytes=saved_bytes, storages=storages,
                              freed=any(by_id[m].freed for m in chain))
    if not runs:
        return graph
    # saved-tensor nodes of folded ops go with them
    for e in graph.edges:
        if e.kind == SAVED_EDGE and e.src in mapping:
            mapping[e.dst] = mapping[e.src]
    nodes = [n for n in graph.nodes if n.id not in mapping] + list(runs.values())
    notes = list(graph.notes) + [f"{len(runs)} chain(s) of ops folded ({sum(r.count for r in runs.values())} ops)."]
    view = "chains folded" if graph.view == "full" else f"{graph.view}, chains folded"
    return AutogradGraph(nodes, _dedupe(graph.edges, mapping), list(graph.calls), notes,
                         graph.saved_bytes_total, view=view)


# ---- one call from the magic --------------------------------------------------------
def capture(shell, cell: str, magic_line: str = "", output_names: Sequence[str] = (), *,
            show_saved: bool = False, show_attrs: bool = False, shared_params: bool = False) -> AutogradGraph:
    """Run the cell (see :func:`run_cell`) and walk the autograd graph of its value.

    Args:
        shell: The ``InteractiveShell``.
        cell: The cell body.
        magic_line: The magic's arguments (only for the traceback line offset).
        output_names: Variables to draw instead of the last expression (``-o loss,logits``).
        show_saved, show_attrs, shared_params: See :func:`walk`.

    Returns:
        The full graph, with module calls recorded while the cell ran.

    Raises:
        NothingToDraw: The value holds no autograd graph (message names the likely cause).
            Also when ``output_names`` names a variable the cell did not define.
        Exception: Any exception of the user's cell, untouched.
    """
    __tracebackhide__ = True  # noqa: F841
    import torch  # noqa: F401 - the recorder needs it loaded before the cell runs

    with ModuleCallRecorder() as rec:
        value = run_cell(shell, cell, magic_line)
    ns = shell.user_ns
    try:
        if output_names:
            missing = [n for n in output_names if n not in ns]
            if missing:
                raise NothingToDraw(
                    f"-o {','.join(output_names)}: the cell did not define a variable named {missing[0]!r}. "
                    "Give names of variables the cell assigns, for example `-o loss`.")
            value = {n: ns[n] for n in output_names}
            outputs, skipped = [], []
            for n in output_names:
                o, s = flatten_outputs(ns[n], n)
                outputs += o
                skipped += s
            what = "The variable(s) " + ", ".join(f"`{n}`" for n in output_names)
        else:
            outputs, skipped = flatten_outputs(value)
            what = "The cell's last expression"
        notes = [f"`{p or 'value'}` is {_article(t)} {t}, not a tensor: skipped." for p, t in skipped]
        drawable = []
        for p, t in outputs:
            if t.grad_fn is not None or t.requires_grad:
                drawable.append((p, t))
            else:
                notes.append(f"`{p or 'output'}` has no grad_fn and does not require grad (no_grad, "
                             "inference_mode, detach, or no input requires grad): skipped.")
        if not drawable:
            raise NothingToDraw(diagnose(value if not output_names else
                                         (value if len(value) > 1 else next(iter(value.values()))),
                                         cell, ns, what))
        if all(t.grad_fn is None for _, t in drawable):
            raise NothingToDraw(
                f"{what} is a leaf tensor that requires grad ({', '.join(p or 'output' for p, _ in drawable)}): "
                "no operation has been recorded on it yet. Draw a result computed from it, for example "
                "`y = (x * 2).sum()` then `y`.")
        tensor_names, module_paths = namespace_names(ns)
        calls, starts, ends = rec.resolve(module_paths)
        return walk(drawable, tensor_names=tensor_names, show_saved=show_saved, show_attrs=show_attrs,
                    shared_params=shared_params, calls=calls, call_starts=starts, call_ends=ends, notes=notes)
    finally:
        rec.raw = []
        value = outputs = drawable = None  # noqa: F841 - drop references to user tensors
