"""Tier 1: the iterative walk of grad_fn (structure, saved bytes, per-use leaves, freed saved tensors,
no references kept, torchviz parity) and guard_deep_free; deep chains are in test_deep.py."""

from __future__ import annotations

import gc
import weakref
from collections import Counter

import pytest
import torch

from cudamagic.graph import dot, draw
from cudamagic.graph import model as M
from cudamagic.graph import walk as G

from .common import magic

def test_walk_small_graph_structure():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    y = (x * w).sum()
    gr = G.walk([("", y)], tensor_names={id(x): "x", id(w): "w"})
    assert gr.labels(M.BACKWARD) == ["SumBackward0", "MulBackward0"]
    assert sorted(gr.labels(M.LEAF)) == ["w", "x"]
    assert gr.label_edges() == Counter({("SumBackward0", "output"): 1, ("MulBackward0", "SumBackward0"): 1,
                                        ("AccumulateGrad", "MulBackward0"): 2, ("x", "AccumulateGrad"): 1,
                                        ("w", "AccumulateGrad"): 1})
    mul = gr.of_kind(M.BACKWARD)[1]
    assert mul.saved_bytes == 0  # x and w are leaves: parameters are not counted
    assert [n.id for n in gr.nodes] == [f"n{i}" for i in range(len(gr.nodes))]


def test_saved_bytes_counts_activations_once():
    x = torch.randn(1000, requires_grad=True)
    h = x.exp()          # ExpBackward0 saves its result (4000 B)
    y = (h * h).sum()    # MulBackward0 saves h twice: one storage
    gr = G.walk([("", y)])
    by = {n.label: n for n in gr.of_kind(M.BACKWARD)}
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
    assert len(shared.of_kind(M.LEAF)) == 1
    uses = per_use.of_kind(M.LEAF)
    assert len(uses) == 5 and {n.use for n in uses} == {(k, 5) for k in range(1, 6)}
    assert all(n.label == "w" for n in uses)
    # same backward structure either way
    assert Counter(shared.labels(M.BACKWARD)) == Counter(per_use.labels(M.BACKWARD))
    assert len(G.walk([("", h)], shared_params=True).edges) < len(per_use.edges)


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
    assert "ScaleBackward" in gr.labels(M.BACKWARD)
    saved = gr.labels(M.SAVED)
    assert saved == ["saved_tensors[0]", "saved_tensors[1] = None"]
    y.backward()
    after = G.walk([("", y)])  # F11: no "backward through the graph a second time"
    assert after.labels(M.SAVED) == ["saved_tensors (freed by backward)"]
    assert any(n.freed for n in after.of_kind(M.BACKWARD))


def test_builtin_saved_tensors_after_backward_are_marked_freed():
    x = torch.randn(3, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    gr = G.walk([("y", y)], show_saved=True)
    saved = gr.of_kind(M.SAVED)
    assert {n.label for n in saved} == {"self (freed by backward)", "other (freed by backward)"}
    assert all(n.freed for n in saved)
    assert "freed by backward" in dot.to_dot(gr)


def test_no_strong_reference_to_user_tensors_survives():
    x = torch.randn(3, requires_grad=True)
    y = (x.exp() * 2).sum()
    refs = [weakref.ref(x), weakref.ref(y)]
    gr = G.walk([("y", y)], tensor_names={id(x): "x"}, show_saved=True, show_attrs=True)
    result = draw.draw(gr, fmt="dot")
    del x, y
    gc.collect()
    assert all(r() is None for r in refs)
    assert result.nodes  # the model is still there


def test_torchviz_parity_on_small_graphs():
    torchviz = pytest.importorskip("torchviz")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    x = torch.randn(2, 4, requires_grad=True)
    cases = [model(x).sum(), (x * x).exp().mean(), torch.cat([x.sin(), x.cos()], 1)[0].sum(),
             torch.nn.functional.softmax(model(x), 0).prod()]
    for y in cases:
        ours = G.walk([("", y)], shared_params=True).label_edges(kinds=(M.GRAD, M.TO_OUTPUT))
        tv_graph = torchviz.make_dot(y)
        labels, theirs = {}, Counter()
        for line in tv_graph.body:
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


class _FakeResource:
    RLIMIT_STACK = 3
    RLIM_INFINITY = -1

    def __init__(self, soft, hard):
        self.limits = (soft, hard)

    def getrlimit(self, which):
        return self.limits

    def setrlimit(self, which, limits):
        self.limits = limits


def test_guard_deep_free_raises_the_stack_limit_or_warns(monkeypatch):
    import sys
    import threading

    from cudamagic.core import platform

    mib = 1024 * 1024

    def guard(n, res, main=True):
        monkeypatch.setitem(sys.modules, "resource", res)  # platform.raise_stack_limit imports it
        if main:
            return G.guard_deep_free(n)
        out = []
        t = threading.Thread(target=lambda: out.append(G.guard_deep_free(n)))
        t.start()
        t.join()
        return out[0]

    assert guard(5_000, _FakeResource(8 * mib, -1)) == ""
    res = _FakeResource(8 * mib, -1)
    assert guard(100_000, res) == ""
    assert res.limits[0] >= 8 * mib + 100_000 * 400 and res.limits[1] == -1
    res = _FakeResource(8 * mib, 16 * mib)  # a hard limit that does not allow enough
    assert "overflow the C stack" in guard(100_000, res)
    assert res.limits == (16 * mib, 16 * mib)
    assert "overflow" in guard(10_000_000, _FakeResource(8 * mib, -1))
    assert "not on the main thread" in guard(100_000, _FakeResource(8 * mib, -1), main=False)
    assert guard(100_000, _FakeResource(-1, -1)) == ""
    # Windows: the main stack (2 MB) is fixed, so the guard warns earlier and says why
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    monkeypatch.delitem(sys.modules, "resource")
    assert G.guard_deep_free(1_000) == ""
    note = G.guard_deep_free(5_000)
    assert "5000 autograd nodes" in note and "cannot be raised" in note and "2,000 chained ops" in note