"""Tier 4: examples/quickstart.ipynb opened in JupyterLab, Run All Cells, as a person sees it."""

import pytest

from tests.browser import jlab

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def quickstart(page, lab):
    jlab.open_notebook(page, lab, "quickstart.ipynb")
    jlab.run_all(page)
    return page


def test_runs_without_errors(quickstart):
    assert jlab.error_texts(quickstart) == []
    assert "Error displaying widget" not in quickstart.inner_text("body")


def test_cudainfo_renders_table_with_torch_version(quickstart, screenshots):
    import torch

    cell = jlab.find_cell(quickstart, lambda src: src == "%cudainfo")
    assert cell is not None, "no cell with exactly '%cudainfo' in quickstart.ipynb"
    table = jlab.outputs(cell).locator("table").first
    table.wait_for(state="visible")
    box = table.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 50, box
    assert torch.__version__ in table.inner_text()
    # the table is a real table: several rows, one of them naming PyTorch
    rows = table.locator("tr")
    assert rows.count() >= 3
    jlab.shot(cell, screenshots, "cudainfo_table")
