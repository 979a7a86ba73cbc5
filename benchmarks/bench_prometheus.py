"""%gpuwatch --source prometheus://.

Cost of one refresh and of loading history, against a real Prometheus.

For 64 and 512 simulated GPUs (8 per host, DCGM exporter format, scraped every second by Debian's
`prometheus` on 127.0.0.1) it measures, side by side in one run:
  * requests per refresh (goal: exactly 1);
  * one refresh = the HTTP request + parsing into a Sample + the cluster widget update (goal
    < 100 ms at 64 GPUs), split into its parts, and as a ratio to the bare HTTP request alone
    (what our own code adds);
  * loading 1 hour of history for 64 GPUs (one range query; goal < 2 s), from a history
    backfilled with promtool at a 15 s scrape interval: at the step the monitor uses by default
    (600 samples kept) and at a 1 s step; wall and CPU time (the CPU time is the one to compare
    on a shared machine).

Beside it, the same refresh as a dashboard does it (one instant query per metric, JSON-decoded):
an interleaved side-by-side row (benchmarks/sidebyside.py) whose guard checks that both sides read
the same metrics of the same GPUs.

Usage: python benchmarks/bench_prometheus.py [--refreshes N] [--refresh-only]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "scripts"), os.path.dirname(os.path.abspath(__file__))]

import prom_sim
from sidebyside import InProcess, compare, load_average

from cudamagic.watch.cluster import PrometheusSource, classify
from cudamagic.watch.clusterview import ClusterView
from cudamagic.watch.prometheus import parse_source


def ms(x):
    return f"{x * 1000:7.1f} ms"


def bench_refresh(n_gpus: int, refreshes: int):
    sim, server = prom_sim.start_cluster(prom_sim.cluster(n_gpus), scrape_s=1.0)
    try:
        src = PrometheusSource(parse_source(server.url), interval_s=1.0, timeout_s=10)
        if not prom_sim.wait_for(lambda: len(src.read(0, time.time()).gpus) == n_gpus, 60, 0.5):
            print(f"  {n_gpus} GPUs: Prometheus did not scrape them all within 60 s")
            return
        view = ClusterView(src, label=src.label)
        bare, read, widget, total, cpu = [], [], [], [], []
        req0 = src.client.requests
        for _ in range(refreshes):
            t0 = time.perf_counter()
            src.client.instant(src.query)
            t1 = time.perf_counter()
            bare.append(t1 - t0)
        req1 = src.client.requests
        hist = []
        for i in range(refreshes):
            c0, t0 = time.process_time(), time.perf_counter()
            s = src.read(i + 1, time.time())
            t1 = time.perf_counter()
            view.apply(s, hist, state="running")
            t2, c2 = time.perf_counter(), time.process_time()
            hist.append(s)
            read.append(t1 - t0)
            widget.append(t2 - t1)
            total.append(t2 - t0)
            cpu.append(c2 - c0)
            time.sleep(0.5)  # new values: Prometheus scrapes every second
        per_refresh = (src.client.requests - req1) / refreshes
        assert req1 - req0 == refreshes
        med = statistics.median
        print(
            f"  {n_gpus:4d} GPUs on {n_gpus // 8:3d} hosts: requests per refresh {per_refresh:g}; "
            f"refresh {ms(med(total))} (request+parse {ms(med(read))}, widget {ms(med(widget))}); "
            f"bare request {ms(med(bare))}; refresh / bare request = "
            f"{med(total) / med(bare):.2f}x; tiles HTML {len(view.tiles.value) // 1024} KiB"
        )
        print(
            f"        client CPU of one refresh (request, parsing and widget): min {ms(min(cpu))}, "
            f"median {ms(med(cpu))} (goal < 150 ms at 512 GPUs; {load_average()})"
        )
        bench_dashboard_peer(src, n_gpus, refreshes)
        view.close()
        src.close()
    finally:
        prom_sim.stop_cluster(sim, server)


def _fields_by_gpu(series_fields) -> dict:
    """``{"host/index": sorted fields}``: the guard's description of what a refresh read."""
    out = {}
    for key, field in series_fields:
        out.setdefault(f"{key[0]}/{key[1]}", set()).add(field)
    return {k: sorted(v) for k, v in sorted(out.items())}


def bench_dashboard_peer(src, n_gpus: int, refreshes: int):
    """The one-request refresh beside a dashboard's: one instant query per metric.

    The peer is what a Grafana dashboard of the DCGM exporter does at each refresh (NVIDIA's asks
    one query per panel): one ``/api/v1/query`` per metric that the refresh shows, each answer
    decoded with :mod:`json`. Both sides read the same metrics of the same GPUs (the guard).
    """
    rows = src.client.instant_rows(src.query)
    names = sorted(
        {json.loads(labels)["__name__"] for labels, _ in rows if b'"__name__":"up"' not in labels}
    )

    def ours():
        src.read(0, time.time())
        return _fields_by_gpu((s.key, s.field) for s in src._plan["series"])  # this answer's

    def peer():
        got = []
        for name in names:
            for r in src.client.instant(name):
                k = classify(r["metric"])
                if k is not None:
                    got.append((k.key, k.field))
        return _fields_by_gpu(got)

    compare(
        f"cluster refresh, {n_gpus} GPUs (request and parsing, no widget)",
        InProcess(ours, lambda w: w),
        InProcess(peer, lambda w: w),
        peer_name=f"dashboard ({len(names)} queries)",
        reps=max(3, refreshes // 2),
        note=f"metrics: {', '.join(names)}",
    )


def bench_history(n_gpus: int = 64):
    hosts = prom_sim.cluster(n_gpus)
    end = (int(time.time()) // 60) * 60 - 600
    start = end - 3600
    server = prom_sim.PrometheusServer([])
    try:
        t0 = time.perf_counter()
        prom_sim.backfill(hosts, server.data_dir, start, end, step_s=15)
        print(
            f"  backfill of 1 h x {n_gpus} GPUs at 15 s with promtool: "
            f"{time.perf_counter() - t0:.1f} s"
        )
        server.start()
        src = PrometheusSource(parse_source(server.url), interval_s=1.0)
        # warm the connection and the server's caches alike for both runs
        src.history(60, end_s=end)
        for label, kept in (
            ("monitor default (600 samples kept)", 600),
            ("1 s step (3600 samples)", 3600),
        ):
            req = src.client.requests
            t0, c0 = time.perf_counter(), time.process_time()
            hist = src.history(3600, end_s=end, max_samples=kept)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            gpus = len(hist[-1].gpus) if hist else 0
            http = src.client.last_request_s
            print(
                f"  1 h history, {label}: {dt:.2f} s (CPU {cpu:.2f} s) for {len(hist)} samples x "
                f"{gpus} GPUs, {src.client.requests - req} request(s), HTTP part {http:.2f} s "
                f"({http / dt:.0%})"
            )
        src.close()
    finally:
        server.cleanup()


def main():
    if prom_sim.prometheus_binary() is None:
        print("prometheus is not installed (apt-get install prometheus): benchmark skipped")
        return 0
    refreshes = (
        int(sys.argv[sys.argv.index("--refreshes") + 1]) if "--refreshes" in sys.argv else 20
    )
    print("one refresh against a real Prometheus (median of", refreshes, "refreshes):")
    for n in (64, 512):
        bench_refresh(n, refreshes)
    if "--refresh-only" in sys.argv:
        return 0
    print("history:")
    bench_history(64)
    return 0


if __name__ == "__main__":
    sys.exit(main())
