"""Tier 4: Jupyter Notebook 7, the second tested front end, as a person sees it.

The same server as the JupyterLab checks serves Notebook 7's pages (``/notebooks/<name>``): the
quickstart is run there (Run > Run All Cells) and looked at in the light and the dark theme at
1400 and 800 px with the same contrast and overflow checks as in JupyterLab (``looks.py``); then
``browser_check.ipynb``'s replayed ``%gpuwatch`` must render as a widget and keep updating while
another cell runs.

The tests of this module share one page and run in file order. They open copies of the two
notebooks (``nb7_*.ipynb``): Notebook 7 saves what it runs, and the JupyterLab checks must find the
originals as the fixtures left them.
"""

import os
import re
import shutil

import pytest

from tests.browser import jlab, looks, notebooks

pytestmark = [pytest.mark.browser, pytest.mark.slow]


QUICKSTART, CHECK = "nb7_quickstart.ipynb", f"nb7_{notebooks.NAME}"


@pytest.fixture(scope="module")
def quickstart(page, lab):
    for src, dst in (("quickstart.ipynb", QUICKSTART), (notebooks.NAME, CHECK)):
        shutil.copy(os.path.join(lab.root, src), os.path.join(lab.root, dst))
    jlab.open_notebook(page, lab, QUICKSTART, front_end="notebook7")
    assert page.locator("#jp-main-dock-panel").count() == 0, "this is JupyterLab, not Notebook 7"
    jlab.run_all(page)
    return page


def test_quickstart_runs_without_errors(quickstart):
    assert jlab.error_texts(quickstart) == [], jlab.page_state(quickstart)
    assert "Error displaying widget" not in jlab.text(quickstart.locator(jlab.PANEL))


def test_cudainfo_and_graph_render(quickstart, screenshots):
    import torch

    info = jlab.find_cell(quickstart, lambda src: src == "%cudainfo")
    table = jlab.outputs(info).locator("table").first
    table.wait_for(state="visible")
    assert torch.__version__ in jlab.text(table)
    graph = jlab.find_cell(quickstart, lambda src: src.startswith("%%autograd_graph"))
    img = jlab.outputs(graph).locator(jlab.GRAPH_IMG).first  # an <img> of SVG, as in JupyterLab
    img.wait_for(state="visible", timeout=15_000)
    assert "Backward" in jlab.picture_svg(img)
    jlab.assert_svg_fits(img)
    jlab.shot(quickstart, screenshots, "nb7-quickstart-page")


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks("quickstart", QUICKSTART)


def _samples(root) -> int:
    m = re.search(r"samples:\s*(\d+)", jlab.text(root))
    assert m, f"no 'samples: N' in the monitor: {jlab.text(root)[:300]!r}"
    return int(m.group(1))


def test_live_monitor_renders_and_updates(quickstart, lab, screenshots):
    page = quickstart  # the same page, now on the other notebook
    """The replayed monitor is a widget that redraws (both themes) and samples while a cell runs."""
    jlab.open_notebook(page, lab, CHECK, front_end="notebook7")
    jlab.run_all(page)
    work = jlab.text(jlab.outputs(jlab.code_cells(page).nth(notebooks.cell_index("work"))))
    during = re.search(r"samples taken during this cell=(\d+)", work)
    assert during and int(during.group(1)) >= 2, work
    cell = jlab.code_cells(page).nth(notebooks.cell_index("gpuwatch"))
    cell.scroll_into_view_if_needed()
    root = jlab.outputs(cell).locator(".jp-OutputArea-output .widget-vbox").first
    root.wait_for(state="visible", timeout=15_000)  # the widget view, not its text fallback
    assert "REPLAY" in jlab.text(root) and jlab.text(root.locator("button").first) == "Stop"
    try:
        for theme in looks.THEMES:
            looks.set_theme(page, theme)
            page.wait_for_function(
                "([el, n]) => { const m = /samples:\\s*(\\d+)/.exec(el.textContent);"
                " return !!m && Number(m[1]) >= n; }",
                arg=[root.element_handle(), _samples(root) + 2],
                timeout=30_000,
                polling=100,
            )
            jlab.shot(jlab.outputs(cell), screenshots, f"nb7-gpuwatch-{theme}")
    finally:
        looks.set_theme(page, "light")
