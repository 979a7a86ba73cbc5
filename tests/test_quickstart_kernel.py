"""examples/quickstart.ipynb run top to bottom in a real Jupyter kernel through nbclient."""

import os

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

    cell = next(
        c for c in executed.cells if c.cell_type == "code" and c.source.strip() == "%cudainfo"
    )
    data = next(o for o in cell.outputs if o.output_type == "execute_result").data
    assert "text/html" in data and "text/plain" in data
    assert torch.__version__ in data["text/html"] and torch.__version__ in data["text/plain"]
    assert "Verdict" in data["text/plain"]


def test_training_reached_accuracy(executed):
    """The number the notebook printed: a run that learned nothing printed the phrase too."""
    import re

    text = "".join(
        o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs
    )
    m = re.search(r"last batch loss (\d+\.\d+), test accuracy (\d+\.\d)%", text)
    assert m, text[-500:]
    loss, acc = float(m.group(1)), float(m.group(2))
    assert acc > 90.0 and loss < 0.5, (loss, acc)
    # the %%cudamem report of that cell is there too (the cell ran under the magic, and the report
    # came back)
    cell = next(c for c in executed.cells if c.cell_type == "code" and "test accuracy" in c.source)
    assert any(
        o.output_type == "execute_result" and "%%cudamem" in o.data.get("text/plain", "")
        for o in cell.outputs
    ), [o.output_type for o in cell.outputs]
