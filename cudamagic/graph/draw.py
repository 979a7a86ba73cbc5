"""Drawing a walked graph: choosing the view that fits, running ``dot`` and the fallbacks.

Fallbacks, in order:

1. the full graph, when it has at most ``node_budget`` nodes;
2. the collapsed module view (deepest ``--depth`` that fits, repeated blocks and
   chains of identical ops folded), said so in a note;
3. a summary table (op counts, saved memory) with the DOT source, when even that
   is too big or ``dot`` runs past its time limit;
4. without ``dot`` on PATH: the install commands, a text outline and the DOT source.

:func:`draw` returns a :class:`~cudamagic.graph.result.GraphResult`. The ``dot``
program is reached through the :mod:`.dot` module's attributes (``dot.run_dot``),
so a test can replace it there.
"""

from __future__ import annotations

import dataclasses

from . import dot, views
from .result import GraphResult


# ---- choosing a view and rendering ------------------------------------------------------------
def choose_view(graph, depth: int | None, fold: bool, node_budget: int) -> tuple:
    """The graph to draw and notes: ``depth`` when given, else the full graph or the view that fits.

    Returns:
        ``(view, notes, fits)``: ``fits`` is False when even the most collapsed view exceeds the budget.
    """
    if depth is not None:
        view = views.collapse(graph, depth, fold)
        return view, [], len(view.nodes) <= node_budget
    if len(graph.nodes) <= node_budget:
        return graph, [], True
    view = graph
    for d in range(views.max_depth(graph) - 1, -1, -1):
        for f in ((False, True) if fold else (False,)):
            view = views.collapse(graph, d, f)
            if len(view.nodes) <= node_budget:
                break
        if len(view.nodes) <= node_budget:
            break
    if len(view.nodes) > node_budget:
        view = views.fold_runs(view)
    fits = len(view.nodes) <= node_budget
    note = (f"The graph has {len(graph.nodes)} nodes, more than the node budget of {node_budget} "
            f"(CudaMagics.graph_node_budget): ")
    if fits:
        note += (f"drawn as the {view.view} view ({len(view.nodes)} nodes). Use --depth D to choose the module "
                 "depth, or raise the budget with %config CudaMagics.graph_node_budget = N.")
    else:
        note += ("even the collapsed view is too big to lay out, so here are a summary and the DOT source. "
                 "Draw a smaller part (fewer steps or layers), or raise the budget with "
                 "%config CudaMagics.graph_node_budget = N.")
    return view, [note], fits


def draw(graph, *, fmt: str = "svg", group: bool = False, depth: int | None = None, fold: bool = True,
         node_budget: int = 2000, timeout_s: float = 20.0, save_path: str | None = None) -> GraphResult:
    """Pick a view of ``graph``, render it with ``dot`` (time-limited) and apply the fallbacks.

    Args:
        graph: The full graph from :func:`cudamagic.graph.capture.capture`.
        fmt: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'`` (DOT source only, no ``dot`` run).
        group: Module calls as clusters.
        depth: Collapse module calls deeper than this (``None``: full graph, collapsed only past the budget).
        fold: Fold repeated identical blocks when collapsing.
        node_budget: Most nodes drawn before collapsing (count).
        timeout_s: Seconds ``dot`` may run per attempt.
        save_path: Also write the picture there (format from the extension when it has one).

    Returns:
        A :class:`GraphResult`; never raises for ``dot`` problems (they become ``problem`` and notes).
    """
    view, notes, fits = choose_view(graph, depth, fold, node_budget)
    notes = list(graph.notes) + notes
    source = dot.to_dot(view, group=group, full=graph)
    result = GraphResult(graph, view, source, fmt, notes=notes)
    if fmt == "dot":
        pass
    elif not fits:
        result.problem = "too big"
    elif dot.find_dot() is None:
        result.problem = "dot missing"
    else:
        try:
            result.image = dot.run_dot(source, fmt, timeout_s)
        except dot.DotTimeout:
            collapsed = None
            if view is graph:
                for d in range(views.max_depth(graph) - 1, -1, -1):
                    collapsed = views.collapse(graph, d, fold)
                    if len(collapsed.nodes) < len(graph.nodes) // 2:
                        break
                collapsed = views.fold_runs(collapsed or graph)
                if len(collapsed.nodes) >= len(graph.nodes):
                    collapsed = None
            if collapsed is not None:
                notes.append(f"dot did not finish the full graph within {timeout_s:g} s "
                             f"(CudaMagics.graph_dot_timeout_s): drawn as the {collapsed.view} view.")
                result.drawn, result.dot = collapsed, dot.to_dot(collapsed, group=group, full=graph)
                try:
                    result.image = dot.run_dot(result.dot, fmt, timeout_s)
                except (dot.DotTimeout, dot.DotFailed) as exc:
                    result.problem = "dot timeout"
                    notes.append(f"The collapsed view failed too ({exc}): summary and DOT source below.")
            else:
                result.problem = "dot timeout"
                notes.append(f"dot did not finish within {timeout_s:g} s (CudaMagics.graph_dot_timeout_s): "
                             "summary and DOT source below; raise the limit or draw a smaller part.")
        except dot.DotFailed as exc:
            result.problem = "dot failed"
            notes.append(f"dot failed: {exc}")
    if save_path:
        _save(result, save_path, timeout_s)
    return result


def draw_source(graph, source: str, *, fmt: str = "svg", timeout_s: float = 20.0, save_path: str | None = None,
                notes=()) -> GraphResult:
    """Render DOT ``source`` made by another engine (torchviz) for ``graph``, with the same time limit.

    Returns:
        A :class:`GraphResult` whose ``dot`` is ``source``; ``dot`` problems become ``problem`` and notes.
    """
    drawn = dataclasses.replace(graph, view="torchviz make_dot")
    result = GraphResult(graph, drawn, source, fmt, notes=list(graph.notes) + list(notes))
    if fmt != "dot":
        if dot.find_dot() is None:
            result.problem = "dot missing"
        else:
            try:
                result.image = dot.run_dot(source, fmt, timeout_s)
            except dot.DotTimeout:
                result.problem = "dot timeout"
                result.notes.append(f"dot did not finish within {timeout_s:g} s (CudaMagics.graph_dot_timeout_s): "
                                    "summary and DOT source below; the default engine collapses big graphs.")
            except dot.DotFailed as exc:
                result.problem = "dot failed"
                result.notes.append(f"dot failed: {exc}")
    if save_path:
        _save(result, save_path, timeout_s)
    return result


def _save(result: GraphResult, path: str, timeout_s: float) -> None:
    try:
        fmt = dot.save_format(path)
        if fmt != "dot" and result.problem:
            raise dot.DotFailed(f"{result.problem}; the DOT source can still be saved: `_.save('graph.dot')`")
        result.save(path, timeout_s)
        result.saved_to = path
        result.notes.append(f"Saved to {path}.")
    except (dot.DotMissing, dot.DotTimeout, dot.DotFailed, OSError, ValueError) as exc:
        result.notes.append(f"Not saved to {path}: {exc}")
