"""What ``%%autograd_graph`` returns (:class:`GraphResult`) and its text and HTML forms.

In a notebook the result is one page (:func:`cudamagic.core.style.page`): a one-line caption, the
    picture scaled
to the output width (a "1:1" toggle, pure HTML/CSS, shows it at full size with scroll bars), right
below it a legend of the node kinds drawn, and the technical detail in a collapsible ``<details>``.
In a terminal it is the same caption, the notes and an outline of the graph. When there is no
picture it shows why, an op-count table and the DOT source.
Rendering only: the picture is chosen and made in :mod:`.draw`.

The caption counts one thing, **autograd nodes**: the ``grad_fn`` nodes ``backward()`` runs
    (backward ops and
``AccumulateGrad``) in the whole graph, whatever view is drawn; the picture is described in words
(full, or which module calls are collapsed into how many boxes).
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import textwrap
from collections import Counter, defaultdict, deque

from ..core import style
from ..core.fmt import TEXT_WIDTH, esc, format_bytes, html_table, text_table
from . import dot
from . import model as g
from .dot import INSTALL_DOT, SAVE_EXTENSIONS, clean_text, legend_rows, node_text, plural

# : The graph page's own rules, scoped like :data:`cudamagic.core.style.CSS` (theme variables only).
# The picture
# : fits the output width by default (``max-width:100%`` on the ``<svg>``, its ``viewBox`` keeps it
# crisp); opening
# : the ``cm-zoom`` ``<details>`` shows it at 1:1 in a scroll box (a CSS sibling rule: no script, so
# it works in
#: JupyterLab's trusted outputs, which run no inline scripts).
GRAPH_CSS = """
.cudamagic.cm-graph .cm-graph-cap{margin:2px 0}
.cudamagic.cm-graph .cm-legend{display:flex;flex-wrap:wrap;gap:2px 14px;margin:4px 0;align-items:center}
.cudamagic.cm-graph .cm-legend svg{vertical-align:middle;margin-right:4px}
.cudamagic.cm-graph details.cm-zoom{margin:2px 0}
.cudamagic.cm-graph .cm-pic{max-width:100%;overflow:auto;margin:2px 0 4px}
.cudamagic.cm-graph .cm-pic svg,.cudamagic.cm-graph .cm-pic img{display:block;max-width:100%;height:auto}
.cudamagic.cm-graph details.cm-zoom[open]~.cm-pic{max-height:85vh;
 border:1px solid var(--jp-border-color1,currentColor)}
.cudamagic.cm-graph details.cm-zoom[open]~.cm-pic svg,
.cudamagic.cm-graph details.cm-zoom[open]~.cm-pic img{max-width:none!important}
"""


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


# : Most lines of the terminal outline of a graph (the ``... N more boxes`` line included), with or
# without ``dot``.
OUTLINE_LINES = 40


def outline(graph, max_lines: int = 300) -> str:
    """A text outline of the DAG, inputs first: ``id  label  <- input ids``, one node a line.

    At most ``max_lines`` lines (>= 2): when boxes are left out, the last line says how many (``...
    N more boxes``; a box is a drawn node: an op, a tensor, a module box).
    """
    preds = defaultdict(list)
    for e in graph.edges:
        preds[e.dst].append(e.src)
    lines = []
    order = topo_order(graph)
    shown = order if len(order) <= max_lines else order[: max_lines - 1]
    for nid in shown:
        n = graph.node(nid)
        text = node_text(n).replace("\n", " | ")
        src = preds.get(nid)
        lines.append(f"{nid:>6}  {text}" + (f"   <- {', '.join(src)}" if src else ""))
    if len(shown) < len(order):
        lines.append(f"... {len(order) - len(shown)} more boxes")
    return "\n".join(lines)


def summary_rows(graph, top: int = 15) -> list:
    """``[(op, count)]`` most frequent first, then kinds of tensor nodes."""
    rows = [(op, str(c)) for op, c in graph.op_counts().most_common(top)]
    kinds = Counter(n.kind for n in graph.nodes if n.kind not in (g.BACKWARD, g.ACCUMULATE))
    rows += [(f"[{k} tensors]", str(c)) for k, c in sorted(kinds.items())]
    return rows


# ---- the result object ---------------------------------------------------------------------
def drawn_saved_bytes(view) -> int:
    """Sum of the saved bytes shown on the boxes of ``view`` (backward ops, folded runs, module
    boxes).

    Equal to the graph's total unless several boxes save the same storage (then each box shows it,
    and the total counts it once).
    """
    return sum(n.saved_bytes for n in view.nodes if n.kind in (g.BACKWARD, g.RUN, g.MODULE))


@dataclasses.dataclass
class GraphResult:
    """What ``%%autograd_graph`` returns: the graph data, its DOT source and the picture.

    Attributes:
        graph: The full :class:`~cudamagic.graph.AutogradGraph` (all nodes, each leaf once, before
            collapsing).
        drawn: The graph that was drawn (``graph`` itself, a collapsed view, or leaves drawn once
            per use).
        dot: DOT source of ``drawn`` for a standalone file (with a legend and the caption).
        format: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'``.
        image: Rendered bytes (the picture in the notebook: no legend or caption inside, the page
            shows them), ``None`` when not rendered.
        notes: What happened (collapsing, skipped outputs, timeouts), one sentence each.
        problem: Why there is no picture (``'dot missing'``, ``'dot timeout'``, ``'too big'``...),
            or ``''``.
        saved_to: Path written by ``--save``, or ``''``.
        view_notes: The notes among ``notes`` that say how the view was chosen (shown under
            "details").
        group: Module calls drawn as clusters (``--group``).
        engine: ``'cudamagic'`` or ``'torchviz'`` (then ``dot`` is torchviz's source, drawn as it
            is).
    """

    graph: object
    drawn: object
    dot: str
    format: str = "svg"
    image: bytes | None = None
    notes: list = dataclasses.field(default_factory=list)
    problem: str = ""
    saved_to: str = ""
    view_notes: list = dataclasses.field(default_factory=list)
    group: bool = False
    engine: str = "cudamagic"

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

    def inline_dot(self) -> str:
        """DOT source of the picture shown in the notebook: ``drawn`` without legend or caption (the
        page shows them as text, in the theme's colours); torchviz's source as it is.
        """
        if self.engine == "torchviz":
            return self.dot
        return dot.to_dot(self.drawn, group=self.group, legend=False)

    def save(self, path: str, timeout_s: float = 60.0) -> str:
        """Write the picture, with its legend and caption, to ``path``; format from the extension
        (``.svg .png .pdf .dot .gv``).

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
        elif self.engine == "torchviz" and fmt == self.format and self.image is not None:
            data = self.image
        else:
            data = dot.run_dot(self.dot, fmt, timeout_s)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    # -- the caption, one for text and HTML --
    def count_text(self) -> str:
        """``N autograd nodes (B backward ops, A AccumulateGrad)``: the one node count, of the whole graph."""
        kinds = Counter(n.kind for n in self.graph.nodes)
        total = kinds[g.BACKWARD] + kinds[g.ACCUMULATE]
        return (
            f"{plural(total, 'autograd node')} ({plural(kinds[g.BACKWARD], 'backward op')}, "
            f"{kinds[g.ACCUMULATE]} AccumulateGrad)"
        )

    def saved_text(self) -> str:
        """Bytes saved for backward, said so when the boxes drawn show more (a storage shared by boxes)."""
        gr = self.graph
        text = f"saved for backward: {format_bytes(gr.saved_bytes_total)} (parameters not counted"
        shown = drawn_saved_bytes(self.drawn)
        if shown > gr.saved_bytes_total and self.engine != "torchviz":
            text += (
                f"; a storage saved by several boxes is counted once, so the boxes add up to "
                f"{format_bytes(shown)}"
            )
        text += ")"
        if gr.saved_unknown:
            text += f" + {plural(gr.saved_unknown, 'tensor')} of unknown size"
        return text

    def view_text(self) -> str:
        """How the picture shows the graph, in words (``drawn in full``, ``module calls below depth 1 ...``)."""
        if self.problem:
            return (
                "not drawn ("
                + {"dot missing": "no Graphviz dot", "too big": "too big to lay out"}.get(
                    self.problem, self.problem
                )
                + ")"
            )
        if self.format == "dot" and self.image is None:
            what = "DOT source only"
        else:
            what = f"drawn as {self.format}"
        v = self.drawn
        if self.engine == "torchviz":
            return f"{what}, torchviz make_dot view"
        if v.view == "full":
            text = f"{what}, in full"
        else:
            text = f"{what}, {v.view} view"
        boxes = [n for n in v.nodes if n.kind == g.MODULE]
        if boxes:
            folded = [n for n in boxes if n.count > 1]
            text += f", {plural(len(boxes), 'module box', 'module boxes')}"
            if folded:
                text += f" ({', '.join(n.label for n in folded[:3])}{', ...' if len(folded) > 3 else ''})"
        if any(n.use for n in v.nodes):
            text += ", leaves drawn once per use"
        return text

    def caption(self) -> str:
        """The one-line caption of text and HTML: the count, saved bytes, what is drawn."""
        tensors = Counter(n.kind for n in self.graph.nodes)
        parts = [
            plural(tensors[k], word)
            for k, word in (
                (g.PARAM, "parameter"),
                (g.LEAF, "leaf tensor"),
                (g.BASE, "view base"),
                (g.OUTPUT, "output"),
            )
            if tensors[k]
        ]
        return (
            f"autograd graph: {self.count_text()}; tensors: {', '.join(parts) or 'none'}; "
            f"{self.saved_text()}; {self.view_text()}."
        )

    def summary_line(self) -> str:
        """The caption (kept under its old name)."""
        return self.caption()

    # -- text --
    def __repr__(self) -> str:
        """The terminal form: caption, notes, and on problems a table; lines wrapped at 100 columns."""

        def wrap(text, indent=""):
            return textwrap.fill(
                clean_text(text, 10_000),
                TEXT_WIDTH,
                subsequent_indent=indent,
                break_on_hyphens=False,
                break_long_words=True,
            )

        parts = [wrap(self.caption(), "  ")]
        parts += [wrap(f"note: {n}", "  ") for n in self.notes]
        if self.problem:
            parts.append(text_table(["op", "count"], summary_rows(self.graph)))
        if self.problem == "dot missing":
            parts.append(
                wrap(
                    INSTALL_DOT.replace(
                        " and its DOT source", " (the DOT source is in the result's `.dot`)"
                    )
                )
            )
        elif self.problem:
            parts.append("The DOT source is in the result's `.dot` (for example `print(_.dot)`).")
        # the terminal's only view of the graph (40 lines at most)
        parts.append(
            "\n".join(
                line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
                for line in clean_text(outline(self.drawn, OUTLINE_LINES), 1_000_000).splitlines()
            )
        )
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
            # scaled to the output width (its viewBox keeps it crisp); the 1:1 toggle lifts
            # max-width
            return svg[start:].replace("<svg", '<svg style="max-width:100%;height:auto"', 1)
        if self.format == "png":
            return (
                f'<img style="max-width:100%;height:auto" alt="autograd graph" '
                f'src="data:image/png;base64,{base64.b64encode(self.image).decode()}"/>'
            )
        return (
            f"<p>PDF rendered ({esc(format_bytes(len(self.image)))}): "
            "<code>result.save('graph.pdf')</code> writes it.</p>"
        )

    def legend_html(self) -> str:
        """The legend: one swatch (the nodes' own fill colour, a tiny picture) and a label per kind drawn."""
        if self.engine == "torchviz":
            return ""
        items = []
        for colour, text in legend_rows(self.drawn):
            dashed = ' stroke-dasharray="3,2"' if "dashed" in text else ""
            swatch = (
                f'<svg width="18" height="12" aria-hidden="true"><rect x="0.5" y="0.5" width="17" '
                f'height="11" fill="{esc(colour)}" stroke="currentColor"{dashed}/></svg>'
            )
            items.append(f'<span class="cm-legend-item">{swatch}{esc(text)}</span>')
        return f'<div class="cm-legend" aria-label="legend">{"".join(items)}</div>' if items else ""

    def _repr_html_(self) -> str:
        parts = [
            f"<style>{GRAPH_CSS}</style>",
            f'<div class="cm-graph-cap">{esc(self.caption())}</div>',
        ]
        pic = self._picture_html()
        if pic:
            if self.format in ("svg", "png"):
                parts.append(
                    '<details class="cm-zoom"><summary>show at 1:1 size (scroll) instead of fitting the '
                    "output width</summary></details>"
                )
            # the legend right below the picture: the picture stays the output's first <svg> (the
            # swatches are tiny ones), and the legend is in reach whether the picture is fitted or
            # scrolled
            parts.append(f'<div class="cm-pic">{pic}</div>')
            parts.append(self.legend_html())
        shown = [n for n in self.notes if n not in self.view_notes]
        if shown:
            parts.append(
                "<ul>" + "".join(f"<li>{_code_spans(esc(n))}</li>" for n in shown) + "</ul>"
            )
        if self.problem == "dot missing":
            parts.append(f"<p><b>{esc(INSTALL_DOT)}</b></p>")
            parts.append(f"<pre>{esc(outline(self.drawn))}</pre>")
        if self.problem:
            parts.append(
                html_table(["op", "count"], [(esc(a), esc(b)) for a, b in summary_rows(self.graph)])
            )
        if self.problem or self.format == "dot":
            parts.append(
                style.details(
                    "DOT source", f"<pre>{esc(self.dot)}</pre>", open_=self.format == "dot"
                )
            )
        detail = [f"<li>{_code_spans(esc(n))}</li>" for n in self.view_notes]
        detail.append(
            "<li>Counts: autograd nodes are the <code>grad_fn</code> nodes <code>backward()</code> runs "
            "(backward ops and <code>AccumulateGrad</code>), counted in the whole graph whatever the "
            "view; saved bytes count each storage once, parameters not counted.</li>"
        )
        body = "<ul>" + "".join(detail) + "</ul>"
        if not self.problem:
            body += html_table(
                ["op", "count"], [(esc(a), esc(b)) for a, b in summary_rows(self.graph)]
            )
            if self.format != "dot":
                body += style.details("DOT source", f"<pre>{esc(self.dot)}</pre>")
        parts.append(
            style.details("details: how this picture was chosen, op counts, DOT source", body)
        )
        return style.page("".join(parts), "graph")
