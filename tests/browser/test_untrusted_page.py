"""Tier 4: a notebook executed by nbclient (so not trusted) opened in JupyterLab, as shared.

JupyterLab sanitises every HTML output of an untrusted notebook (no ``<style>``, no ``<svg>``,
no ``var()`` in inline styles). The graphs and tables must still be there: pictures as loaded
images, tables with rows, names left-aligned. Then the first two cells are run live: the load
message and the ``%cudamagic`` overview are visible. Last, the page (sanitised outputs and the live
ones) gets the suite's contrast and overflow checks in the light and dark theme.
"""

import pytest

from tests import sanitise
from tests.browser import jlab, looks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "untrusted_check.ipynb"
OUT = f"{jlab.PANEL} .jp-OutputArea-output"


@pytest.fixture(scope="module")
def saved(lab, tmp_path_factory):
    """The executed notebook, written unsigned into the server's root."""
    import os

    import nbformat

    nb = sanitise.execute(str(tmp_path_factory.mktemp("untrusted")))
    nbformat.write(nb, os.path.join(lab.root, NAME))
    return nb


@pytest.fixture(scope="module")
def shared(page, lab, saved):
    jlab.open_notebook(page, lab, NAME)
    page.wait_for_selector(f"{OUT} .cudamagic", timeout=30_000)
    return page


def _cell(page, start):
    cell = jlab.find_cell(page, lambda src: src.startswith(start))
    assert cell is not None, f"no cell starting with {start!r}"
    cell.scroll_into_view_if_needed()
    return jlab.outputs(cell)


def test_the_notebook_is_shown_sanitised(shared):
    """The premise: JupyterLab dropped our stylesheets (the notebook is not trusted)."""
    counts = shared.evaluate(
        f"""() => ({{outputs: document.querySelectorAll('{OUT} .cudamagic').length,
                  styles: document.querySelectorAll('{OUT} .cudamagic style').length}})"""
    )
    assert counts["outputs"] >= 8 and counts["styles"] == 0, counts


def test_graph_is_a_loaded_picture(shared, screenshots):
    out = _cell(shared, "%%autograd_graph")
    img = out.locator("img").first
    img.wait_for(state="visible", timeout=15_000)
    shared.wait_for_function("img => img.complete", arg=img.element_handle(), timeout=15_000)
    size = img.evaluate("img => [img.naturalWidth, img.getBoundingClientRect().width]")
    assert size[0] > 50 and size[1] > 50, size
    height = out.bounding_box()["height"]
    assert height < 2500, f"the graph's output is {height:.0f} px high (text soup?)"
    jlab.shot(out, screenshots, "untrusted_graph")


def test_every_picture_loads(shared):
    broken = shared.evaluate(
        f"""() => [...document.querySelectorAll('{OUT} .cudamagic img')]
             .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80))"""
    )
    assert broken == [], broken


@pytest.mark.parametrize("start", ["%cudainfo", "%%cudamem", "%%torchprof", "%cudamagic"])
def test_tables_have_rows_and_left_aligned_names(shared, screenshots, start):
    out = _cell(shared, start)
    table = out.locator(".cudamagic table").first
    table.wait_for(state="visible", timeout=15_000)
    assert table.locator("tbody tr").count() >= 1
    align = table.evaluate(
        """t => { const td = [...t.querySelectorAll('td')]
                      .find(c => !c.classList.contains('cm-num'));
                  return td ? getComputedStyle(td).textAlign : 'left'; }"""
    )
    margin = table.evaluate("t => getComputedStyle(t).marginLeft")
    assert align in ("left", "start") and margin == "0px", (align, margin)
    jlab.shot(out, screenshots, f"untrusted_{start.strip('%')}")


def test_load_message_and_overview_when_run(shared, screenshots):
    """Run the first two cells live: the one-line load message, then the overview table."""
    jlab.code_cells(shared).first.click()
    for _ in range(2):
        shared.evaluate(
            "() => window.jupyterapp.commands.execute('notebook:run-cell-and-select-next')"
        )
    load = jlab.outputs(jlab.code_cells(shared).nth(0))
    shared.wait_for_function(
        "el => /added .*%gpuwatch.*Overview: %cudamagic/.test(el.textContent)",
        arg=load.element_handle(),
        timeout=60_000,
    )
    assert load.is_visible()
    overview = jlab.outputs(jlab.code_cells(shared).nth(1))
    shared.wait_for_function(
        "el => el.querySelectorAll('style').length > 0",
        arg=overview.element_handle(),
        timeout=60_000,
    )  # a fresh output of this session is trusted: its stylesheet is back
    rows = overview.locator("table tbody tr")
    text = jlab.text(overview)
    assert rows.count() >= 8 and "%gpuwatch?" in text and "%%torchprof?" in text, text[:300]
    jlab.shot(overview, screenshots, "overview_live")


# ---- light and dark theme, 1400 and 800 px (runs last: it switches themes) ----


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks("shared", NAME)
