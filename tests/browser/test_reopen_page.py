"""Tier 4: a saved and reopened notebook shows the monitor's final state, never a widget error.

The notebook is saved after Run All.

``reopen_check.ipynb`` (generated, see ``tests/browser/notebooks.py``) replays ``trace_demo.jsonl``
with ``%gpuwatch --count N``; the next cell waits until the monitor stopped and prints its final
state. The test saves the notebook (``docmanager:save``, as Ctrl+S does), closes it, shuts its
kernel down (a reopened or shared notebook has no live widget models), opens it again and reads what
the monitor's output shows (issue 16: when the monitor stops, its output is replaced by a static
snapshot of the final state).
"""

import re

import pytest

from tests.browser import jlab, notebooks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = notebooks.REOPEN_NAME
N = notebooks.REOPEN_COUNT


def _watch_output(page):
    cell = jlab.code_cells(page).nth(1)
    cell.scroll_into_view_if_needed()
    return jlab.outputs(cell)


@pytest.fixture(scope="module")
def reopened(page, lab, screenshots):
    """``(final line printed by the kernel, saved outputs of the monitor cell, reopened page)``."""
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page)
    assert jlab.error_texts(page) == [], jlab.page_state(page)
    final = jlab.text(jlab.outputs(jlab.code_cells(page).nth(2)))
    assert re.search(rf"final: running=False samples={N} at=", final), final
    jlab.shot(_watch_output(page), screenshots, "reopen-before-save")
    saved = jlab.save_close_reopen(page, lab, NAME, check_cell=2)
    out = _watch_output(page)
    out.locator(".jp-OutputArea-output").first.wait_for(state="visible", timeout=30_000)
    jlab.shot(out, screenshots, "reopen-after-reopen")
    return final, [c for c in saved if c["cell_type"] == "code"][1]["outputs"], page


def test_reopened_monitor_shows_final_snapshot(reopened):
    final, saved_outputs, page = reopened
    out = _watch_output(page)
    shown = jlab.text(out)
    assert "Error displaying widget" not in shown, f"the reopened notebook shows: {shown[:300]!r}"
    assert "Error displaying widget" not in jlab.text(page.locator(jlab.PANEL))
    assert shown.strip(), "the monitor's output is empty after reopening"
    # the final state: the stop, the sample count and the time of the last sample, not the first
    # sample "running"
    at = final.split("at=", 1)[1].strip()
    assert at in shown, (
        f"the last sample's time {at!r} is not shown after reopening: {shown[:400]!r}"
    )
    assert re.search(rf"samples:?\s*{N}\b", shown), f"not the final count ({N}): {shown[:400]!r}"
    assert not re.search(r"\brunning\b", shown), (
        f"still labelled running after the monitor stopped: {shown[:400]!r}"
    )
    # what the file holds, for nbviewer / GitHub / HTML export: no output that needs a live widget
    # model
    mimes = [m for o in saved_outputs for m in o.get("data", {})]
    assert "text/html" in mimes, mimes
    needs_model = [
        o for o in saved_outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert not needs_model, f"the saved monitor output still needs a widget model: {mimes}"
