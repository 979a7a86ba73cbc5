"""Tier 4: examples/profile_tour.ipynb in JupyterLab: every %%torchprof summary renders.

Tables with full operator names, the timeline picture visible and fitting the output area, no
error, no typeset math.
"""

import os

import pytest

from tests.browser import conftest, jlab, looks
from tests.browser.conftest import skip_or_fail

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "profile_tour.ipynb"


@pytest.fixture(scope="module")
def tour(page, lab):
    if not os.path.exists(os.path.join(conftest.EXAMPLES, NAME)):
        skip_or_fail(f"examples/{NAME} is not there yet")
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page, timeout_s=300)
    return page


def test_runs_without_errors_or_math(tour):
    assert jlab.error_texts(tour) == []
    assert jlab.math_in_outputs(tour) == []


def test_every_summary_renders_with_its_timeline(tour, screenshots):
    summaries = [
        (i, c)
        for i, (c, src) in enumerate(
            zip(jlab.code_cells(tour).all(), jlab.cell_sources(tour), strict=True)
        )
        if src.strip().startswith("%%torchprof")
    ]
    assert len(summaries) >= 3
    for n, (i, cell) in enumerate(summaries):
        out = jlab.outputs(cell)
        box = out.locator(".cm-prof").first
        box.wait_for(state="visible", timeout=30_000)
        text = jlab.text(box)
        assert "Top operators by self time" in text, f"cell {i}: {text[:300]}"
        assert "aten::addmm" in text, f"cell {i}: no full operator name"
        # the timeline is an <img> of SVG (it survives an untrusted notebook's sanitiser)
        img = box.locator("img[src^='data:image/svg+xml']").first
        img.wait_for(state="visible", timeout=15_000)
        assert img.evaluate("el => el.complete && el.naturalWidth > 0"), f"cell {i}: not loaded"
        assert "<rect" in jlab.picture_svg(img), f"cell {i}: an empty timeline"
        jlab.assert_svg_fits(img)
        if n == 0:
            jlab.shot(out, screenshots, "profile_tour_first_summary")


# ---- issue 16: light and dark theme, 1400 and 800 px with the file browser open (runs last: it
# switches themes) --


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks(
    "tour", "profile_tour.ipynb"
)
