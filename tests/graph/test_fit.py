"""Pictures a person can read (issue 16).

The automatic view of big models, one count in one caption, a legend of what is drawn, saved bytes
that add up, theme colours only around the picture.
"""

from __future__ import annotations

import base64
import re

import pytest

from cudamagic.core import style
from cudamagic.graph import draw, render
from cudamagic.graph import model as M

from .common import magic, needs_dot

RNN_LOOP = "h = torch.zeros(2, 16)\nfor t in range(400):\n    h = rnn(xs[t], h)\nh.sum()"
MLP_LOSS = "loss = loss_fn(model(xb), yb)\nloss"


@pytest.fixture
def big(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(32, 4, 64, "
        "batch_first=True), 6,"
        " enable_nested_tensor=False)\nsrc = torch.randn(2, 5, 32)\n"
        "rnn = torch.nn.RNNCell(8, 16)\nxs = torch.randn(400, 2, 8)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), "
        "torch.nn.Linear(128, 10))\n"
        "loss_fn = torch.nn.CrossEntropyLoss()\nxb, yb = torch.randn(128, 64), torch.randint(0, "
        "10, (128,))"
    )
    return ip


def _page_outside_pictures(html: str) -> str:
    """The page without the shared stylesheet.

    The page without the shared stylesheet (the lead's, tested in tests/core) and without the
    pictures' data (the graph and the legend's swatches: a picture's colours are its own).
    """
    html = html.replace(style.CSS, "")
    return re.sub(r'src="data:image/[^"]+"', "", html)


def test_repeated_calls_of_one_module_fold_into_one_box_with_the_count(big):
    r = magic(big, "--format dot", RNN_LOOP)  # the automatic view, no --depth
    boxes = r.drawn.of_kind(M.MODULE)
    assert [(b.label, b.count) for b in boxes] == [("rnn (RNNCell) x 400", 400)]
    # every op but the final SumBackward0
    assert boxes[0].ops == len(r.graph.of_kind(M.BACKWARD)) - 1
    # 4 parameters, their AccumulateGrads, the box, the sum, the output
    assert len(r.drawn.nodes) <= 12
    assert "rnn (RNNCell) x 400" in r.caption()
    assert "rnn (RNNCell) x 400" in r.summary_line()  # its first name, kept for notebooks


def test_budget_picks_the_collapsed_view_for_a_six_layer_encoder(big):
    r = magic(big, "--format dot", "enc(src).sum()")
    assert len(r.graph.nodes) > 500 and len(r.graph.nodes) > draw.NODE_BUDGET
    assert r.drawn.view.startswith("collapsed")
    assert len(r.drawn.nodes) <= draw.NODE_BUDGET and draw.ranks(r.drawn) <= draw.RANK_BUDGET
    assert [b.label for b in r.drawn.of_kind(M.MODULE)] == ["TransformerEncoderLayer x 6"]
    assert any("node budget of 150" in n for n in r.view_notes)
    # the user can still ask for more: --depth, or a budget big enough for the whole graph
    assert magic(big, "--format dot --max-nodes 5000", "enc(src).sum()").drawn.view == "full"


def test_small_graph_drawn_in_full_with_each_leaf_once(big):
    r = magic(big, "--format dot", MLP_LOSS)
    assert r.drawn.view == "full" and not any(n.use for n in r.drawn.nodes)
    assert sorted(r.drawn.labels(M.PARAM)) == [
        "model.0.bias",
        "model.0.weight",
        "model.2.bias",
        "model.2.weight",
    ]


@needs_dot
def test_one_count_in_one_caption_for_html_and_text(big):
    for cell in (MLP_LOSS, "enc(src).sum()", RNN_LOOP):
        r = magic(big, "", cell)
        kinds = [n.kind for n in r.graph.nodes]
        count = kinds.count(M.BACKWARD) + kinds.count(M.ACCUMULATE)
        caption = r.caption()
        assert re.findall(r"(\d+) (?:autograd )?nodes?\b", caption) == [str(count)], caption
        assert f"{count} autograd nodes (" in caption
        # the HTML shows that caption once, and no other node count outside the details
        page = _page_outside_pictures(r._repr_html_())
        visible = re.sub(r"<details\b.*</details>", "", page, flags=re.S)
        assert visible.count(render.esc(caption)) == 1
        assert re.findall(r"(\d+) (?:autograd )?nodes?\b", re.sub(r"<[^>]+>", " ", visible)) == [
            str(count)
        ]
        # the terminal's first lines are the same caption, wrapped
        text = " ".join(line.strip() for line in repr(r).split("\nnote:")[0].split("\n  ") if line)
        assert text.splitlines()[0].startswith(caption[:60])


@needs_dot
def test_legend_lists_only_the_kinds_drawn(big):
    def legend(r):
        return re.findall(
            r'<span class="cm-legend-item"[^>]*><img [^>]*>([^<]*)</span>', r._repr_html_()
        )

    mlp = magic(big, "", MLP_LOSS)
    assert legend(mlp) == [
        "backward op (grad_fn)",
        "AccumulateGrad (writes .grad)",
        "parameter (module path)",
        "output",
    ]
    enc = magic(big, "", "enc(src).sum()")  # the parameters are inside the folded box
    assert legend(enc) == ["backward op (grad_fn)", "output", "module call (collapsed)"]
    grouped = magic(big, "--group", MLP_LOSS)
    html = grouped._repr_html_()
    # the legend is part of the page, right below the picture (not a node dot places beside a
    # clustered graph)
    assert re.search(r'<div class="cm-pic"[^>]*><img [^>]*></div><div class="cm-legend"', html)
    # standalone files keep one
    assert "legend" not in grouped.inline_dot() and "cluster_legend" in grouped.dot


@needs_dot
def test_saved_bytes_of_the_boxes_add_up_to_the_caption_or_the_caption_says_why(big):
    rnn = magic(big, "", RNN_LOOP)
    assert render.drawn_saved_bytes(rnn.drawn) == rnn.graph.saved_bytes_total
    assert "add up to" not in rnn.caption() and "75.1 KiB" in rnn.caption()
    # ReLU's result is saved by ReluBackward0 and by the next AddmmBackward0
    mlp = magic(big, "", MLP_LOSS)
    shown = render.drawn_saved_bytes(mlp.drawn)
    assert shown > mlp.graph.saved_bytes_total
    assert (
        f"saved for backward: {render.format_bytes(mlp.graph.saved_bytes_total)}" in mlp.caption()
        and f"counted once, so the boxes add up to {render.format_bytes(shown)}" in mlp.caption()
    )


@needs_dot
def test_no_hard_coded_colours_around_the_picture(big):
    for line, cell in (
        ("", MLP_LOSS),
        ("--group", MLP_LOSS),
        ("", "enc(src).sum()"),
        ("--format png", MLP_LOSS),
        ("--format dot", MLP_LOSS),
    ):
        page = _page_outside_pictures(magic(big, line, cell)._repr_html_())
        # the DOT source is text, not styling
        page = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
        assert style.hard_coded_colours(page) == [], line  # the rule every output's tests share
        without_vars = re.sub(r"var\(--jp-[\w-]+(?:,[^()]*)?\)", "", page)
        assert not re.search(r"#[0-9a-fA-F]{3,8}\b|rgba?\(|hsl\(", without_vars), line
        assert not re.search(
            r"(?:color|background|border|fill|stroke)[\w-]*\s*[:=]\s*\"?(?:white|black|gr[ae]y|"
            r"silver|red|blue|green|yellow|orange)\b",
            without_vars,
            re.I,
        ), line


@needs_dot
def test_svg_keeps_its_viewbox_and_fits_the_width_by_default(big):
    r = magic(big, "", "enc(src).sum()")
    html = r._repr_html_()
    img = re.search(
        r'<img style="([^"]*)" alt="autograd graph" src="data:image/svg\+xml;base64,'
        r'([^"]+)"',
        html,
    )
    assert img.group(1) == "display:block;max-width:100%;height:auto"
    assert "viewBox=" in base64.b64decode(img.group(2)).decode()
    assert 'details class="cm-zoom"' in html and "1:1" in html
    png = magic(big, "--format png", MLP_LOSS)._repr_html_()
    assert (
        '<img style="display:block;max-width:100%;height:auto" alt="autograd graph" '
        'src="data:image/png;base64,' in png
    )
