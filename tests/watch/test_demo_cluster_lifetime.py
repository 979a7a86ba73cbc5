"""Tier 3: the demo cluster's Prometheus never outlives the kernel that started it.

A real kernel (jupyter_client) starts ``scripts/prom_sim.py``'s Prometheus as
``examples/cluster_watch.ipynb`` does, then ends without stopping it: shut down, restarted, or
killed with SIGKILL (no exit hook runs: the watchdog stops Prometheus).
"""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from jupyter_client import KernelManager

from .conftest import need_prometheus
from .fakes import ROOT, wait_until

pytestmark = [pytest.mark.kernel, pytest.mark.slow]  # a real kernel and a real Prometheus

START = f"""
import sys; sys.path.insert(0, {os.path.join(ROOT, "scripts")!r})
import prom_sim
server = prom_sim.PrometheusServer().start()
print(server.proc.pid, server.tmp)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("end", ["shutdown", "restart", "kill"])
def test_demo_prometheus_ends_with_its_kernel(end):
    need_prometheus()
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=ROOT)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        out = []
        reply = kc.execute_interactive(
            START,
            timeout=60,
            output_hook=lambda m: out.append(m["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        pid_text, tmp = "".join(out).split()
        pid = int(pid_text)
        assert not _gone(pid) and os.path.isdir(tmp)
        if end == "shutdown":
            km.shutdown_kernel(now=False)
        elif end == "restart":
            km.restart_kernel(now=False)
        else:
            os.kill(km.provisioner.pid, signal.SIGKILL)  # kill -9: no exit hook runs
        assert wait_until(lambda: _gone(pid), timeout_s=60), f"prometheus {pid} outlived the kernel"
        assert wait_until(lambda: not os.path.exists(tmp), timeout_s=30)
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
