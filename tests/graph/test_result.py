"""The result's text (terminal) and HTML (notebook) forms."""

from __future__ import annotations

import base64
import re
from collections import Counter

from cudamagic.core.fmt import esc
from cudamagic.graph import model as M
from cudamagic.graph import render
from tests.watch.sanitiser import sanitise

from .common import LSTM_CELL, magic, needs_dot, picture, visible_text


@needs_dot
def test_mlp_graph_names_parameters_and_renders_svg(mlp):
    r = magic(mlp, "", "out = model(x)\nloss = out.pow(2).mean()\nloss")
    assert sorted(r.graph.labels(M.PARAM)) == [
        "model.0.bias",
        "model.0.weight",
        "model.2.bias",
        "model.2.weight",
    ]
    assert r.graph.labels(M.OUTPUT) == ["loss"]
    assert Counter(r.graph.labels(M.BACKWARD)) == Counter(
        {
            "AddmmBackward0": 2,
            "TBackward0": 2,
            "ReluBackward0": 1,
            "PowBackward0": 1,
            "MeanBackward0": 1,
        }
    )
    assert r.svg.lstrip().startswith("<?xml") and "model.0.weight" in r.svg
    html = r._repr_html_()
    assert '<img style="display:block;max-width:100%' in html and "overflow:auto" in html
    assert "<svg" not in html  # the picture is an image: no inline SVG for a sanitiser to drop
    # the terminal form: summary plus a bounded text outline (the terminal's only view of the graph)
    text = repr(r)
    assert (
        text.startswith("autograd graph:") and "model.0.weight" in text and "AddmmBackward0" in text
    )
    assert len(text.splitlines()) <= 45 and max(len(line) for line in text.splitlines()) <= 100
    assert mlp.user_ns["loss"].grad_fn is not None  # the cell's variables land in the namespace
    assert r.graph.saved_bytes_total > 0


@needs_dot
def test_terminal_text_fits_100_columns_and_counts_add_up(lstm):
    r = magic(lstm, "", LSTM_CELL)
    text = repr(r)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "1 outputs" not in text and "1 output;" in text.replace("\n  ", " ")
    assert "AccumulateGrad" in text.splitlines()[0]


@needs_dot
def test_missing_dot_text_fits_100_columns(lstm, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    text = repr(magic(lstm, "", LSTM_CELL))
    assert "apt-get install graphviz" in " ".join(text.split())  # wrapped at 100 columns
    assert max(len(line) for line in text.splitlines()) <= 100


@needs_dot
def test_picture_is_scaled_to_the_output_width_with_a_1_to_1_toggle(lstm):
    r = magic(lstm, "--max-nodes 5000", LSTM_CELL)  # a big picture: 1716 pt wide at 1:1
    html = r._repr_html_()
    img = re.search(
        r'<img style="([^"]*)" alt="autograd graph" src="data:image/svg\+xml;base64,'
        r'([^"]+)"',
        html,
    )
    assert img.group(1) == "display:block;max-width:100%;height:auto"
    assert "viewBox=" in base64.b64decode(img.group(2)).decode()[:2000]
    # the toggle is a <details> before the picture; open, a CSS sibling rule lifts max-width (no
    # script); without the stylesheet (untrusted) it says so instead
    assert html.index('<details class="cm-zoom"') < html.index('<div class="cm-pic"')
    assert "details.cm-zoom[open]~.cm-pic img{max-width:none!important}" in html
    assert ".cm-needs-trust{display:none}" in html and "needs a trusted notebook" in html
    assert "<script" not in html


def test_notes_render_code_spans_in_html_and_one_op_is_singular():
    assert (
        render._code_spans(esc("`['no_grad']` has no grad_fn"))
        == "<code>[&#x27;no_grad&#x27;]</code> has no grad_fn"
    )
    assert render.plural(1, "op") == "1 op" and render.plural(3, "op") == "3 ops"


def _outline_lines(r) -> list:
    """The lines of the terminal text from the outline's first line to the end.

    The lines of the terminal text from the outline's first line to the end (the outline closes the
    text).
    """
    text = repr(r).splitlines()
    first = render.outline(r.drawn, render.OUTLINE_LINES).splitlines()[0][:99]
    return text[[i for i, line in enumerate(text) if line.startswith(first)][-1] :]


def test_terminal_outline_is_at_most_40_lines_without_dot(lstm, monkeypatch):
    # `dot` hidden: the outline is the terminal's only view
    monkeypatch.setenv("PATH", "/nonexistent")
    r = magic(lstm, "--max-nodes 5000", LSTM_CELL)
    assert r.problem == "dot missing" and len(r.drawn.nodes) > 60
    lines = _outline_lines(r)
    assert len(lines) == render.OUTLINE_LINES == 40
    assert lines[-1] == f"... {len(r.drawn.nodes) - 39} more boxes"


def test_notebook_outline_without_dot_lists_the_view_that_would_be_drawn(lstm, monkeypatch):
    # the manual: the outline is of the view the picture would be (collapsed past the budget),
    # not of the whole graph: every box of it, up to 300 lines
    monkeypatch.setenv("PATH", "/nonexistent")
    sizes = {}
    for line in ("", "--max-nodes 5000"):
        r = magic(lstm, line, LSTM_CELL)
        pres = re.findall(r"<pre>(.*?)</pre>", r._repr_html_(), re.S)
        outline = [p for p in pres if "digraph" not in p and "&lt;-" in p]
        assert len(outline) == 1, line
        sizes[line] = (len(outline[0].strip().splitlines()), len(r.drawn.nodes), r.graph.nodes)
    lines, boxes, nodes = sizes[""]
    assert lines == boxes < 60 < len(nodes)  # collapsed: the outline is the collapsed view
    lines, boxes, nodes = sizes["--max-nodes 5000"]
    assert lines == 300 < boxes  # the full view, cut at 300 lines


@needs_dot
def test_terminal_outline_is_at_most_40_lines_with_dot(lstm):
    r = magic(lstm, "--max-nodes 5000", LSTM_CELL)
    lines = _outline_lines(r)
    assert len(lines) == 40 and lines[-1] == f"... {len(r.drawn.nodes) - 39} more boxes"


def test_autograd_graph_manual_is_complete(ip, capsys):
    ip.run_line_magic("pinfo", "%%autograd_graph")
    manual = " ".join(capsys.readouterr().out.split())
    assert "%%autograd_graph [-o NAME[,NAME...]]" in manual  # the usage line, not %autograd_graph
    for words in (
        "RLIMIT_STACK",
        "120 MiB",
        "at most 40 lines",
        "text outline",
        "--save PATH",
        "the folder must exist",
        "before the cell runs",
        "Not saved to PATH",
        "Without the Graphviz",
        "install command",
        "DOT source",
        "Examples",
    ):
        assert words in manual, words


@needs_dot
def test_legend_swatches_are_distinct_and_the_colours_of_the_drawn_nodes(mlp):
    """Each legend swatch has the fill of its nodes in the picture; no two swatches share one."""
    r = magic(mlp, "", "loss = model(x).pow(2).mean()\nloss")
    html = r._repr_html_()
    swatches = {
        text: re.search(r'fill="([^"]+)"', base64.b64decode(uri).decode()).group(1)
        for uri, text in re.findall(
            r'<span class="cm-legend-item"[^>]*><img alt=""[^>]* '
            r'src="data:image/svg\+xml;base64,([^"]+)"[^>]*>([^<]+)</span>',
            html,
        )
    }
    node_fill = {
        label: fill
        for fill, label in re.findall(
            r'<polygon fill="([^"]+)"[^>]*/>\s*<text[^>]*>([^<]+)</text>', picture(html)
        )
    }
    assert swatches["backward op (grad_fn)"] == node_fill["AddmmBackward0"]
    assert swatches["AccumulateGrad (writes .grad)"] == node_fill["AccumulateGrad"]
    assert swatches["parameter (module path)"] == node_fill["model.0.weight"]
    assert len(set(swatches.values())) == len(swatches) >= 4, swatches


@needs_dot
def test_module_box_label_clears_its_3d_top_edge(ip):
    """A collapsed module's box3d: the first label line sits below the front face's top edge."""
    import torch

    ip.user_ns.update(model=torch.nn.Sequential(torch.nn.Linear(3, 4)), x=torch.randn(2, 3))
    svg = picture(magic(ip, "--depth 0", "model(x).sum()")._repr_html_())
    node = re.search(r'<g id="node\d+" class="node">(?:(?!</g>).)*?>model</text>', svg, re.S).group(
        0
    )
    front_top = float(
        re.search(r'<polyline fill="none" stroke="black" points="[\d.]+,(-?[\d.]+) ', node).group(1)
    )
    first = re.search(r'<text [^>]*y="(-?[\d.]+)"[^>]*font-size="([\d.]+)"', node)
    baseline, size = float(first.group(1)), float(first.group(2))
    assert baseline - size >= front_top, (baseline, size, front_top)


@needs_dot
def test_untrusted_notebook_shows_the_picture_and_legend_and_no_stray_text(mlp):
    """JupyterLab's sanitiser (untrusted notebook) keeps the picture, the legend, the caption."""
    r = magic(mlp, "", "loss = model(x).pow(2).mean()\nloss")
    clean = sanitise(r._repr_html_())
    svg = picture(clean)
    assert "model.0.weight" in svg and "AddmmBackward0" in svg
    img = re.search(r'<img [^>]*alt="autograd graph"[^>]*>', clean).group(0)
    assert re.search(r'style="display: ?block; ?max-width: ?100%; ?height: ?auto;?"', img), img
    legend = re.findall(
        r'<span class="cm-legend-item" style="[^"]*white-space: ?nowrap[^"]*">'
        r'<img alt=""[^>]* src="data:image/svg\+xml;base64,[^"]+"[^>]*>([^<]+)</span>',
        clean,
    )
    assert legend == [text for _, text in render.legend_rows(r.drawn)] and legend
    # above the details: the caption, the toggle, the legend; no node label or id leaks out of
    # the picture (an inline <svg> would leave its labels and <title>s as a run-on line)
    top = visible_text(clean.split("<details><summary>details")[0])
    assert top.startswith(render.caption(r)), top
    assert "Backward" not in top and not re.search(r"\bn\d+\b", top), top
    assert "needs a trusted notebook" in top  # the 1:1 toggle says it needs trust
