"""Tier 3: examples/quickstart.ipynb executed top to bottom in a real Jupyter kernel through nbclient."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def executed():
    import run_demo

    return run_demo.execute(os.path.join(ROOT, "examples", "quickstart.ipynb"))


def test_no_cell_errors(executed):
    for cell in executed.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source


def test_cudainfo_cell_has_html_and_text(executed):
    import torch

    cell = next(c for c in executed.cells if c.cell_type == "code" and c.source.strip() == "%cudainfo")
    data = next(o for o in cell.outputs if o.output_type == "execute_result").data
    assert "text/html" in data and "text/plain" in data
    assert torch.__version__ in data["text/html"] and torch.__version__ in data["text/plain"]
    assert "Verdict" in data["text/plain"]


def test_training_reached_accuracy(executed):
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "test accuracy" in text
