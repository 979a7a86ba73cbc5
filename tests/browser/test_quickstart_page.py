"""Tier 4: examples/quickstart.ipynb opened in JupyterLab, Run All Cells, as a person sees it."""

import pytest

from tests.browser import jlab, looks
from tests.browser.conftest import skip_or_fail

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def quickstart(page, lab):
    jlab.open_notebook(page, lab, "quickstart.ipynb")
    jlab.run_all(page)
    return page


def test_runs_without_errors(quickstart):
    assert jlab.error_texts(quickstart) == [], jlab.page_state(quickstart)
    assert "Error displaying widget" not in jlab.text(quickstart.locator(jlab.PANEL))


def test_cudainfo_renders_table_with_torch_version(quickstart, screenshots):
    import torch

    cell = jlab.find_cell(quickstart, lambda src: src == "%cudainfo")
    assert cell is not None, "no cell with exactly '%cudainfo' in quickstart.ipynb"
    table = jlab.outputs(cell).locator("table").first
    table.wait_for(state="visible")
    box = table.bounding_box()
    assert box and box["width"] > 100 and box["height"] > 50, box
    assert torch.__version__ in jlab.text(table)
    assert table.locator("tr").count() >= 3
    jlab.shot(cell, screenshots, "cudainfo_table")


def test_no_output_text_typeset_as_math(quickstart):
    """A ``$`` pair in an HTML output must not turn into LaTeX math.

    E.g. ``$CUDA_HOME/bin, $CUDA_PATH/bin``.
    """
    typeset = jlab.math_in_outputs(quickstart)
    assert typeset == [], (
        f"JupyterLab typeset output text as LaTeX math: {typeset}. Fix: put "
        'class="mathjax_ignore" on the root element of cudamagic\'s HTML (or <code> around '
        "text with $); checked in JupyterLab 4.6: both keep the $ as text."
    )


def test_gpuwatch_cell_shows_a_widget(quickstart, screenshots):
    """The monitor shows as a live widget with its Stop button, or as its final snapshot.

    Once the replay ran out (it stops by itself), the static snapshot of its final state replaces
    the widget (issue 16).
    """
    cell = jlab.find_cell(quickstart, lambda src: "%gpuwatch" in src and "--stop" not in src)
    if cell is None:
        skip_or_fail("quickstart.ipynb has no %gpuwatch cell")
    out = jlab.outputs(cell)
    cell.scroll_into_view_if_needed()
    assert "Error displaying widget" not in jlab.text(out)
    shown = out.locator(
        ".jp-OutputArea-output .widget-vbox, .jp-OutputArea-output .cudamagic"
    ).first
    shown.wait_for(state="visible", timeout=15_000)
    widget = out.locator(".widget-vbox")
    if widget.count():
        assert widget.first.locator("button").first.is_visible()
    else:
        assert "stopped" in jlab.text(out), jlab.text(out)[:300]
    jlab.shot(out, screenshots, "quickstart_gpuwatch")


def test_autograd_graph_cells_show_svg(quickstart, screenshots):
    cells = [
        c
        for c, src in zip(
            jlab.code_cells(quickstart).all(), jlab.cell_sources(quickstart), strict=True
        )
        if src.strip().startswith("%%autograd_graph")
    ]
    if not cells:
        skip_or_fail("quickstart.ipynb has no %%autograd_graph cell")
    for i, cell in enumerate(cells):
        svg = jlab.outputs(cell).locator(jlab.GRAPH_IMG).first
        svg.wait_for(state="visible", timeout=15_000)
        assert "Backward" in jlab.picture_svg(svg)
        jlab.assert_svg_fits(svg)
        jlab.shot(jlab.outputs(cell), screenshots, f"quickstart_autograd_graph_{i}")


# ---- issue 16: light and dark theme, 1400 and 800 px with the file browser open (runs last: it
# switches themes) --


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks(
    "quickstart", "quickstart.ipynb"
)


@pytest.mark.parametrize("theme", looks.params("quickstart", "graph fit", looks.THEMES))
def test_graph_fits_at_1400_without_scrolling(surveyed, theme):
    """The quickstart's graph is fully visible in a 1400 px window.

    The graph is a 3-layer MLP's loss, ~16 nodes: its SVG lies within the output area, nothing of it
    is clipped by a scroll box, and it is no taller than the notebook's visible height.
    """
    graphs = surveyed[f"{theme}-1400"]["graphs"]
    assert graphs, "no %%autograd_graph picture measured in quickstart.ipynb"
    for g in graphs:
        assert g["inside"], f"the graph sticks out of its output area: {g}"
        assert g["visW"] >= g["w"] - 1 and g["visH"] >= g["h"] - 1, (
            f"part of the graph is hidden (scrolling): {g}"
        )
        assert g["h"] <= g["view_height"], (
            f"the graph is taller than the notebook's visible height: {g}"
        )
