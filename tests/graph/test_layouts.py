"""Saved bytes for every layout autograd can save.

A size that cannot be known is marked, never guessed.
"""

from __future__ import annotations

import warnings

import torch

from cudamagic.graph import model as M
from cudamagic.graph import walk as G

from .common import opaque


class Keep(torch.autograd.Function):
    """Saves the tensor it is given (any layout) next to its input."""

    @staticmethod
    def forward(ctx, a, kept):
        ctx.save_for_backward(kept)
        return a * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def _saved_by_keep(kept):
    a = torch.randn(3, requires_grad=True)
    y = Keep.apply(a, kept).sum()
    gr = G.walk([("", y)])
    node = next(n for n in gr.of_kind(M.BACKWARD) if n.label == "KeepBackward")
    return gr, node


def _bytes(t):
    parts, why = G.storage_parts(t)
    assert why == ""
    return sum(p[1] for p in parts)


def test_strided_view_keeps_its_whole_storage():
    base = torch.randn(100)
    _, node = _saved_by_keep(base[10:20])
    assert node.saved_bytes == 400 and node.saved_view_bytes == 40


def test_sparse_coo_and_csr_count_indices_and_values():
    dense = torch.zeros(4, 4)
    dense[0, 1], dense[2, 3], dense[3, 0] = 1.0, 2.0, 3.0
    coo = dense.to_sparse()
    assert _bytes(coo) == 2 * 3 * 8 + 3 * 4
    _, node = _saved_by_keep(coo)
    assert node.saved_bytes == 2 * 3 * 8 + 3 * 4 and node.size_unknown == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        csr = dense.to_sparse_csr()
        csc = dense.to_sparse_csc()
    for t, comps in (
        (csr, (csr.crow_indices(), csr.col_indices(), csr.values())),
        (csc, (csc.ccol_indices(), csc.row_indices(), csc.values())),
    ):
        parts, _ = G.storage_parts(t)
        assert sum(p[2] for p in parts) == 5 * 8 + 3 * 8 + 3 * 4  # the tensors themselves
        # whole storages (the index storage may be over-allocated by the conversion)
        assert _bytes(t) == sum(c.untyped_storage().nbytes() for c in comps)


def test_sparse_tensor_saved_by_a_builtin_op():
    s = torch.eye(50).to_sparse()
    w = torch.randn(50, 2, requires_grad=True)
    gr = G.walk([("", torch.sparse.mm(s, w).sum())])
    assert gr.saved_bytes_total == 2 * 50 * 8 + 50 * 4  # the sparse matrix; w is a leaf


def test_nested_tensors_strided_and_jagged():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)])
        nj = torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=torch.jagged)
    assert _bytes(nt) == 6 * 3 * 4
    assert _bytes(nj) == 6 * 3 * 4 + 3 * 8  # values and offsets
    _, node = _saved_by_keep(nj)
    assert node.saved_bytes == 6 * 3 * 4 + 3 * 8


def test_quantized_per_tensor_and_per_channel():
    q = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8)
    assert _bytes(q) == 16
    qc = torch.quantize_per_channel(
        torch.randn(4, 4), torch.rand(4) + 0.1, torch.zeros(4, dtype=torch.long), 0, torch.qint8
    )
    assert _bytes(qc) == 16 + 4 * 8 + 4 * 8  # int8 data, float64 scales, int64 zero points


def test_meta_and_fake_tensors_hold_no_data():
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert G.storage_parts(torch.empty(1000, device="meta")) == ([], "")
    with FakeTensorMode():
        fake = torch.empty(1000)
    assert G.storage_parts(fake) == ([], "")


def test_subclasses_inner_tensors_or_unknown():
    from torch.testing._internal.two_tensor import TwoTensor

    class Plain(torch.Tensor):
        pass

    assert _bytes(torch.randn(10).as_subclass(Plain)) == 40
    assert _bytes(TwoTensor(torch.randn(3), torch.randn(3))) == 24

    parts, why = G.storage_parts(opaque((100,)))
    assert parts is None and "Opaque" in why  # never 400 B, a dense guess


def test_unknown_size_is_marked_in_graph_and_summary(ip):
    """A hook whose packed object holds no tensor.

    The drawn graph says 'unknown size' instead of a guess.
    """
    ip.run_cell(
        "import torch\nw = torch.randn(20, requires_grad=True)\n"
        "hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: object(), lambda p: None)"
    )
    r = ip.run_cell_magic("autograd_graph", "", "with hooks:\n    y = w.exp().sum()\ny")
    assert r.graph.saved_unknown == 1 and r.graph.saved_bytes_total == 0
    assert "1 tensor of unknown size" in r.caption()
    assert "saved of unknown size" in r.dot


def test_block_sparse_bsr_and_bsc_count_their_three_storages():
    dense = torch.zeros(4, 4)
    dense[0, 1], dense[2, 3] = 1.0, 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bsr, bsc = dense.to_sparse_bsr((2, 2)), dense.to_sparse_bsc((2, 2))
    for t, comps in (
        (bsr, (bsr.crow_indices(), bsr.col_indices(), bsr.values())),
        (bsc, (bsc.ccol_indices(), bsc.row_indices(), bsc.values())),
    ):
        parts, why = G.storage_parts(t)
        assert why == "" and len(parts) == 3
        assert [p[1] for p in parts] == [c.untyped_storage().nbytes() for c in comps]
        assert [p[2] for p in parts] == [c.numel() * c.element_size() for c in comps]
        _, node = _saved_by_keep(t)
        assert (
            node.saved_bytes == sum(c.untyped_storage().nbytes() for c in comps)
            and node.size_unknown == 0
        )


def test_nested_subclasses_read_four_levels_deep_then_unknown():
    from torch.testing._internal.two_tensor import TwoTensor

    t = TwoTensor(torch.randn(3), torch.randn(3))
    for _ in range(3):
        t = TwoTensor(t, t)
    parts, why = G.storage_parts(t)  # 4 levels: 16 references to the same two 12-byte storages
    assert why == "" and len(parts) == 16 and {p[1] for p in parts} == {12}
    assert len({p[0] for p in parts}) == 2
    _, node = _saved_by_keep(t)
    assert node.saved_bytes == 24  # each storage once
    parts, why = G.storage_parts(TwoTensor(t, t))
    assert parts is None and why == "Tensor nested too deep"


def test_storage_parts_keys_are_device_and_address_own_bytes_per_view():
    base = torch.randn(100)
    parts, why = G.storage_parts(base[10:20])
    assert why == "" and parts == [(("cpu", base.untyped_storage().data_ptr()), 400, 40)]
    q = torch.quantize_per_tensor(torch.randn(4, 4), 0.1, 0, torch.qint8)
    assert G.storage_parts(q) == ([(("cpu", q.untyped_storage().data_ptr()), 16, 16)], "")


def test_per_channel_scales_counted_inside_subclasses_or_the_size_is_unknown():
    from torch.testing._internal.two_tensor import TwoTensor

    qc = torch.quantize_per_channel(
        torch.randn(4, 4), torch.rand(4) + 0.1, torch.zeros(4, dtype=torch.long), 0, torch.qint8
    )
    t = TwoTensor(qc, qc)
    for _ in range(2):
        t = TwoTensor(t, t)
    # qc three levels down: data, scales and zero points, 8 times over
    parts, why = G.storage_parts(t)
    assert why == "" and len(parts) == 24
    assert (
        sum(b for _, b in {key: nbytes for key, nbytes, _ in parts}.items()) == 16 + 4 * 8 + 4 * 8
    )
    parts, why = G.storage_parts(TwoTensor(t, t))  # four levels down: its scales would be a fifth
    assert parts is None and why == "Tensor nested too deep"


def test_a_non_strided_subclass_without_readable_parts_is_unknown_by_its_layout():
    class SparseOpaque(torch.Tensor):
        @staticmethod
        def __new__(cls, size):
            return torch.Tensor._make_wrapper_subclass(
                cls, size, dtype=torch.float32, layout=torch.sparse_coo
            )

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError  # its indices cannot be read

    assert G.storage_parts(SparseOpaque((4, 4))) == (None, "torch.sparse_coo layout")


def test_a_subclass_that_cannot_count_its_elements_shows_its_whole_storage():
    class NoNumel(torch.Tensor):
        def numel(self):
            raise RuntimeError("numel of a symbolic size")

    t = torch.randn(10).as_subclass(NoNumel)
    assert G.storage_parts(t) == ([(("cpu", t.untyped_storage().data_ptr()), 40, 40)], "")
