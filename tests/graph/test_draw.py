"""Choosing the view that fits, the fallbacks (no `dot`, time-out, too big) and --save."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from cudamagic.graph import layout, render

from .common import magic, needs_dot


@needs_dot
def test_lstmcell_200_steps_renders_within_time_limit(ip):
    ip.run_cell("import torch\ncell = torch.nn.LSTMCell(8, 16)\nxs = torch.randn(200, 2, 8)")
    r = magic(
        ip,
        "",
        "h = c = torch.zeros(2, 16)\nfor t in range(200):\n    h, c = cell(xs[t], (h, c))\nh.sum()",
    )
    assert r.image is not None and not r.problem  # dot finished within its time limit
    assert r.graph.op_counts()["AddmmBackward0"] == 400
    assert any("node budget" in n for n in r.notes)
    assert len(r.drawn.nodes) <= 2500


@needs_dot
def test_dot_timeout_falls_back_without_hanging(ip, monkeypatch):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")

    def slow(source, fmt="svg", timeout_s=20.0):
        raise layout.DotTimeout(f"dot did not finish within {timeout_s:g} s")

    monkeypatch.setattr(layout, "run_dot", slow)
    r = magic(ip, "--timeout 0.5", "(w.sin() * 2).sum()")
    assert r.problem == "dot timeout" and "digraph" in r._repr_html_()
    assert any("0.5 s" in n for n in r.notes)


@needs_dot
def test_missing_dot_gives_install_message_outline_and_source(mlp, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = magic(mlp, "", "loss = model(x).sum()\nloss")
    assert r.problem == "dot missing" and r.image is None
    html = r._repr_html_()
    for word in (
        "apt-get install graphviz",
        "brew install graphviz",
        "conda install -c conda-forge graphviz",
        "%%autograd_graph?",
    ):
        assert word in html
    assert "AddmmBackward0" in render.outline(r.drawn) and "digraph autograd" in html
    assert "AddmmBackward0" in repr(r)
    assert mlp.user_ns["loss"].grad_fn is not None


@needs_dot
def test_formats_and_save(mlp, tmp_path):
    r = magic(mlp, f"--format png --save {tmp_path / 'g.pdf'}", "model(x).sum()")
    assert r.image.startswith(b"\x89PNG") and "data:image/png;base64" in r._repr_html_()
    assert (tmp_path / "g.pdf").read_bytes().startswith(b"%PDF")
    r.save(str(tmp_path / "g.dot"))
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    with pytest.raises(UsageError, match=r"--format: invalid choice: 'jpg'"):
        magic(mlp, "--format jpg", "model(x).sum()")


@needs_dot
def test_save_with_dot_extension_and_uppercase(w, tmp_path):
    r = magic(w, f"--save {tmp_path / 'G.SVG'}", "(w * 2).sum()")
    assert (tmp_path / "G.SVG").read_text().lstrip().startswith(("<?xml", "<svg", "<!--"))
    assert r.saved_to.endswith("G.SVG")
    with pytest.raises(
        ValueError, match=r"g\.jpeg: the file name must end in \.svg, \.png, \.pdf or \.dot"
    ):
        r.save(str(tmp_path / "g.jpeg"))
