"""Text and HTML of a :class:`~cudamagic.graph.result.GraphResult`.

In a notebook: one caption, the picture scaled to the output width (a "1:1" toggle, pure HTML/CSS,
shows it at full size), a legend of the node kinds drawn, and the details in a ``<details>``. In a
terminal: the caption, the notes and a text outline of the graph. Without a picture: why, an
op-count table and the DOT source. The caption counts one thing, autograd nodes (the ``grad_fn``
nodes ``backward()`` runs) in the whole graph, whatever view is drawn.
"""

from __future__ import annotations

import base64
import re
import textwrap
from collections import defaultdict

from ..core import style
from ..core.fmt import TEXT_WIDTH, esc, format_bytes, html_table, plural, text_table
from .dot import legend_rows, node_text
from .layout import INSTALL_DOT, clean_text
from .model import ACCUMULATE, BACKWARD, BASE, LEAF, MODULE, OUTPUT, PARAM, RUN, topo_order

#: The graph page's own rules, for a trusted notebook only: the sanitiser of an untrusted one drops
#: ``<style>``, so what must survive it is inline (sizes, margins, the pictures as ``<img>`` data
#: URIs). Opening the ``cm-zoom`` ``<details>`` shows the picture at 1:1 in a scroll box (a CSS
#: sibling rule: no script, which JupyterLab's outputs do not run); untrusted, the same
#: ``<details>`` says that it needs trust instead.
GRAPH_CSS = """
.cudamagic.cm-graph .cm-needs-trust{display:none}
.cudamagic.cm-graph details.cm-zoom[open]~.cm-pic{max-height:85vh;
 border:1px solid var(--jp-border-color1,currentColor)}
.cudamagic.cm-graph details.cm-zoom[open]~.cm-pic img{max-width:none!important}
"""
#: A picture fitted to the output width, inline (it survives the sanitiser).
FIT = "display:block;max-width:100%;height:auto"


def data_uri(mime: str, data: bytes) -> str:
    """``data:MIME;base64,...`` of ``data``: a picture an untrusted notebook still shows."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _code_spans(escaped: str) -> str:
    """Backquoted spans of escaped text as ``<code>`` elements."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


#: Most lines of the terminal outline of a graph (the ``... N more boxes`` line included), with or
#: without ``dot``.
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
    kinds = graph.kind_counts
    rows += [
        (f"[{k} tensors]", str(c))
        for k, c in sorted(kinds.items())
        if k not in (BACKWARD, ACCUMULATE)
    ]
    return rows


def drawn_saved_bytes(view) -> int:
    """Sum of the saved bytes shown on the boxes of ``view``.

    Sum of the saved bytes shown on the boxes of ``view`` (backward ops, folded runs, module boxes).

    Equal to the graph's total unless several boxes save the same storage (then each box shows it,
    and the total counts it once).
    """
    return sum(n.saved_bytes for n in view.nodes if n.kind in (BACKWARD, RUN, MODULE))


# -- the caption, one for text and HTML --
def count_text(r) -> str:
    """``N autograd nodes (B backward ops, A AccumulateGrad)``."""
    kinds = r.graph.kind_counts
    total = kinds[BACKWARD] + kinds[ACCUMULATE]
    return (
        f"{plural(total, 'autograd node')} ({plural(kinds[BACKWARD], 'backward op')}, "
        f"{kinds[ACCUMULATE]} AccumulateGrad)"
    )


def saved_text(r) -> str:
    """Bytes saved for backward, as the caption says it."""
    gr = r.graph
    text = f"saved for backward: {format_bytes(gr.saved_bytes_total)} (parameters not counted"
    shown = drawn_saved_bytes(r.drawn)
    if shown > gr.saved_bytes_total and r.engine != "torchviz":
        text += (
            f"; a storage saved by several boxes is counted once, so the boxes add up to "
            f"{format_bytes(shown)}"
        )
    text += ")"
    if gr.saved_unknown:
        text += f" + {plural(gr.saved_unknown, 'tensor')} of unknown size"
    return text


def view_text(r) -> str:
    """How the picture shows the graph, in words."""
    if r.problem:
        return (
            "not drawn ("
            + {"dot missing": "no Graphviz dot", "too big": "too big to lay out"}.get(
                r.problem, r.problem
            )
            + ")"
        )
    if r.format == "dot" and r.image is None:
        what = "DOT source only"
    else:
        what = f"drawn as {r.format}"
    v = r.drawn
    if r.engine == "torchviz":
        return f"{what}, torchviz make_dot view"
    if v.view == "full":
        text = f"{what}, in full"
    else:
        text = f"{what}, {v.view} view"
    boxes = [n for n in v.nodes if n.kind == MODULE]
    if boxes:
        folded = [n for n in boxes if n.count > 1]
        text += f", {plural(len(boxes), 'module box', 'module boxes')}"
        if folded:
            text += (
                f" ({', '.join(n.label for n in folded[:3])}{', ...' if len(folded) > 3 else ''})"
            )
    if any(n.use for n in v.nodes):
        text += ", leaves drawn once per use"
    return text


def caption(r) -> str:
    """The one-line caption of text and HTML: the count, saved bytes, what is drawn."""
    tensors = r.graph.kind_counts
    parts = [
        plural(tensors[k], word)
        for k, word in (
            (PARAM, "parameter"),
            (LEAF, "leaf tensor"),
            (BASE, "view base"),
            (OUTPUT, "output"),
        )
        if tensors[k]
    ]
    return (
        f"autograd graph: {count_text(r)}; tensors: {', '.join(parts) or 'none'}; "
        f"{saved_text(r)}; {view_text(r)}."
    )


def result_text(r) -> str:
    """The terminal form: caption, notes, and on problems a table; lines wrapped at 100 columns."""

    def wrap(text, indent=""):
        return textwrap.fill(
            clean_text(text, 10_000),
            TEXT_WIDTH,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=True,
        )

    parts = [wrap(caption(r), "  ")]
    parts += [wrap(f"note: {n}", "  ") for n in r.notes]
    if r.problem:
        parts.append(text_table(["op", "count"], summary_rows(r.graph)))
    if r.problem == "dot missing":
        parts.append(wrap(INSTALL_DOT))
    if r.problem:
        parts.append("The DOT source is in the result's `.dot` (for example `print(_.dot)`).")
    # the terminal's only view of the graph (40 lines at most)
    parts.append(
        "\n".join(
            line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
            for line in clean_text(outline(r.drawn, OUTLINE_LINES), 1_000_000).splitlines()
        )
    )
    return "\n".join(parts)


def _picture_html(r) -> str:
    if r.image is None:
        return ""
    if r.format in ("svg", "png"):
        mime = "image/svg+xml" if r.format == "svg" else "image/png"
        return f'<img style="{FIT}" alt="autograd graph" src="{data_uri(mime, r.image)}"/>'
    return (
        f"<p>PDF rendered ({esc(format_bytes(len(r.image)))}): "
        "<code>result.save('graph.pdf')</code> writes it.</p>"
    )


def _swatch(colour: str, text: str) -> str:
    """A node kind's colour as a tiny picture (the node's own colour, not a theme colour).

    Dashed for a freed saved tensor, with a second border for a folded run, as the nodes are.
    """
    dash = ' stroke-dasharray="3,2"' if "dashed" in text else ""
    inner = (
        '<rect x="2.5" y="2.5" width="13" height="7" fill="none" stroke="gray"/>'
        if "folded" in text
        else ""
    )
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="18" height="12"><rect x="0.5" y="0.5" '
        f'width="17" height="11" fill="{esc(colour)}" stroke="gray"{dash}/>{inner}</svg>'
    )
    return (
        f'<img alt="" width="18" height="12" style="vertical-align:middle;margin-right:4px" '
        f'src="{data_uri("image/svg+xml", svg.encode())}"/>'
    )


def legend_html(r) -> str:
    """The legend: a colour swatch and a label per node kind drawn, inline-styled."""
    if r.engine == "torchviz":
        return ""
    items = [
        f'<span class="cm-legend-item" style="display:inline-block;margin:0 14px 2px 0;'
        f'white-space:nowrap">{_swatch(colour, text)}{esc(text)}</span>'
        for colour, text in legend_rows(r.drawn)
    ]
    return f'<div class="cm-legend" style="margin:4px 0">{"".join(items)}</div>' if items else ""


def result_html(r) -> str:
    """The result as one themed HTML page."""
    parts = [
        f"<style>{GRAPH_CSS}</style>",
        f'<div class="cm-graph-cap" style="margin:2px 0">{esc(caption(r))}</div>',
    ]
    pic = _picture_html(r)
    if pic and r.format in ("svg", "png"):
        parts.append(
            '<details class="cm-zoom" style="margin:2px 0"><summary>show at 1:1 size (scroll) '
            'instead of fitting the output width</summary><span class="cm-needs-trust">This '
            "needs a trusted notebook (File &gt; Trust Notebook); <code>_.save('graph.svg')"
            "</code> writes the picture at full size.</span></details>"
        )
    if pic:  # the legend right below the picture: in reach whether it is fitted or scrolled
        parts += [
            f'<div class="cm-pic" style="max-width:100%;overflow:auto;margin:2px 0">{pic}</div>',
            legend_html(r),
        ]
    shown = [n for n in r.notes if n not in r.view_notes]
    if shown:
        parts.append("<ul>" + "".join(f"<li>{_code_spans(esc(n))}</li>" for n in shown) + "</ul>")
    if r.problem == "dot missing":
        parts += [f"<p><b>{esc(INSTALL_DOT)}</b></p>", f"<pre>{esc(outline(r.drawn))}</pre>"]
    table = html_table(["op", "count"], [(esc(a), esc(b)) for a, b in summary_rows(r.graph)])
    source = style.details("DOT source", f"<pre>{esc(r.dot)}</pre>", open_=r.format == "dot")
    # without a picture the op counts and the DOT source are on the page, else under "details"
    if r.problem:
        parts += [table, source]
    elif r.format == "dot":
        parts.append(source)
    detail = [f"<li>{_code_spans(esc(n))}</li>" for n in r.view_notes]
    detail.append(
        "<li>Counts: autograd nodes are the <code>grad_fn</code> nodes <code>backward()</code> "
        "runs (backward ops and <code>AccumulateGrad</code>), counted in the whole graph whatever "
        "the view; saved bytes count each storage once, parameters not counted.</li>"
    )
    body = "<ul>" + "".join(detail) + "</ul>"
    if not r.problem:
        body += table + (source if r.format != "dot" else "")
    parts.append(style.details("details: how this picture was chosen, op counts, DOT source", body))
    return style.page("".join(parts), "graph")
