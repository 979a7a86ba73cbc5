"""%%cudafit in a real Jupyter kernel (nbclient) on this CPU-only PyTorch build.

A differentiable op on a fake ``cuda`` tensor aborts the process here (SIGABRT, which no ``try``
catches): cells that move the model and batch to ``cuda`` and make ``device="cuda"`` tensors with
``requires_grad`` must leave the kernel alive, with no CUDA call that would create a context.
"""

from __future__ import annotations

import os

import pytest
import run_demo  # scripts/run_demo.py (on sys.path via conftest)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.kernel

CELLS = [
    "%load_ext cudamagic\nimport torch\nfrom tests.cuda_calls import record\n"
    "from tests.fit.workloads import gpt\nglobals().update(gpt())\ncuda_calls = record(torch)",
    '%%cudafit --gpu "RTX 4090"\nmodel.cuda()\nloss = loss_fn(model(x.cuda()), y.to("cuda"))\n'
    "loss.backward()\nopt.step()\nopt.zero_grad()",
    "%%cudafit --device-memory 8GiB\nw = torch.ones(64, 64, device='cuda', requires_grad=True)\n"
    "(w @ w).relu().sum().backward()",
    "print('alive; cuda initialised:', torch.cuda.is_initialized(), 'calls:', cuda_calls, "
    "'model on', next(model.parameters()).device)",
]


@pytest.fixture(scope="module")
def cells():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    run_demo.execute_nb(nb, cwd=ROOT, timeout_s=180)  # raises on a cell error or a dead kernel
    return nb.cells


def test_kernel_survives_cuda_cells_and_creates_no_context(cells):
    out = "".join(o.get("text", "") for o in cells[3].outputs)
    assert "alive; cuda initialised: False calls: [] model on cpu" in out


def test_reports_render_in_the_notebook(cells):
    for cell in cells[1:3]:
        data = next(o for o in cell.outputs if o.output_type == "execute_result").data
        assert "fits on" in data["text/plain"] and "fits on" in data["text/html"]
