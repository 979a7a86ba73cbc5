"""Graphs derived from a walked :class:`~cudamagic.graph.model.AutogradGraph`, model to model.

Passes the walk applies (parameters placed in the module call that uses them,
saved-tensor nodes, one leaf node per use) and the views drawn when the full graph
is too big (module calls collapsed to boxes, repeated blocks and chains of ops
folded). Every function returns a new graph; none imports torch or IPython.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import compress, repeat
from operator import attrgetter, itemgetter

from .model import (
    BACKWARD,
    GRAD,
    LEAF,
    MODULE,
    PARAM,
    RUN,
    SAVED,
    SAVED_EDGE,
    VARIABLE,
    AutogradGraph,
    GraphEdge,
    GraphNode,
    distinct_saved_bytes,
)


# ---- passes of the walk -------------------------------------------------------------
def _common_call(calls: Sequence, a, b):
    """Innermost call enclosing both call indexes ``a`` and ``b`` (``None``: top level)."""
    chain = set()
    while a is not None:
        chain.add(a)
        a = calls[a].parent
    while b is not None and b not in chain:
        b = calls[b].parent
    return b


def place_params(graph: AutogradGraph) -> AutogradGraph:
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
    place.update({var_of[a]: c for a, c in place.items()})  # each tensor with its AccumulateGrad
    nodes = [n._replace(call=place[n.id]) if n.id in place else n for n in graph.nodes]
    return dataclasses.replace(graph, nodes=nodes)


_src, _dst, _label = attrgetter("src"), attrgetter("dst"), attrgetter("label")
_freed, _size_unknown = attrgetter("freed"), attrgetter("size_unknown")
_held = attrgetter("held")


def merge_held(nodes) -> tuple:
    """``((how, count), ...)`` summed over ``nodes`` (saved tensors behind saved-tensor hooks)."""
    total = Counter()
    for held in filter(None, map(_held, nodes)):  # empty for most nodes
        for how, count in held:
            total[how] += count
    return tuple(sorted(total.items()))


def add_saved_nodes(graph: AutogradGraph, all_saved: bool) -> AutogradGraph:
    """Draw saved tensors as ``saved`` nodes linked to their op.

    Every one (``all_saved``, ``--show-saved``) or only custom Functions' ``saved_tensors``.
    """
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
            if s.held:
                label += f" ({s.held})"
            if not s.size_known:
                label += " (size unknown)"
            nodes.append(
                GraphNode(
                    sid,
                    SAVED,
                    label,
                    shape=s.shape,
                    dtype=s.dtype,
                    saved_bytes=s.nbytes,
                    call=n.call,
                    freed=s.freed,
                )
            )
            edges.append(GraphEdge(n.id, sid, SAVED_EDGE))
    return dataclasses.replace(graph, nodes=nodes, edges=edges)


def split_uses(graph: AutogradGraph) -> AutogradGraph:
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
            nodes.append(by_id[var]._replace(id=var + suffix, use=(k, len(cons)), call=call))
            nodes.append(by_id[acc]._replace(id=acc + suffix, use=(k, len(cons)), call=call))
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
        "--shared-params draws one node each."
    ]
    return dataclasses.replace(graph, nodes=kept + nodes, edges=edges, notes=notes)


# ---- views drawn when the full graph is too big ---------------------------------------------
def _dedupe(edges: Iterable, mapping: dict) -> list:
    """``edges`` with their ends renamed by ``mapping``, minus self-loops and repeats."""
    get = mapping.get
    return _renamed((e, get(e[0], e[0]), get(e[1], e[1])) for e in edges)


def _renamed(renames: Iterable) -> list:
    """Edges renamed, minus self-loops and repeats; ``renames``: ``(edge, new src, new dst)``."""
    out, seen = [], set()
    for e, new_src, new_dst in renames:
        kind = e[2]
        if new_src == new_dst:
            continue
        key = (new_src, new_dst, kind)
        if key not in seen:
            seen.add(key)
            out.append(e if key == e else GraphEdge(new_src, new_dst, kind))
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
            into one box counted ``x N`` (``TransformerEncoderLayer x 12``; one module called in a
            loop: ``rnn (RNNCell) x 400``). The first box of a run may hold
            fewer ops than the others when nothing feeds it (its input does not require grad, so the
            ops on the input's path were not recorded): it folds in all the same, with or without a
            grad input.

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
        saved_bytes, storages = distinct_saved_bytes(
            m for m in ms if m.kind in (BACKWARD, RUN, MODULE)
        )
        boxes[t] = GraphNode(
            f"m{t}",
            MODULE,
            c.path or c.type_name,
            attrs=(("type", c.type_name),),
            saved_bytes=saved_bytes,
            storages=storages,
            ops=sum(1 for m in ms if m.kind == BACKWARD),
            call=c.parent,
            freed=any(m.freed for m in ms),
            held=merge_held(ms),
            size_unknown=sum(m.size_unknown for m in ms),
        )
    edges = _dedupe(graph.edges, mapping)
    notes = list(graph.notes)
    if fold:
        signature = {
            t: (
                calls[t].type_name,
                frozenset(
                    Counter(
                        m.kind if m.kind in (PARAM, LEAF) else m.label
                        for m in ms
                        if m.kind != SAVED
                    ).items()
                ),
            )
            for t, ms in members.items()
        }
        linked = {(e.src, e.dst) for e in edges}
        fed = {e.dst for e in edges}
        children = defaultdict(list)
        for c in calls:
            children[c.parent].append(c.index)

        def structure(t):
            """The block's module tree: its type, then its calls' types, depth first."""
            out, todo = [], [t]
            while todo:
                c = todo.pop()
                out.append(calls[c].type_name)
                todo.extend(reversed(children[c]))
            return tuple(out)

        def same_block(prev, t, run):
            if signature[t] == signature[prev]:
                return True
            # the first block of a run whose input does not require grad (nothing feeds its box)
            # records fewer ops (none on the input's path) but is the same block: same type and
            # parameters, ops a subset
            if len(run) > 1 or f"m{prev}" in fed or structure(prev) != structure(t):
                return False
            a, b = Counter(dict(signature[prev][1])), Counter(dict(signature[t][1]))
            return not (a - b) and all(a[k] == b[k] for k in (PARAM, LEAF, "AccumulateGrad"))

        by_parent = defaultdict(list)
        for t in sorted(boxes):
            by_parent[calls[t].parent].append(t)
        fold_map = {}
        for sibs in by_parent.values():
            run = [sibs[0]]
            for t in sibs[1:] + [None]:
                prev = run[-1]
                if t is not None and same_block(prev, t, run) and (f"m{prev}", f"m{t}") in linked:
                    run.append(t)
                    continue
                if len(run) > 1:
                    first, last = calls[run[0]], calls[run[-1]]
                    span = ""
                    if first.path and first.path == last.path:  # one module in a loop (RNN)
                        label = f"{first.path} ({first.type_name}) x {len(run)}"
                    else:
                        label = f"{first.type_name} x {len(run)}"
                        if first.path and last.path:
                            span = f"{first.path} … {last.path}"
                    attrs = (("type", first.type_name),) + ((("calls", span),) if span else ())
                    saved_bytes, storages = distinct_saved_bytes(boxes[r] for r in run)
                    boxes[run[0]] = boxes[run[0]]._replace(
                        label=label,
                        count=len(run),
                        attrs=attrs,
                        ops=sum(boxes[r].ops for r in run),
                        saved_bytes=saved_bytes,
                        storages=storages,
                        held=merge_held(boxes[r] for r in run),
                        size_unknown=sum(boxes[r].size_unknown for r in run),
                    )
                    for r in run[1:]:
                        fold_map[f"m{r}"] = f"m{run[0]}"
                        del boxes[r]
                    notes.append(
                        f"{len(run)} identical {first.type_name} calls folded into one box."
                    )
                run = [t]
        if fold_map:
            edges = _dedupe(edges, fold_map)
    nodes = [n for n in graph.nodes if n.id not in mapping] + [boxes[t] for t in sorted(boxes)]
    return AutogradGraph(
        nodes,
        edges,
        list(calls),
        notes,
        graph.saved_bytes_total,
        view=f"collapsed (depth {depth})",
        saved_unknown=graph.saved_unknown,
    )


def fold_runs(graph: AutogradGraph, min_run: int = 3) -> AutogradGraph:
    """Fold linear chains of ops into one box.

    Fold linear chains of ops (``SinBackward0 -> MulBackward0 -> SinBackward0 ...``) into one box.

    A link ``a -> b`` folds when both are backward nodes of the same module call, ``a`` feeds only
    ``b`` and ``b`` has no other input. Chains shorter than ``min_run`` stay as they are.

    Nodes are numbered by their place in ``graph.nodes`` first, and the links found on those
    numbers: a 100,000-op chain looks each node id up in a dict about twice, not fifteen times
    (each lookup of a string key reads the string; past a few 10,000 nodes they no longer stay
    in the CPU caches).

    Returns:
        A new graph with ``run`` nodes (``count`` ops, per-op counts in ``attrs``, ``saved_bytes``
        summed), or ``graph`` unchanged.
    """
    nodes, edges = graph.nodes, graph.edges
    ids = list(map(_id, nodes))
    pos = dict(zip(ids, range(len(ids)), strict=True))
    srcs, dsts = _places(edges, pos, ids)
    # per place: the node's call when it is a backward node, else _NOT (equal to no call)
    back = [
        c if k == BACKWARD else _NOT
        for k, c in zip(map(_kind, nodes), map(_call, nodes), strict=True)
    ]
    back += [_NOT] * (len(ids) - len(back))  # edge ends no node has
    outdeg, indeg = [0] * len(ids), [0] * len(ids)
    for s in srcs:
        outdeg[s] += 1
    grad = [k == GRAD for k in map(_edge_kind, edges)]
    for d in compress(dsts, grad):
        indeg[d] += 1
    nxt = {}
    for a, b in compress(zip(srcs, dsts, strict=True), grad):
        if outdeg[a] == 1 and indeg[b] == 1 and back[a] is not _NOT and back[a] == back[b]:
            nxt[a] = b
    if not nxt:
        return graph
    targets = set(nxt.values())
    heads = [a for a in nxt if a not in targets]
    run_of = [None] * len(ids)  # place -> the id of the run it folds into
    members = {}
    for head in sorted(heads, key=lambda i: int(re.sub(r"\D", "", ids[i]) or 0)):
        chain = [head]
        link = nxt.get(head)
        while link is not None:
            chain.append(link)
            link = nxt.get(link)
        if len(chain) >= min_run:
            rid = "r" + ids[head][1:]
            members[rid] = []
            for i in chain:
                run_of[i] = rid
    if not members:
        return graph
    for n, rid in zip(nodes, run_of, strict=False):  # each run's ops, in one pass, in node order
        if rid is not None:
            members[rid].append(n)
    runs = {}
    for rid, chain in members.items():
        counts = Counter(map(_label, chain))
        label = next(iter(counts)) if len(counts) == 1 else f"chain of {len(chain)} ops"
        saved_bytes, storages = distinct_saved_bytes(chain)
        runs[rid] = GraphNode(
            rid,
            RUN,
            label,
            count=len(chain),
            ops=len(chain),
            call=chain[0].call,
            attrs=tuple((op, str(c)) for op, c in sorted(counts.items())),
            saved_bytes=saved_bytes,
            storages=storages,
            freed=any(map(_freed, chain)),
            held=merge_held(chain),
            size_unknown=sum(map(_size_unknown, chain)),
        )
    if graph.kind_counts[SAVED]:  # saved-tensor nodes of folded ops go with them
        for e, s, d in zip(edges, srcs, dsts, strict=True):
            if e.kind == SAVED_EDGE and run_of[s] is not None:
                run_of[d] = run_of[s]
    nodes = [n for n, rid in zip(nodes, run_of, strict=False) if rid is None] + list(runs.values())
    notes = list(graph.notes) + [
        f"{len(runs)} chain(s) of ops folded ({sum(r.count for r in runs.values())} ops)."
    ]
    view = "chains folded" if graph.view == "full" else f"{graph.view}, chains folded"
    return AutogradGraph(
        nodes,
        _renamed(  # the ends of folded ops renamed to their run
            (e, run_of[s] or e[0], run_of[d] or e[1])
            for e, s, d in zip(edges, srcs, dsts, strict=True)
        ),
        list(graph.calls),
        notes,
        graph.saved_bytes_total,
        view=view,
        saved_unknown=graph.saved_unknown,
    )


_id, _kind, _call, _edge_kind = (
    attrgetter("id"),
    attrgetter("kind"),
    attrgetter("call"),
    itemgetter(2),
)
_NOT = object()  # the call of a node that is not a backward node: equal to none


def _places(edges: Sequence, pos: dict, ids: list) -> tuple:
    """The places (in ``ids``) of each edge's two ends, as two lists.

    An end no node has (no graph of the walk has one) gets a place of its own, appended to
    ``ids`` and ``pos``.
    """
    srcs = list(map(pos.get, map(_src, edges), repeat(-1)))
    dsts = list(map(pos.get, map(_dst, edges), repeat(-1)))
    if edges and min(min(srcs), min(dsts)) < 0:
        for e in edges:
            for end in e[:2]:
                if end not in pos:
                    pos[end] = len(ids)
                    ids.append(end)
        srcs, dsts = list(map(pos.get, map(_src, edges))), list(map(pos.get, map(_dst, edges)))
    return srcs, dsts
