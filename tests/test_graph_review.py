"""%%autograd_graph: regressions from a fresh-user review (bad flags, odd `dot` programs, deep graphs,
collapsed-view numbers, terminal width, SyntaxError)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from cudamagic.graph import walk as G
from cudamagic.graph import dot as R

HAVE_DOT = R.find_dot() is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz dot not installed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def magic(ip, line, cell):
    return ip.run_cell_magic("autograd_graph", line, cell)


def fake_dot(tmp_path, monkeypatch, body: str):
    """Put a `dot` shell script first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder


@pytest.fixture
def w(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    return ip


# ---- a deep graph visited from Python must not crash the process when it is freed -------------------
def test_freeing_a_walked_100k_chain_does_not_crash_the_process():
    code = textwrap.dedent("""
        import torch
        from cudamagic.graph import walk as G
        x = torch.randn(2, requires_grad=True)
        z = x
        for _ in range(100_000):
            z = z * 1.0001
        gr = G.walk([("z", z)])
        del z, x       # freeing the visited chain recursed past the 8 MiB stack: SIGSEGV
        print("alive", len(gr.nodes))
    """)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env, preexec_fn=_default_stack)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "alive 100003" in proc.stdout


def _default_stack():
    """In the child: the usual 8 MiB main-thread stack (the crash does not show with a bigger one)."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    soft = 8 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_STACK, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


class _FakeResource:
    RLIMIT_STACK = 3
    RLIM_INFINITY = -1

    def __init__(self, soft, hard):
        self.limits = (soft, hard)

    def getrlimit(self, which):
        return self.limits

    def setrlimit(self, which, limits):
        self.limits = limits


def test_guard_deep_free_raises_the_stack_limit_or_warns():
    mib = 1024 * 1024
    assert G.guard_deep_free(5_000, _resource=_FakeResource(8 * mib, -1), _is_main=True) == ""
    res = _FakeResource(8 * mib, -1)
    assert G.guard_deep_free(100_000, _resource=res, _is_main=True) == ""
    assert res.limits[0] >= 8 * mib + 100_000 * 400 and res.limits[1] == -1
    res = _FakeResource(8 * mib, 16 * mib)  # a hard limit that does not allow enough
    assert "overflow the C stack" in G.guard_deep_free(100_000, _resource=res, _is_main=True)
    assert res.limits == (16 * mib, 16 * mib)
    assert "overflow" in G.guard_deep_free(10_000_000, _resource=_FakeResource(8 * mib, -1), _is_main=True)
    assert "overflow" in G.guard_deep_free(100_000, _resource=_FakeResource(8 * mib, -1), _is_main=False)
    assert G.guard_deep_free(100_000, _resource=_FakeResource(-1, -1), _is_main=True) == ""


# ---- flags checked before the cell runs ----------------------------------------------------------
@pytest.mark.parametrize("flags, match", [
    ("--timeout nan", "--timeout must be"), ("--timeout inf", "--timeout must be"),
    ("--timeout 1e300", "--timeout must be"), ("--timeout 0", "--timeout must be"),
    ("--timeout -1", "--timeout must be"), ("--max-nodes 0", "--max-nodes must be"),
    ("--max-nodes -4", "--max-nodes must be"),
    ("--save {tmp}/no/such/folder/g.svg", "does not exist"), ("--save {tmp}/g.txt", "must end in"),
    ("--save {tmp}/g", "must end in"), ("--save {tmp}/adir.svg", "is a folder"),
])
def test_bad_flags_are_usage_errors_before_the_cell_runs(w, tmp_path, flags, match):
    (tmp_path / "adir.svg").mkdir()
    w.user_ns.pop("ran", None)
    with pytest.raises(UsageError, match=match):
        magic(w, flags.format(tmp=tmp_path), "ran = True\n(w * 2).sum()")
    assert "ran" not in w.user_ns
    assert not (tmp_path / "g.txt").exists() and not (tmp_path / "g").exists()


def test_bad_config_values_are_usage_errors(w):
    magics = w.find_cell_magic("autograd_graph").__self__.settings
    old = magics.graph_dot_timeout_s, magics.graph_node_budget
    try:
        magics.graph_dot_timeout_s = float("nan")
        with pytest.raises(UsageError, match="CudaMagics.graph_dot_timeout_s must be"):
            magic(w, "", "(w * 2).sum()")
        magics.graph_dot_timeout_s, magics.graph_node_budget = 20.0, 0
        with pytest.raises(UsageError, match="CudaMagics.graph_node_budget must be"):
            magic(w, "", "(w * 2).sum()")
    finally:
        magics.graph_dot_timeout_s, magics.graph_node_budget = old


@needs_dot
def test_save_with_dot_extension_and_uppercase(w, tmp_path):
    r = magic(w, f"--save {tmp_path / 'G.SVG'}", "(w * 2).sum()")
    assert (tmp_path / "G.SVG").read_text().lstrip().startswith(("<?xml", "<svg", "<!--"))
    assert r.saved_to.endswith("G.SVG")
    with pytest.raises(ValueError, match=r"g\.jpeg: the file name must end in \.svg, \.png, \.pdf or \.dot"):
        r.save(str(tmp_path / "g.jpeg"))


# ---- odd dot programs ------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_hanging_dot_is_killed_with_its_children(w, tmp_path, monkeypatch):
    pidfile = tmp_path / "child.pid"
    fake_dot(tmp_path, monkeypatch, f"sleep 120 &\necho $! > {pidfile}\nwait\n")
    t0 = time.perf_counter()
    r = magic(w, "--timeout 1.5", "(w * 2).sum()")
    assert time.perf_counter() - t0 < 10
    assert r.problem == "dot timeout" and r.image is None
    pid = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid), "the dot script's child outlived the time-out"


def test_dot_that_prints_garbage_is_a_failure_with_a_note(w, tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, "cat > /dev/null\nprintf 'not a picture <script>alert(1)</script>'\n")
    for fmt in ("svg", "png", "pdf"):
        r = magic(w, f"--format {fmt}", "(w * 2).sum()")
        assert r.problem == "dot failed" and r.image is None
        assert any(f"not {fmt.upper()}" in n for n in r.notes)
        html = r._repr_html_()
        assert "<script>" not in html and "digraph autograd" in html


def test_dot_error_text_cannot_drive_the_terminal(w, tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, "cat > /dev/null\nprintf 'bad \\033[31mred\\033]0;title\\007' >&2\nexit 1\n")
    r = magic(w, "", "(w * 2).sum()")
    assert r.problem == "dot failed"
    text = repr(r)
    assert "\x1b" not in text and "\x07" not in text and "\\x1b[31mred" in text
    assert "\x1b" not in r._repr_html_()


# ---- collapsed views: numbers that add up -----------------------------------------------------------
@pytest.fixture
def lstm(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\ncell = torch.nn.LSTMCell(8, 16)\nxs = torch.randn(30, 4, 8)")
    return ip


LSTM_CELL = "h = c = torch.zeros(4, 16)\nfor t in range(30):\n    h, c = cell(xs[t], (h, c))\nh.sum()"


def test_folded_box_counts_shared_storages_once(lstm):
    r = magic(lstm, "--depth 0 --format dot --shared-params", LSTM_CELL)
    boxes = r.drawn.of_kind(G.MODULE)
    assert len(boxes) == 1 and boxes[0].count == 30
    # every step saves a view of xs (the whole 3.75 KiB storage): the sum over nodes was 6x the total
    assert boxes[0].saved_bytes <= r.graph.saved_bytes_total
    assert boxes[0].saved_bytes > 0.9 * r.graph.saved_bytes_total
    assert "cell, called 30 times" in R.node_text(boxes[0]) and "cell … cell" not in r.dot


def test_collapsed_caption_counts_every_autograd_node(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\n"
                "layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)\n"
                "enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)\n"
                "src = torch.randn(2, 5, 16)")
    r = magic(ip, "--depth 1 --format dot", "enc(src).sum()")
    boxes = r.drawn.of_kind(G.MODULE)
    assert len(boxes) == 2
    assert sum(b.saved_bytes for b in boxes) <= r.graph.saved_bytes_total
    total = sum(r.graph.op_counts().values())
    assert f'label="{total} autograd nodes;' in r.dot
    assert "the rest inside 2 module boxes" in r.dot and "1 autograd nodes" not in r.dot


# ---- front ends ----------------------------------------------------------------------------------------
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


@needs_dot
def test_freed_saved_tensors_have_a_legend_entry(w):
    r = magic(w, "--show-saved", "y = (w * w).sum(); y.backward(); y")
    assert any(n.kind == G.SAVED and n.freed for n in r.graph.nodes)
    assert "saved tensor freed by backward()" in r.dot


# ---- the cell's own SyntaxError ----------------------------------------------------------------------
def test_syntax_error_points_at_the_cell_line_without_our_parser_frames(ip):
    with capture_output() as cap:
        res = ip.run_cell("%%autograd_graph\nx = 1\ny = (2 +\n", store_history=True)
    out = re.sub(r"\x1b\[[0-9;]*m", "", cap.stdout)
    assert isinstance(res.error_in_exec, SyntaxError)
    assert res.error_in_exec.lineno == 3  # line 1 is the %%autograd_graph line
    assert "graph.py" not in out and "compilerop.py" not in out
    assert f"Cell In[{res.execution_count}], line 3" in out
    assert "x" not in ip.user_ns or ip.user_ns["x"] != 1


def test_skipped_note_uses_the_right_article(w):
    r = magic(w, "--format dot", "{'loss': (w * 2).sum(), 'n': 3, 'name': 'a'}")
    assert any("`['n']` is an int" in n for n in r.notes)
    assert any("`['name']` is a str" in n for n in r.notes)


@needs_dot
def test_unrolled_loop_opens_with_nodes_in_the_first_screen(lstm):
    """The scroll box opens at the top left: an unrolled LSTM's staircase must start there."""
    r = magic(lstm, "", LSTM_CELL)
    assert r.drawn.view == "full" and 'ordering="out"' in r.dot
    svg = r.svg
    height = float(re.search(r'viewBox="[\d.]+ [\d.]+ [\d.]+ ([\d.]+)"', svg).group(1))
    shift = float(re.search(r"translate\([\d.]+ ([\d.]+)\)", svg).group(1))
    points = [(float(x), float(y) + shift) for x, y in re.findall(r'<text[^>]* x="([-\d.]+)" y="([-\d.]+)"', svg)]
    # 1000 x 700 CSS px = 750 x 525 pt, from the top left of the picture
    assert height > 2000 and any(x < 750 and y < 525 for x, y in points)


def test_notes_render_code_spans_in_html_and_one_op_is_singular():
    from cudamagic.graph import dot as R
    assert R._code_spans(R.esc("`['no_grad']` has no grad_fn")) == "<code>[&#x27;no_grad&#x27;]</code> has no grad_fn"
    assert R._plural(1, "op") == "1 op" and R._plural(3, "op") == "3 ops"
