"""Tier 3: the explainer box in a real Jupyter kernel (nbclient).

The box must be an output of the failing cell, after its `error` output, with both
text/html and text/plain; unmatched errors and `explain_errors = False` give no box.
Also executes examples/dataloader.ipynb top to bottom (its failing cell is tagged
`raises-exception`) and checks the box in that cell's outputs.
"""

from __future__ import annotations

import os
import re

import pytest
import run_demo  # scripts/run_demo.py (on sys.path via conftest): the one notebook runner

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.kernel
BOX = "cudamagic explains"


def _boxes(cell):
    return [
        o
        for o in cell.outputs
        if o.output_type == "display_data" and BOX in o.data.get("text/plain", "")
    ]


@pytest.fixture(scope="module")
def executed_cells():
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("torch")
    cells = [
        "%load_ext cudamagic\nimport torch",
        # grad-not-scalar, real
        "w = torch.randn(3, requires_grad=True)\npred = w * 2\npred.backward()",
        "1/0",  # unmatched
        "%config CudaMagics.explain_errors = False\nw.add_(1)",  # leaf-inplace, box off
        "%config CudaMagics.explain_errors = True\nw.add_(1)",  # leaf-inplace, box on
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    run_demo.execute_nb(nb, cwd=ROOT, timeout_s=120, allow_errors=True)
    return nb.cells


def test_box_is_an_output_of_the_failing_cell_after_the_traceback(executed_cells):
    cell = executed_cells[1]
    kinds = [o.output_type for o in cell.outputs]
    assert "error" in kinds
    boxes = _boxes(cell)
    assert len(boxes) == 1
    assert kinds.index("error") < cell.outputs.index(boxes[0])
    error = cell.outputs[kinds.index("error")]
    assert error.ename == "RuntimeError" and "scalar outputs" in error.evalue  # traceback untouched
    html = boxes[0].data["text/html"]
    assert 'data-id="grad-not-scalar"' in html and "pred.mean().backward()" in html
    assert "<code>pred</code> has shape [3]" in html


def test_unmatched_error_has_no_box(executed_cells):
    cell = executed_cells[2]
    assert any(o.output_type == "error" and o.ename == "ZeroDivisionError" for o in cell.outputs)
    assert _boxes(cell) == []


def test_explain_errors_config_in_kernel(executed_cells):
    off, on = executed_cells[3], executed_cells[4]
    assert any(o.output_type == "error" for o in off.outputs) and _boxes(off) == []
    assert any(o.output_type == "error" for o in on.outputs)
    box = _boxes(on)[0]
    assert (
        "In-place change of a leaf" in box.data["text/plain"]
        and 'data-id="leaf-inplace"' in box.data["text/html"]
    )
    assert (
        "leaf-inplace" not in box.data["text/plain"]
    )  # the catalogue id is for --list and scripts, not the box


def test_dataloader_notebook_runs_and_shows_the_box():
    pytest.importorskip("nbclient")
    import run_demo

    nb = run_demo.execute(os.path.join(ROOT, "examples", "dataloader.ipynb"))
    failing = [
        c
        for c in nb.cells
        if c.cell_type == "code" and "raises-exception" in c.metadata.get("tags", [])
    ]
    assert len(failing) == 1
    cell = failing[0]
    assert [o.ename for o in cell.outputs if o.output_type == "error"] == ["RuntimeError"]
    boxes = _boxes(cell)
    assert len(boxes) == 1 and "text/html" in boxes[0].data
    expected = (
        "pin-cuda-tensor"
        if "GPU available: True" in str(nb.cells[1].outputs)
        else "pin-no-accelerator"
    )
    assert (
        f'data-id="{expected}"' in boxes[0].data["text/html"]
        and expected not in boxes[0].data["text/plain"]
    )
    # every other code cell ran without error
    for c in nb.cells:
        if c.cell_type == "code" and c is not cell:
            assert not [o for o in c.outputs if o.output_type == "error"], c.source
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "num_workers pin_memory" in text
    assert "1797 torch.Size([64])" in text  # scikit-learn's digits, shipped with the package
    # the %gpuwatch replay found its trace: notebooks run with examples/ as working directory
    assert "skipped: %gpuwatch" not in text


def test_dataloader_notebook_paths_and_gpu_cells_are_plain():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(os.path.join(ROOT, "examples", "dataloader.ipynb"), as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert not re.search(
        r"[\"']examples/", code
    )  # paths are relative to examples/, the working directory
    intro = nb.cells[0].source
    assert "Which cells need a GPU" in intro
    gpu_headings = [
        c.source.splitlines()[0]
        for c in nb.cells
        if c.cell_type == "markdown"
        and re.search(r"needs a GPU|GPU only", c.source.splitlines()[0])
    ]
    assert len(gpu_headings) == 2, gpu_headings
