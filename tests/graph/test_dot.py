"""DOT text and the `dot` program.

DOT text: escaping, determinism, legend, layout order. The `dot` program: odd programs, time-outs
that kill the whole process group.
"""

from __future__ import annotations

import os
import re
import select
import time

import pytest
import torch

from cudamagic.graph import dot, layout
from cudamagic.graph import model as M
from cudamagic.graph import walk as G

from .common import HAVE_DOT, LSTM_CELL, fake_dot, magic, needs_dot


def test_dot_escaping_of_names():
    x = torch.randn(2, requires_grad=True)
    y = (x * 3).sum()
    gr = G.walk([('a"b\\c\n<d>', y)], tensor_names={id(x): 'we"ird'})
    source = dot.to_dot(gr)
    assert 'a\\"b\\\\c\\n<d>' in source
    assert 'we\\"ird' in source
    if HAVE_DOT:
        assert layout.run_dot(source, "svg", 20).startswith(b"<?xml")


def test_deterministic_dot_across_runs(mlp):
    cell = "torch.manual_seed(1)\nloss = model(torch.randn(2, 4)).tanh().sum()\nloss"
    a = magic(mlp, "--show-saved --show-attrs --format dot", cell)
    b = magic(mlp, "--show-saved --show-attrs --format dot", cell)
    assert a.dot == b.dot
    assert "0x" not in a.dot


@needs_dot
def test_freed_saved_tensors_have_a_legend_entry(w):
    r = magic(w, "--show-saved", "y = (w * w).sum(); y.backward(); y")
    assert any(n.kind == M.SAVED and n.freed for n in r.graph.nodes)
    assert "saved tensor freed by backward()" in r.dot


@needs_dot
def test_unrolled_loop_opens_with_nodes_in_the_first_screen(lstm):
    """An unrolled LSTM drawn in full (budget raised) starts at the top.

    The picture is scaled to the output width, so the first screen shows its first rows whatever
    their x.
    """
    r = magic(lstm, "--max-nodes 5000", LSTM_CELL)
    assert r.drawn.view == "full" and 'nslimit="2"' in r.dot and "ordering" not in r.dot
    svg = r.svg
    height = float(re.search(r'viewBox="[\d.]+ [\d.]+ [\d.]+ ([\d.]+)"', svg).group(1))
    shift = float(re.search(r"translate\([\d.]+ ([\d.]+)\)", svg).group(1))
    points = [
        (float(x), float(y) + shift)
        for x, y in re.findall(r'<text[^>]* x="([-\d.]+)" y="([-\d.]+)"', svg)
    ]
    # the top 525 pt (700 CSS px at 1:1; more once scaled down to fit the width) hold labels
    assert height > 2000 and any(y < 525 for x, y in points)


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Wait for process ``pid`` to exit (a pidfd becomes readable), at most ``timeout_s``."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_hanging_dot_is_killed_with_its_children(w, tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    fake_dot(tmp_path, monkeypatch, f"sleep 120 &\necho $! > {pidfile}\nwait\n")
    t0 = time.perf_counter()
    r = magic(w, "--timeout 1.5", "(w * 2).sum()")
    assert time.perf_counter() - t0 < 60  # the script sleeps 120 s: it was not waited for
    assert r.problem == "dot timeout" and r.image is None
    pid = int(pidfile.read_text())
    assert _exits_within(pid, 60), "the dot script's child outlived the time-out"


def test_dot_that_prints_garbage_is_a_failure_with_a_note(w, tmp_path, monkeypatch):
    fake_dot(
        tmp_path, monkeypatch, "cat > /dev/null\nprintf 'not a picture <script>alert(1)</script>'\n"
    )
    for fmt in ("svg", "png", "pdf"):
        r = magic(w, f"--format {fmt}", "(w * 2).sum()")
        assert r.problem == "dot failed" and r.image is None
        assert any(f"not {fmt.upper()}" in n for n in r.notes)
        html = r._repr_html_()
        assert "<script>" not in html and "digraph autograd" in html


def test_dot_error_text_cannot_drive_the_terminal(w, tmp_path, monkeypatch):
    fake_dot(
        tmp_path,
        monkeypatch,
        "cat > /dev/null\nprintf 'bad \\033[31mred\\033]0;title\\007' >&2\nexit 1\n",
    )
    r = magic(w, "", "(w * 2).sum()")
    assert r.problem == "dot failed"
    text = repr(r)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[31mred" in text
    assert "\x1b" not in r._repr_html_()


@needs_dot
def test_an_ops_operands_are_drawn_left_to_right_in_argument_order(ip):
    """What ``ordering="out"`` once kept, without it: ``a - b`` shows ``a`` left of ``b``."""
    ip.run_cell("import torch")
    ip.run_cell("first, second, third = (torch.randn(3, requires_grad=True) for _ in range(3))")
    for cell, names in (
        ("(first - second).sum()", ["first", "second"]),
        ("(second - first).sum()", ["second", "first"]),
        ("torch.addcmul(first, second, third).sum()", ["first", "second", "third"]),
        ("torch.cat([third, first, second]).sum()", ["third", "first", "second"]),
        ("(first.sin() - second.cos()).sum()", ["first", "second"]),
    ):
        r = magic(ip, "", cell)
        assert "ordering" not in r.dot
        x = {
            name: float(re.search(rf'<text[^>]* x="([-\d.]+)"[^>]*>{name}</text>', r.svg).group(1))
            for name in names
        }
        assert sorted(names, key=x.get) == names, (cell, x)


@needs_dot
def test_a_long_chain_is_ranked_by_newrank_and_drawn_top_down_in_order(w):
    """Graphviz's default ranking is quadratic in a chain's depth; newrank keeps the picture.

    Each op stands below its input: the boxes go down the page in the chain's order.
    """
    r = magic(w, "--max-nodes 1000 --no-fold", "z = w\nfor _ in range(150):\n    z = z.sin()\nz")
    assert r.drawn.view == "full" and 'newrank="true"' in r.dot and len(r.drawn.nodes) > 150
    y_of = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"<title>(\w+)</title>.*?<text[^>]* y=\"([-\d.]+)\"", r.svg, re.S)
    }
    grads = [e for e in r.drawn.edges if e.kind == M.GRAD]
    assert len(grads) == 150 and all(y_of[e.src] < y_of[e.dst] for e in grads)
    small = magic(w, "", "(w.sin() * 2).sum()")
    assert "newrank" not in small.dot  # small pictures as they were


def test_notebook_source_is_the_file_source_less_legend_and_caption(mlp):
    """The picture's DOT and the file's DOT (written together) differ only by legend and caption.

    Also after the drawn view changes (the fallback of a ``dot`` time-out): the picture's source is
    then the new view's, never the one written before.
    """
    from cudamagic.graph import views

    cell = "model(x).tanh().sum()"
    for line in ("--format dot", "--group --format dot"):
        r = magic(mlp, line, cell)
        inline = r.inline_dot()
        assert "cluster_legend" in r.dot and "legend" not in inline
        caption = dot.quote(r.caption())
        assert f"label={caption}" in r.dot and caption not in inline
        file_less_extras = re.sub(
            r"  subgraph cluster_legend \{.*?\n  \}\n", "", r.dot, flags=re.S
        ).replace(f', labelloc="b", label={caption}', "")
        assert file_less_extras == inline
        assert inline == dot.to_dot(r.drawn, group=r.group, legend=False)
        r.drawn = views.collapse(r.graph, 0, True)  # one box per top-level module call
        assert r.inline_dot() == dot.to_dot(r.drawn, group=r.group, legend=False) != inline


@needs_dot
def test_every_label_fits_its_box_in_the_notebook_picture(mlp):
    """Boxes are as wide as their monospace text (0.6 em a character), and the SVG says monospace.

    Whether ``dot`` measured the text with its text-layout plugin or, without it, with its own
    metrics of Courier (:func:`layout.plain_text_dir`): with the metrics of a proportional font the
    longest lines would overflow.
    """
    import html as html_lib

    r = magic(mlp, "--show-saved --group", "model(x).tanh().sum()")
    svg = r.svg
    assert "Courier" not in svg and 'font-family="monospace"' in svg
    nodes = re.findall(r'<g id="node\d+" class="node">(.*?)</g>', svg, re.S)
    assert len(nodes) == len(r.drawn.nodes)
    for node in nodes:
        points = re.search(r'<polygon [^>]*points="([^"]+)"', node).group(1)
        xs = [float(p.split(",")[0]) for p in points.split()]
        longest = max(len(html_lib.unescape(t)) for t in re.findall(r">([^<]*)</text>", node))
        assert max(xs) - min(xs) >= longest * 0.6 * 10, node  # fontsize 10


@needs_dot
def test_a_dot_that_fails_without_its_text_plugin_draws_as_installed(w, tmp_path, monkeypatch):
    exe = layout.find_dot()
    broken = tmp_path / "gv"
    broken.mkdir()
    (broken / "config6a").write_text("/nonexistent/libgvplugin_core.so.6 core {\n}\n")
    monkeypatch.setitem(layout._PLAIN_DIRS, exe, str(broken))
    r = magic(w, "", "(w * 2).sum()")
    assert not r.problem and "MulBackward0" in r.svg
    assert layout._PLAIN_DIRS[exe] is None  # not tried again


@pytest.mark.skipif(os.name == "nt", reason="POSIX layout of a Graphviz install")
def test_plain_text_plugin_list_keeps_the_core_and_dot_layout_only(tmp_path):
    prefix = tmp_path / "graphviz"
    (prefix / "bin").mkdir(parents=True)
    exe = prefix / "bin" / "dot"
    exe.write_text("#!/bin/sh\n")
    lib = prefix / "lib" / "graphviz"
    lib.mkdir(parents=True)
    for name in ("libgvplugin_core.so.6", "libgvplugin_dot_layout.so.6", "libgvplugin_pango.so.6"):
        (lib / name).write_bytes(b"")
    (lib / "config6a").write_text(
        "libgvplugin_core.so.6 core {\n\trender {\n\t\tsvg 1\n\t}\n}\n"
        "libgvplugin_dot_layout.so.6 dot_layout {\n\tlayout {\n\t\tdot 0\n\t}\n}\n"
        "libgvplugin_pango.so.6 cairo {\n\ttextlayout {\n\t\ttextlayout 0\n\t}\n}\n"
    )
    folder = layout.plain_text_dir(str(exe))
    text = open(os.path.join(folder, "config6a")).read()
    assert text == (
        f"{lib}/libgvplugin_core.so.6 core {{\n\trender {{\n\t\tsvg 1\n\t}}\n}}\n"
        f"{lib}/libgvplugin_dot_layout.so.6 dot_layout {{\n\tlayout {{\n\t\tdot 0\n\t}}\n}}\n"
    )
    assert layout.plain_text_dir(str(tmp_path / "other" / "bin" / "dot")) is None  # no list
