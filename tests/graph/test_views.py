"""Collapsed and folded views: module boxes, repeated blocks, numbers that add up."""

from __future__ import annotations

from cudamagic.graph import dot, views
from cudamagic.graph import model as M

from .common import LSTM_CELL, magic


def test_collapse_and_fold_repeated_blocks(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, "
        "dropout=0.0, "
        "batch_first=True), 4)\nsrc = torch.randn(2, 5, 16, requires_grad=True)"
    )
    r = magic(ip, "--depth 1 --format dot", "enc(src).sum()")
    boxes = r.drawn.of_kind(M.MODULE)
    assert [(b.label, b.count) for b in boxes] == [("TransformerEncoderLayer x 4", 4)]
    assert dict(boxes[0].attrs)["calls"] == "enc.layers.0 … enc.layers.3"
    assert boxes[0].ops == sum(
        1
        for n in r.graph.nodes
        if n.kind == M.BACKWARD and n.call is not None and r.graph.calls[n.call].depth >= 2
    )
    unfolded = magic(ip, "--depth 1 --no-fold --format dot", "enc(src).sum()")
    assert [b.label for b in unfolded.drawn.of_kind(M.MODULE)] == [
        f"enc.layers.{i}" for i in range(4)
    ]
    grouped = magic(ip, "--group --format dot", "enc(src).sum()")
    assert (
        "subgraph cluster_c0" in grouped.dot and 'label="enc (TransformerEncoder)"' in grouped.dot
    )


def test_folded_box_counts_shared_storages_once(lstm):
    r = magic(lstm, "--depth 0 --format dot --shared-params", LSTM_CELL)
    boxes = r.drawn.of_kind(M.MODULE)
    assert len(boxes) == 1 and boxes[0].count == 30
    # every step saves a view of xs (the whole 3.75 KiB storage): the sum over nodes was 6x the
    # total
    assert boxes[0].saved_bytes <= r.graph.saved_bytes_total
    assert boxes[0].saved_bytes > 0.9 * r.graph.saved_bytes_total
    assert (
        dot.node_text(boxes[0]).startswith("cell (LSTMCell) x 30\n") and "cell … cell" not in r.dot
    )


def test_collapsed_caption_counts_every_autograd_node(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)\n"
        "enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)\n"
        "src = torch.randn(2, 5, 16)"
    )
    # two boxes (folded: one, x 2)
    r = magic(ip, "--depth 1 --no-fold --format dot", "enc(src).sum()")
    boxes = r.drawn.of_kind(M.MODULE)
    assert len(boxes) == 2
    assert sum(b.saved_bytes for b in boxes) <= r.graph.saved_bytes_total
    total = sum(r.graph.op_counts().values())
    # the standalone file's caption
    assert f'label="autograd graph: {total} autograd nodes (' in r.dot
    assert "2 module boxes" in r.dot and "1 autograd nodes" not in r.dot


def test_twelve_layer_encoder_folds_to_x12_with_or_without_an_input_requiring_grad(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, "
        "dropout=0.0, "
        "batch_first=True), 12, enable_nested_tensor=False)\n"
        "plain = torch.randn(2, 5, 16)\nwith_grad = torch.randn(2, 5, 16, requires_grad=True)"
    )
    for src in ("plain", "with_grad"):
        r = magic(ip, "--depth 1 --format dot", f"enc({src}).sum()")
        boxes = r.drawn.of_kind(M.MODULE)
        assert [(b.label, b.count) for b in boxes] == [("TransformerEncoderLayer x 12", 12)], src
        assert dict(boxes[0].attrs)["calls"] == "enc.layers.0 … enc.layers.11"
        assert boxes[0].ops == sum(
            1
            for n in r.graph.nodes
            if n.kind == M.BACKWARD and n.call is not None and r.graph.calls[n.call].depth >= 2
        )


def test_different_first_block_is_not_folded_in(ip):
    # a Linear(16, 16) before three Linear(16, 16)+ReLU blocks: other type, stays its own box
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "blk = lambda: torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())\n"
        "net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(16, 16)), blk(), blk(), "
        "blk())\n"
        "x = torch.randn(2, 16)"
    )
    r = magic(ip, "--depth 1 --format dot", "net(x).sum()")
    assert sorted(b.label for b in r.drawn.of_kind(M.MODULE)) == ["Sequential x 3", "net.0"]


def test_fold_runs_folds_each_linear_chain_with_its_saved_nodes():
    # n6 -> n5 -> n4 -> n3 -> n2 -> n1 -> n0 (output); n7 also feeds n3 (twice), so the chain breaks
    # before n3; n1's saved tensor is a node of its own (an op with one can only end a run: its
    # edge to it is a second way out); "zz" is an edge end no node has
    def op(i, storage):
        label = "SinBackward0" if i % 2 else "MulBackward0"
        return M.GraphNode(f"n{i}", M.BACKWARD, label, saved_bytes=8, storages=((storage, 8),))

    nodes = [M.GraphNode("n0", M.OUTPUT, "y")] + [op(i, i) for i in (1, 3, 4, 5, 6, 7)]
    nodes.insert(2, op(2, 1))  # n2 saves n1's storage: counted once in their run
    nodes.append(M.GraphNode("n1s0", M.SAVED, "self", saved_bytes=8))
    links = [("n1", "n0", M.TO_OUTPUT)] + [(f"n{i + 1}", f"n{i}", M.GRAD) for i in range(1, 6)]
    links += [("n7", "n3", M.GRAD), ("n7", "n3", M.GRAD), ("n1", "n1s0", M.SAVED_EDGE)]
    links += [("zz", "n7", M.GRAD)]
    graph = M.AutogradGraph(nodes, [M.GraphEdge(*e) for e in links])

    runs = views.fold_runs(graph)

    assert [n.id for n in runs.nodes] == ["n0", "n7", "r3", "r6"]
    r3, r6 = runs.nodes[2:]
    assert (r3.kind, r3.label, r3.count, r3.ops) == (M.RUN, "chain of 3 ops", 3, 3)
    assert r3.attrs == (("MulBackward0", "1"), ("SinBackward0", "2"))
    assert (r3.saved_bytes, r3.storages) == (16, ((1, 8), (3, 8)))
    assert r6.attrs == (("MulBackward0", "2"), ("SinBackward0", "1")) and r6.saved_bytes == 24
    assert runs.edges == [
        ("r3", "n0", M.TO_OUTPUT),
        ("r6", "r3", M.GRAD),
        ("n7", "r3", M.GRAD),
        ("zz", "n7", M.GRAD),
    ]
    assert runs.view == "chains folded" and runs.notes == ["2 chain(s) of ops folded (6 ops)."]
    assert views.fold_runs(graph, min_run=4) is graph  # no chain of 4


def test_distinct_saved_bytes_counts_each_storage_once_sorted_by_id():
    def box(*storages):
        return M.GraphNode("b", M.MODULE, "b", storages=storages)

    in_order = [box((0, 8)), box((1, 16), (2, 4)), box((5, 1))]
    assert M.distinct_saved_bytes(in_order) == (29, ((0, 8), (1, 16), (2, 4), (5, 1)))
    shuffled = [box((5, 1)), box((1, 16), (0, 8)), box((1, 16), (2, 4))]
    assert M.distinct_saved_bytes(shuffled) == (29, ((0, 8), (1, 16), (2, 4), (5, 1)))
    assert M.distinct_saved_bytes([box(), box()]) == (0, ())
