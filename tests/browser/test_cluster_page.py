"""Tier 4: the cluster view of ``%gpuwatch`` in JupyterLab, as a person sees it.

One tile per GPU, grouped by host.

The module writes its own small notebook into the server's temporary copy of ``examples/``: it
replays ``trace_cluster.jsonl`` (recorded from the local demo cluster: 12 GPUs on 4 hosts, MIG on
node03) through the same cluster widget a live ``--source prometheus://...`` uses. The checks read
the page: every GPU has a visible tile, the tiles sit in one row block per host in host order, and
nothing in a tile or a host label overflows its box.
"""

from __future__ import annotations

import itertools
import os

import pytest

from tests.browser import jlab

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "cluster_check.ipynb"
TRACE = "trace_cluster.jsonl"
CELLS = ["%load_ext cudamagic", f"w = %gpuwatch --replay {TRACE} --interval 0.5\nw"]

# JS: geometry and overflow of the tiles and host rows of the first cluster view on the page.
_LAYOUT_JS = """
(root) => {
  const box = e => {
    const r = e.getBoundingClientRect();
    return {x: r.x, y: r.y, w: r.width, h: r.height};
  };
  const over = e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1;
  const hosts = [...root.querySelectorAll('.cm-host')].map(h => {
    const label = h.querySelector('span');
    return {host: h.getAttribute('data-host'), label: label.textContent, labelOverflow: over(label),
            box: box(h),
            tiles: [...h.querySelectorAll('.cm-tile')].map(t => {
              const tb = t.getBoundingClientRect();
              const texts = [...t.querySelectorAll('*')].filter(c => c.childNodes.length &&
                  [...c.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()));
              const head = t.firstElementChild;  // "index [MIG]  util%": one line, never wrapped
              const headPx = parseFloat(getComputedStyle(head).fontSize);
              return {box: box(t), text: t.textContent.trim(), overflow: over(t),
                      wrapped: head.getBoundingClientRect().height > 1.8 * headPx,
                      visible: getComputedStyle(t).visibility !== 'hidden'
                          && tb.width > 0 && tb.height > 0,
                      fontPx: Math.min(...texts.map(c => parseFloat(getComputedStyle(c).fontSize))),
                      textOutside: texts.some(c => { const r = c.getBoundingClientRect();
                        return r.left < tb.left - 0.5 || r.right > tb.right + 0.5 ||
                               r.top < tb.top - 0.5 || r.bottom > tb.bottom + 0.5; })};
            })};
  });
  const area = root.closest('.jp-OutputArea-output');
  return {hosts, areaOverflowX: area ? area.scrollWidth > area.clientWidth + 1 : null,
          areaRight: area ? area.getBoundingClientRect().right : null};
}
"""


def _expected():
    """``{host: GPU count}`` of the trace's last sample, in host order.

    Read with the project's own reader.
    """
    from cudamagic.watch import trace

    here = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples"
    )
    _, samples = trace.read_trace(os.path.join(here, TRACE))
    out = {}
    for g in samples[-1].gpus:
        out[g.host] = out.get(g.host, 0) + 1
    return out


@pytest.fixture(scope="module")
def nb(page, lab):
    import nbformat

    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    book.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nbformat.write(book, os.path.join(lab.root, NAME))
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page)
    return page


def _view(page):
    cell = jlab.code_cells(page).nth(1)
    cell.scroll_into_view_if_needed()
    root = jlab.outputs(cell).locator(".jp-OutputArea-output .widget-vbox").first
    root.wait_for(state="visible", timeout=15_000)  # the widget view, not the text/html fallback
    tiles = root.locator(".cm-tile")
    tiles.first.wait_for(state="visible", timeout=15_000)
    return cell, root


def test_cluster_notebook_ran_without_errors(nb):
    assert jlab.error_texts(nb) == [], jlab.page_state(nb)


def test_cluster_tiles_visible_grouped_by_host_and_readable(nb, screenshots):
    cell, root = _view(nb)
    want = _expected()
    assert sum(want.values()) == 12 and len(want) == 4  # what the trace holds
    layout = root.locator(".cm-cluster-status").first.evaluate(
        "(el) => (" + _LAYOUT_JS + ")(el.closest('.widget-vbox'))"
    )
    jlab.shot(jlab.outputs(cell), screenshots, "cluster_tiles")
    hosts = layout["hosts"]
    # grouped by host: one row block per host, in host order, holding exactly that host's GPUs
    assert [h["host"] for h in hosts] == list(want), hosts
    assert [len(h["tiles"]) for h in hosts] == list(want.values())
    for h in hosts:
        assert h["label"].startswith(h["host"]) and f"{len(h['tiles'])}\u00a0GPUs" in h["label"], h[
            "label"
        ]
    for above, below in itertools.pairwise(hosts):
        assert (
            max(t["box"]["y"] + t["box"]["h"] for t in above["tiles"])
            <= min(t["box"]["y"] for t in below["tiles"]) + 0.5
        ), (above["host"], below["host"])
    # visible and readable: every tile drawn, its text inside its box at a readable size, no overlap
    tiles = [t for h in hosts for t in h["tiles"]]
    assert all(t["visible"] and t["text"] for t in tiles), tiles
    assert not [t for t in tiles if t["overflow"] or t["textOutside"] or t["wrapped"]], [
        t for t in tiles if t["overflow"] or t["textOutside"] or t["wrapped"]
    ]
    assert min(t["fontPx"] for t in tiles) >= 9, [t["fontPx"] for t in tiles]
    assert not [h["label"] for h in hosts if h["labelOverflow"]]
    boxes = [t["box"] for t in tiles]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert (
                a["x"] + a["w"] <= b["x"] + 0.5
                or b["x"] + b["w"] <= a["x"] + 0.5
                or a["y"] + a["h"] <= b["y"] + 0.5
                or b["y"] + b["h"] <= a["y"] + 0.5
            ), (a, b)
    assert layout["areaOverflowX"] is False
    assert max(b["x"] + b["w"] for b in boxes) <= layout["areaRight"] + 0.5
    # the MIG GPU of node03 says so on its tile; the detail of one host is below the tiles
    assert any("MIG" in t["text"] for t in hosts[2]["tiles"])
    detail = root.locator("table").first
    detail.wait_for(state="visible", timeout=15_000)
    assert "GPU" in jlab.text(detail) and "memory" in jlab.text(detail)
    # the host detail fits a 1400 px window's output (no sideways scroll): its headers wrap
    fit = detail.evaluate(
        "t => ({table: t.getBoundingClientRect().width,"
        " box: t.parentElement.getBoundingClientRect().width})"
    )
    assert fit["table"] <= fit["box"] + 1, f"the host detail scrolls sideways: {fit}"
