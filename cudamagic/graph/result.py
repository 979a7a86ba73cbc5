"""What ``%%autograd_graph`` returns (:class:`GraphResult`) and its text and HTML forms.

The result renders as scrollable inline SVG (or PNG) in a notebook and as a text
summary with an outline of the graph in a terminal; when there is no picture it
shows why, an op-count table and the DOT source. Rendering only: the picture is
chosen and made in :mod:`.draw`.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import textwrap
from collections import Counter, defaultdict, deque

from . import dot
from . import model as g
from ..core.fmt import TEXT_WIDTH, esc, format_bytes, html_table, text_table
from .dot import INSTALL_DOT, SAVE_EXTENSIONS, clean_text, node_text, plural


def _code_spans(escaped: str) -> str:
    """```x``` spans of already-escaped text as ``<code>x</code>`` (notes are written for text and HTML)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


# ---- text forms --------------------------------------------------------------------------
def topo_order(graph) -> list:
    """Node ids from inputs to outputs (Kahn's algorithm, ties in walk order); cycles cannot occur."""
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


def outline(graph, max_lines: int = 300) -> str:
    """A text outline of the DAG, inputs first: ``id  label  <- input ids``, one node a line."""
    preds = defaultdict(list)
    for e in graph.edges:
        preds[e.dst].append(e.src)
    lines = []
    order = topo_order(graph)
    for nid in order[:max_lines]:
        n = graph.node(nid)
        text = node_text(n).replace("\n", " | ")
        src = preds.get(nid)
        lines.append(f"{nid:>6}  {text}" + (f"   <- {', '.join(src)}" if src else ""))
    if len(order) > max_lines:
        lines.append(f"... {len(order) - max_lines} more nodes")
    return "\n".join(lines)


def summary_rows(graph, top: int = 15) -> list:
    """``[(op, count)]`` most frequent first, then kinds of tensor nodes."""
    rows = [(op, str(c)) for op, c in graph.op_counts().most_common(top)]
    kinds = Counter(n.kind for n in graph.nodes if n.kind not in (g.BACKWARD, g.ACCUMULATE))
    rows += [(f"[{k} nodes]", str(c)) for k, c in sorted(kinds.items())]
    return rows


# ---- the result object ---------------------------------------------------------------------
@dataclasses.dataclass
class GraphResult:
    """What ``%%autograd_graph`` returns: the graph data, its DOT source and the picture.

    Attributes:
        graph: The full :class:`~cudamagic.graph.AutogradGraph` (all nodes, before collapsing).
        drawn: The graph that was drawn (``graph`` itself, or a collapsed view of it).
        dot: DOT source of ``drawn``.
        format: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'``.
        image: Rendered bytes, ``None`` when not rendered.
        notes: What happened (collapsing, skipped outputs, timeouts), one sentence each.
        problem: Why there is no picture (``'dot missing'``, ``'dot timeout'``, ``'too big'``...), or ``''``.
        saved_to: Path written by ``--save``, or ``''``.
    """

    graph: object
    drawn: object
    dot: str
    format: str = "svg"
    image: bytes | None = None
    notes: list = dataclasses.field(default_factory=list)
    problem: str = ""
    saved_to: str = ""

    @property
    def nodes(self):
        """Nodes of the full graph."""
        return self.graph.nodes

    @property
    def edges(self):
        """Edges of the full graph."""
        return self.graph.edges

    @property
    def svg(self) -> str | None:
        """The SVG text (``None`` unless rendered as SVG)."""
        if self.format == "svg" and self.image is not None:
            return self.image.decode("utf-8", "replace")
        return None

    def save(self, path: str, timeout_s: float = 60.0) -> str:
        """Write the picture to ``path``; format from the extension (``.svg .png .pdf .dot .gv``).

        Returns:
            ``path``.

        Raises:
            ValueError: no or unknown extension.
            DotMissing, DotTimeout, DotFailed: when a picture has to be rendered and ``dot`` cannot.
        """
        ext = os.path.splitext(path)[1].lower().lstrip(".")
        if ext not in SAVE_EXTENSIONS:
            raise ValueError(f"{path}: the file name must end in .svg, .png, .pdf or .dot")
        fmt = SAVE_EXTENSIONS[ext]
        if fmt == "dot":
            data = self.dot.encode("utf-8")
        elif fmt == self.format and self.image is not None:
            data = self.image
        else:
            data = dot.run_dot(self.dot, fmt, timeout_s)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    # -- text --
    def summary_line(self) -> str:
        gr = self.graph
        kinds = Counter(n.kind for n in gr.nodes)
        parts = [plural(kinds[g.BACKWARD], "backward op"), plural(kinds[g.ACCUMULATE], "AccumulateGrad")]
        parts += [plural(kinds[k], word) for k, word in ((g.PARAM, "parameter node"),
                                                          (g.LEAF, "leaf tensor node"),
                                                          (g.SAVED, "saved tensor node"),
                                                          (g.BASE, "view base"),
                                                          (g.OUTPUT, "output")) if kinds[k]]
        text = (f"autograd graph: {plural(len(gr.nodes), 'node')} ({', '.join(parts)}), "
                f"{plural(len(gr.edges), 'edge')}; saved for backward: {format_bytes(gr.saved_bytes_total)}")
        if gr.saved_unknown:
            text += f" + {plural(gr.saved_unknown, 'tensor')} of unknown size"
        if self.image is not None:
            text += (f"; drawn as {self.format} ({self.drawn.view} view, "
                     f"{plural(len(self.drawn.nodes), 'node')})")
        elif self.format == "dot":
            text += "; DOT source only"
        return text

    def __repr__(self) -> str:
        """The terminal form: summary, notes, and on problems a table; lines wrapped at 100 columns."""
        def wrap(text, indent=""):
            return textwrap.fill(clean_text(text, 10_000), TEXT_WIDTH, subsequent_indent=indent,
                                 break_on_hyphens=False, break_long_words=True)

        parts = [wrap(self.summary_line(), "  ")]
        parts += [wrap(f"note: {n}", "  ") for n in self.notes]
        if self.problem:
            parts.append(text_table(["op", "count"], summary_rows(self.graph)))
        if self.problem == "dot missing":
            parts.append(wrap(INSTALL_DOT.replace(" and its DOT source", " (the DOT source is in the "
                                                  "result's `.dot`)")))
            parts.append("\n".join(line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
                                   for line in clean_text(outline(self.drawn, 60), 1_000_000).splitlines()))
        elif self.problem:
            parts.append("The DOT source is in the result's `.dot` (for example `print(_.dot)`).")
        if self.problem != "dot missing":  # the terminal's only view of the graph (40 lines at most)
            parts.append("\n".join(line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
                                   for line in clean_text(outline(self.drawn, 40), 1_000_000).splitlines()))
        return "\n".join(parts)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    # -- notebook --
    def _picture_html(self) -> str:
        if self.image is None:
            return ""
        if self.format == "svg":
            svg = self.svg
            start = svg.find("<svg")
            if start < 0:
                return ""
            # natural size inside the scrolling box: front ends shrink <svg> to the output width
            # (JupyterLab's and nbconvert's `max-width: 100%`), which makes big graphs illegible
            return svg[start:].replace("<svg", '<svg style="max-width:none;height:auto"', 1)
        if self.format == "png":
            return f'<img src="data:image/png;base64,{base64.b64encode(self.image).decode()}"/>'
        return (f"<p>PDF rendered ({esc(format_bytes(len(self.image)))}): "
                "<code>result.save('graph.pdf')</code> writes it.</p>")

    def _repr_html_(self) -> str:
        parts = ['<div class="cm-autograd-graph">']
        pic = self._picture_html()
        if pic:
            parts.append('<div style="max-height:720px;max-width:100%;overflow:auto;border:1px solid #ddd;'
                         f'resize:vertical">{pic}</div>')
        parts.append(f"<p><small>{esc(self.summary_line())}</small></p>")
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{_code_spans(esc(n))}</li>" for n in self.notes) + "</ul>")
        if self.problem == "dot missing":
            parts.append(f"<p><b>{esc(INSTALL_DOT)}</b></p>")
            parts.append(f"<pre>{esc(outline(self.drawn))}</pre>")
        if self.problem:
            parts.append(html_table(["op", "count"], [(esc(a), esc(b)) for a, b in summary_rows(self.graph)]))
        if self.problem or self.format == "dot":
            opened = " open" if self.format == "dot" else ""
            parts.append(f"<details{opened}><summary>DOT source</summary><pre>{esc(self.dot)}</pre></details>")
        parts.append("</div>")
        return "".join(parts)
