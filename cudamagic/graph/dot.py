"""DOT text for an :class:`~cudamagic.graph.model.AutogradGraph`.

Node styles, the legend and every label escaped (:func:`to_dot`); :mod:`.layout` runs the ``dot``
program on it.
"""

from __future__ import annotations

import html
import re
from collections import defaultdict

from ..core.fmt import format_bytes, plural
from .model import (
    ACCUMULATE,
    BACKWARD,
    BASE,
    LEAF,
    MODULE,
    OUTPUT,
    PARAM,
    RUN,
    SAVED,
    SAVED_EDGE,
    VIEW,
)

# kind -> fill colour: torchviz's colours, as names and values both Graphviz and CSS know, except
# AccumulateGrad: thistle, not the backward ops' grey. A folded run is backward ops: grey, 2 rims.
_FILL = {
    BACKWARD: "lightgray",
    ACCUMULATE: "thistle",
    PARAM: "lightblue",
    LEAF: "lightcyan",
    OUTPUT: "#caff70",  # Graphviz's darkolivegreen1 (torchviz), as CSS knows it
    BASE: "#a2cd5a",  # darkolivegreen3
    SAVED: "orange",
    MODULE: "lightyellow",
    RUN: "lightgray",
}
_SHAPE = {MODULE: ', shape="box3d", margin="0.11,0.1"', RUN: ', peripheries="2"'}
_LEGEND = {
    BACKWARD: "backward op (grad_fn)",
    ACCUMULATE: "AccumulateGrad (writes .grad)",
    PARAM: "parameter (module path)",
    LEAF: "leaf tensor, requires grad",
    OUTPUT: "output",
    BASE: "base of a view output",
    SAVED: "tensor saved for backward",
    MODULE: "module call (collapsed)",
    RUN: "chain of ops (folded)",
}


def legend_rows(graph) -> list:
    """``[(fill colour, text)]`` of the node kinds present in ``graph``.

    The fill colours are the nodes' own (names or #hex that Graphviz and CSS both know): a picture
    colour, not a theme colour.
    """
    present = {n.kind for n in graph.nodes}
    rows = [(_FILL[k], _LEGEND[k]) for k in _LEGEND if k in present]
    if any(n.kind == SAVED and n.freed for n in graph.nodes):
        rows.append(("mistyrose", "saved tensor freed by backward() (dashed)"))
    return rows


def _legend_node(graph) -> list:
    """The legend as one node with an HTML-like table.

    The legend as ONE node with an HTML-like table, for standalone files (``.dot``, ``--save``); a
    notebook shows the legend in the page instead (:mod:`.render`).
    """
    rows = legend_rows(graph)
    if not rows:
        return []
    cells = "".join(
        f'<TR><TD BGCOLOR="{html.escape(c)}" ALIGN="LEFT">{html.escape(t)}</TD></TR>'
        for c, t in rows
    )
    table = (
        '<TABLE BORDER="1" STYLE="dashed" CELLBORDER="1" CELLSPACING="3" CELLPADDING="2" '
        'COLOR="gray40">'
        f'<TR><TD BORDER="0">legend</TD></TR>{cells}</TABLE>'
    )
    return [
        '  subgraph cluster_legend { style="invis";',
        f'    legend [shape="plain", style="", label=<{table}>];',
        "  }",
    ]


#: Graphs of more nodes than this get ``nslimit`` (:data:`NSLIMIT`), bounding dot's x placement.
NSLIMIT_ABOVE = 100
#: dot's ``nslimit``: iterations of its x-placement network simplex, per node.
NSLIMIT = 2


# ---- DOT ----------------------------------------------------------------------------
#: Control characters other than newline (and carriage return, dropped first): drawn as spaces.
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f]")


def quote(text) -> str:
    """A DOT double-quoted string, everything escaped."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\r", "")
    return '"' + _CONTROL.sub(" ", text).replace("\n", "\\n") + '"'


def _tensor_text(n) -> str:
    shape = "(" + ", ".join(str(s) for s in n.shape) + ")" if n.shape is not None else "(nested)"
    dev = "" if n.device in ("", "cpu") else f" {n.device}"
    return f"{shape} {n.dtype}{dev}".strip()


def node_text(n) -> str:
    """The multi-line label drawn for node ``n`` (plain text; :func:`quote` escapes it)."""
    lines = []
    if n.kind in (PARAM, LEAF, OUTPUT, BASE):
        lines = [n.label, _tensor_text(n)]
        if n.use:
            lines.append(f"use {n.use[0]}/{n.use[1]}")
    elif n.kind == SAVED:
        lines = [n.label]
        if n.shape is not None:
            lines.append(_tensor_text(n))
        if n.saved_bytes:
            lines.append(format_bytes(n.saved_bytes))
    elif n.kind == MODULE:
        attrs = dict(n.attrs)
        lines = [n.label]
        if n.count > 1 and attrs.get("calls"):
            lines.append(attrs["calls"])
        elif attrs.get("type") and attrs["type"] != n.label and n.count == 1:
            lines.append(attrs["type"])
        lines.append(
            plural(n.ops, "op")
            + (f", saves {format_bytes(n.saved_bytes)}" if n.saved_bytes else "")
        )
        lines.extend(_held_lines(n))
    elif n.kind == RUN:
        lines = [f"{n.label} x {n.count}" if len(n.attrs) == 1 else n.label]
        if len(n.attrs) > 1:
            lines += [f"{op} x {c}" for op, c in n.attrs[:6]] + (
                ["..."] if len(n.attrs) > 6 else []
            )
        if n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
        lines.extend(_held_lines(n))
    else:
        lines = [n.label]
        if n.saved_bytes and 0 < n.saved_view_bytes < n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_view_bytes)} of views")
            lines.append(f"(keeps {format_bytes(n.saved_bytes)} of storage alive)")
        elif n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
        if n.freed:
            lines.append("saved tensors freed by backward()")
        lines.extend(_held_lines(n))
        lines.extend(f"{k}: {v}" for k, v in n.attrs)
    return "\n".join(lines)


def _held_lines(n) -> list:
    """Lines for saved tensors behind saved-tensor hooks and of unknown size."""
    lines = [f"{count} saved {how}" for how, count in n.held]
    if n.size_unknown:
        lines.append(f"+ {n.size_unknown} saved of unknown size")
    return lines


def to_dot(graph, group: bool = False, legend: bool = True, caption: str = "") -> str:
    """DOT source for ``graph``: deterministic (ids from the model), every label escaped.

    Args:
        graph: An :class:`~cudamagic.graph.AutogradGraph`.
        group: Draw each module call as a labelled cluster (nested calls nest).
        legend: Add a small legend of the node kinds present (for standalone files; the notebook
            page has its own).
        caption: A caption drawn below the picture (``''``: none; the notebook page shows it as
            text).

    Returns:
        DOT text (``digraph``), UTF-8 safe.
    """
    return _assemble(graph, _body(graph, group), legend, caption)


def dot_sources(graph, group: bool = False, caption: str = "") -> tuple:
    """The file's and the notebook's DOT of ``graph``, written once.

    ``(standalone, inline)``: ``standalone`` is ``to_dot(graph, group, caption=caption)``
    (legend and caption: a file), ``inline`` is ``to_dot(graph, group, legend=False)`` (the
    notebook's picture).
    """
    body = _body(graph, group)
    return _assemble(graph, body, True, caption), _assemble(graph, body, False, "")


def _assemble(graph, body: str, legend: bool, caption: str) -> str:
    """The whole ``digraph``: graph attributes, ``body`` (nodes and edges), the legend."""
    # no ordering="out": it made dot 3-4x slower on unrolled loops (an LSTMCell x 25 drawn in full:
    # 86 s CPU with it, 23 s without) and the picture is scaled to the output width, so its first
    # screen shows the first rows wherever they sit. nslimit bounds the network simplex that places
    # nodes across (nslimit x nodes iterations): on big graphs it was almost all of dot's time (the
    # same LSTM: 1.7 s instead of 23 s, torchviz's file 30 s); small graphs converge within it.
    # newrank: dot's default ranking is quadratic in the depth of a chain (10,000 chained ops:
    # 5.4 s of dot's CPU, 0.5 s with newrank; the LSTM the same either way).
    limit = f', nslimit="{NSLIMIT}", newrank="true"' if len(graph.nodes) > NSLIMIT_ABOVE else ""
    label = f', labelloc="b", label={quote(caption)}' if caption else ""
    # compact spacing (dot's defaults are 0.25 in between nodes and 0.5 in between ranks): a 16-node
    # graph then fits a notebook output at full size
    out = [
        "digraph autograd {",
        f'  graph [rankdir="TB"{limit}, fontname="monospace", fontsize="10", nodesep="0.2", '
        f'ranksep="0.3", pad="0.1"{label}];',
        '  node [style="filled", shape="box", align="left", fontsize="10", height="0.2", '
        'margin="0.08,0.03", fontname="monospace"];',
        '  edge [fontsize="9"];',
    ]
    if body:
        out.append(body)
    if legend:
        out.extend(_legend_node(graph))
    out.append("}")
    return "\n".join(out) + "\n"


def _body(graph, group: bool) -> str:
    """The node, cluster and edge statements of ``graph``, one a line (no trailing newline)."""
    clustered = bool(group and graph.calls)
    out = []

    def node_line(n, indent="  "):
        extra = (
            ', style="filled,dashed", fillcolor="mistyrose"' if n.kind == SAVED and n.freed else ""
        )
        style = f'fillcolor="{_FILL[n.kind]}"{_SHAPE.get(n.kind, "")}'
        return f"{indent}{n.id} [label={quote(node_text(n))}, {style}{extra}];"

    if clustered:
        by_call = defaultdict(list)
        for n in graph.nodes:
            by_call[n.call].append(n)
        used = set()
        for c in list(by_call):
            while c is not None and c not in used:
                used.add(c)
                c = graph.calls[c].parent
        children = defaultdict(list)
        for c in sorted(used):
            children[graph.calls[c].parent].append(c)
        out.extend(node_line(n) for n in by_call.get(None, []))
        # iterative nested clusters
        stack = [(c, 1) for c in reversed(children[None])]
        closing = []
        while stack:
            c, level = stack.pop()
            while closing and closing[-1] >= level:
                out.append("  " * closing.pop() + "}")
            ind = "  " * level
            call = graph.calls[c]
            out.append(f"{ind}subgraph cluster_c{c} {{")
            out.append(
                f'{ind}  label={quote(call.title)}; style="rounded"; color="gray50"; '
                'fontname="monospace";'
            )
            out.extend(node_line(n, ind + "  ") for n in by_call.get(c, []))
            closing.append(level)
            stack.extend((k, level + 1) for k in reversed(children[c]))
        while closing:
            out.append("  " * closing.pop() + "}")
    else:
        out.extend(node_line(n) for n in graph.nodes)
    for e in graph.edges:
        attr = ""
        if e.kind == SAVED_EDGE:
            attr = ' [dir="none", color="orange3"]'
        elif e.kind == VIEW:
            attr = ' [style="dotted"]'
        out.append(f"  {e.src} -> {e.dst}{attr};")
    return "\n".join(out)
