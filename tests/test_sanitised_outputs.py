"""Saved notebooks read right where they are not trusted (JupyterLab's sanitiser, see sanitise.py).

The notebooks are ``examples/out/*.ipynb`` when ``make demo`` made them, else a small notebook
executed here through nbclient with every magic that runs on a CPU. Every cudamagic ``text/html``
output goes through the sanitiser: its tables and pictures must still be there, its text must not
gain the text of a dropped ``<svg>`` (node names, ``<title>`` tooltips), and its table cells must
keep their alignment.
"""

from __future__ import annotations

import glob
import os

import pytest

from tests import sanitise

pytest.importorskip("nh3", reason="nh3 is in the test extra: pip install -e '.[test]'")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def notebooks(tmp_path_factory):
    """(name, notebook) pairs: the demo's executed notebooks, else one executed here."""
    import nbformat

    saved = sorted(glob.glob(os.path.join(ROOT, "examples", "out", "*.ipynb")))
    if saved:
        return [(os.path.basename(p), nbformat.read(p, as_version=4)) for p in saved]
    return [("sanitiser_check.ipynb", sanitise.execute(str(tmp_path_factory.mktemp("sanitise"))))]


def _outputs(notebooks):
    """(where, output) of every cudamagic text/html output."""
    for name, nb in notebooks:
        for i, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []):
                html = out.get("data", {}).get("text/html", "")
                if 'class="cudamagic' in html:
                    yield f"{name} cell {i} ({cell.source.splitlines()[0][:40]})", out


def test_every_magic_left_an_html_output(notebooks):
    """The check below saw the outputs of every magic of the executed notebook."""
    if notebooks[0][0] != "sanitiser_check.ipynb":
        pytest.skip("examples/out/ notebooks: their cells are the examples' own")
    cells = notebooks[0][1].cells
    kinds = {
        src.split()[0]
        for src, cell in zip(sanitise.CELLS, cells, strict=True)
        if any('class="cudamagic' in o.get("data", {}).get("text/html", "") for o in cell.outputs)
    }
    expected = {
        c.split()[0] for c in sanitise.CELLS if c.startswith("%") and c != "%load_ext cudamagic"
    }
    assert expected | {"torch.zeros(1).cuda()"} <= kinds, sorted(kinds)


def test_tables_and_pictures_survive(notebooks):
    lost = []
    for where, out in _outputs(notebooks):
        html = out["data"]["text/html"]
        clean = sanitise.sanitise(html)
        pictures = sanitise.count(html, "svg") + sanitise.count(html, "img")
        if (sanitise.count(clean, "table"), sanitise.count(clean, "img")) != (
            sanitise.count(html, "table"),
            pictures,
        ):
            lost.append(
                f"{where}: tables {sanitise.count(html, 'table')} -> "
                f"{sanitise.count(clean, 'table')}, pictures {pictures} -> "
                f"{sanitise.count(clean, 'img')} (an inline <svg> is dropped: use an <img> data "
                "URI or an image/png output; JupyterLab shows no image/svg+xml output of an "
                "untrusted notebook)"
            )
    assert not lost, "\n".join(lost)


def test_no_dropped_text_leaks_into_the_flow(notebooks):
    """The sanitised output reads as the trusted one does (no SVG labels or tooltips added)."""
    leaks = []
    for where, out in _outputs(notebooks):
        html = out["data"]["text/html"]
        shown = "".join(sanitise.visible_text(html, skip_svg=True).split())
        clean = "".join(sanitise.visible_text(sanitise.sanitise(html)).split())
        if clean != shown:
            at = next(
                (i for i, (a, b) in enumerate(zip(clean, shown, strict=False)) if a != b),
                len(shown),
            )
            leaks.append(
                f"{where}: {len(clean) - len(shown):+d} characters from {clean[at:][:80]!r}"
            )
    assert not leaks, "\n".join(leaks)


def test_table_cells_keep_their_alignment(notebooks):
    """Names stay left and numbers right (JupyterLab's own table style right-aligns every cell)."""
    import re

    bad = []
    for where, out in _outputs(notebooks):
        clean = sanitise.sanitise(out["data"]["text/html"])
        for cell in re.findall(r"<t[dh]\b[^>]*>", clean):
            if "text-align:" not in cell:
                bad.append(f"{where}: {cell}")
    assert not bad, "\n".join(bad[:10])


def test_the_sanitiser_model_drops_what_jupyterlab_drops():
    """The model itself: <style>, <svg> and var() values go; a plain inline style stays."""
    html = (
        '<div style="color:var(--jp-ui-font-color1,#000);text-align:left"><style>b{}</style>'
        "<svg><style>text{}</style><title>tip</title></svg>"
        '<img src="data:image/png;base64,AA=="></div>'
    )
    clean = sanitise.sanitise(html)
    assert "<style" not in clean and "<svg" not in clean and "var(" not in clean
    assert 'style="text-align:left"' in clean and 'src="data:image/png' in clean
    assert sanitise.visible_text(clean) == "tip"
