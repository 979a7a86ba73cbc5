"""Driving JupyterLab 4 the way a person does: open a notebook, Run > Run All Cells, read what the page shows.

Every helper works on the visible notebook panel and waits on the page itself (prompts, the kernel status
indicator), never on fixed sleeps alone.
"""

from __future__ import annotations

import os
import secrets
import time

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
CODE_CELL = f"{PANEL} .jp-Notebook .jp-Cell.jp-CodeCell"

# JS: is the run finished? No cell queued/running ([*]), the kernel idle, and either the last code cell numbered
# or an error output present (JupyterLab stops the queue at the first error).
_RUN_DONE_JS = """
() => {
  const panel = document.querySelector('%(panel)s');
  if (!panel) return false;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!ind || ind.getAttribute('data-status') !== 'idle') return false;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent);
  if (prompts.length === 0 || prompts.some(t => t.includes('*'))) return false;
  const lastDone = /\\d/.test(prompts[prompts.length - 1]);
  const errored = [...panel.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
      .some(e => /Traceback|Error/.test(e.textContent));
  return lastDone || errored;
}
""" % {"panel": PANEL}


# JS: the notebook has a kernel (not "No Kernel", which also reads as idle) and that kernel is idle.
_KERNEL_READY_JS = """
() => {
  const panel = document.querySelector('%(panel)s');
  if (!panel) return false;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const name = panel.querySelector('.jp-Toolbar-kernelName');
  const kernel = name ? name.textContent.trim() : '';
  return !!ind && ind.getAttribute('data-status') === 'idle' && kernel !== '' && kernel !== 'No Kernel';
}
""" % {"panel": PANEL}


def open_notebook(page, lab, name, timeout_s=120.0):
    """Open ``/lab/tree/<name>`` and wait until its kernel is idle."""
    # A workspace of its own per opening: Lab does not restore tabs of earlier tests into this page.
    page.goto(lab.url(f"lab/workspaces/t{secrets.token_hex(4)}/tree/{name}"), wait_until="domcontentloaded")
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    try:
        page.wait_for_function(_KERNEL_READY_JS, timeout=timeout_s * 1000, polling=250)
    except Exception as exc:
        _failure_shot(page, "kernel_timeout")
        raise AssertionError(f"{name}: no idle kernel within {timeout_s:.0f} s: {page_state(page)}") from exc


def run_all(page, timeout_s=180.0):
    """Menu Run > Run All Cells, then wait until the run is finished (see ``_RUN_DONE_JS``)."""
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    time.sleep(0.5)  # let the first execute request leave before polling the indicator
    try:
        page.wait_for_function(_RUN_DONE_JS, timeout=timeout_s * 1000, polling=250)
    except Exception as exc:
        _failure_shot(page, "run_all_timeout")
        raise AssertionError(f"Run All Cells did not finish within {timeout_s:.0f} s: {page_state(page)}") from exc


def page_state(page):
    """Kernel status and cell prompts of the visible notebook (for failure messages)."""
    try:
        return page.evaluate("""() => {
          const panel = document.querySelector('%s');
          if (!panel) return 'no notebook panel';
          const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
          const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].map(e => e.textContent);
          const dialogs = [...document.querySelectorAll('.jp-Dialog')].map(d => d.innerText.slice(0, 200));
          const name = panel.querySelector('.jp-Toolbar-kernelName');
          return JSON.stringify({status: ind && ind.getAttribute('data-status'),
                                 kernel: name && name.textContent.trim(), prompts, dialogs});
        }""" % PANEL)
    except Exception as exc:  # the page itself is gone
        return f"(page state unavailable: {exc})"


def code_cells(page):
    return page.locator(CODE_CELL)


def cell_sources(page):
    """Source text of every code cell, in order."""
    return page.eval_on_selector_all(
        CODE_CELL, "els => els.map(e => { const c = e.querySelector('.cm-content');"
                   " return c ? c.innerText : ''; })")


def find_cell(page, predicate):
    """The Locator of the first code cell whose source satisfies ``predicate(source)``, or None."""
    for i, src in enumerate(cell_sources(page)):
        if predicate(src.strip()):
            return code_cells(page).nth(i)
    return None


def outputs(cell):
    """The cell's output area Locator."""
    return cell.locator(".jp-OutputArea")


def error_texts(page):
    """Texts of error (traceback) outputs on the page."""
    return [t for t in page.locator(
        f'{PANEL} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()
        if "Traceback" in t or "Error" in t]


def shot(locator_or_page, folder, name):
    """Save a screenshot (an element, scrolled into view, or the page) as ``folder/name.png``; returns the path."""
    path = os.path.join(folder, f"{name}.png")
    locator_or_page.screenshot(path=path)
    return path


def _failure_shot(page, name):
    """Best-effort full-page screenshot for a failure (tests/_artifacts/screenshots/FAILED_<name>.png)."""
    from tests.browser.conftest import ARTIFACTS

    try:
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, f"FAILED_{name}.png"))
    except Exception:
        pass
