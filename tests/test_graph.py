"""%%autograd_graph: the graph walker (tier 1) and the magic in a real InteractiveShell (tier 2)."""

from __future__ import annotations

import dataclasses
import gc
import os
import threading
import time
import traceback
import weakref
from collections import Counter, namedtuple

import pytest
import torch
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from cudamagic.graph import walk as G
from cudamagic.graph import dot as R

HAVE_DOT = R.find_dot() is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz dot not installed")


def magic(ip, line, cell):
    return ip.run_cell_magic("autograd_graph", line, cell)


@pytest.fixture
def mlp(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\n"
                "model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))\n"
                "x = torch.randn(3, 4)")
    return ip


# ---- tier 1: the walker ----------------------------------------------------------------
def test_walk_small_graph_structure():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    y = (x * w).sum()
    gr = G.walk([("", y)], tensor_names={id(x): "x", id(w): "w"})
    assert gr.labels(G.BACKWARD) == ["SumBackward0", "MulBackward0"]
    assert sorted(gr.labels(G.LEAF)) == ["w", "x"]
    assert gr.label_edges() == Counter({("SumBackward0", "output"): 1, ("MulBackward0", "SumBackward0"): 1,
                                        ("AccumulateGrad", "MulBackward0"): 2, ("x", "AccumulateGrad"): 1,
                                        ("w", "AccumulateGrad"): 1})
    mul = gr.of_kind(G.BACKWARD)[1]
    assert mul.saved_bytes == 0  # x and w are leaves: parameters are not counted
    assert [n.id for n in gr.nodes] == [f"n{i}" for i in range(len(gr.nodes))]


def test_saved_bytes_counts_activations_once():
    x = torch.randn(1000, requires_grad=True)
    h = x.exp()          # ExpBackward0 saves its result (4000 B)
    y = (h * h).sum()    # MulBackward0 saves h twice: one storage
    gr = G.walk([("", y)])
    by = {n.label: n for n in gr.of_kind(G.BACKWARD)}
    assert by["MulBackward0"].saved_bytes == 4000
    assert by["ExpBackward0"].saved_bytes == 4000
    assert gr.saved_bytes_total == 4000


def test_per_use_parameter_nodes_and_shared_params():
    w = torch.randn(3, requires_grad=True)
    h = torch.ones(3)
    for _ in range(5):
        h = torch.tanh(h * w)
    per_use = G.walk([("", h)], tensor_names={id(w): "w"})
    shared = G.walk([("", h)], tensor_names={id(w): "w"}, shared_params=True)
    assert len(shared.of_kind(G.LEAF)) == 1
    uses = per_use.of_kind(G.LEAF)
    assert len(uses) == 5 and {n.use for n in uses} == {(k, 5) for k in range(1, 6)}
    assert all(n.label == "w" for n in uses)
    # same backward structure either way
    assert Counter(shared.labels(G.BACKWARD)) == Counter(per_use.labels(G.BACKWARD))
    assert len(G.walk([("", h)], shared_params=True).edges) < len(per_use.edges)


def test_chain_of_100k_ops_walks_iteratively():
    result = {}

    def body():  # a big C stack: freeing a 100k-deep graph recurses in PyTorch's C++ (pytorch#109948)
        x = torch.randn(2, requires_grad=True)
        z = x
        for _ in range(100_000):
            z = z.sin()
        gr = G.walk([("z", z)])
        view, notes, fits = R.choose_view(gr, None, True, 2500)
        result.update(n=len(gr.nodes), ops=gr.op_counts()["SinBackward0"], view=view, fits=fits)
        del z, x

    old = threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=body)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    assert result["n"] == 100_003 and result["ops"] == 100_000
    assert result["fits"]
    runs = result["view"].of_kind(G.RUN)
    assert [(r.label, r.count) for r in runs] == [("SinBackward0", 100_000)]


def test_custom_function_with_none_and_freed_saved_tensors():
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, None)
            return a * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2, None

    x = torch.randn(4, requires_grad=True)
    y = Scale.apply(x, None).sum()
    gr = G.walk([("", y)])
    assert "ScaleBackward" in gr.labels(G.BACKWARD)
    saved = gr.labels(G.SAVED)
    assert saved == ["saved_tensors[0]", "saved_tensors[1] = None"]
    y.backward()
    after = G.walk([("", y)])  # F11: no "backward through the graph a second time"
    assert after.labels(G.SAVED) == ["saved_tensors (freed by backward)"]
    assert any(n.freed for n in after.of_kind(G.BACKWARD))


def test_builtin_saved_tensors_after_backward_are_marked_freed():
    x = torch.randn(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    gr = G.walk([("y", y)], show_saved=True)
    saved = gr.of_kind(G.SAVED)
    assert {n.label for n in saved} == {"self (freed by backward)", "other (freed by backward)"}
    assert all(n.freed for n in saved)
    assert "freed by backward" in R.to_dot(gr)


def test_no_strong_reference_to_user_tensors_survives():
    x = torch.randn(3, requires_grad=True)
    y = (x.exp() * 2).sum()
    refs = [weakref.ref(x), weakref.ref(y)]
    gr = G.walk([("y", y)], tensor_names={id(x): "x"}, show_saved=True, show_attrs=True)
    result = R.draw(gr, fmt="dot")
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)
    assert result.nodes  # the model is still there


def test_dot_escaping_of_names():
    x = torch.randn(2, requires_grad=True)
    y = (x * 3).sum()
    gr = G.walk([('a"b\\c\n<d>', y)], tensor_names={id(x): 'we"ird'})
    dot = R.to_dot(gr)
    assert 'a\\"b\\\\c\\n<d>' in dot
    assert 'we\\"ird' in dot
    if HAVE_DOT:
        assert R.run_dot(dot, "svg", 20).startswith(b"<?xml")


def test_collapse_and_fold_repeated_blocks(ip):
    ip.run_cell("import torch\ntorch.manual_seed(0)\n"
                "enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, "
                "batch_first=True), 4)\nsrc = torch.randn(2, 5, 16, requires_grad=True)")
    r = magic(ip, "--depth 1 --format dot", "enc(src).sum()")
    boxes = r.drawn.of_kind(G.MODULE)
    assert [(b.label, b.count) for b in boxes] == [("TransformerEncoderLayer x 4", 4)]
    assert dict(boxes[0].attrs)["calls"] == "enc.layers.0 … enc.layers.3"
    assert boxes[0].ops == sum(1 for n in r.graph.nodes if n.kind == G.BACKWARD and n.call is not None
                               and r.graph.calls[n.call].depth >= 2)
    unfolded = magic(ip, "--depth 1 --no-fold --format dot", "enc(src).sum()")
    assert [b.label for b in unfolded.drawn.of_kind(G.MODULE)] == [f"enc.layers.{i}" for i in range(4)]
    grouped = magic(ip, "--group --format dot", "enc(src).sum()")
    assert 'subgraph cluster_c0' in grouped.dot and 'label="enc (TransformerEncoder)"' in grouped.dot


# ---- tier 2: the magic in a real shell ---------------------------------------------------
@needs_dot
def test_mlp_graph_names_parameters_and_renders_svg(mlp):
    r = magic(mlp, "", "out = model(x)\nloss = out.pow(2).mean()\nloss")
    assert sorted(r.graph.labels(G.PARAM)) == ["model.0.bias", "model.0.weight", "model.2.bias",
                                               "model.2.weight"]
    assert r.graph.labels(G.OUTPUT) == ["loss"]
    assert Counter(r.graph.labels(G.BACKWARD)) == Counter(
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


def test_outputs_nested_structures(ip):
    ip.run_cell("import torch, dataclasses, collections\nx = torch.randn(3, requires_grad=True)\n"
                "@dataclasses.dataclass\nclass Out:\n    logits: object\n    loss: object\n    tag: str\n"
                "Pair = collections.namedtuple('Pair', 'a b')")
    r = magic(ip, "--format dot", "[x * 2, (x ** 2).sum()]")
    assert r.graph.labels(G.OUTPUT) == ["[0]", "[1]"]
    r = magic(ip, "--format dot", "{'logits': x * 2, 'loss': (x ** 2).sum()}")
    assert r.graph.labels(G.OUTPUT) == ["['logits']", "['loss']"]
    r = magic(ip, "--format dot", "Out(x * 2, (x ** 2).sum(), 'hello')")
    assert r.graph.labels(G.OUTPUT) == [".logits", ".loss"]
    assert any("`.tag` is a str" in n for n in r.notes)
    r = magic(ip, "--format dot", "(Pair(x.exp(), [x.sin()]), 3)")
    assert r.graph.labels(G.OUTPUT) == ["[0].a", "[0].b[0]"]


def test_output_option_names_variables(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    r = magic(ip, "-o a,b --format dot", "a = w * 2\nb = a.sum()\nprint('done')")
    assert r.graph.labels(G.OUTPUT) == ["a", "b"]
    assert r.graph.labels(G.LEAF) == ["w"]
    with pytest.raises(UsageError, match="named 'nope'"):
        magic(ip, "-o nope", "a = w * 2")


@pytest.mark.parametrize("cell, match", [
    ("model", "is an nn.Module"),
    ("with torch.no_grad():\n    y = model(x)\ny", "no_grad"),
    ("with torch.inference_mode():\n    y = model(x)\ny", "inference_mode"),
    ("model(x).detach()", "detach"),
    ("model(x).sum().item()", "item()"),
    ("y = model(x)", "no value to draw"),
    ("torch.randn(3) * 2", "no input requires grad"),
    ("torch.randn(3, requires_grad=True)", "leaf tensor"),
])
def test_nothing_to_draw_is_a_usage_error_naming_the_cause(mlp, cell, match):
    if "no input" in match:
        mlp.run_cell("del model")
    with pytest.raises(UsageError, match=match):
        magic(mlp, "", cell)


def test_mixed_outputs_skip_no_grad_tensor_with_note(mlp):
    r = magic(mlp, "--format dot", "with torch.no_grad():\n    frozen = model(x)\n(model(x).sum(), frozen)")
    assert r.graph.labels(G.OUTPUT) == ["[0]"]
    assert any("`[1]` has no grad_fn" in n for n in r.notes)


def test_user_error_propagates_with_real_source_line(ip):
    cell = "a = 1\nb = undefined_name + 1\nb"
    with pytest.raises(NameError, match="name 'undefined_name' is not defined") as info:
        magic(ip, "", cell)
    text = "".join(traceback.format_exception(info.value))
    assert "b = undefined_name + 1" in text
    assert "line 3" in text  # line 1 is the %%autograd_graph line
    assert ip.user_ns["a"] == 1
    with capture_output() as cap:
        res = ip.run_cell("%%autograd_graph\nq = 2\nraise ValueError('boom from the cell')\n")
    assert isinstance(res.error_in_exec, ValueError)
    assert "raise ValueError('boom from the cell')" in cap.stdout
    assert "graph.py" not in cap.stdout and "magics.py" not in cap.stdout  # our frames are hidden


def test_cell_events_fire_once(ip):
    seen = []
    cb = lambda *a: seen.append(1)  # noqa: E731
    ip.events.register("pre_run_cell", cb)
    try:
        ip.run_cell("%%autograd_graph --format dot\nimport torch\nv = torch.randn(2, requires_grad=True)\n"
                    "(v * 2).sum()")
    finally:
        ip.events.unregister("pre_run_cell", cb)
    assert seen == [1]
    assert "v" in ip.user_ns


def test_deterministic_dot_across_runs(mlp):
    cell = "torch.manual_seed(1)\nloss = model(torch.randn(2, 4)).tanh().sum()\nloss"
    a = magic(mlp, "--show-saved --show-attrs --format dot", cell)
    b = magic(mlp, "--show-saved --show-attrs --format dot", cell)
    assert a.dot == b.dot
    assert "0x" not in a.dot


@needs_dot
def test_missing_dot_gives_install_message_outline_and_source(mlp, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    r = magic(mlp, "", "loss = model(x).sum()\nloss")
    assert r.problem == "dot missing" and r.image is None
    html = r._repr_html_()
    for word in ("apt-get install graphviz", "dnf install graphviz", "brew install graphviz",
                 "conda install -c conda-forge graphviz", "winget install graphviz"):
        assert word in html
    assert "AddmmBackward0" in R.outline(r.drawn) and "digraph autograd" in html
    assert "AddmmBackward0" in repr(r)
    assert mlp.user_ns["loss"].grad_fn is not None


@needs_dot
def test_lstmcell_200_steps_renders_within_time_limit(ip):
    ip.run_cell("import torch\ncell = torch.nn.LSTMCell(8, 16)\nxs = torch.randn(200, 2, 8)")
    limit = ip.find_cell_magic("autograd_graph").__self__.settings.graph_dot_timeout_s
    t0 = time.perf_counter()
    r = magic(ip, "", "h = c = torch.zeros(2, 16)\nfor t in range(200):\n    h, c = cell(xs[t], (h, c))\nh.sum()")
    elapsed = time.perf_counter() - t0
    assert r.image is not None and not r.problem
    assert elapsed < limit
    assert r.graph.op_counts()["AddmmBackward0"] == 400
    assert any("node budget" in n for n in r.notes)
    assert len(r.drawn.nodes) <= 2500


@needs_dot
def test_dot_timeout_falls_back_without_hanging(ip, monkeypatch):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")

    def slow(source, fmt="svg", timeout_s=20.0):
        raise R.DotTimeout(f"dot did not finish within {timeout_s:g} s")

    monkeypatch.setattr(R, "run_dot", slow)
    r = magic(ip, "--timeout 0.5", "(w.sin() * 2).sum()")
    assert r.problem == "dot timeout" and "digraph" in r._repr_html_()
    assert any("0.5 s" in n for n in r.notes)


@needs_dot
def test_formats_and_save(mlp, tmp_path):
    r = magic(mlp, f"--format png --save {tmp_path / 'g.pdf'}", "model(x).sum()")
    assert r.image.startswith(b"\x89PNG") and "data:image/png;base64" in r._repr_html_()
    assert (tmp_path / "g.pdf").read_bytes().startswith(b"%PDF")
    r.save(str(tmp_path / "g.dot"))
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    with pytest.raises(UsageError, match=r"--format: invalid choice: 'jpg' \(choose from 'svg', 'png', 'pdf', 'dot'\)"):
        magic(mlp, "--format jpg", "model(x).sum()")


def test_torchviz_parity_on_small_graphs():
    torchviz = pytest.importorskip("torchviz")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    x = torch.randn(2, 4, requires_grad=True)
    cases = [model(x).sum(), (x * x).exp().mean(), torch.cat([x.sin(), x.cos()], 1)[0].sum(),
             torch.nn.functional.softmax(model(x), 0).prod()]
    for y in cases:
        ours = G.walk([("", y)], shared_params=True).label_edges(kinds=(G.GRAD, G.TO_OUTPUT))
        dot = torchviz.make_dot(y)
        labels, theirs = {}, Counter()
        for line in dot.body:
            line = line.strip()
            if "->" in line:
                src, rest = line.split(" -> ")
                theirs[(src, rest.split()[0])] += 1
            elif "[label=" in line:
                nid, lab = line.split(" [label=", 1)
                text = lab.split('"')[1] if lab.startswith('"') else lab.split("]")[0].split()[0]
                labels[nid] = "<tensor>" if "\n" in text else text  # tensors: "name\n (shape)"
        mapped = Counter()
        for (s, d), c in theirs.items():
            ls, ld = labels[s], labels[d]
            if ls == "<tensor>":  # torchviz leaf tensor -> AccumulateGrad edge: compared separately
                continue
            mapped[(ls, "output" if ld == "<tensor>" else ld)] += c
        assert sum(mapped.values()) > 3
        assert ours == mapped


def test_saved_view_shows_its_own_bytes_and_the_storage_it_keeps(ip):
    """A batch sliced from a big tensor: the op saves 3 KiB of view but keeps the 350 KiB storage alive."""
    ip.run_cell("import torch\nlin = torch.nn.Linear(64, 8)\nX = torch.randn(1400, 64)\nxb = X[1380:]")
    r = magic(ip, "--format dot", "lin(xb).sum()")
    addmm = next(n for n in r.nodes if n.label == "AddmmBackward0")
    assert addmm.saved_view_bytes == 20 * 64 * 4 and addmm.saved_bytes == 1400 * 64 * 4
    assert "saves 5.0 KiB of views" in r.dot and "keeps 350.0 KiB of storage alive" in r.dot
