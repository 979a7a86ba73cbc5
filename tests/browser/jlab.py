"""Driving JupyterLab 4 the way a person does.

Open a notebook, Run > Run All Cells, read what the page shows.

Every helper works on the visible notebook panel and waits on the page itself (prompts, the kernel
status indicator), never on fixed sleeps alone.
"""

from __future__ import annotations

import os
import secrets
import time

PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"
CODE_CELL = f"{PANEL} .jp-Notebook .jp-Cell.jp-CodeCell"

# JS: is the run finished? No cell queued/running ([*]), the kernel idle, and either the last code
# cell numbered or an error output present (JupyterLab stops the queue at the first error).
_RUN_DONE_JS = (
    "\n() => {\n"
    f"  const panel = document.querySelector('{PANEL}');\n"
    """  if (!panel) return false;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (!ind || ind.getAttribute('data-status') !== 'idle') return false;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
      .map(e => e.textContent);
  if (prompts.length === 0 || prompts.some(t => t.includes('*'))) return false;
  const lastDone = /\\d/.test(prompts[prompts.length - 1]);
  const stderr = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  const errored = [...panel.querySelectorAll(stderr)]
      .some(e => /Traceback|Error/.test(e.textContent));
  return lastDone || errored;
}
"""
)


# JS: the notebook has a kernel (not "No Kernel", which also reads as idle) and that kernel is idle.
_KERNEL_READY_JS = (
    "\n() => {\n"
    f"  const panel = document.querySelector('{PANEL}');\n"
    """  if (!panel) return false;
  const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const name = panel.querySelector('.jp-Toolbar-kernelName');
  const kernel = name ? name.textContent.trim() : '';
  return !!ind && ind.getAttribute('data-status') === 'idle'
      && kernel !== '' && kernel !== 'No Kernel';
}
"""
)


#: The front ends the suite drives, served by the same server: JupyterLab 4 and Notebook 7 (built
#: from JupyterLab's components: the same notebook panel, menus and output areas).
FRONT_ENDS = ("lab", "notebook7")


def open_notebook(page, lab, name, timeout_s=120.0, front_end="lab"):
    """Open ``name`` in ``front_end`` (:data:`FRONT_ENDS`) and wait until its kernel is idle.

    JupyterLab opens ``/lab/workspaces/<new>/tree/<name>``, Notebook 7 ``/notebooks/<name>``.
    """
    page.lab, page.notebook_name, page.front_end = lab, name, front_end
    if front_end == "lab":
        # A workspace of its own per opening: Lab does not restore tabs of earlier tests here.
        path = f"lab/workspaces/t{secrets.token_hex(4)}/tree/{name}"
    else:
        path = f"notebooks/{name}"
    page.goto(lab.url(path), wait_until="domcontentloaded")
    page.wait_for_selector(f"{PANEL} .jp-Notebook .jp-Cell", timeout=timeout_s * 1000)
    try:
        page.wait_for_function(_KERNEL_READY_JS, timeout=timeout_s * 1000, polling=250)
    except Exception as exc:
        _failure_shot(page, "kernel_timeout")
        raise AssertionError(
            f"{name}: no idle kernel within {timeout_s:.0f} s: {page_state(page)}"
        ) from exc


def run_all(page, timeout_s=180.0):
    """Menu Run > Run All Cells, then wait until the run is finished (see ``_RUN_DONE_JS``)."""
    page.locator("#jp-MainMenu").get_by_text("Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    time.sleep(0.5)  # let the first execute request leave before polling the indicator
    try:
        page.wait_for_function(_RUN_DONE_JS, timeout=timeout_s * 1000, polling=250)
    except Exception as exc:
        _failure_shot(page, "run_all_timeout")
        raise AssertionError(
            f"Run All Cells did not finish within {timeout_s:.0f} s: {page_state(page)}"
        ) from exc


def page_state(page):
    """Kernel status and cell prompts of the visible notebook (for failure messages)."""
    try:
        return page.evaluate(
            "() => {\n"
            f"          const panel = document.querySelector('{PANEL}');\n"
            """          if (!panel) return 'no notebook panel';
          const ind = panel.querySelector('.jp-Notebook-ExecutionIndicator');
          const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
              .map(e => e.textContent);
          const dialogs = [...document.querySelectorAll('.jp-Dialog')]
              .map(d => d.innerText.slice(0, 200));
          const name = panel.querySelector('.jp-Toolbar-kernelName');
          return JSON.stringify({status: ind && ind.getAttribute('data-status'),
                                 kernel: name && name.textContent.trim(), prompts, dialogs});
        }"""
        )
    except Exception as exc:  # the page itself is gone
        return f"(page state unavailable: {exc})"


def code_cells(page):
    return page.locator(CODE_CELL)


def cell_sources(page):
    """Source text of every code cell of the open notebook, in order.

    Read from the server's copy of the file: the DOM holds only what the editor rendered, and cells
    out of view may not be rendered at all.
    """
    model = page.lab.api(f"contents/{page.notebook_name}?content=1", timeout=30.0)
    return ["".join(c["source"]) for c in model["content"]["cells"] if c["cell_type"] == "code"]


def text(locator):
    """``textContent`` (also for content the browser skipped rendering, unlike ``inner_text``)."""
    return locator.text_content() or ""


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
    return [
        t
        for t in page.locator(
            f'{PANEL} .jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
        ).all_text_contents()
        if "Traceback" in t or "Error" in t
    ]


def math_in_outputs(page):
    """Text of every output fragment that JupyterLab typeset as LaTeX math.

    That is ``$...$`` in an HTML output.

    cudamagic's outputs hold paths, shell variables and prices-like numbers; a pair of ``$`` in them
    turns into italic math in the page while the kernel-side HTML looks right. Returns ``[]`` when
    nothing was typeset.
    """
    return page.locator(
        f"{PANEL} .jp-OutputArea mjx-container, {PANEL} .jp-OutputArea .MathJax"
    ).evaluate_all("els => els.map(e => (e.closest('td,p,div') || e).textContent.slice(0, 200))")


def svg_geometry(svg):
    """Where an output's SVG sits, what of it is visible, how high its labels are.

    Its size, the part left visible after clipping ancestors (up to the output area), whether it is
    inside the output area or in a scrollable box, and the height of its first label.

    Returns a dict: ``w, h`` (px), ``visW, visH`` (px visible), ``inside``, ``scrollable`` (bool),
    ``textH`` (px).
    """
    return svg.evaluate(
        """svg => {
        const r = svg.getBoundingClientRect();
        const area = svg.closest('.jp-OutputArea-output');
        const a = area.getBoundingClientRect();
        let vis = {l: r.left, t: r.top, r: r.right, b: r.bottom};
        let scrollable = false;
        for (let el = svg.parentElement; el && el !== area.parentElement; el = el.parentElement) {
          const s = getComputedStyle(el);
          if (s.overflowX !== 'visible' || s.overflowY !== 'visible') {
            const c = el.getBoundingClientRect();
            vis = {l: Math.max(vis.l, c.left), t: Math.max(vis.t, c.top),
                   r: Math.min(vis.r, c.right), b: Math.min(vis.b, c.bottom)};
            if ((el.scrollWidth > el.clientWidth + 1 && /auto|scroll/.test(s.overflowX)) ||
                (el.scrollHeight > el.clientHeight + 1 && /auto|scroll/.test(s.overflowY))) {
              scrollable = true;
            }
          }
        }
        // an <img> of an SVG (the autograd graph): dot's 10 pt labels, scaled as the image is
        const label = svg.tagName === 'IMG' ? null : svg.querySelector('text');
        const t = label ? label.getBoundingClientRect()
            : {height: svg.tagName === 'IMG' ? 13.33 * r.width / (svg.naturalWidth || 1e9) : 0};
        return {w: r.width, h: r.height,
                visW: Math.max(0, vis.r - vis.l), visH: Math.max(0, vis.b - vis.t),
                inside: r.left >= a.left - 1 && r.right <= a.right + 1, scrollable, textH: t.height,
                areaW: a.width};
      }"""
    )


#: The autograd graph's picture in an output: an ``<img>`` of SVG (it survives the sanitiser).
GRAPH_IMG = ".jp-OutputArea-output img[alt='autograd graph']"


def picture_svg(img) -> str:
    """The SVG text of a graph ``<img>`` (its base64 data URI, decoded)."""
    return img.evaluate("el => atob(el.src.split(',')[1])")


def assert_svg_fits(svg):
    """The SVG has a size, is visible, fits or scrolls, and has legible labels.

    Not clipped to nothing; fits the output area or scrolls; labels at least 6 px high. Returns the
    geometry.
    """
    svg.scroll_into_view_if_needed()
    geo = svg_geometry(svg)
    assert geo["w"] > 50 and geo["h"] > 50, f"the SVG has no size: {geo}"
    assert geo["visW"] >= min(geo["w"], 100) and geo["visH"] >= min(geo["h"], 100), (
        f"the SVG is clipped: {geo}"
    )
    assert geo["inside"] or geo["scrollable"], (
        f"the SVG sticks out of the output area and cannot scroll: {geo}"
    )
    assert geo["textH"] >= 6, f"labels shrunk to illegibility ({geo['textH']:.1f} px high): {geo}"
    return geo


def shot(locator_or_page, folder, name):
    """Save a screenshot as ``folder/name.png``; return the path.

    Of an element, scrolled into view, or of the page.
    """
    path = os.path.join(folder, f"{name}.png")
    locator_or_page.screenshot(path=path)
    return path


def _failure_shot(page, name):
    """Best-effort full-page screenshot for a failure.

    Saved as tests/_artifacts/screenshots/FAILED_<name>.png.
    """
    from tests.browser.conftest import ARTIFACTS

    try:
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, f"FAILED_{name}.png"))
    except Exception:
        pass


def save_close_reopen(page, lab, name: str, check_cell: int) -> list:
    """Save, close and reopen the notebook; return the saved file's cells.

    Saves as Ctrl+S does, closes every tab, shuts the kernels down (a reopened or shared notebook
    has no live widget models) and opens ``name`` again. Fails when the save did not reach the
    file (cell ``check_cell`` has no outputs there).
    """
    import json

    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    page.wait_for_function(
        f"() => !document.querySelector('{PANEL}.jp-mod-dirty') && "
        "![...document.querySelectorAll('.lm-TabBar-tab')]"
        ".some(t => t.classList.contains('jp-mod-dirty'))",
        timeout=30_000,
        polling=200,
    )
    saved = lab.api(f"contents/{name}?content=1", timeout=30.0)["content"]["cells"]
    assert saved[check_cell]["outputs"], (
        f"the save did not reach the file: {json.dumps(saved)[:500]}"
    )
    page.evaluate("() => window.jupyterapp.commands.execute('application:close-all')")
    lab.shutdown_kernels()
    open_notebook(page, lab, name)
    return saved
