"""Fixtures for the Prometheus cluster source.

Fixtures for the Prometheus cluster source: a real Prometheus server scraping the exporter
simulator.

The ``prometheus`` program comes from Debian's ``prometheus`` package (``scripts/system_deps.sh``
installs it). Without it these tests skip on a developer machine and FAIL in CI (``CI`` set), where
the set-up installs it.
"""

from __future__ import annotations

import os
import shutil

import prom_sim
import pytest


def need_prometheus():
    """Skip (developer machine) or fail (CI) when the prometheus/promtool programs are missing."""
    missing = [p for p in ("prometheus", "promtool") if shutil.which(p) is None]
    if missing:
        msg = (
            f"{' and '.join(missing)} not installed "
            "(apt-get install prometheus; scripts/system_deps.sh)"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + " - CI installs it, so this is a set-up failure")
        pytest.skip(msg)


def wait_all_scraped(server, timeout_s: float = 30.0) -> None:
    """Wait until the server answers with all 12 simulated GPUs.

    On a loaded machine a scrape can miss its scrape timeout, and Prometheus then marks that host's
    series stale until the next good scrape: tests that need every GPU wait for a complete answer
    first instead of reading a gap.
    """
    import time

    from cudamagic.watch.cluster import PrometheusSource
    from cudamagic.watch.prometheus import parse_source

    src = PrometheusSource(parse_source(server.url))
    try:
        ok = prom_sim.wait_for(lambda: len(src.read(1, time.time()).gpus) == 12, timeout_s)
    finally:
        src.close()
    assert ok, f"Prometheus never scraped all 12 simulated GPUs: {server.tail()}"


@pytest.fixture
def settled(cluster):
    """The module's cluster, with every GPU in the server's latest answer."""
    wait_all_scraped(cluster[1])
    return cluster


@pytest.fixture(scope="module")
def cluster():
    """``(sim, server)``.

    The demo cluster (4 hosts, 12 GPUs) scraped every second by a real Prometheus.
    """
    need_prometheus()
    sim, server = prom_sim.start_cluster(
        prom_sim.demo_cluster(), scrape_s=2.0
    )  # 2 s: a slow scrape on a loaded machine is not a gap
    try:
        wait_all_scraped(server)
        yield sim, server
    finally:
        prom_sim.stop_cluster(sim, server)
        assert server.proc is None
