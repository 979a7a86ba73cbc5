"""Tier 4: examples/autograd_tour.ipynb in JupyterLab.

Every ``%%autograd_graph`` picture is visible and fits.
"""

import os
import re

import pytest

from tests.browser import conftest, jlab, looks
from tests.browser.conftest import skip_or_fail

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "autograd_tour.ipynb"


@pytest.fixture(scope="module")
def tour(page, lab):
    if not os.path.exists(os.path.join(conftest.EXAMPLES, NAME)):
        skip_or_fail(f"examples/{NAME} is not there yet")
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page, timeout_s=240)
    return page


def _expected_to_fail():
    """Indices (among code cells) of cells tagged ``raises-exception`` in the notebook file."""
    import nbformat

    nb = nbformat.read(os.path.join(conftest.EXAMPLES, NAME), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return {i for i, c in enumerate(code) if "raises-exception" in c.metadata.get("tags", [])}


def test_runs_without_unexpected_errors(tour):
    cells = jlab.code_cells(tour)
    failing = {
        i
        for i in range(cells.count())
        if any(
            "Traceback" in t
            for t in cells.nth(i)
            .locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
            .all_text_contents()
        )
    }
    assert failing <= _expected_to_fail(), (failing, jlab.error_texts(tour))
    assert "Error displaying widget" not in jlab.text(tour.locator(jlab.PANEL))
    assert jlab.math_in_outputs(tour) == []


def test_every_graph_is_visible_and_fits(tour, screenshots):
    graphs = [
        (i, c, src)
        for i, (c, src) in enumerate(
            zip(jlab.code_cells(tour).all(), jlab.cell_sources(tour), strict=True)
        )
        if src.strip().startswith("%%autograd_graph")
    ]
    assert graphs, f"no %%autograd_graph cell in {NAME}"
    drawn = 0
    for i, cell, src in graphs:
        out = jlab.outputs(cell)
        cell.scroll_into_view_if_needed()
        if out.locator(
            ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
        ).count():
            continue  # a cell that fails on purpose (checked above) has no picture
        svg = out.locator(jlab.GRAPH_IMG).first
        svg.wait_for(state="visible", timeout=15_000)
        labels = re.findall(r"<text[^>]*>([^<]*)</text>", jlab.picture_svg(svg))
        assert len(labels) >= 3, f"cell {i}: an SVG with almost no labels: {labels}"
        if (
            "--depth" not in src.splitlines()[0]
        ):  # the collapsed module view shows module boxes instead
            assert any("Backward" in t for t in labels), (
                f"cell {i}: no backward node among {labels}"
            )
        jlab.assert_svg_fits(svg)
        drawn += 1
        if drawn == 1:
            jlab.shot(out, screenshots, "autograd_tour_first_graph")
    assert drawn >= 1


# ---- issue 16: light and dark theme, 1400 and 800 px with the file browser open (runs last: it
# switches themes) --


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks(
    "tour", "autograd_tour.ipynb"
)
