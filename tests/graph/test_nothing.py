"""The "nothing to draw" message names the real cause (issue 12)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from .common import magic


def test_integer_result_blamed_on_dtype_not_no_grad(ip):
    ip.run_cell("import torch\nemb = torch.nn.Embedding(10, 4)\ntok = torch.tensor([1, 2, 3])")
    with pytest.raises(
        UsageError,
        match=r"dtype is int64: only floating-point and complex tensors carry "
        r"gradients",
    ) as info:
        magic(ip, "", "e = emb(tok)\ntok.sum()")
    assert "no_grad" not in str(info.value) and "detach" not in str(info.value)


def test_bool_result(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    with pytest.raises(UsageError, match=r"dtype is bool"):
        magic(ip, "", "(w * 2) > 0")


def test_reentrant_checkpoint_without_grad_inputs(ip):
    ip.run_cell(
        "import torch\nfrom torch.utils.checkpoint import checkpoint\nlin = torch.nn.Linear(4, 4)\n"
        "x = torch.randn(2, 4)"
    )
    with pytest.raises(
        UsageError,
        match=r"use_reentrant=True\)` returns a result without a graph when none of "
        r"its tensor inputs requires grad",
    ):
        magic(ip, "", "y = checkpoint(lin, x, use_reentrant=True)\ny.sum()")


def test_torch_func_transform(ip):
    ip.run_cell("import torch\nx = torch.randn(3)")
    with pytest.raises(UsageError, match=r"`torch.func` transform"):
        magic(ip, "", "g = torch.func.grad(lambda t: (t ** 2).sum())(x)\ng")


def test_inference_mode_tensor_made_in_another_cell(ip):
    ip.run_cell(
        "import torch\nlin = torch.nn.Linear(3, 3)\nwith torch.inference_mode():\n    y = "
        "lin(torch.randn(2, 3))"
    )
    with pytest.raises(UsageError, match=r"made under `torch.inference_mode\(\)`.*can never join"):
        magic(ip, "", "y * 2")


def test_integer_output_among_others_is_a_note(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    r = magic(ip, "", "(w * 2).sum(), w.argmax()")
    assert any("dtype is int64: only floating-point" in n for n in r.graph.notes)
