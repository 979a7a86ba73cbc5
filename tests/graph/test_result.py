"""The result's text (terminal) and HTML (notebook) forms."""

from __future__ import annotations

from collections import Counter

from cudamagic.core.fmt import esc
from cudamagic.graph import dot, result
from cudamagic.graph import model as M

from .common import LSTM_CELL, magic, needs_dot


@needs_dot
def test_mlp_graph_names_parameters_and_renders_svg(mlp):
    r = magic(mlp, "", "out = model(x)\nloss = out.pow(2).mean()\nloss")
    assert sorted(r.graph.labels(M.PARAM)) == ["model.0.bias", "model.0.weight", "model.2.bias",
                                               "model.2.weight"]
    assert r.graph.labels(M.OUTPUT) == ["loss"]
    assert Counter(r.graph.labels(M.BACKWARD)) == Counter(
        {"AddmmBackward0": 2, "TBackward0": 2, "ReluBackward0": 1, "PowBackward0": 1, "MeanBackward0": 1})
    assert r.svg.lstrip().startswith("<?xml") and "model.0.weight" in r.svg
    html = r._repr_html_()
    assert "<svg" in html and "overflow:auto" in html
    # the terminal form: summary plus a bounded text outline (the terminal's only view of the graph)
    text = repr(r)
    assert text.startswith("autograd graph:") and "model.0.weight" in text and "AddmmBackward0" in text
    assert len(text.splitlines()) <= 45 and max(len(line) for line in text.splitlines()) <= 100
    assert mlp.user_ns["loss"].grad_fn is not None  # the cell's variables land in the namespace
    assert r.graph.saved_bytes_total > 0


@needs_dot
def test_terminal_text_fits_100_columns_and_counts_add_up(lstm):
    r = magic(lstm, "", LSTM_CELL)
    text = repr(r)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "1 outputs" not in text and "1 output)" in text.replace("\n  ", " ")
    assert "AccumulateGrad" in text.splitlines()[0]


@needs_dot
def test_missing_dot_text_fits_100_columns(lstm, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    text = repr(magic(lstm, "", LSTM_CELL))
    assert "apt-get install graphviz" in text
    assert max(len(line) for line in text.splitlines()) <= 100


@needs_dot
def test_inline_svg_keeps_its_natural_size_in_the_scroll_box(lstm):
    html = magic(lstm, "", LSTM_CELL)._repr_html_()
    assert "overflow:auto" in html
    assert '<svg style="max-width:none;height:auto"' in html  # front ends' max-width:100% shrinks it


def test_notes_render_code_spans_in_html_and_one_op_is_singular():
    assert result._code_spans(esc("`['no_grad']` has no grad_fn")) == "<code>[&#x27;no_grad&#x27;]</code> has no grad_fn"
    assert dot.plural(1, "op") == "1 op" and dot.plural(3, "op") == "3 ops"
