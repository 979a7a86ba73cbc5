"""The context functions (:mod:`cudamagic.explain.context`).

Tier 1: the numbers in PyTorch's out-of-memory messages. Tier 2 (a real InteractiveShell):
the context names what is on the failing line; a variable that merely exists in the
namespace must not be named as the cause.
"""

from __future__ import annotations

from cudamagic.core.nvml import decode_cuda_driver_version
from cudamagic.explain.context.memory import parse_oom

from .failing import NEW_OOM, OLD_OOM, SETUP, fail, notes


def test_parse_oom_current_and_old_formats():
    MiB, GiB = 1024**2, 1024**3
    new = parse_oom(NEW_OOM)
    assert new["requested_bytes"] == round(1.95 * GiB)
    assert (
        new["gpu"] == 0
        and new["total_bytes"] == round(14.57 * GiB)
        and new["free_bytes"] == round(1.58 * GiB)
    )
    assert new["allocated_bytes"] == round(734.07 * MiB)
    assert new["reserved_bytes"] == round(734.07 * MiB) + round(33.93 * MiB)
    assert new["process_bytes"] == round(966 * MiB)
    old = parse_oom(OLD_OOM)
    assert old["requested_bytes"] == 36 * MiB and old["free_bytes"] == round(47.06 * MiB)
    assert old["reserved_bytes"] == 188 * MiB and old["allocated_bytes"] == round(130.35 * MiB)
    assert (
        parse_oom(
            "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 8.00 "
            "GiB "
            "of which 0 bytes is free."
        )["free_bytes"]
        == 0
    )


def test_decode_cuda_version():
    assert decode_cuda_driver_version(11040) == "11.4"
    assert decode_cuda_driver_version(12010) == "12.1"


def test_long_targets_name_the_argument_not_a_namespace_guess(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "logits = torch.randn(4, 5)\ny = torch.randn(4).sum().detach()\ntarget = torch.tensor([0., "
        "1, 2, 3])"
    )
    expl, _ = fail(ip, "F.nll_loss(logits, target)")  # aten/src/ATen/native/LossNLL.cpp
    assert expl.entry.id == "target-dtype-long"
    assert expl.context.facts["targets"] == ["target"]
    assert "target = target.long()" in expl.context.fix and "`y`" not in notes(expl)
    # a target that is an expression: no variable is blamed, the expression is quoted
    expl, _ = fail(
        ip, "crit = nn.CrossEntropyLoss()\ncrit(logits, torch.tensor([0.5, 1., 2., 3.]))"
    )
    assert expl.context.facts["targets"] == [] and "`y`" not in notes(expl)
    assert expl.context.facts["expressions"] == ["torch.tensor([0.5, 1.0, 2.0, 3.0])"]


def test_embedding_float_indices_names_the_indices(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "emb = nn.Embedding(10, 3)\nlabels = torch.tensor([1., 2.])\nids = torch.tensor([1., 2.])"
    )
    expl, _ = fail(ip, "emb(ids)")  # aten/src/ATen/native/Embedding.cpp: checkScalarTypes
    assert expl.entry.id == "target-dtype-long"
    assert expl.context.facts["targets"] == ["ids"] and "ids = ids.long()" in expl.context.fix


def test_float_targets_name_only_the_argument(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "probs = torch.rand(3)\nsteps = torch.tensor([7, 8])\nlab = torch.tensor([0, 1, 1])"
    )
    expl, _ = fail(ip, "F.binary_cross_entropy(probs, lab)")
    assert expl.entry.id == "target-dtype-float"
    assert expl.context.facts["targets"] == ["lab"] and "steps" not in notes(expl)


def test_result_type_cast_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("scores = torch.randn(4)\nlab = torch.tensor([1, 0, 1, 0])")
    # aten/src/ATen/TensorIterator.cpp: compute_types (BCEWithLogits computes in the target's dtype)
    expl, _ = fail(ip, "nn.BCEWithLogitsLoss()(scores, lab)")
    assert expl.entry.id == "result-type-cast"
    assert expl.context.facts["targets"] == ["lab"] and "lab = lab.float()" in expl.context.fix
    expl, _ = fail(ip, "counts = torch.zeros(3, dtype=torch.long)\ncounts += torch.rand(3)")
    assert expl.entry.id == "result-type-cast" and expl.context.facts["inplace"] == ["counts"]


def test_dtype_mismatch_plain_matmul_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "import numpy as np\nunrelated = torch.zeros(2, dtype=torch.float64)\n"
        "a = torch.randn(2, 3)\nb = torch.from_numpy(np.ones((3, 2)))"
    )
    expl, _ = fail(ip, "a @ b")  # LinearAlgebra.cpp: "expected m1 and m2 to have the same dtype"
    assert expl.entry.id == "dtype-mismatch"
    assert expl.context.facts["float64"] == ["b"] and "unrelated" not in notes(expl)
    assert expl.context.facts["tensor_dtype"] == {"a": "float32", "b": "float64"}
    assert "b = b.float()" in expl.context.fix
    expl, _ = fail(ip, "torch.mv(a, torch.ones(3, dtype=torch.float64))")  # addmv
    assert expl.entry.id == "dtype-mismatch"


def test_no_grad_counts_only_the_models_involved(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "other = nn.Linear(3, 3)\np = nn.Linear(3, 1).requires_grad_(False)\nx = torch.randn(2, 3)"
    )
    expl, _ = fail(ip, "p(x).sum().backward()")
    assert expl.entry.id == "no-grad"
    assert expl.context.facts["models"] == {"p": (2, 0)}
    assert "None of the 2 parameters of `p`" in notes(expl) and "other" not in notes(expl)


def test_no_grad_does_not_blame_an_unrelated_model(ip):
    ip.run_cell(SETUP)
    ip.run_cell("lin = nn.Linear(3, 1)")
    expl, _ = fail(ip, "def f():\n    h = torch.zeros(2)\n    h.sum().backward()\nf()")
    assert expl.entry.id == "no-grad" and expl.context.facts["tensor"] == "h"
    assert expl.context.facts["models"] == {} and "lin" not in notes(expl)
    assert "`h` is a leaf" in notes(expl)


def test_no_grad_names_the_cell_that_computed_the_loss(ip):
    ip.run_cell(SETUP, store_history=True)
    ip.run_cell("model = nn.Linear(4, 1)\nx = torch.randn(8, 4)", store_history=True)
    ip.run_cell("with torch.no_grad():\n    loss = model(x).mean()", store_history=True)
    forward_cell = ip.execution_count - 1
    ip.run_cell("stale = torch.ones(1).detach()", store_history=True)
    expl, _ = fail(ip, "loss.backward()")
    assert expl.context.facts["assigned_in"] == forward_cell
    assert expl.context.facts["signs"] == [
        "a `with torch.no_grad():` block"
    ]  # not the later `.detach()`
    assert "if `loss` comes from `model`" in notes(expl)


def test_broadcast_lists_only_tensors_on_the_failing_line(ip):
    ip.run_cell(SETUP)
    ip.run_cell("x = torch.randn(5, 4)\nhidden = torch.zeros(1, 3)")
    expl, _ = fail(ip, "torch.randn(3) + torch.randn(4)")
    assert expl.entry.id == "broadcast-size"
    assert (
        expl.context.facts["tensors"] == []
        and "`x`" not in notes(expl)
        and "hidden" not in notes(expl)
    )


def test_matmul_names_both_operands_and_uses_the_input_name(ip):
    ip.run_cell(SETUP)
    ip.run_cell("decoy = torch.randn(2, 3)\nleft = torch.randn(2, 3)\nright = torch.randn(4, 5)")
    expl, _ = fail(ip, "left @ right")
    assert expl.entry.id == "matmul-shapes"
    assert expl.context.facts["input"] == "left" and expl.context.facts["right_name"] == "right"
    ip.run_cell("lin = nn.Linear(7, 2)\nbig = torch.randn(3, 9)")
    expl, _ = fail(ip, "lin(big)")
    assert "big.view(big.size(0), -1)" in expl.context.fix


def test_index_out_of_range_uses_the_failing_line(ip):
    ip.run_cell(SETUP)
    ip.run_cell(
        "steps = torch.arange(100)\nlogits = torch.randn(2, 3)\nlabels = torch.tensor([0, 5])"
    )
    expl, _ = fail(ip, "F.nll_loss(logits, labels)")  # LossNLL.cpp: "Target 5 is out of bounds."
    assert expl.entry.id == "index-out-of-range"
    assert expl.context.facts["int_tensors"] == {"labels": (0, 5)}
    assert expl.context.facts["classes"] == {"logits": 3} and "steps" not in notes(expl)
