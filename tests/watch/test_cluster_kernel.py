"""Tier 3: examples/cluster_watch.ipynb in a real kernel.

The live local cluster, and the replay fallback.
"""

from __future__ import annotations

import os

import nbformat
import pytest
from run_demo import EXAMPLES, execute_nb

from .conftest import need_prometheus

pytestmark = pytest.mark.kernel


def _texts(nb):
    out = []
    for c in nb.cells:
        if c.cell_type == "code":
            out.append(
                "".join(
                    str(o.get("text") or o.get("data", {}).get("text/plain", "")) for o in c.outputs
                )
            )
    return out


def _widget_values(nb):
    state = (
        nb.metadata.get("widgets", {})
        .get("application/vnd.jupyter.widget-state+json", {})
        .get("state", {})
    )
    return [
        m.get("state", {}).get("value")
        for m in state.values()
        if isinstance(m.get("state", {}).get("value"), str)
    ]


@pytest.mark.slow  # a real Prometheus server
def test_cluster_notebook_live():
    need_prometheus()
    nb = execute_nb(
        nbformat.read(os.path.join(EXAMPLES, "cluster_watch.ipynb"), 4), store_widget_state=True
    )
    texts = _texts(nb)
    assert "local Prometheus at prometheus://127.0.0.1:" in texts[0]
    assert "12 GPUs on 4 hosts" in texts[1] and "node03" in texts[1]
    assert "; 12 GPUs on 4 hosts" in texts[2]
    assert (
        "'power.draw: DCGM blank value: no data yet', 'fan.speed: DCGM: not supported on this GPU'"
        in texts[2]
    )
    assert "--job matched hpc_job=4242" in " ".join(texts[3].split()) and "node03" not in texts[3]
    assert "stopped the monitor" not in texts[3]  # the one-off table left the live view alone
    assert "%gpuwatch stopped after" in texts[4] and "local cluster stopped" in texts[4]
    values = _widget_values(nb)
    assert any(
        v.count('class="cm-tile"') == 12 for v in values
    )  # the widget's tiles updated in the kernel


def test_cluster_notebook_replays_the_trace_without_prometheus():
    nb = nbformat.read(os.path.join(EXAMPLES, "cluster_watch.ipynb"), 4)
    nb.cells[1].source = nb.cells[1].source.replace(
        "LIVE = prom_sim.prometheus_binary() is not None", "LIVE = False"
    )
    nb = execute_nb(nb, store_widget_state=True)
    texts = _texts(nb)
    assert "replaying trace_cluster.jsonl" in texts[0]
    assert "replay of trace_cluster.jsonl" in texts[1] and "12 GPUs on 4 hosts" in texts[1]
    assert "12 GPUs on 4 hosts" in texts[2]
