"""Choosing the view that fits, the fallbacks (no `dot`, time-out, too big) and --save."""

from __future__ import annotations

import time

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.error import UsageError

from cudamagic.graph import draw, layout, render

from .common import fake_dot, magic, needs_dot


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

    def slow(source, fmt="svg", timeout_s=20.0, progress=None, plain_text=False):
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


@needs_dot
def test_timeout_bounds_the_whole_drawing_fallback_included(ip, monkeypatch):
    """A graph dot takes minutes over, with --timeout 2: a small view or a summary, soon."""
    limits = []
    real = layout.run_dot

    def counted(source, fmt="svg", timeout_s=20.0, progress=None, plain_text=False):
        limits.append(timeout_s)
        return real(source, fmt, timeout_s, progress, plain_text)

    monkeypatch.setattr(layout, "run_dot", counted)
    ip.run_cell("import torch\ncell = torch.nn.LSTMCell(8, 16)\nxs = torch.randn(200, 2, 8)")
    loop = "h = c = torch.zeros(2, 16)\nfor t in range(200):\n    h, c = cell(xs[t], (h, c))\n"
    ip.run_cell(loop)  # the forward pass alone, for its time
    t0 = time.monotonic()
    ip.run_cell(loop)
    forward_s = time.monotonic() - t0
    t0 = time.monotonic()
    r = magic(ip, "--no-fold --shared-params --max-nodes 10000000 --timeout 2", loop + "h.sum()")
    total_s = time.monotonic() - t0
    assert total_s - forward_s < 20, total_s  # 10x the limit (dot alone needs minutes)
    assert sum(limits) <= 2.0 and len(limits) <= 2, limits  # the fallback within the same 2 s
    if r.problem:  # even the small view did not make it on a loaded machine: the summary
        assert r.problem == "dot timeout" and "digraph" in r._repr_html_()
    else:
        assert r.image is not None and len(r.drawn.nodes) <= draw.FALLBACK_BOXES
        assert any("within 1.6 s of the 2 s limit" in n for n in r.view_notes), r.view_notes
    assert len(r.graph.nodes) > 3000  # the full graph is still the result's data


def test_slow_dot_shows_a_progress_line_that_is_gone_at_the_end(w, tmp_path, monkeypatch):
    """While dot runs past a second a line counts seconds in place; emptied when it ends."""
    fake_dot(
        tmp_path,
        monkeypatch,
        "cat > /dev/null\nsleep 2.6\n"
        'printf \'<svg xmlns="http://www.w3.org/2000/svg" width="8pt" height="8pt"/>\'\n',
    )
    pub = CapturingDisplayPublisher()
    monkeypatch.setattr(w, "display_pub", pub)
    monkeypatch.setattr(w, "kernel", object(), raising=False)  # as in a notebook
    r = magic(w, "--timeout 30", "(w * 2).sum()")
    assert r.image is not None and not r.problem
    shown = [o for o in pub.outputs if o["transient"]]
    ids = {o["transient"]["display_id"] for o in shown}
    assert len(ids) == 1 and len(shown) >= 3, shown  # one line: shown, updated, emptied
    assert not shown[0]["update"] and all(o["update"] for o in shown[1:])
    texts = [o["data"].get("text/plain", "") for o in shown[:-1]]
    assert all("Graphviz dot is laying out the picture" in t for t in texts), texts
    assert texts[0] != texts[-1]  # the seconds count up
    assert shown[-1]["data"] == {"text/plain": ""}  # nothing of it stays in the output


def test_no_progress_line_for_a_quick_dot(w, tmp_path, monkeypatch):
    fake_dot(
        tmp_path,
        monkeypatch,
        'cat > /dev/null\nprintf \'<svg xmlns="http://www.w3.org/2000/svg" width="8pt"/>\'\n',
    )
    pub = CapturingDisplayPublisher()
    monkeypatch.setattr(w, "display_pub", pub)
    monkeypatch.setattr(w, "kernel", object(), raising=False)
    assert magic(w, "", "(w * 2).sum()").image is not None
    assert pub.outputs == []


def test_default_view_of_a_chain_takes_work_linear_in_its_ops(w):
    """10x the ops, about 10x the lines of cudamagic run (counted, not timed: a loaded machine)."""
    import os
    import sys

    import cudamagic.graph

    here = os.path.dirname(cudamagic.graph.__file__)
    w.run_cell(
        "def chain(n):\n    z = w\n    for i in range(n):\n"
        "        z = z.sin() if i % 2 else z * 1.001\n    return z.sum()"
    )

    def lines(n):
        count = 0

        def line(frame, event, arg):
            nonlocal count
            count += event == "line"
            return line

        def call(frame, event, arg):
            return line if frame.f_code.co_filename.startswith(here) else None

        sys.settrace(call)
        try:
            r = magic(w, "--format dot", f"chain({n})")
        finally:
            sys.settrace(None)
        assert len(r.drawn.nodes) < 10 and len(r.graph.nodes) > n  # the folded chain
        return count

    small, big = lines(2_000), lines(20_000)
    assert 8 * small < big < 12 * small, (small, big)
