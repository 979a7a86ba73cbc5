"""Saved tensors and the bytes they keep alive, checked against what torch itself reports.

The truth for every count here is torch's own: ``untyped_storage().nbytes()`` of the saved tensors
(a storage shared by several saved tensors or nodes counted once), ``numel() * element_size()`` for
the views themselves. Saved-tensor hooks are never unpacked; what they hold is read from the packed
object.
"""

from __future__ import annotations

import functools

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from cudamagic.graph import model as M
from cudamagic.graph import walk as G

from .common import opaque


def _storage_bytes(*tensors):
    """Bytes of the distinct storages behind ``tensors``, as torch reports them."""
    return sum(
        {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values()
    )


def _by_label(gr):
    return {n.label: n for n in gr.of_kind(M.BACKWARD)}


def test_views_of_one_activation_count_its_storage_once_per_node_and_per_graph():
    x = torch.randn(100, requires_grad=True)
    h = x.exp()  # ExpBackward0 saves h (400 B)
    v = h[10:20]  # a 40 B view of h's storage
    c = v.cos()  # CosBackward0 saves v; c is a fresh 40 B storage
    y = (v * c).sum()  # MulBackward0 saves v and c
    gr = G.walk([("y", y)])
    by = _by_label(gr)
    assert gr.saved_bytes_total == _storage_bytes(h, v, c) == 440
    assert by["MulBackward0"].saved_bytes == _storage_bytes(v, c)
    assert (
        by["MulBackward0"].saved_view_bytes
        == v.numel() * v.element_size() + c.numel() * c.element_size()
    )
    assert by["CosBackward0"].saved_bytes == _storage_bytes(v) == 400
    assert by["CosBackward0"].saved_view_bytes == 40
    assert by["ExpBackward0"].saved_bytes == by["ExpBackward0"].saved_view_bytes == 400
    # storage ids in walk order (MulBackward0 first, its `other` before its `self`), a shared
    # storage keeps its
    # id: the model merges the nodes' storages back to the total
    assert by["MulBackward0"].storages == ((0, 40), (1, 400))
    assert by["CosBackward0"].storages == by["ExpBackward0"].storages == ((1, 400),)
    assert M.distinct_saved_bytes(gr.of_kind(M.BACKWARD)) == (440, ((0, 40), (1, 400)))
    assert M.distinct_saved_bytes([by["CosBackward0"], by["ExpBackward0"]]) == (400, ((1, 400),))
    assert M.distinct_saved_bytes([]) == (0, ())


def test_saved_view_of_a_parameter_is_not_counted_but_activations_beside_it_are():
    # a leaf: its storage is the user's, not held for backward
    w = torch.randn(64, requires_grad=True)
    x = torch.randn(64) + 1  # plain input, saved by the product
    y = (x[:32] * w[:32]).sum()  # MulBackward0 reads `other` (w's view) first, then `self`
    gr = G.walk([("y", y)], tensor_names={id(w): "w"})
    mul = _by_label(gr)["MulBackward0"]
    # x's whole storage; w[:32] shares w's: not counted
    assert mul.saved_bytes == _storage_bytes(x) == 256
    assert mul.saved_view_bytes == 32 * 4
    assert gr.saved_bytes_total == 256


def test_expanded_tensor_saved_counts_no_more_than_its_storage():
    a = torch.randn(1, requires_grad=True)
    e = torch.randn(1).expand(100)  # 100 elements over a 4-byte storage
    y = (a * e).sum()
    mul = _by_label(G.walk([("y", y)]))["MulBackward0"]
    assert mul.saved_bytes == _storage_bytes(e) == 4
    assert mul.saved_view_bytes == 4  # never more than the storage it views


def test_hook_kinds_are_summed_in_one_note_and_a_shared_storage_counted_once():
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        h = x.exp()  # kept on CPU: the CPU tensor itself
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, functools.partial(lambda p: p)):
        y = (h.sin() * h.cos()).sum()  # packed by a partial (no __qualname__): h three times
    gr = G.walk([("y", y)])
    by = _by_label(gr)
    assert by["ExpBackward0"].held == (("kept on CPU", 1),)
    assert by["SinBackward0"].held == (("packed by partial", 1),)
    assert by["MulBackward0"].held == (("packed by partial", 2),)
    # h once; sin(h) and cos(h) are new storages
    assert gr.saved_bytes_total == _storage_bytes(h) + 2 * 400
    hooks = [n for n in gr.notes if n.startswith("Saved tensors behind saved-tensor hooks")]
    assert hooks == [
        "Saved tensors behind saved-tensor hooks (1 kept on CPU, 4 packed by partial) were read "
        "without unpacking them (unpacking would run the hook: a checkpointed block's forward "
        "again); only what autograd holds until backward is counted."
    ]
    assert not any("cannot be known" in n for n in gr.notes)


@pytest.mark.parametrize(
    "packed, nbytes",
    [
        (
            lambda t: {"data": [t], "meta": ("float", None)},
            400,
        ),  # a dict holding a list holding the tensor
        (lambda t: ((("deep", t),),), 400),  # three levels of tuples: still read
        (lambda t: {"a": {"b": {"c": t}}}, 400),  # three levels of dicts
        (lambda t: [t, t.to(torch.float16)], 400 + 200),  # two tensors: both storages
    ],
)
def test_what_a_pack_hook_returns_is_searched_for_tensors(packed, nbytes):
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(packed, lambda p: None):
        y = x.exp().sum()
    gr = G.walk([("y", y)])
    exp = _by_label(gr)["ExpBackward0"]
    assert exp.saved_bytes == gr.saved_bytes_total == nbytes
    assert exp.size_unknown == 0 and gr.saved_unknown == 0


@pytest.mark.parametrize(
    "packed",
    [
        lambda t: (((("deeper", t),),),),
        lambda t: {"a": {"b": {"c": {"d": t}}}},
        lambda t: ((({"t": t},),),),
    ],
)
def test_pack_hook_results_too_deep_or_holding_no_tensor_are_unknown_never_guessed(packed):
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(packed, lambda p: None):
        y = x.exp().sum()
    gr = G.walk([("y", y)])
    assert gr.saved_unknown == 1 and gr.saved_bytes_total == 0
    assert "1 saved tensor(s) have a size that cannot be known" in " ".join(gr.notes)
    assert "not counted in the saved bytes" in " ".join(gr.notes)


def test_pack_hook_that_keeps_nothing_is_known_to_hold_zero_bytes():
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: None, lambda p: torch.zeros(100)):
        y = x.exp().sum()
    gr = G.walk([("y", y)], show_saved=True)
    exp = _by_label(gr)["ExpBackward0"]
    assert exp.held == (
        ("packed by test_pack_hook_that_keeps_nothing_is_known_to_hold_zero_bytes", 1),
    )
    assert exp.size_unknown == 0 and exp.saved_bytes == 0 and gr.saved_unknown == 0
    assert not any("cannot be known" in n for n in gr.notes)


def test_checkpoint_counts_every_input_of_its_frame_once():
    lin = torch.nn.Linear(16, 16)
    x = torch.randn(8, 16, requires_grad=True)
    a, b = x * 2, x * 3  # two inputs the checkpoint frame keeps (512 B each)

    def block(p, q, k):
        return torch.tanh(lin(p) + q * k).exp()

    y = checkpoint(block, a, b, 3, use_reentrant=False).sum()  # and an int, kept as it is
    gr = G.walk([("y", y)])
    by = _by_label(gr)
    inside = [n for n in gr.of_kind(M.BACKWARD) if n.held]
    assert {n.label for n in inside} == {"ExpBackward0", "TanhBackward0", "AddmmBackward0"}
    assert all(h == "recomputed in backward" for n in inside for h, _ in n.held)
    # on the frame's first entry only
    assert by["ExpBackward0"].saved_bytes == _storage_bytes(a, b) == 1024
    assert by["TanhBackward0"].saved_bytes == 0
    # the three MulBackward0 save a 0-dim scalar each (8 B: the wrapped Python number, not given to
    # the hooks)
    assert gr.saved_bytes_total == 1024 + 3 * 8
    assert gr.saved_unknown == 0


def test_a_checkpoint_hook_whose_private_frame_cannot_be_read_is_unknown():
    """torch.utils.checkpoint's private layout changed (no ``frame`` cell).

    The size is unknown, not 0.
    """

    def unpack(p):
        return p

    unpack.__module__ = "torch.utils.checkpoint"
    assert G.checkpoint_inputs(unpack) is None
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = x.exp().sum()
    gr = G.walk([("y", y)], show_saved=True)
    exp = _by_label(gr)["ExpBackward0"]
    assert exp.held == (("recomputed in backward", 1),)
    assert exp.size_unknown == 1 and gr.saved_unknown == 1 and gr.saved_bytes_total == 0
    assert [n.label for n in gr.of_kind(M.SAVED)] == [
        "result (recomputed in backward) (size unknown)"
    ]


def test_undefined_saved_tensor_is_not_counted_and_never_unpacked():
    """layer_norm without weight and bias saves undefined tensors for them.

    Nothing to count or unpack.
    """
    unpacked = []
    x = torch.randn(4, 8, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda p: unpacked.append(1) or p):
        y = torch.nn.functional.layer_norm(x * 2, (8,)).sum()
    gr = G.walk([("y", y)])
    ln = _by_label(gr)["NativeLayerNormBackward0"]
    assert unpacked == []
    assert ln.size_unknown == 0
    plain = G.walk([("y", torch.nn.functional.layer_norm(x * 2, (8,)).sum())])
    assert (
        _by_label(plain)["NativeLayerNormBackward0"].saved_bytes == ln.saved_bytes == 128 + 16 + 16
    )


def test_hooks_given_as_methods_with_no_module_attribute():
    """``torch.Tensor.clone`` as the unpack hook (a method descriptor.

    No ``__module__``) is named by its qualname.
    """
    x = torch.randn(10, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(torch.Tensor.detach, torch.Tensor.clone):
        y = x.exp().sum()
    gr = G.walk([("y", y)])
    assert _by_label(gr)["ExpBackward0"].held == (("packed by TensorBase.clone", 1),)
    assert gr.saved_bytes_total == 40


def test_bytes_still_counted_where_torch_has_no_fake_tensors(monkeypatch):
    import sys

    t = torch.randn(10)
    monkeypatch.setitem(sys.modules, "torch._subclasses.fake_tensor", None)  # its import now fails
    assert G.storage_parts(t) == ([(("cpu", t.untyped_storage().data_ptr()), 40, 40)], "")


def test_saved_attribute_names_are_read_once_per_node_class():
    """``dir()`` of each backward class once (a 100k-op chain would call it per node)."""
    x = torch.randn(3, requires_grad=True)
    y = (x * x.exp()).sum()
    mul = type(y.grad_fn.next_functions[0][0])
    G._saved_attrs.cache_clear()
    attrs = G._saved_attrs(mul)
    assert attrs == (
        (
            ("_saved_other", "other", "_raw_saved_other"),
            ("_saved_self", "self", "_raw_saved_self"),
        ),
        "MulBackward0",
        False,
    )
    assert G._saved_attrs(mul) is attrs and G._saved_attrs.cache_info().currsize == 1
    gr = G.walk([("y", y)])
    assert _by_label(gr)["MulBackward0"].saved_bytes == 12
    # Sum, Mul, Exp and AccumulateGrad: once each
    assert G._saved_attrs.cache_info().currsize == 4


def test_subclass_inner_tensors_named_but_absent_are_skipped():
    class Wrapped(torch.Tensor):
        @staticmethod
        def __new__(cls, inner):
            return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

        def __init__(self, inner):
            self.inner = inner
            self.scale = None  # an optional inner tensor left out

        def __tensor_flatten__(self):
            return ["inner", "scale", "absent"], None

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError

    parts, why = G.storage_parts(Wrapped(torch.randn(25)))
    assert why == "" and [p[1:] for p in parts] == [(100, 100)]


def test_saved_entries_carry_shape_dtype_and_storage_bytes_when_drawn():
    x = torch.randn(100, requires_grad=True)
    h = x.exp()
    v = h[10:20]
    y = (v * v.cos()).sum()
    E = M.SavedEntry
    plain = _by_label(G.walk([("y", y)]))
    # no shapes kept
    assert plain["MulBackward0"].saved == (
        E("other", None, "", 40),
        E("self", None, "", 400),
    )
    drawn = G.walk([("y", y)], show_saved=True)
    by = _by_label(drawn)
    # the entry's bytes are the storage it keeps alive (h's 400 B for the 10-element view), not the
    # view's 40 B
    assert by["MulBackward0"].saved == (
        E("other", (10,), "float32", 40),
        E("self", (10,), "float32", 400),
    )
    assert by["ExpBackward0"].saved == (E("result", (100,), "float32", 400),)
    assert [n.freed for n in drawn.of_kind(M.BACKWARD, M.SAVED)] == [False] * 9
    assert [n.label for n in drawn.of_kind(M.SAVED)] == ["other", "self", "self", "result"]


def test_hooked_entries_show_the_tensor_they_hold_except_a_checkpoints():
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        y = x.exp().sum()
    exp = _by_label(G.walk([("y", y)], show_saved=True))["ExpBackward0"]
    assert exp.saved == (M.SavedEntry("result", (100,), "float32", 400, held="kept on CPU"),)
    a = x * 2
    y = checkpoint(lambda p: p.exp(), a, use_reentrant=False).sum()
    exp = _by_label(G.walk([("y", y)], show_saved=True))["ExpBackward0"]
    # the frame's input, not the recomputed result: no shape shown for it
    assert exp.saved == (M.SavedEntry("result", None, "", 400, held="recomputed in backward"),)


def test_every_unknown_saved_tensor_of_a_node_is_counted():
    """A pack hook returning a tensor subclass with no readable storage.

    Each entry unknown, none guessed.
    """
    x = torch.randn(10, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: opaque(t.shape), lambda p: None):
        y = (
            x.exp() * x.sin()
        ).sum()  # MulBackward0 saves both factors; Exp its result, Sin its input
    gr = G.walk([("y", y)], show_saved=True)
    by = _by_label(gr)
    assert [by[k].size_unknown for k in ("MulBackward0", "ExpBackward0", "SinBackward0")] == [
        2,
        1,
        1,
    ]
    assert gr.saved_unknown == 4 and gr.saved_bytes_total == 0
    hook = "packed by test_every_unknown_saved_tensor_of_a_node_is_counted"
    assert by["MulBackward0"].saved == (
        M.SavedEntry("other", (10,), "float32", 0, held=hook, size_known=False),
        M.SavedEntry("self", (10,), "float32", 0, held=hook, size_known=False),
    )
    assert (
        "4 saved tensor(s) have a size that cannot be known (a tensor subclass without readable "
        "storage, or a hook's packed object): not counted in the saved bytes."
    ) in gr.notes


def test_two_views_of_one_storage_in_one_node_show_the_larger_view():
    x = torch.randn(100, requires_grad=True)
    h = x.exp()
    y = (
        h[:1] * h[:10]
    ).sum()  # MulBackward0: `other` is h[:10] (40 B), `self` h[:1] (4 B), one storage
    mul = _by_label(G.walk([("y", y)]))["MulBackward0"]
    assert mul.saved_bytes == 400 and mul.saved_view_bytes == 40 and len(mul.storages) == 1


def test_an_empty_saved_tensor_counts_zero_bytes():
    # not empty: an empty leaf's storage key (address 0) is every empty one's
    x = torch.randn(1, requires_grad=True)
    e = torch.randn(0) + 1
    mul = _by_label(G.walk([("y", (x * e).sum())]))["MulBackward0"]
    assert mul.saved_bytes == mul.saved_view_bytes == e.untyped_storage().nbytes() == 0


def test_storage_ids_follow_walk_order_past_ten_nodes():
    """Ids n2, n3 ...

    n10, n11 in number order (not as text: "n10" < "n2"), so storage ids are 0, 1, 2 ...
    """
    x = torch.randn(10, requires_grad=True)
    h = x
    for _ in range(12):
        h = h.exp()  # each saves its own result: a new storage per node
    gr = G.walk([("y", h.sum())])
    exps = [n for n in gr.of_kind(M.BACKWARD) if n.label == "ExpBackward0"]
    assert [n.id for n in exps][-3:] == ["n11", "n12", "n13"]
    assert [n.storages for n in exps] == [((i, 40),) for i in range(12)]


def test_a_graph_on_the_meta_device_holds_no_bytes():
    """A model built on ``device="meta"`` (no data).

    The walk reads no storage and counts 0, it never fails.
    """
    lin = torch.nn.Linear(8, 4, device="meta")
    x = torch.empty(2, 8, device="meta")
    gr = G.walk(
        [("y", torch.tanh(lin(x)).sum())],
        tensor_names={id(lin.weight): "lin.weight", id(lin.bias): "lin.bias"},
    )
    assert sorted(gr.labels(M.PARAM)) == ["lin.bias", "lin.weight"]
    assert {n.device for n in gr.of_kind(M.PARAM, M.OUTPUT)} == {"meta"}
    assert gr.saved_bytes_total == 0 and gr.saved_unknown == 0


def test_a_node_saving_a_parameter_and_an_activation_counts_the_activation():
    x = torch.randn(100, requires_grad=True)
    w = torch.randn(100, requires_grad=True)
    h = x.exp()
    y = (h * w).sum()  # MulBackward0 saves `other` (w, a leaf: not counted) and `self` (h)
    mul = _by_label(G.walk([("y", y)], tensor_names={id(w): "w"}))["MulBackward0"]
    assert [e.name for e in mul.saved] == ["other", "self"]
    assert mul.saved_bytes == mul.saved_view_bytes == _storage_bytes(h) == 400
    assert mul.storages == ((0, 400),)
