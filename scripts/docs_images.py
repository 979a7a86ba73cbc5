"""The README's pictures, docs/images/<magic>.png, from a real JupyterLab (`make docs-images`).

The browser suite's own machinery (``tests/browser``: JupyterLab from this venv on 127.0.0.1 with
temporary settings, the system Chromium through Playwright, every non-local request blocked) runs
one small notebook, one cell per magic, in the light theme, and keeps a screenshot of each cell's
output cropped to the output (taller outputs are cut at ``MAX_HEIGHT_PX``). Everything runs on
this machine as it is: on a machine without a GPU the pictures show what such a machine shows
(N/A with the reason), and the monitor replays ``examples/trace_demo.jsonl`` (labelled REPLAY).

Usage::

    python scripts/docs_images.py            # writes docs/images/*.png
    python scripts/docs_images.py --out DIR  # elsewhere
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.browser import conftest as bc
from tests.browser import jlab, looks

WIDTH_PX, MAX_HEIGHT_PX = 1000, 640

PRELUDE = (
    "import torch\n"
    "torch.manual_seed(0)\n"
    "nn = torch.nn\n"
    "model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))\n"
    "x, y = torch.randn(512, 64), torch.randint(0, 10, (512,))\n"
    "loss_fn = torch.nn.functional.cross_entropy"
)

#: ``(image name, cell source)`` in run order; the image is that cell's cudamagic output.
#: The last :data:`FAILING` cells fail on purpose.
CELLS = [
    ("overview", "%load_ext cudamagic\n%cudamagic"),
    ("", PRELUDE),
    ("cudainfo", "%cudainfo"),
    (
        "autograd_graph",
        "%%autograd_graph\nloss = loss_fn(model(x), y)\nloss",
    ),
    (
        "cudamem",
        "%%cudamem\nacts = [model[0](x) for _ in range(8)]\nbig = torch.zeros(1024, 1024, 16)",
    ),
    (
        "cudafit",
        "%%cudafit --device-memory 8GiB --max-batch x,y\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "loss = loss_fn(model(x), y)\n"
        "loss.backward()\n"
        "opt.step()",
    ),
    (
        "torchprof",
        "%%torchprof --top 8\nfor _ in range(5):\n    loss_fn(model(x), y).backward()",
    ),
    # the replay is still running when the pictures are taken
    ("gpuwatch", "%gpuwatch --replay trace_demo.jsonl --interval 0.25"),
    # the cells that fail, run one by one after Run All (which stops at the first error):
    # a compile error told at its cell line, and a known PyTorch error explained
    (
        "cuda",
        "%%cuda\n"
        "__global__ void scale(float *x, float a) { x[threadIdx.x] *= a }\n"
        "int main() { return 0; }",
    ),
    ("explainer", "torch.nn.BatchNorm1d(3).train()(torch.randn(1, 3))"),
]


FAILING = 2

#: JS: run the cell at this index alone (the notebook's "Run Selected Cell").
_RUN_CELL_JS = """i => {
  const panel = window.jupyterapp.shell.currentWidget;
  panel.content.activeCellIndex = i;
  return window.jupyterapp.commands.execute('notebook:run-cell');
}"""


def write_notebook(path: str) -> None:
    """The notebook of :data:`CELLS`, each cell tagged with its image name."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_code_cell(src, metadata={"tags": [name] if name else []})
        for name, src in CELLS
    ]
    nbformat.write(nb, path)


def output_of(cell, name: str):
    """The cell's cudamagic output: the explainer's box, else the last output."""
    outs = cell.locator(".jp-OutputArea-output")
    if name == "explainer":
        return outs.filter(has_text="cudamagic explains").first
    return outs.last


def run_failing_cells(page) -> None:
    """Run the last :data:`FAILING` cells one at a time; wait for each one's output."""
    for i in range(len(CELLS) - FAILING, len(CELLS)):
        page.evaluate(_RUN_CELL_JS, i)
        cell = jlab.code_cells(page).nth(i)
        cell.locator(".jp-InputArea-prompt", has_text=re.compile(r"\d")).wait_for(timeout=300_000)
        output_of(cell, CELLS[i][0]).wait_for(state="visible", timeout=60_000)


def shoot(page, target, path: str) -> None:
    """Screenshot ``target`` cropped to itself, at most :data:`MAX_HEIGHT_PX` high."""
    target.evaluate("e => e.scrollIntoView({block: 'start'})")
    looks.settle(page)
    box = target.bounding_box()
    clip = dict(box, height=min(box["height"], MAX_HEIGHT_PX))
    page.screenshot(path=path, clip=clip)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "images"))
    args = ap.parse_args(argv)
    reason = bc.missing_reason()
    if reason:
        print(f"docs-images: {reason}", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    os.makedirs(args.out, exist_ok=True)
    base = tempfile.mkdtemp(prefix="cudamagic-docs-images-")
    root = os.path.join(base, "examples")
    os.makedirs(root)
    shutil.copy(os.path.join(ROOT, "examples", "trace_demo.jsonl"), root)
    write_notebook(os.path.join(root, "docs_images.ipynb"))
    server = bc._start_lab(base, root, bc._isolated_env(base))
    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(
            executable_path=bc.chromium_path(), headless=True, args=bc.CHROMIUM_ARGS
        )
        context = browser.new_context(viewport={"width": WIDTH_PX, "height": 1200})

        def only_local(route):
            url = route.request.url
            local = urlparse(url).hostname == "127.0.0.1" or url.startswith(("data:", "blob:"))
            route.continue_() if local else route.abort()

        context.route("**/*", only_local)
        page = context.new_page()
        page.set_default_timeout(60_000)
        jlab.open_notebook(page, server, "docs_images.ipynb")
        looks.set_theme(page, "light")
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        jlab.run_all(page, timeout_s=600)
        run_failing_cells(page)
        cells = jlab.code_cells(page)
        # the monitor has drawn a few samples of its chart
        cells.nth(len(CELLS) - FAILING - 1).locator(".widget-vbox").first.wait_for(state="visible")
        time.sleep(4)
        for i, (name, _src) in enumerate(CELLS):
            if name:
                path = os.path.join(args.out, f"{name}.png")
                shoot(page, output_of(cells.nth(i), name), path)
                print(f"{path}: {os.path.getsize(path) / 1024:.0f} KiB")
        browser.close()
    finally:
        pw.stop()
        bc._stop_lab(server)
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
