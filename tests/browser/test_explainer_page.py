"""Tier 4: examples/dataloader.ipynb in JupyterLab: the explainer box under the failing cell."""

import re

import pytest

from tests.browser import jlab, looks

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def dataloader(page, lab):
    jlab.open_notebook(page, lab, "dataloader.ipynb")
    jlab.run_all(page, timeout_s=240)
    return page


def test_explainer_box_under_failing_cell(dataloader, screenshots):
    page = dataloader
    cells = jlab.code_cells(page)
    failing = [
        i
        for i in range(cells.count())
        if any(
            "Traceback" in t or "Error" in t
            for t in cells.nth(i)
            .locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
            .all_text_contents()
        )
    ]
    assert len(failing) == 1, (
        f"expected exactly one failing cell (the mistake made on purpose): {failing}"
    )
    cell = cells.nth(failing[0])
    cell.scroll_into_view_if_needed()
    trace = cell.locator(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    ).last
    box = cell.locator(".jp-OutputArea-output", has_text="cudamagic explains").last
    box.wait_for(state="visible", timeout=15_000)
    text = jlab.text(box)
    assert re.search(r"What happened:.*Why:.*Fix:", text, re.S), text
    tb, bx = trace.bounding_box(), box.bounding_box()
    assert bx["height"] > 40 and bx["width"] > 200, bx
    assert bx["y"] >= tb["y"] + tb["height"] - 1, f"the box is not below the traceback: {tb} {bx}"
    # the card spans the traceback's width (JupyterLab pads HTML outputs 20 px on the right)
    card = box.locator(".cm-explain").first.bounding_box()
    assert (
        abs(card["x"] - tb["x"]) <= 2
        and abs(card["x"] + card["width"] - tb["x"] - tb["width"]) <= 2
    ), f"the card and the traceback do not line up: {card} {tb}"
    # no other cell gets a box automatically (only an explicit %cudaexplain shows one again)
    sources = jlab.cell_sources(page)
    others = [
        i
        for i in range(cells.count())
        if i != failing[0]
        and cells.nth(i).locator(".jp-OutputArea-output", has_text="cudamagic explains").count()
    ]
    assert all(sources[i].strip().startswith("%cudaexplain") for i in others), [
        sources[i] for i in others
    ]
    assert "Error displaying widget" not in jlab.text(page.locator(jlab.PANEL))
    jlab.shot(cell, screenshots, "explainer_box")


# ---- issue 16: light and dark theme, 1400 and 800 px with the file browser open (runs last: it
# switches themes) --


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks(
    "dataloader", "dataloader.ipynb"
)
