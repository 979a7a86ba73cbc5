"""Do no harm: saved tensors behind saved-tensor hooks are read without unpacking.

Do no harm: saved tensors behind saved-tensor hooks are read without unpacking (a field case).
"""

from __future__ import annotations

import torch

from cudamagic.graph import model as M
from cudamagic.graph import walk as G

from .common import magic

E11_SETUP = """
import torch, torch.nn as nn
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
calls = {"n": 0}
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 64); self.bn = nn.BatchNorm1d(64)
    def forward(self, x):
        calls["n"] += 1
        return torch.tanh(torch.nn.functional.dropout(self.bn(self.lin(x)), 0.1))
model = nn.Sequential(*[Block() for _ in range(4)])
x = torch.randn(8, 64)
def run_ckpt(m, x, reentrant=False):
    for b in m:
        x = checkpoint(b, x, use_reentrant=reentrant)
    return x
"""


def _state(ip):
    ns = ip.user_ns
    bn = {
        k: v.clone()
        for k, v in ns["model"].state_dict().items()
        if "running" in k or "num_batches" in k
    }
    return ns["calls"]["n"], bn, torch.get_rng_state().clone()


def _same(a, b):
    assert a[0] == b[0]
    assert a[1].keys() == b[1].keys() and all(torch.equal(a[1][k], b[1][k]) for k in a[1])
    assert torch.equal(a[2], b[2])


def test_checkpoint_drawing_runs_no_forward_and_touches_no_state(ip):
    """The same cell with and without the magic leaves the same state.

    Counters, BatchNorm buffers and the RNG are equal (a field case).
    """
    ip.run_cell(E11_SETUP)
    ip.run_cell("torch.manual_seed(1)\nloss = run_ckpt(model, x).sum()")
    plain = _state(ip)
    ip.run_cell(E11_SETUP)
    ip.run_cell("torch.manual_seed(1)")
    r = magic(ip, "", "loss = run_ckpt(model, x).sum()\nloss")
    with_magic = _state(ip)
    _same(plain, with_magic)
    assert with_magic[0] == 4
    assert int(ip.user_ns["model"][0].bn.num_batches_tracked) == 1
    # autograd holds the 4 block inputs (8 x 64 float32 = 2 KiB each), nothing per recomputed tensor
    assert r.graph.saved_bytes_total == 4 * 8 * 64 * 4
    r2 = magic(ip, "", "loss = run_ckpt(model, x).sum()\nloss")
    assert r2.graph.saved_bytes_total == r.graph.saved_bytes_total
    held = [h for n in r.graph.nodes for h in n.held]
    assert held and all(how == "recomputed in backward" for how, _ in held)
    assert any("recomputed in backward" in note for note in r.graph.notes)
    assert "1 saved recomputed in backward" in r.dot
    ip.run_cell("loss.backward()")  # backward still works: the hooks were never consumed
    assert ip.user_ns["calls"]["n"] == 8 + 4  # 4 recomputations in backward, none by the drawing


def test_save_on_cpu_counted_as_kept_on_cpu():
    x = torch.randn(100, requires_grad=True)
    with torch.autograd.graph.save_on_cpu():
        y = (x.exp() * 2).sum()
    gr = G.walk([("", y)], show_saved=True)
    exp = next(n for n in gr.of_kind(M.BACKWARD) if n.label == "ExpBackward0")
    assert exp.held == (("kept on CPU", 1),)
    assert exp.saved_bytes == 400
    assert any(n.kind == M.SAVED and "kept on CPU" in n.label for n in gr.nodes)


def test_user_hooks_never_unpacked_and_unknown_size_marked():
    unpacked = []

    def pack(t):
        return ("shape only", t.shape)

    def unpack(p):
        unpacked.append(p)
        return torch.zeros(p[1])

    x = torch.randn(50, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = x.sin().sum()
    gr = G.walk([("", y)])
    sin = next(n for n in gr.of_kind(M.BACKWARD) if n.label == "SinBackward0")
    assert unpacked == []
    assert sin.held == (("packed by test_user_hooks_never_unpacked_and_unknown_size_marked", 1),)
    assert sin.size_unknown == 1 and gr.saved_unknown == 1 and gr.saved_bytes_total == 0


def test_user_hook_packing_a_tensor_counts_it():
    def pack(t):
        return t.to(torch.float16)

    x = torch.randn(50, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda p: p.float()):
        y = x.exp().sum()  # ExpBackward0 saves its result, packed to float16
    gr = G.walk([("", y)])
    assert gr.saved_bytes_total == 100  # the float16 copy: 50 x 2 bytes


def test_custom_function_saved_behind_checkpoint_not_unpacked(ip):
    ip.run_cell("""
import torch
from torch.utils.checkpoint import checkpoint
n = [0]
class Sq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a * a
    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        return 2 * a * g
def block(a):
    n[0] += 1
    return Sq.apply(a * 3)
w = torch.randn(10, requires_grad=True)
""")
    r = magic(ip, "", "y = checkpoint(block, w, use_reentrant=False).sum()\ny")
    assert ip.user_ns["n"] == [1]
    saved = [n for n in r.graph.nodes if n.kind == M.SAVED]
    assert saved and all("recomputed in backward" in n.label for n in saved)


def test_collapsed_boxes_carry_the_hooked_counts(ip):
    ip.run_cell(E11_SETUP)
    r = magic(ip, "--depth 0 --format dot", "loss = run_ckpt(model, x).sum()\nloss")
    boxes = [n for n in r.drawn.nodes if n.kind == M.MODULE]
    assert boxes and all(dict(b.held).get("recomputed in backward", 0) > 0 for b in boxes)
    assert "saved recomputed in backward" in r.dot
    assert ip.user_ns["calls"]["n"] == 4


def test_tensor_list_with_none_entries_behind_hooks_not_unpacked():
    unpacked = []

    def unpack(t):
        unpacked.append(1)
        return t

    x = torch.randn(4, 4, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
        y = x[:, torch.tensor([0, 1])].sum()  # IndexBackward0 saves [None, index]
    gr = G.walk([("", y)], show_saved=True)
    assert unpacked == []
    index = next(n for n in gr.of_kind(M.BACKWARD) if n.label == "IndexBackward0")
    assert index.held == (
        ("packed by test_tensor_list_with_none_entries_behind_hooks_not_unpacked", 1),
    )
    assert index.saved_bytes == 16
