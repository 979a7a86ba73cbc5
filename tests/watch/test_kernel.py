"""Tier 3 for %gpuwatch: a real Jupyter kernel through nbclient with ``store_widget_state=True``.

Cell 1 starts a replay monitor; cell 2 does other work. The saved widget state must show the
values of the last replayed sample (they changed after the display was created), and cell 2
must have run while the monitor was live. The thread's updates reach the front end while
another cell runs, and nothing it does lands in cell 2's output (F13).
"""

import json
import os

import pytest

from cudamagic.watch.trace import read_trace
from cudamagic.watch.widget import gpu_html
from tests.watch.fakes import DEMO, ROOT

CELL2 = """\
import json, time
from cudamagic.watch.monitor import current
w = current()
t_start = time.time()
running_at_start, n_at_start = w.running, w.samples_taken
work = 0
while w.running and time.time() - t_start < 30:
    work += sum(i * i for i in range(2000))
print(json.dumps({"running_at_start": running_at_start, "n_at_start": n_at_start, "n_at_end": w.samples_taken,
                  "running_at_end": w.running, "work": work, "finished": w.sampler.finished,
                  "error": w.error}))
"""


@pytest.mark.kernel
def test_replay_monitor_updates_while_another_cell_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == "python" or os.path.realpath(spec.argv[0]).startswith(os.path.realpath(os.sys.prefix))

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {ROOT!r})\n%load_ext cudamagic"),
        nbformat.v4.new_code_cell("%gpuwatch --replay examples/trace_demo.jsonl --interval 0.05 --count 20"),
        nbformat.v4.new_code_cell(CELL2),
        nbformat.v4.new_code_cell("%gpuwatch --stop"),
    ]
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, store_widget_state=True,
                                     resources={"metadata": {"path": ROOT}})
    client.execute()

    # cell 1 shows the widget, with a real text/plain snapshot (F14)
    (out1,) = nb.cells[1].outputs
    assert "application/vnd.jupyter.widget-view+json" in out1["data"]
    assert out1["data"]["text/plain"].startswith("gpuwatch  REPLAY of examples/trace_demo.jsonl  recorded")

    # cell 2 ran while the monitor was live, and got none of the thread's output (F13)
    (out2,) = nb.cells[2].outputs
    assert out2["output_type"] == "stream" and out2["name"] == "stdout"
    facts = json.loads(out2["text"])
    assert facts["running_at_start"] is True and facts["n_at_start"] < 20
    assert facts["n_at_end"] == 20 and facts["running_at_end"] is False and facts["error"] == ""
    assert "--count" in facts["finished"]

    # the saved widget state shows the 20th sample, not the first one the display was built with
    _, samples = read_trace(DEMO)
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    values = [m["state"].get("value") for m in state.values() if isinstance(m["state"].get("value"), str)]
    card0_last = gpu_html(samples[19].gpus[0])
    card0_first = gpu_html(samples[0].gpus[0])
    assert card0_last != card0_first
    assert card0_last in values and card0_first not in values
    status = [v for v in values if "REPLAY" in v]
    assert len(status) == 1 and "samples: 20" in status[0] and "stopped" in status[0]
    assert "recorded at " + samples[19].timestamp in status[0]
    buttons = [m["state"] for m in state.values() if m["state"].get("_model_name") == "ButtonModel"]
    assert buttons and buttons[0]["disabled"] is True
