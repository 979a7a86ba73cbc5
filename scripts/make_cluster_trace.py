"""Record examples/trace_cluster.jsonl from the local cluster.

Record examples/trace_cluster.jsonl from the local cluster (exporter simulator + a real Prometheus).

It is what examples/cluster_watch.ipynb replays where the `prometheus` program is not installed. The
demo cluster (scripts/prom_sim.demo_cluster: 4 hosts, 12 GPUs, both DCGM label casings, MIG,
sentinels, a Slurm job, a pod, nvitop's format) is read through the same PrometheusSource as
`%gpuwatch --source`, one sample a second.

Usage: python scripts/make_cluster_trace.py [SAMPLES]
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts")]

import prom_sim
from make_demo_trace import new_trace

from cudamagic.watch.cluster import PrometheusSource
from cudamagic.watch.prometheus import parse_source


def main(samples: int = 30) -> str:
    path = os.path.join(ROOT, "examples", "trace_cluster.jsonl")
    sim, server = prom_sim.start_cluster(prom_sim.demo_cluster())
    try:
        src = PrometheusSource(parse_source(server.url), interval_s=1.0)
        if not prom_sim.wait_for(lambda: len(src.read(0, time.time()).gpus) == 12, 30):
            raise SystemExit("Prometheus did not scrape the 12 simulated GPUs")
        writer = new_trace(
            path,
            "recording of the local demo cluster (scripts/prom_sim.py) by "
            "scripts/make_cluster_trace.py",
            1.0,
        )
        for i in range(samples):
            writer.write(src.read(i + 1, time.time()))
            time.sleep(1.0)
        writer.close()
    finally:
        prom_sim.stop_cluster(sim, server)
    return path


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
