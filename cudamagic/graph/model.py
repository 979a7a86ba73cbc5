"""The autograd graph model: node and edge kinds, nodes, edges, module calls and the graph.

Plain data (:class:`AutogradGraph` of :class:`GraphNode` and :class:`GraphEdge`):
node ids are assigned in walk order (``n0``, ``n1``, ...), never from memory
addresses, so the same cell gives the same graph twice. The model keeps only
metadata (names, shapes, dtypes, byte counts), never a tensor or an autograd node.

Vocabulary follows autograd and torchviz: backward nodes by class name
(``AddmmBackward0``), ``AccumulateGrad`` with the leaf tensor it accumulates
into, saved tensors, outputs and view bases. Imports neither IPython nor torch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict, deque
from collections.abc import Iterable
from itertools import chain, compress
from operator import attrgetter
from typing import NamedTuple

# ---- node and edge kinds ----------------------------------------------------------
BACKWARD = "backward"  # a grad_fn node (``MulBackward0``, custom ``MyFnBackward``)
ACCUMULATE = "accumulate"  # an ``AccumulateGrad`` node
PARAM = "param"  # a leaf tensor that requires grad and is a parameter of a module
LEAF = "leaf"  # any other leaf tensor that requires grad
OUTPUT = "output"  # a tensor the cell returned
BASE = "base"  # the base tensor of an output that is a view
SAVED = "saved"  # a tensor saved for backward (``--show-saved``; custom Functions always)
MODULE = "module"  # a collapsed module call (or several folded identical ones)
RUN = "run"  # a folded run of identical single-input ops in a chain

GRAD = "grad"  # edge: input grad_fn -> consumer (``next_functions``), as torchviz draws it
VARIABLE = "variable"  # edge: leaf tensor -> its AccumulateGrad
TO_OUTPUT = "output"  # edge: grad_fn -> output tensor
VIEW = "view"  # edge: base -> view (dotted)
SAVED_EDGE = "saved"  # edge: node -> saved tensor (no arrow)


# ---- the graph model --------------------------------------------------------------
class SavedEntry(NamedTuple):
    """One tensor saved for backward by a node.

    Attributes:
        name: Attribute name without the ``_saved_`` prefix (``self``, ``other``,
            ``saved_tensors[1]``).
        shape: Tensor shape, ``None`` when the entry is ``None``, freed or has no regular shape.
        dtype: ``'float32'`` etc., ``''`` when unknown.
        nbytes: Bytes of the storage it keeps alive (0 when freed, ``None`` or a parameter's).
        freed: True when ``backward()`` already freed it.
        is_none: True for a ``None`` entry of a custom Function's ``saved_tensors``.
        held: ``''`` when autograd holds the tensor itself; else how a saved-tensor hook holds it,
            read
            without unpacking it: ``'recomputed in backward'`` (non-reentrant checkpoint: nothing
                held),
            ``'kept on CPU'`` (``save_on_cpu``), ``'packed by <hook>'`` (a user's pack hook).
        size_known: False when the bytes it keeps alive cannot be known (a tensor subclass without
            readable storage, a hook's packed object holding no tensor); ``nbytes`` is then 0.
    """

    name: str
    shape: tuple | None = None
    dtype: str = ""
    nbytes: int = 0
    freed: bool = False
    is_none: bool = False
    held: str = ""
    size_known: bool = True


class GraphNode(NamedTuple):
    """One node of the drawn graph.

    A named tuple, as :class:`GraphEdge`: a 100,000-op chain makes 100,000 of each, and a frozen
    dataclass takes 4-6 times longer to make.

    Attributes:
        id: Deterministic id (``n0``, ``n1``, ... in walk order; ``n7u2`` for the 2nd use of a
            parameter; ``m3`` for a collapsed module call, ``r5`` for a folded run).
        kind: One of the module constants (``backward``, ``accumulate``, ``param``, ``leaf``,
            ``output``, ``base``, ``saved``, ``module``, ``run``).
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
            ``saved_bytes`` when they are views (a batch sliced from a bigger tensor) whose whole
            storage is kept alive.
        storages: ``((storage_id, nbytes), ...)`` the distinct non-parameter storages behind
            ``saved_bytes`` (ids ``0, 1, ...`` in walk order, never addresses): a box that stands
            for several nodes counts a storage they share once.
        held: ``((how, count), ...)``: saved tensors behind saved-tensor hooks (see
            ``SavedEntry.held``).
        size_unknown: How many of its saved tensors have a size that cannot be known (not in
            ``saved_bytes``).
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
    storages: tuple = ()
    saved_view_bytes: int = 0
    held: tuple = ()
    size_unknown: int = 0


def distinct_saved_bytes(nodes: Iterable) -> tuple:
    """``(bytes, storages)`` of the distinct storages behind ``nodes`` (each counted once).

    Args:
        nodes: ``GraphNode``s (backward nodes, or boxes that carry their members' ``storages``).

    Returns:
        Total bytes, and the merged ``((storage_id, nbytes), ...)`` sorted by id.
    """
    merged = dict(chain.from_iterable(map(_storages, nodes)))
    return sum(merged.values()), tuple(sorted(merged.items()))


_kind, _label, _storages = attrgetter("kind"), attrgetter("label"), attrgetter("storages")
_OPS = frozenset((BACKWARD, ACCUMULATE))  # the kinds op_counts counts


class GraphEdge(NamedTuple):
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
        """``path (TypeName)``, or the type name of an unnamed module."""
        return f"{self.path} ({self.type_name})" if self.path else self.type_name


@dataclasses.dataclass
class AutogradGraph:
    """The graph model: nodes, edges, module calls and notes.

    Attributes:
        nodes: ``GraphNode`` list in walk order.
        edges: ``GraphEdge`` list (duplicates kept: ``x * x`` has two edges from ``x``'s
            AccumulateGrad).
        calls: ``ModuleCall`` list recorded while the cell ran.
        notes: Human-readable notes (skipped non-tensor outputs, per-use parameters, collapsing
            ...).
        saved_bytes_total: Bytes of distinct storages held for backward (parameters not counted).
        view: ``'full'``, ``'collapsed'`` ... how this graph was derived.
        saved_unknown: Saved tensors whose size cannot be known (count; not in
            ``saved_bytes_total``).
    """

    nodes: list
    edges: list
    calls: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    saved_bytes_total: int = 0
    view: str = "full"
    saved_unknown: int = 0

    @functools.cached_property
    def _by_id(self) -> dict:
        return {n.id: n for n in self.nodes}

    def node(self, node_id: str) -> GraphNode:
        """The node with id ``node_id`` (``KeyError`` when absent)."""
        return self._by_id[node_id]

    def of_kind(self, *kinds: str) -> list:
        """Nodes whose kind is one of ``kinds``, in walk order."""
        return [n for n in self.nodes if n.kind in kinds]

    def labels(self, *kinds: str) -> list:
        """Labels of the nodes of ``kinds`` (all nodes when none given)."""
        return [n.label for n in self.nodes if not kinds or n.kind in kinds]

    @functools.cached_property
    def kind_counts(self) -> Counter:
        """``Counter`` of node kinds (``backward``, ``param``, ``output``, ...), counted once."""
        return Counter(map(_kind, self.nodes))

    @functools.cached_property
    def _op_counts(self) -> Counter:
        nodes = self.nodes
        c = Counter(compress(map(_label, nodes), map(_OPS.__contains__, map(_kind, nodes))))
        if self.kind_counts[RUN]:
            for n in nodes:
                if n.kind == RUN:
                    for op, count in n.attrs:
                        c[op] += int(count)
        return c

    def op_counts(self) -> Counter:
        """``Counter`` of backward and AccumulateGrad class names (a copy: yours to change)."""
        return Counter(self._op_counts)

    def inputs_of(self, node_id: str, kind: str | None = None) -> list:
        """Ids of the nodes with an edge into ``node_id`` (optionally only edges of ``kind``)."""
        return [e.src for e in self.edges if e.dst == node_id and (kind is None or e.kind == kind)]

    def label_edges(self, kinds=(GRAD, VARIABLE, TO_OUTPUT)) -> Counter:
        """Multiset of ``(src label, dst label)`` for edges of ``kinds``: structure without ids."""
        return Counter(
            (self._by_id[e.src].label, self._by_id[e.dst].label)
            for e in self.edges
            if e.kind in kinds
        )


def topo_order(graph) -> list:
    """Node ids from inputs to outputs (Kahn's algorithm)."""
    indeg = Counter()
    succ = defaultdict(list)
    for e in graph.edges:
        indeg[e.dst] += 1
        succ[e.src].append(e.dst)
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    ready = deque(sorted((n.id for n in graph.nodes if indeg[n.id] == 0), key=pos.get))
    order = []
    while ready:
        nid = ready.popleft()
        order.append(nid)
        for d in succ[nid]:
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    return order
