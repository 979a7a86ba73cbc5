"""Tier 1: the iterative walk of grad_fn.

Tier 1: the iterative walk of grad_fn (structure, saved bytes, per-use leaves, freed saved tensors,
no references kept, torchviz parity) and guard_deep_free; deep chains are in test_deep.py.
"""

from __future__ import annotations

import gc
import sys
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
    assert gr.label_edges() == Counter(
        {
            ("SumBackward0", "output"): 1,
            ("MulBackward0", "SumBackward0"): 1,
            ("AccumulateGrad", "MulBackward0"): 2,
            ("x", "AccumulateGrad"): 1,
            ("w", "AccumulateGrad"): 1,
        }
    )
    mul = gr.of_kind(M.BACKWARD)[1]
    assert mul.saved_bytes == 0  # x and w are leaves: parameters are not counted
    assert [n.id for n in gr.nodes] == [f"n{i}" for i in range(len(gr.nodes))]


def test_saved_bytes_counts_activations_once():
    x = torch.randn(1000, requires_grad=True)
    h = x.exp()  # ExpBackward0 saves its result (4000 B)
    y = (h * h).sum()  # MulBackward0 saves h twice: one storage
    gr = G.walk([("", y)])
    by = {n.label: n for n in gr.of_kind(M.BACKWARD)}
    assert by["MulBackward0"].saved_bytes == 4000
    assert by["ExpBackward0"].saved_bytes == 4000
    assert gr.saved_bytes_total == 4000


def test_storage_ids_follow_the_slots_in_a_chain_and_in_a_branching_graph():
    # storages are numbered in slot order (node ids), whether the walk visits the nodes in that
    # order (a chain) or not (the sum of two chains: the second input is visited first)
    x = torch.randn(10, requires_grad=True)
    h = x.exp()  # ExpBackward0 saves its result h; SinBackward0 saves h too: one storage
    w = h.sin().cos()  # CosBackward0 saves h.sin()
    chain = G.walk([("w", w)])
    assert [n.label for n in chain.nodes[1:4]] == ["CosBackward0", "SinBackward0", "ExpBackward0"]
    assert [n.storages for n in chain.nodes[1:4]] == [((0, 40),), ((1, 40),), ((1, 40),)]
    assert [n.saved_bytes for n in chain.nodes[1:4]] == [40, 40, 40]
    assert chain.saved_bytes_total == 80
    both = G.walk([("y", w + h.tanh())])  # TanhBackward0 (its result) is slot 3, visited first
    by = {n.label: n for n in both.of_kind(M.BACKWARD)}
    assert [n.label for n in both.nodes[1:4]] == ["AddBackward0", "CosBackward0", "TanhBackward0"]
    assert [by[op].storages for op in ("CosBackward0", "TanhBackward0", "SinBackward0")] == [
        ((0, 40),),
        ((1, 40),),
        ((2, 40),),
    ]
    assert by["ExpBackward0"].storages == ((2, 40),) and both.saved_bytes_total == 120


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
    after = G.walk([("", y)])  # no "backward through the graph a second time"
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
    assert [(n.label, n.freed) for n in gr.of_kind(M.BACKWARD)] == [
        ("SumBackward0", False),
        ("MulBackward0", True),
    ]
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
    cases = [
        model(x).sum(),
        (x * x).exp().mean(),
        torch.cat([x.sin(), x.cos()], 1)[0].sum(),
        torch.nn.functional.softmax(model(x), 0).prod(),
    ]
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
    """A batch sliced from a big tensor.

    The op saves 3 KiB of view but keeps the 350 KiB storage alive.
    """
    ip.run_cell(
        "import torch\nlin = torch.nn.Linear(64, 8)\nX = torch.randn(1400, 64)\nxb = X[1380:]"
    )
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
    assert "5000 autograd nodes" in note and "cannot be raised" in note
    assert "Keep graphs you draw under about 2,000 chained ops, or restart the kernel" in note


def test_walk_records_each_node_and_edge_with_its_module_call():
    """Every field the views and renderers read.

    Kinds, labels, tensor metadata, the innermost module call (the Net's own op is in call 0, the op
    after the call in none), saved bytes (torch's storage sizes).
    """
    from cudamagic.graph.capture import ModuleCallRecorder

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(
                x
            ).relu()  # AddmmBackward0 and TBackward0 in net.lin, ReluBackward0 in net itself

    net, x = Net(), torch.randn(4, 3)
    rec = ModuleCallRecorder()
    with rec:
        out = net(x)
    y, v = out.sum(), out[1]
    calls, starts, ends = rec.resolve({id(net): "net", id(net.lin): "net.lin"})
    assert [c.path for c in calls] == ["net", "net.lin"]
    names = {id(net.lin.weight): "net.lin.weight", id(net.lin.bias): "net.lin.bias"}
    gr = G.walk(
        [("y", y), ("", v)],
        tensor_names=names,
        calls=calls,
        call_starts=starts,
        call_ends=ends,
        shared_params=True,
    )
    got = [
        (n.id, n.kind, n.label, n.shape, n.dtype, n.device, n.call, n.saved_bytes) for n in gr.nodes
    ]
    assert got == [
        ("n0", M.OUTPUT, "y", (), "float32", "cpu", None, 0),
        ("n1", M.BACKWARD, "SumBackward0", None, "", "", None, 0),
        ("n2", M.BACKWARD, "ReluBackward0", None, "", "", 0, out.untyped_storage().nbytes()),
        ("n3", M.BACKWARD, "AddmmBackward0", None, "", "", 1, x.untyped_storage().nbytes()),
        ("n4", M.ACCUMULATE, "AccumulateGrad", None, "", "", 1, 0),
        ("n5", M.BACKWARD, "TBackward0", None, "", "", 1, 0),
        ("n6", M.ACCUMULATE, "AccumulateGrad", None, "", "", 1, 0),
        ("n7", M.PARAM, "net.lin.weight", (2, 3), "float32", "cpu", 1, 0),
        ("n8", M.PARAM, "net.lin.bias", (2,), "float32", "cpu", 1, 0),
        ("n9", M.OUTPUT, "output", (2,), "float32", "cpu", None, 0),
        ("n10", M.BACKWARD, "SelectBackward0", None, "", "", None, 0),
        ("n11", M.BASE, "output (base)", (4, 2), "float32", "cpu", None, 0),
    ]
    assert [(e.src, e.dst, e.kind) for e in gr.edges] == [
        ("n1", "n0", M.TO_OUTPUT),
        ("n2", "n1", M.GRAD),
        ("n3", "n2", M.GRAD),
        ("n4", "n3", M.GRAD),
        ("n5", "n3", M.GRAD),
        ("n6", "n5", M.GRAD),
        ("n7", "n6", M.VARIABLE),
        ("n8", "n4", M.VARIABLE),
        ("n10", "n9", M.TO_OUTPUT),
        ("n11", "n9", M.VIEW),
        ("n2", "n11", M.TO_OUTPUT),
        ("n2", "n10", M.GRAD),
    ]
    assert [(s.name, s.nbytes) for s in gr.node("n2").saved] == [("result", 32)]
    assert gr.saved_bytes_total == 32 + 48 and gr.notes == [] and gr.view == "full"


def test_output_and_leaf_labels_dtypes_and_names():
    a = torch.randn(5, dtype=torch.float64, requires_grad=True)  # unnamed leaf
    b = torch.randn(5, requires_grad=True)  # a name without a dot: a leaf, not a param
    out = (a * 2).sum() + b.sum()
    gr = G.walk([("", out)], tensor_names={id(out): "total", id(b): "b"})
    assert gr.labels(M.OUTPUT) == ["total"]
    assert sorted(gr.labels(M.LEAF)) == ["(leaf)", "b"] and gr.labels(M.PARAM) == []
    assert {n.label: n.dtype for n in gr.of_kind(M.LEAF)} == {"(leaf)": "float64", "b": "float32"}
    assert gr.of_kind(M.OUTPUT)[0].dtype == "float64" and gr.of_kind(M.OUTPUT)[0].shape == ()
    assert G.walk([("", out)]).labels(M.OUTPUT) == ["output"]


def test_module_calls_bisect_to_the_innermost_enclosing_call():
    """_call_of on hand-made intervals: nested, siblings, gaps, and an index past every call."""
    calls = [
        M.ModuleCall(0, "a", "A", None, 1),
        M.ModuleCall(1, "a.b", "B", 0, 2),
        M.ModuleCall(2, "a.c", "C", 0, 2),
        M.ModuleCall(3, "d", "D", None, 1),
    ]
    starts, ends = [0, 2, 5, 10], [9, 4, 7, 12]

    class Fn:
        def __init__(self, seq):
            self.seq = seq

        def _sequence_nr(self):
            return self.seq

    where = {seq: G._call_of(Fn(seq), calls, starts, ends) for seq in range(14)}
    assert where == {
        0: 0,
        1: 0,
        2: 1,
        3: 1,
        4: 0,
        5: 2,
        6: 2,
        7: 0,
        8: 0,
        9: None,
        10: 3,
        11: 3,
        12: None,
        13: None,
    }
    assert G._call_of(Fn(3), [], [], []) is None


def test_walk_pauses_the_cyclic_gc_and_restores_it(monkeypatch):
    seen = []
    real = G._walk

    def spy(outputs, **kw):
        seen.append(gc.isenabled())
        return real(outputs, **kw)

    monkeypatch.setattr(G, "_walk", spy)
    y = (torch.randn(3, requires_grad=True) * 2).sum()
    was = gc.isenabled()
    try:
        gc.enable()
        G.walk([("y", y)])
        assert gc.isenabled()
        gc.disable()
        G.walk([("y", y)])
        assert not gc.isenabled()  # a user who turned it off keeps it off
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False, False]


def test_walk_asks_the_deep_free_guard_with_the_autograd_node_count(monkeypatch):
    asked = []
    monkeypatch.setattr(G, "guard_deep_free", lambda n: asked.append(n) or "the guard's note")
    x = torch.randn(3, requires_grad=True)
    gr = G.walk([("y", (x * x.exp()).sum())], notes=["given"], shared_params=True)
    assert asked == [
        4
    ]  # SumBackward0, MulBackward0, ExpBackward0, AccumulateGrad; not the 2 tensors
    assert gr.notes == ["given", "the guard's note"]


@pytest.mark.parametrize(
    "value, shown",
    [
        ("x" * 50, "x" * 50),
        ("x" * 51, "x" * 49 + "…"),
        ("<Gen object at 0x7f3a2b4c5d60>", "<Gen object at 0x…>"),
        (3, "3"),
    ],
)
def test_saved_attribute_text_is_short_and_has_no_addresses(value, shown):
    assert G._short(value) == shown


def test_saved_attributes_shown_on_request_and_cut_at_50_characters():
    # str of its 16 sizes: exactly 50 characters
    x = torch.randn(*([1] * 15), 100, requires_grad=True)
    z = torch.randn(*([1] * 16), 3, requires_grad=True)  # 17 sizes: 51 characters
    plain = G.walk([("", x.sum(0, keepdim=True).pow(3).sum())])
    assert all(n.attrs == () for n in plain.of_kind(M.BACKWARD))
    gr = G.walk([("", x.sum(0, keepdim=True).pow(3).sum() + z.sum())], show_attrs=True)
    attrs = [dict(n.attrs) for n in gr.of_kind(M.BACKWARD)]
    assert {"exponent": "3"} in attrs
    assert {"dim": "(0,)", "keepdim": "True", "self_sym_sizes": str(tuple(x.shape))} in attrs
    assert {"self_sym_sizes": str(tuple(z.shape))[:49] + "…"} in attrs


def test_guard_deep_free_thresholds_and_the_stack_it_asks_for(monkeypatch):
    mib = 1024 * 1024

    def guard(n, res):
        monkeypatch.setitem(sys.modules, "resource", res)  # platform.raise_stack_limit reads it
        return G.guard_deep_free(n)

    res = _FakeResource(8 * mib, -1)
    # at the threshold: nothing asked
    assert guard(10_000, res) == "" and res.limits == (
        8 * mib,
        -1,
    )
    assert guard(10_001, res) == "" and res.limits == (8 * mib + 10_001 * 512, -1)
    res = _FakeResource(8 * mib, -1)
    # exactly what it needs
    assert guard(200_000, res) == "" and res.limits == (
        8 * mib + 200_000 * 512,
        -1,
    )
    res = _FakeResource(8 * mib, -1)
    # would need 154 MiB: raised to the 120 MiB cap, and the user is told
    note = guard(300_000, res)
    assert res.limits == (120 * mib, -1)
    assert note.startswith("This graph has 300000 autograd nodes")
    assert "the stack limit can be raised only to 120 MiB" in note
    assert "Keep graphs you draw under about 200,000 chained ops, or restart the kernel" in note
    # a main stack smaller than 8 MiB: fewer nodes already need it (4 MiB / 512 B = 8192)
    res = _FakeResource(4 * mib, 4 * mib)
    assert guard(8_192, res) == ""
    note = guard(8_193, res)
    assert "8193 autograd nodes" in note and "raised only to 4 MiB" in note


def test_graph_model_lookups_by_id_kind_and_edge():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    y = (x * w).sum()
    gr = G.walk(
        [("y", y), ("v", y.view(1))],
        tensor_names={id(x): "x", id(w): "w"},
        shared_params=True,
        show_saved=True,
    )
    assert gr.node("n2").label == "MulBackward0" and gr.node("n2s1").kind == M.SAVED
    with pytest.raises(KeyError, match="n99"):
        gr.node("n99")
    assert gr.labels() == [
        "y",
        "SumBackward0",
        "MulBackward0",
        "AccumulateGrad",
        "AccumulateGrad",
        "w",
        "x",
        "v",
        "ViewBackward0",
        "v (base)",
        "other",
        "self",
    ]
    assert gr.labels(M.OUTPUT, M.BASE) == ["y", "v", "v (base)"]
    assert [n.id for n in gr.of_kind(M.LEAF, M.SAVED)] == ["n5", "n6", "n2s0", "n2s1"]
    assert gr.of_kind() == []
    assert gr.inputs_of("n2") == ["n3", "n4"]
    assert gr.inputs_of("n7") == ["n8", "n9"] and gr.inputs_of("n7", M.VIEW) == ["n9"]
    assert gr.inputs_of("n7", M.TO_OUTPUT) == ["n8"] and gr.inputs_of("n0", M.GRAD) == []
    # structure without ids: grad, variable and output edges only (not view or saved edges)
    assert gr.label_edges() == Counter(
        {
            ("SumBackward0", "y"): 1,
            ("MulBackward0", "SumBackward0"): 1,
            ("AccumulateGrad", "MulBackward0"): 2,
            ("w", "AccumulateGrad"): 1,
            ("x", "AccumulateGrad"): 1,
            ("ViewBackward0", "v"): 1,
            ("SumBackward0", "v (base)"): 1,
            ("SumBackward0", "ViewBackward0"): 1,
        }
    )
    assert gr.label_edges(kinds=(M.VIEW, M.SAVED_EDGE)) == Counter(
        {("v (base)", "v"): 1, ("MulBackward0", "other"): 1, ("MulBackward0", "self"): 1}
    )
    assert gr.op_counts() == Counter(
        {"SumBackward0": 1, "MulBackward0": 1, "AccumulateGrad": 2, "ViewBackward0": 1}
    )


def test_op_counts_add_the_ops_folded_into_runs_and_calls_have_titles():
    nodes = [
        M.GraphNode("n1", M.BACKWARD, "SinBackward0"),
        M.GraphNode(
            "r0", M.RUN, "SinBackward0 x 7", attrs=(("SinBackward0", "7"), ("CosBackward0", "2"))
        ),
        M.GraphNode("m2", M.MODULE, "enc (Linear)"),
        M.GraphNode("n3", M.ACCUMULATE, "AccumulateGrad"),
    ]
    gr = M.AutogradGraph(nodes, [])
    assert gr.op_counts() == Counter({"SinBackward0": 8, "CosBackward0": 2, "AccumulateGrad": 1})
    assert M.ModuleCall(0, "model.enc", "Linear", None, 1).title == "model.enc (Linear)"
    assert M.ModuleCall(1, "", "Linear", 0, 2).title == "Linear"


def test_custom_function_whose_ctx_has_a_variable_attribute_is_not_a_leaf():
    class Keep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.variable = a  # a user's own attribute, as AccumulateGrad.variable is named
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = torch.randn(3, requires_grad=True)
    gr = G.walk([("y", Keep.apply(x * 1).sum())], tensor_names={id(x): "x"}, shared_params=True)
    assert gr.labels(M.BACKWARD) == ["SumBackward0", "KeepBackward", "MulBackward0"]
    assert gr.labels(M.LEAF) == ["x"] and gr.labels(M.ACCUMULATE) == ["AccumulateGrad"]


def test_a_chain_is_read_once_per_op_and_its_equal_saved_entries_are_one_object(monkeypatch):
    """Each op of a chain has its storages read once (the walk is linear in the ops).

    Equal saved entries are shared, so a 100k-op chain holds a few entries, not 100k.
    """
    reads = []
    real = torch.Tensor.untyped_storage
    monkeypatch.setattr(torch.Tensor, "untyped_storage", lambda t: reads.append(t.shape) or real(t))

    def walked(n):
        reads.clear()
        x = torch.randn(5, requires_grad=True)
        z = x
        for _ in range(n):
            z = z.sin()
        return G.walk([("z", z.sum())]), len(reads)

    (_, small_reads), (big, big_reads) = walked(100), walked(1000)
    # each SinBackward0's saved input, and the leaf once (its storage is not counted)
    assert (small_reads, big_reads) == (101, 1001)
    sins = [n for n in big.nodes if n.label == "SinBackward0"]
    assert len(sins) == 1000 and len({id(n.saved) for n in sins}) == 1
    assert sins[0].saved == (M.SavedEntry("self", nbytes=20),)
    # yet each op keeps its own storage (20 bytes), but the first, which saves the leaf
    assert sins[-1].storages == () and len({n.storages for n in sins[:-1]}) == 999
    assert big.saved_bytes_total == 999 * 20


def _saved_facts(graph):
    return [
        (n.id, n.label, n.saved, n.saved_bytes, n.storages, n.saved_view_bytes, n.freed)
        for n in graph.nodes
    ]


@pytest.mark.parametrize("after_backward", [False, True])
def test_the_plain_fast_read_and_the_general_read_record_the_same_saved_tensors(after_backward):
    """Plain nodes are read inline; with ``show_attrs`` every node takes the general read."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten()
    )
    x = torch.randn(2, 3, 8, 8)
    big = torch.randn(64, 10, requires_grad=True)
    # a saved view (sin keeps the slice: all of big * 2), a mul whose self is not saved
    # (a scalar other), a saved output (exp), a cat
    y = (
        model(x).sum()
        + ((big * 2)[:4].sin() * 1.5).exp().sum()
        + torch.cat([big[4:6], big[6:8]]).pow(2).sum()
    )
    if after_backward:
        y.backward()
    fast = G.walk([("y", y)])
    general = G.walk([("y", y)], show_attrs=True)
    assert _saved_facts(fast) == _saved_facts(general)
    assert fast.saved_bytes_total == general.saved_bytes_total
    assert any(n.freed for n in fast.nodes) is after_backward
    sin = next(n for n in fast.nodes if n.label == "SinBackward0")
    if not after_backward:
        assert (sin.saved_view_bytes, sin.saved_bytes) == (4 * 10 * 4, 64 * 10 * 4)
