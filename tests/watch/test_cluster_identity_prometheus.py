"""The GPU-identity rules through a real Prometheus (a history written with promtool, read back).

A pod label that appears halfway, an exporter pod restarted under a new host name, hosts known only
by their scrape address, and the older ``dcgm_*`` names: the history a monitor starts with (one
range query) keeps one continuous GPU per UUID on the right host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

import prom_sim
import pytest

from cudamagic.watch.cluster import PrometheusSource
from cudamagic.watch.prometheus import parse_source

from .conftest import need_prometheus

STEP = 15
A = "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"  # gains exported_pod halfway
B = "GPU-0b3f1b5e-aaaa-bbbb-cccc-000000000001"  # its exporter pod restarts under a new name
C = "GPU-c1f38265-5e7c-0a81-14a0-240a35ea8100"  # older dcgm_* names


def _series(start: int, end: int) -> str:
    """OpenMetrics text of every series (values: seconds since start, so each point is known)."""
    mid = (start + end) // 2
    lines = {}

    def add(name, labels, t, v):
        lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.setdefault(name, []).append(f"{name}{{{lab}}} {v} {t}")

    for t in range(start, end + 1, STEP):
        a = {"gpu": "0", "UUID": A, "Hostname": "node01", "instance": "node01:9400"}
        if t >= mid:
            a.update(exported_pod="train-7f9c", exported_namespace="default")
        add("DCGM_FI_DEV_GPU_UTIL", a, t, (t - start) % 101)
        host = "dcgm-exporter-7xq2k" if t < mid else "dcgm-exporter-m4d9p"
        b = {"gpu": "0", "UUID": B, "Hostname": host, "instance": f"{host}:9400"}
        add("DCGM_FI_DEV_GPU_UTIL", b, t, 50)
        for inst, uuid in (("10.1.2.7:9400", "GPU-ip-7"), ("10.1.2.70:9400", "GPU-ip-70")):
            add("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0", "UUID": uuid, "instance": inst}, t, 7)
        c = {"gpu": "1", "uuid": C, "Hostname": "gpu-node-3", "instance": "gpu-node-3:9400"}
        add("dcgm_gpu_utilization", c, t, 57)
        add("dcgm_fb_used", c, t, 21000)
    out = []
    for name, rows in lines.items():
        out += [f"# TYPE {name} gauge", *rows]
    return "\n".join([*out, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def server():
    """A real Prometheus over the history above (an hour ago, 4 minutes, every 15 s)."""
    need_prometheus()
    end = (int(time.time()) // 60) * 60 - 3600
    start = end - 240
    tmp = tempfile.mkdtemp(prefix="cudamagic-identity-")
    path = os.path.join(tmp, "history.om")
    with open(path, "w") as fh:
        fh.write(_series(start, end))
    data = os.path.join(tmp, "data")
    subprocess.run(
        [shutil.which("promtool"), "tsdb", "create-blocks-from", "openmetrics", path, data],
        check=True,
        capture_output=True,
        timeout=300,
    )
    srv = prom_sim.PrometheusServer([], data_dir=data)
    try:
        srv.start()
        yield srv, start, end
    finally:
        srv.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


def _history(srv, start, end, **kw):
    src = PrometheusSource(parse_source(srv.url), interval_s=STEP, **kw)
    try:
        return src.history(end - start, end_s=end, max_samples=(end - start) // STEP + 1)
    finally:
        src.close()


def test_one_continuous_gpu_per_uuid_on_its_newest_host(server):
    srv, start, end = server
    hist = _history(srv, start, end)
    n = (end - start) // STEP + 1
    assert len(hist) == n
    for s in hist:
        by_uuid = {g.uuid: g for g in s.gpus}
        # the pod label did not cut GPU A's history in two
        assert by_uuid[A].gpu_util_pct == (int(s.timestamp_s) - start) % 101
        assert by_uuid[A].host == "node01"
        # the restarted exporter's GPU is one GPU on the newest host name, all along
        assert by_uuid[B].host == "dcgm-exporter-m4d9p"
        # the older generation's names are read
        assert by_uuid[C].gpu_util_pct == 57 and by_uuid[C].memory_used_bytes == 21000 * 2**20
    assert sum(1 for s in hist for g in s.gpus if g.uuid == B) == n
    assert ("exported_pod", "train-7f9c") in {lab for g in hist[-1].gpus for lab in g.labels}


@pytest.mark.parametrize(
    "kw, hosts",
    [
        ({"hosts": ["10.1.2.7"]}, {"10.1.2.7:9400"}),
        ({"hosts": ["10.1.2.70"]}, {"10.1.2.70:9400"}),
        ({"job": "10.1.2.7"}, {"10.1.2.7:9400"}),
        ({"hosts": ["node01"]}, {"node01"}),
    ],
)
def test_hosts_and_job_select_the_node_with_that_address(server, kw, hosts):
    srv, start, end = server
    hist = _history(srv, start, end, **kw)
    assert hist and all({g.host for g in s.gpus} == hosts for s in hist)
