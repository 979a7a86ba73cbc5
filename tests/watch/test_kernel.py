"""Tier 3 for %gpuwatch: a real Jupyter kernel through nbclient with ``store_widget_state=True``.

Cell 1 starts a replay monitor; cell 2 does other work. The saved widget state must show the
values of the last replayed sample (they changed after the display was created), and cell 2
must have run while the monitor was live. The thread's updates reach the front end while
another cell runs, and nothing it does lands in cell 2's output. When the monitor stops, the
saved notebook's output of cell 1 is a static snapshot of the last sample, not a widget a reopened
notebook cannot show. A live monitor on the fake NVML stopped by ``--count 3`` is replaced the same
way; one still running when the notebook is saved keeps a fallback saying it was live.
"""

import json
import os

import pytest

from cudamagic.watch.render import gpu_html
from cudamagic.watch.style import live_html
from cudamagic.watch.trace import read_trace
from tests.inline import plain
from tests.watch.fakes import DEMO, ROOT, as_read

CELL2 = """\
import json, time
from cudamagic.extension import current
w = current().magics["watch"].monitors.current
t_start = time.time()
running_at_start, n_at_start = w.running, w.samples_taken
work = 0
while w.running and time.time() - t_start < 30:
    work += sum(i * i for i in range(2000))
print(json.dumps({"running_at_start": running_at_start, "n_at_start": n_at_start,
                  "n_at_end": w.samples_taken,
                  "running_at_end": w.running, "work": work, "finished": w.sampler.finished,
                  "error": w.error}))
"""


WAIT_LIVE = """\
import json, time
from cudamagic.extension import current
w = current().magics["watch"].monitors.current
w.wait(30)
print(json.dumps({"n": w.samples_taken, "timestamp": w.latest.timestamp,
                  "finished": w.sampler.finished,
                  "util0": w.latest.gpus[0].gpu_util_pct}))
"""

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


@pytest.mark.kernel
def test_replay_monitor_updates_while_another_cell_runs():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    assert spec.argv[0] == "python" or os.path.realpath(spec.argv[0]).startswith(
        os.path.realpath(os.sys.prefix)
    )

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {ROOT!r})\n%load_ext cudamagic"),
        nbformat.v4.new_code_cell(
            "%gpuwatch --replay examples/trace_demo.jsonl --interval 0.05 --count 20"
        ),
        nbformat.v4.new_code_cell(CELL2),
        nbformat.v4.new_code_cell("%gpuwatch --stop"),
        nbformat.v4.new_code_cell(
            "from tests import fake_nvml as fm\n"
            "fm.install(fm.FakeNVML(fm.SCENARIOS['gpu_without_fan']))"
        ),
        nbformat.v4.new_code_cell("%gpuwatch --count 3 --interval 0.1"),
        nbformat.v4.new_code_cell(WAIT_LIVE),
        nbformat.v4.new_code_cell(
            "%gpuwatch --interval 5"
        ),  # still running when the notebook is saved
    ]
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        store_widget_state=True,
        resources={"metadata": {"path": ROOT}},
    )
    client.execute()

    # cell 1 showed the widget; when the replay ended it was replaced by the snapshot of the 20th
    # sample
    _, samples = read_trace(DEMO)
    (out1,) = nb.cells[1].outputs
    assert out1["output_type"] == "display_data" and set(out1["data"]) == {
        "text/plain",
        "text/html",
    }
    assert out1["data"]["text/plain"].startswith(
        "gpuwatch  REPLAY of examples/trace_demo.jsonl  recorded"
    )
    assert "recorded " + samples[19].timestamp in out1["data"]["text/plain"]
    html1 = out1["data"]["text/html"]
    assert (
        "recorded at " + samples[19].timestamp in html1
        and "samples: 20" in html1
        and "stopped" in html1
    )
    # the snapshot went through core.style.page, which inlines the styles that matter
    assert plain(gpu_html(samples[19].gpus[0])) in plain(html1)
    assert "data:image/svg+xml;base64," in html1

    # cell 2 ran while the monitor was live, and got none of the thread's output
    (out2,) = nb.cells[2].outputs
    assert out2["output_type"] == "stream" and out2["name"] == "stdout"
    facts = json.loads(out2["text"])
    assert facts["running_at_start"] is True and facts["n_at_start"] < 20
    assert facts["n_at_end"] == 20 and facts["running_at_end"] is False and facts["error"] == ""
    assert "--count" in facts["finished"]

    # the saved widget state shows the 20th sample, not the first one the display was built with
    state = nb.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    values = [
        as_read(m["state"]["value"])  # as the browser reads it (the GPUs' HTML is sent as ASCII)
        for m in state.values()
        if isinstance(m["state"].get("value"), str)
    ]
    card0_last = live_html(gpu_html(samples[19].gpus[0]))  # the widget's card: no inline look
    card0_first = live_html(gpu_html(samples[0].gpus[0]))
    assert card0_last != card0_first
    assert any(card0_last in v for v in values) and not any(card0_first in v for v in values)
    status = [v for v in values if "REPLAY" in v]
    assert len(status) == 1 and "stopped" in status[0]
    # the latest sample's line heads the GPUs' widget, beside the cards it drew
    ticks = [v for v in values if card0_last in v]
    assert len(ticks) == 1 and "samples: 20" in ticks[0]
    assert "recorded at " + samples[19].timestamp in ticks[0]
    buttons = [m["state"] for m in state.values() if m["state"].get("_model_name") == "ButtonModel"]
    assert buttons and buttons[0]["disabled"] is True

    # a live monitor (fake NVML) stopped by --count 3: the saved output is the snapshot of its 3rd
    # sample
    facts = json.loads(nb.cells[6].outputs[0]["text"])
    assert facts["n"] == 3 and "--count" in facts["finished"]
    (out6,) = nb.cells[5].outputs
    assert set(out6["data"]) == {"text/plain", "text/html"} and WIDGET_VIEW not in out6["data"]
    html6 = out6["data"]["text/html"]
    assert "LIVE" in html6 and f"· {facts['timestamp']}" in html6 and "samples: 3" in html6
    assert "stopped (3 samples taken (--count))" in html6 and f"{facts['util0']:.0f} %" in html6
    assert "Error displaying widget" not in html6 and 'class="cudamagic' in html6

    # a monitor still running when the notebook was saved: the widget, and beside it a fallback
    # saying it was live
    (out8,) = nb.cells[7].outputs
    assert WIDGET_VIEW in out8["data"]
    assert (
        "live monitor, started" in out8["data"]["text/html"]
        and "Re-run the cell" in out8["data"]["text/html"]
    )
    assert out8["data"]["text/plain"].startswith("gpuwatch: live monitor, started")
    assert "running" not in out8["data"]["text/html"]


@pytest.mark.kernel
def test_text_loop_in_a_notebook_updates_one_output_in_place():
    """``--text --loop`` in a notebook: one output redrawn per sample, not a table per sample.

    What front ends whose widgets do not redraw from a background thread (Colab, some VS Code
    versions) get: the cell's own thread updates a plain display, which every front end redraws.
    """
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {ROOT!r})\n%load_ext cudamagic"),
        nbformat.v4.new_code_cell(
            "w = %gpuwatch --replay examples/trace_demo.jsonl --text --loop --count 4 "
            "--interval 0.05\nprint(w.samples_taken)"
        ),
    ]
    nbclient.NotebookClient(
        nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": ROOT}}
    ).execute()
    _, samples = read_trace(DEMO)
    shown = [o for o in nb.cells[1].outputs if o["output_type"] == "display_data"]
    printed = "".join(
        o.get("text", "") for o in nb.cells[1].outputs if o["output_type"] == "stream"
    )
    assert len(shown) == 1 and printed.strip() == "4", nb.cells[1].outputs
    table = shown[0]["data"]["text/plain"]
    assert "recorded " + samples[3].timestamp in table and "sample 4" in table
    assert "recorded " + samples[0].timestamp not in table
