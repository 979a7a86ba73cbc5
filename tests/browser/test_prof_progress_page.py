"""Tier 4: a long ``%%torchprof`` cell in JupyterLab, as a person watches it (issue 28).

A notebook of its own: a cell that runs about 5 s of small matmuls under ``%%torchprof``. While it
runs, the in-place line ("%%torchprof: profiling... 2.0 s") is seen; once the summary is shown the
line is gone. The timeline picture's legend names exactly the colours its bars use. At a 540 px
output the operator name column stays visible and readable, in the summary and in a
``%torchprof --compare`` table.
"""

import os
import re
import xml.etree.ElementTree as ET

import pytest

from tests.browser import jlab, looks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "prof_progress_check.ipynb"
CELLS = [
    "%load_ext cudamagic\nimport time\nimport torch\n\nx = torch.randn(256, 256)",
    # time-based: about 5 s however loaded the machine is; few events (a short analysis)
    "%%torchprof\n"
    "t0 = time.monotonic()\n"
    "while time.monotonic() - t0 < 5:\n"
    "    y = (x @ x).relu().sum()\n"
    "    time.sleep(0.01)",
    # two small profiles and their comparison (its name column is checked at 540 px too)
    "%%torchprof -o small\nfor _ in range(20):\n    y = torch.log_softmax(x[:32] @ x, dim=1)",
    "%%torchprof -o large\nfor _ in range(5):\n    y = torch.log_softmax(x @ x, dim=1)",
    "%torchprof --compare small large",
]
PROGRESS = r"%%torchprof: (profiling|analysing)[^.]*\.\.\. [\d.]+ s"

# JS: record, from now on, every progress line any output of the panel shows, and whether its
# cell was running ([*]) when it was shown. Mutation records: no update is missed between polls.
_WATCH_JS = (
    "(pattern) => {\n"
    f"  const panel = document.querySelector('{jlab.PANEL}');\n"
    """  const re = new RegExp(pattern);
  window.cmProgressSeen = [];
  const look = () => {
    for (const out of panel.querySelectorAll('.jp-CodeCell .jp-OutputArea-output')) {
      const m = (out.textContent || '').match(re);
      if (!m) continue;
      const cell = out.closest('.jp-CodeCell');
      const prompt = cell.querySelector('.jp-InputArea-prompt');
      const running = !!prompt && prompt.textContent.includes('*');
      window.cmProgressSeen.push({line: m[0], running});
    }
  };
  new MutationObserver(look).observe(panel, {subtree: true, childList: true, characterData: true});
}
"""
)


@pytest.fixture(scope="module")
def ran(page, lab):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, os.path.join(lab.root, NAME))
    jlab.open_notebook(page, lab, NAME)
    page.evaluate(_WATCH_JS, PROGRESS)
    jlab.run_all(page, timeout_s=300)
    assert jlab.error_texts(page) == [], jlab.page_state(page)
    return page


def _summary(page):
    box = (
        jlab.outputs(jlab.code_cells(page).nth(1))
        .locator(".cm-prof", has_text="Top operators by self time")
        .first
    )
    box.wait_for(state="visible", timeout=30_000)
    return box


def test_progress_line_while_running_then_gone(ran, screenshots):
    seen = ran.evaluate("() => window.cmProgressSeen")
    profiling = [s for s in seen if s["running"] and s["line"].startswith("%%torchprof: profil")]
    assert profiling, f"no progress line seen while the 5 s cell ran: {seen[:5]}"
    out = jlab.outputs(jlab.code_cells(ran).nth(1))
    _summary(ran)
    text = jlab.text(out)
    assert "Top operators by self time" in text, text[:300]
    assert not re.search(PROGRESS, text), f"the progress line stayed: {text[:300]}"
    jlab.shot(out, screenshots, "prof_progress_summary")


def test_legend_colours_are_the_bar_colours(ran):
    img = _summary(ran).locator("img[src^='data:image/svg+xml']").first
    img.wait_for(state="visible", timeout=15_000)
    svg = ET.fromstring(jlab.picture_svg(img))
    rects = [e for e in svg.iter() if e.tag.endswith("rect")]
    # legend swatches are outlined; bars are placed (x) and not outlined; the background neither
    legend = {r.get("fill") for r in rects if r.get("stroke")}
    bars = {r.get("fill") for r in rects if r.get("x") and not r.get("stroke")}
    assert bars, "no bars in the timeline"
    assert bars == legend, f"bars only: {bars - legend}; legend only: {legend - bars}"
    assert len(bars) >= 2, f"one colour for every operator: {bars}"


# JS: the first operator row's name cell: its box, the part of it left visible by its clipping
# ancestors and the output area, its text, font size and how many lines it takes.
_NAME_CELL_JS = """box => {
  const h = [...box.querySelectorAll('h4')].find(e => e.textContent.startsWith('Top operators'));
  // the summary's top-operators table, or the --compare table (its name column is cm-mono)
  const td = h ? h.nextElementSibling.querySelector('tbody tr td')
      : box.querySelector('table tbody tr td.cm-mono');
  const area = td.closest('.jp-OutputArea-output');
  const r = td.getBoundingClientRect();
  let vis = {l: r.left, r: r.right};
  for (let el = td.parentElement; el && el !== area.parentElement; el = el.parentElement) {
    const s = getComputedStyle(el);
    if (s.overflowX !== 'visible' || el === area) {
      const c = el.getBoundingClientRect();
      vis = {l: Math.max(vis.l, c.left), r: Math.min(vis.r, c.right)};
    }
  }
  const range = document.createRange();
  range.selectNodeContents(td);
  const tops = new Set([...range.getClientRects()].map(q => Math.round(q.top)));
  return {w: r.width, visW: Math.max(0, vis.r - vis.l), areaW: area.getBoundingClientRect().width,
          text: td.textContent, shown: td.innerText, lines: tops.size,
          font: parseFloat(getComputedStyle(td).fontSize),
          cut: td.scrollWidth > td.clientWidth + 1};
}"""


def _output_width(box):
    return box.evaluate("b => b.closest('.jp-OutputArea-output').getBoundingClientRect().width")


def test_name_column_readable_at_540_px(ran, screenshots):
    box = _summary(ran)
    viewport = ran.viewport_size["width"]
    try:
        # the viewport that gives a 540 px output (the sidebars and prompt take the rest)
        for _ in range(3):
            width = _output_width(box)
            if abs(width - 540) <= 10:
                break
            viewport = round(viewport + 540 - width)
            looks.set_width(ran, viewport)
        assert abs(_output_width(box) - 540) <= 20, _output_width(box)
        compared = jlab.outputs(jlab.code_cells(ran).nth(4)).locator(".cm-prof").first
        for shown, shot in ((box, "prof_progress_540px"), (compared, "prof_compare_540px")):
            shown.scroll_into_view_if_needed()
            cell = shown.evaluate(_NAME_CELL_JS)
            name = cell["text"]
            parts = [p for p in re.split(r"(?<=::)|(?<=_)|(?<=/)", name) if p]
            assert name.strip(), f"{shot}: an empty name cell: {cell}"
            assert cell["w"] >= 40 and cell["visW"] >= cell["w"] - 1, f"name clipped: {cell}"
            assert re.sub(r"\s", "", cell["shown"]) == name, f"name not fully shown: {cell}"
            assert not cell["cut"] and cell["font"] >= 10, cell
            assert cell["lines"] <= len(parts), f"the name broke inside a part: {cell}"
            jlab.shot(shown, screenshots, shot)
    finally:
        looks.set_width(ran, 1400)
