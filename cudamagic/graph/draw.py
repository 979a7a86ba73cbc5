"""Drawing a walked graph: choosing the view that fits, running ``dot`` and the fallbacks.

Fallbacks, in order:

1. the full graph, when it has at most ``node_budget`` nodes;
2. the collapsed module view (deepest ``--depth`` that fits, repeated blocks and
   chains of identical ops folded), said so in a note;
3. a summary table (op counts, saved memory) with the DOT source, when even that
   is too big or ``dot`` runs past its time limit;
4. without ``dot`` on PATH: the install commands, a text outline and the DOT source.

:func:`draw` returns a :class:`~cudamagic.graph.result.GraphResult`. The ``dot``
program is run by :func:`.layout.run_dot`.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter, defaultdict

from ..core.gcpause import paused_gc
from . import capture, layout, views
from .result import GraphResult

# ---- choosing a view and rendering ------------------------------------------------------------
#: Default node budget (``CudaMagics.graph_node_budget``): most boxes one picture holds before
#: module calls are collapsed. With the compact spacing of :func:`dot.to_dot` a rank (one box high
#: plus the gap) is about 70 px, and a picture scaled to the output width of a 1400 px window keeps
#: labels legible up to about 2,500 px natural width (15-20 boxes side by side): 150 boxes is at
#: most a few screens, and ``dot`` lays it out in well under a second.
NODE_BUDGET = 150

#: Most ranks (boxes on the longest input-to-output path) the automatic view prefers: 40 ranks are
#: about three screens (900 px each) of a 1400 px window. A view under the node budget but taller is
#: drawn only when no collapsed view is shorter. A raised node budget raises it too (a quarter of
#: the budget, at least 40).
RANK_BUDGET = 40


def rank_budget(node_budget: int) -> int:
    """The preferred most ranks for ``node_budget``."""
    return max(RANK_BUDGET, node_budget // 4)


#: A full graph drawn with more boxes than this gets one node per use of a leaf used by several ops
#: (what keeps ``dot`` fast on an unrolled loop); smaller graphs draw each leaf once.
PER_USE_ABOVE = 60


#: Most boxes of the view drawn when ``dot`` runs out of time on the chosen one (a view this small
#: lays out in well under a second), and the share of the time limit the chosen view gets first.
FALLBACK_BOXES = 60
FIRST_SHARE = 0.8
#: Seconds ``--save`` may still run ``dot`` when the time limit is spent.
MIN_SAVE_S = 0.5


def ranks(graph) -> int:
    """Boxes on the longest path of ``graph`` (its height in ranks)."""
    succ, indeg = defaultdict(list), Counter()
    for e in graph.edges:
        succ[e.src].append(e.dst)
        indeg[e.dst] += 1
    depth = {n.id: 1 for n in graph.nodes if not indeg[n.id]}
    ready = list(depth)
    while ready:  # Kahn's order: a node's depth is final when its last input is done
        nid = ready.pop()
        d = depth[nid] + 1
        for s in succ[nid]:
            if depth.get(s, 0) < d:
                depth[s] = d
            indeg[s] -= 1
            if not indeg[s]:
                ready.append(s)
    return max(depth.values(), default=0)


def choose_view(
    graph, depth: int | None, fold: bool, node_budget: int, per_use: bool = True
) -> tuple:
    """The view to draw, its notes, and whether it fits.

    The graph to draw and notes: ``depth`` when given, else the full graph or the deepest view that
    fits.

    A view fits when it has at most ``node_budget`` boxes; the automatic choice also prefers views
    at most :func:`rank_budget` ranks high (a few screens), collapsing module calls one depth at a
    time with repeated calls folded (``rnn (RNNCell) x 400``), and folds chains of ops when that is
    not enough.

    Args:
        graph: The full graph, each leaf once (``shared_params=True``).
        depth: ``--depth`` (``None``: automatic).
        fold: Fold repeated calls of one block (``--no-fold`` turns it off).
        node_budget: Most boxes drawn (count).
        per_use: Allow one node per use of a leaf in a full graph of more than :data:`PER_USE_ABOVE`
            boxes.

    Returns:
        ``(view, notes, fits)``: ``fits`` is False when even the most collapsed view exceeds the
        budget; ``notes`` say how the view was chosen.
    """
    if depth is not None:
        view = views.collapse(graph, depth, fold)
        return view, [], len(view.nodes) <= node_budget

    def candidates():
        yield graph
        for d in range(views.max_depth(graph) - 1, -1, -1):
            yield views.collapse(graph, d, fold)  # folded: a loop of 400 calls is one box, not 400

    tall = rank_budget(node_budget)
    chosen, fallback, last = None, None, graph
    for view in candidates():
        last = view
        if len(view.nodes) > node_budget:
            continue
        if ranks(view) <= tall:
            chosen = view
            break
        if view.view == "full" or len(view.nodes) < len(graph.nodes):
            runs = views.fold_runs(view)
            if ranks(runs) <= tall:
                chosen = runs
                break
            fallback = fallback or runs
    view = chosen or fallback or views.fold_runs(last)
    fits = len(view.nodes) <= node_budget
    if view is graph:
        if per_use and len(graph.nodes) > PER_USE_ABOVE:
            split = views.split_uses(graph)
            if len(split.nodes) <= node_budget:
                view = split
        return view, [], True
    too = (
        [f"{len(graph.nodes)} boxes, more than the node budget of {node_budget}"]
        if len(graph.nodes) > node_budget
        else []
    )
    high = ranks(graph) if not too else 0  # over the budget says enough
    if high > tall:
        too.append(f"{high} boxes high, more than {tall}")
    note = (
        f"The full graph would be {' and '.join(too)} "
        "(about three screens; CudaMagics.graph_node_budget): "
    )
    if fits:
        note += (
            f"drawn as the {view.view} view ({len(view.nodes)} boxes, {ranks(view)} high). Use "
            "--depth D to "
            "choose the module depth, or raise the budget with %config "
            "CudaMagics.graph_node_budget = N."
        )
    else:
        note += (
            "even the collapsed view is too big to lay out, so here are a summary and the DOT "
            "source. "
            "Draw a smaller part (fewer steps or layers), or raise the budget with "
            "%config CudaMagics.graph_node_budget = N."
        )
    return view, [note], fits


def draw_cell(shell, cell: str, line: str, opts, progress=None) -> GraphResult:
    """Run ``cell`` and draw its graph as ``opts`` (:class:`~.options.GraphOptions`) asks.

    ``progress``: see :func:`draw`.
    """
    __tracebackhide__ = True
    graph = capture.capture(
        shell,
        cell,
        line,
        list(opts.output_names),
        show_saved=opts.show_saved,
        show_attrs=opts.show_attrs,
        shared_params=True,
    )
    return draw_with(graph, opts, progress)


def draw_with(graph, opts, progress=None) -> GraphResult:
    """:func:`draw` with the settings of ``opts`` (:class:`~.options.GraphOptions`)."""
    return draw(
        graph,
        fmt=opts.fmt,
        group=opts.group,
        depth=opts.depth,
        fold=opts.fold,
        node_budget=opts.node_budget,
        timeout_s=opts.timeout_s,
        save_path=opts.save_path,
        per_use=not opts.shared_params,
        progress=progress,
    )


def draw(
    graph,
    *,
    fmt: str = "svg",
    group: bool = False,
    depth: int | None = None,
    fold: bool = True,
    node_budget: int = NODE_BUDGET,
    timeout_s: float = 20.0,
    save_path: str | None = None,
    per_use: bool = True,
    progress=None,
) -> GraphResult:
    """Pick a view of ``graph``, render it with ``dot`` (time-limited) and apply the fallbacks.

    Args:
        graph: The full graph from :func:`cudamagic.graph.capture.capture`, each leaf once.
        fmt: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'`` (DOT source only, no ``dot`` run).
        group: Module calls as clusters.
        depth: Collapse module calls deeper than this (``None``: full graph, collapsed only past the
            budget).
        fold: Fold repeated identical blocks when collapsing.
        node_budget: Most boxes drawn before collapsing (count).
        timeout_s: Seconds ``dot`` may run in all: the chosen view gets :data:`FIRST_SHARE` of
            them when a smaller fallback view exists, the fallback (at most
            :data:`FALLBACK_BOXES` boxes) what is left; then a summary, without ``dot``.
        save_path: Also write the picture there (format from the extension when it has one).
        per_use: Allow one node per use of a leaf in big full graphs (``--shared-params`` turns it
            off).
        progress: Called as ``progress()`` about once a second while ``dot`` runs (see
            :func:`.layout.run_dot`), or None.

    Returns:
        A :class:`GraphResult`; never raises for ``dot`` problems (they become ``problem`` and
        notes).
    """
    deadline = time.monotonic() + timeout_s
    with paused_gc(promote=True):
        view, view_notes, fits = choose_view(graph, depth, fold, node_budget, per_use)
    view_notes = [n for n in view.notes if n not in graph.notes] + view_notes
    notes = list(graph.notes) + view_notes
    result = GraphResult(graph, view, "", fmt, notes=notes, view_notes=view_notes, group=group)
    result.write_dot()
    # a picture bigger than the fallback gets most of the time, the fallback the rest
    first = timeout_s * FIRST_SHARE if len(view.nodes) > FALLBACK_BOXES else timeout_s
    if fmt == "dot":
        pass
    elif not fits:
        result.problem = "too big"
    elif layout.find_dot() is None:
        result.problem = "dot missing"
    elif not _render(result, first, progress):
        small, _, small_fits = choose_view(graph, None, True, FALLBACK_BOXES, per_use=False)
        left = deadline - time.monotonic()
        if small_fits and len(small.nodes) < len(view.nodes) and left > 0:
            note = (
                f"dot did not finish the {view.view} view ({len(view.nodes)} boxes) within "
                f"{first:.3g} s of the {timeout_s:g} s limit "
                f"(CudaMagics.graph_dot_timeout_s): drawn as the {small.view} view "
                f"({len(small.nodes)} boxes)."
            )
            notes.append(note)
            result.view_notes.append(note)
            result.drawn = small
            result.write_dot()
            if not _render(result, left, progress):
                result.problem = "dot timeout"
                notes.append("The small view ran out of time too: summary and DOT source below.")
        else:
            result.problem = "dot timeout"
            notes.append(
                f"dot did not finish within {timeout_s:g} s (CudaMagics.graph_dot_timeout_s): "
                "summary and DOT source below; raise the limit or draw a smaller part."
            )
    if save_path:
        _save(result, save_path, max(deadline - time.monotonic(), MIN_SAVE_S))
    return result


def draw_source(
    graph,
    source: str,
    *,
    fmt: str = "svg",
    timeout_s: float = 20.0,
    save_path: str | None = None,
    notes=(),
    progress=None,
) -> GraphResult:
    """Render DOT ``source`` from torchviz for ``graph``.

    Render DOT ``source`` made by another engine (torchviz) for ``graph``, with the same time limit.

    Returns:
        A :class:`GraphResult` whose ``dot`` is ``source``; ``dot`` problems become ``problem`` and
        notes.
    """
    drawn = dataclasses.replace(graph, view="torchviz make_dot")
    result = GraphResult(
        graph, drawn, source, fmt, notes=list(graph.notes) + list(notes), engine="torchviz"
    )
    if fmt == "dot":
        pass
    elif layout.find_dot() is None:
        result.problem = "dot missing"
    elif not _render(result, timeout_s, progress):
        result.problem = "dot timeout"
        result.notes.append(
            f"dot did not finish within {timeout_s:g} s (CudaMagics.graph_dot_timeout_s): "
            "summary and DOT source below; the default engine collapses big graphs."
        )
    if save_path:
        _save(result, save_path, timeout_s)
    return result


def _render(result: GraphResult, timeout_s: float, progress) -> bool:
    """Lay out the picture into ``result.image``; False when ``dot`` ran out of time.

    A ``dot`` that fails sets ``result.problem`` and a note.
    """
    try:
        result.image = layout.run_dot(
            result.inline_dot(), result.format, timeout_s, progress, result.engine != "torchviz"
        )
    except layout.DotTimeout:
        return False
    except layout.DotFailed as exc:
        result.problem = "dot failed"
        result.notes.append(f"dot failed: {exc}")
    return True


def _save(result: GraphResult, path: str, timeout_s: float) -> None:
    try:
        if result.problem and not path.lower().endswith((".dot", ".gv")):
            raise layout.DotFailed(
                f"{result.problem}; the DOT source can still be saved: `_.save('graph.dot')`"
            )
        result.save(path, timeout_s)
        result.saved_to = path
        result.notes.append(f"Saved to {path}.")
    except (layout.DotMissing, layout.DotTimeout, layout.DotFailed, OSError, ValueError) as exc:
        result.notes.append(f"Not saved to {path}: {exc}")
