"""The small notebook the browser suite generates inside its temporary copy of ``examples/``.

``browser_check.ipynb`` holds exactly the cells the widget and graph checks need, so those checks do
not depend on how the example notebooks are laid out. The example notebooks themselves are opened by
the other checks (``quickstart.ipynb`` for ``%cudainfo``, ``dataloader.ipynb`` for the error
explainer).
"""

from __future__ import annotations

import os

NAME = "browser_check.ipynb"

# : Replay interval (s) and the trace that ``%gpuwatch`` replays (shipped in examples/, so in the
# temp copy).
WATCH_INTERVAL_S = 0.5
TRACE = "trace_demo.jsonl"

# Order: the graph is drawn before the monitor starts, so the replay (60 samples) is still running
# when the checks look at it right after Run All; "work" runs while the monitor is live.
CELLS = {
    "load": "%load_ext cudamagic",
    "cudainfo": "%cudainfo",
    "graph": (
        "%%autograd_graph\n"
        "import torch\n"
        "from torch import nn\n"
        "torch.manual_seed(0)\n"
        "mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "x = torch.randn(3, 4)\n"
        "loss = mlp(x).pow(2).mean()\n"
        "loss"
    ),
    "gpuwatch": f"w = %gpuwatch --replay {TRACE} --interval {WATCH_INTERVAL_S}\nw",
    # Other work while the monitor is live: the cell reports what the monitor did while it ran.
    "work": (
        "import time\n"
        "a, live_at_start = w.samples_taken, w.running\n"
        "total = sum(i * i for i in range(300_000))\n"
        "time.sleep(4 * w.sampler.interval_s)\n"
        "b = w.samples_taken\n"
        "print(f'other work done: monitor live at start={live_at_start}, at end={w.running}, '\n"
        "      f'samples taken during this cell={b - a}')"
    ),
}

#: Node labels the autograd graph of the "graph" cell must show.
GRAPH_LABELS = (
    "AddmmBackward0",
    "ReluBackward0",
    "PowBackward0",
    "MeanBackward0",
    "mlp.0.weight",
    "mlp.2.bias",
)


def write_browser_check(root: str) -> str:
    """Write ``browser_check.ipynb`` into ``root``; return its path.

    Its cells are :data:`CELLS`, in order.
    """
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(src, metadata={"tags": [key]}) for key, src in CELLS.items()
    ]
    path = os.path.join(root, NAME)
    nbformat.write(nb, path)
    return path


def cell_index(key: str) -> int:
    """0-based index of a cell of :data:`CELLS` in the generated notebook."""
    return list(CELLS).index(key)


def strip_outputs(root: str) -> None:
    """Clear outputs and execution counts of every notebook in ``root`` (the temp copy).

    What the checks read is then what this run produced.
    """
    import glob

    import nbformat

    for path in glob.glob(os.path.join(root, "*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, path)


# : ``reopen_check.ipynb``: a monitor that stops by itself after :data:`REOPEN_COUNT` samples, then
# a cell that waits
#: for the stop and prints the final state the saved notebook must show.
REOPEN_NAME = "reopen_check.ipynb"
REOPEN_COUNT = 6
REOPEN_CELLS = [
    "%load_ext cudamagic",
    f"w = %gpuwatch --replay {TRACE} --interval 0.2 --count {REOPEN_COUNT}\nw",
    (
        "import time\n"
        "t0 = time.monotonic()\n"
        "while w.running and time.monotonic() - t0 < 60:\n"
        "    time.sleep(0.05)\n"
        "last = w.samples[-1]\n"
        "print(f'final: running={w.running} samples={w.samples_taken} at={last.timestamp}')"
    ),
]


def write_reopen_check(root: str) -> str:
    """Write ``reopen_check.ipynb`` (:data:`REOPEN_CELLS`) into ``root``; returns its path."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in REOPEN_CELLS]
    path = os.path.join(root, REOPEN_NAME)
    nbformat.write(nb, path)
    return path
