"""Tier 3: examples/autograd_tour.ipynb executed top to bottom in a real Jupyter kernel.

Tier 3: examples/autograd_tour.ipynb executed top to bottom in a real Jupyter kernel (nbclient).
"""

import os
import re
import shutil

import pytest

from tests.watch.sanitiser import sanitise

from .common import picture, visible_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def executed():
    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot not installed")
    import run_demo

    return run_demo.execute(os.path.join(ROOT, "examples", "autograd_tour.ipynb"), timeout_s=120)


def _graph_cells(nb):
    return [
        c for c in nb.cells if c.cell_type == "code" and c.source.startswith("%%autograd_graph")
    ]


def test_no_cell_errors(executed):
    for cell in executed.cells:
        if cell.cell_type == "code":
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source


def test_every_graph_cell_shows_its_picture_as_an_image(executed):
    cells = _graph_cells(executed)
    assert len(cells) >= 11
    for cell in cells:
        data = next(o for o in cell.outputs if o.output_type == "execute_result").data
        assert "<svg" in picture(data["text/html"]), cell.source
        assert "autograd graph:" in data["text/plain"]


def test_untrusted_tour_still_shows_every_picture(executed):
    """The executed notebook is not trusted: JupyterLab sanitises its HTML; the pictures stay."""
    for cell in _graph_cells(executed):
        html = next(o for o in cell.outputs if o.output_type == "execute_result").data["text/html"]
        clean = sanitise(html)
        assert "<svg" in picture(clean), cell.source
        top = visible_text(clean.split("<details")[0])
        assert top.startswith("autograd graph:") and "Backward" not in top, (cell.source, top)


def test_tour_steps_show_what_they_teach(executed):
    html = {
        c.source.splitlines()[-1]: next(
            o for o in c.outputs if o.output_type == "execute_result"
        ).data["text/html"]
        for c in _graph_cells(executed)
    }
    assert "model.0.weight" in picture(html["loss"])  # parameters named by module path
    assert "freed by backward" in picture(html["q"])
    skipped = html['{"tracked": (x * 2).sum(), "no_grad": frozen, "detached": cut}']
    # no_grad output skipped, with a note
    assert "<code>[&#x27;no_grad&#x27;]</code> has no grad_fn" in skipped
    text = "".join(
        o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
    )
    assert "tensor([3., 3., 3.])" in text and "tensor([ 4.,  8., 12.])" in text


def test_big_models_get_the_automatic_view(executed):
    """The tour's big-model cells.

    A 6-layer encoder and a 400-step RNNCell loop, folded into one box each.
    """
    html = {
        c.source: next(o for o in c.outputs if o.output_type == "execute_result").data["text/html"]
        for c in _graph_cells(executed)
    }
    encoder = next(h for src, h in html.items() if "TransformerEncoder(" in src)
    loop = next(h for src, h in html.items() if "range(400)" in src)
    assert "TransformerEncoderLayer x 6" in encoder and "454 autograd nodes (" in encoder
    assert "rnn (RNNCell) x 400" in loop and "2405 autograd nodes (" in loop
    for h in (encoder, loop):
        size = re.search(r'<svg width="(\d+)pt" height="(\d+)pt"', picture(h))
        # a screen, not 22,620 px
        assert size and int(size.group(1)) < 1000 and int(size.group(2)) < 1000, size
