"""Real exporters' ``/metrics`` text through a real Prometheus: the scrape's values come out.

Each file of ``tests/data/real/*.prom`` (``PROVENANCE.md``) is served as it is on its own port and
scraped every second by Debian's Prometheus; ``%gpuwatch --source``'s source reads the server. The
expected values come from the scrape itself, parsed by ``prometheus_client``'s parser, through this
test's own table of what each exporter's metric means (not cudamagic's map).
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from wsgiref.simple_server import make_server

import prom_sim
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cudamagic.core.na import is_na
from cudamagic.watch.cluster import PrometheusSource
from cudamagic.watch.clusterview import host_summary
from cudamagic.watch.prometheus import parse_source

from .conftest import need_prometheus

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "real")
MIB = 1024**2
SCRAPES = sorted(f for f in os.listdir(HERE) if f.endswith(".prom"))

#: metric -> (GpuSample attribute, factor to its unit), from each exporter's own documentation:
#: dcgm-exporter (MiB, W, MHz, %), its older dcgm_* generation (same units), nvitop-exporter (unit
#: in the name).
MEANING = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpu_util_pct", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1),
    "DCGM_FI_DEV_FB_USED": ("memory_used_bytes", MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total_bytes", MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("memory_reserved_bytes", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature_c", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power_draw_mw", 1000),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_mw", 1000),
    "DCGM_FI_DEV_SM_CLOCK": ("clock_sm_mhz", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("clock_mem_mhz", 1),
    "DCGM_FI_DEV_PSTATE": ("pstate", 1),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle_reasons_mask", 1),
    "dcgm_gpu_utilization": ("gpu_util_pct", 1),
    "dcgm_mem_copy_utilization": ("mem_util_pct", 1),
    "dcgm_gpu_temp": ("temperature_c", 1),
    "dcgm_power_usage": ("power_draw_mw", 1000),
    "dcgm_sm_clock": ("clock_sm_mhz", 1),
    "dcgm_memory_clock": ("clock_mem_mhz", 1),
    "gpu_utilization_Percentage": ("gpu_util_pct", 1),
    "gpu_memory_utilization_Percentage": ("mem_util_pct", 1),
    "gpu_memory_total_MiB": ("memory_total_bytes", MIB),
    "gpu_memory_used_MiB": ("memory_used_bytes", MIB),
    "gpu_temperature_C": ("temperature_c", 1),
    "gpu_power_usage_W": ("power_draw_mw", 1000),
    "gpu_power_limit_W": ("power_limit_mw", 1000),
    "gpu_fan_speed_Percentage": ("fan_speed_pct", 1),
    "gpu_clock_sm_MHz": ("clock_sm_mhz", 1),
    "gpu_clock_memory_MHz": ("clock_mem_mhz", 1),
}


HOST_LABEL = re.compile(r"[{,]\s*[Hh]ostname=")


def text(name: str) -> str:
    """One scrape file's text."""
    with open(os.path.join(HERE, name), encoding="utf-8") as fh:
        return fh.read()


def expected(name: str) -> dict:
    """``{GPU uuid: {attribute: value in cudamagic's unit, or NaN}}`` of one scrape file."""
    out = {}
    for family in text_string_to_metric_families(text(name)):
        for s in family.samples:
            meaning = MEANING.get(s.name)
            uuid = s.labels.get("UUID") or s.labels.get("uuid")
            if meaning is None or not uuid:
                continue
            attr, factor = meaning
            out.setdefault(uuid, {})[attr] = s.value * factor
    return out


class _Static:
    """Serves one file's bytes at ``/metrics`` on its own 127.0.0.1 port (a thread)."""

    def __init__(self, path):
        with open(path, "rb") as fh:
            body = fh.read()

        def app(environ, start_response):
            start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
            return [body]

        self.port = prom_sim.free_port()
        self.server = make_server(
            "127.0.0.1",
            self.port,
            app,
            server_class=prom_sim._ThreadingWSGIServer,
            handler_class=prom_sim._Quiet,
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture(scope="module")
def scraped():
    """``(server, {file: port})``: every scrape file served and scraped by a real Prometheus."""
    need_prometheus()
    exporters = {name: _Static(os.path.join(HERE, name)) for name in SCRAPES}
    server = prom_sim.PrometheusServer(
        [(name[:-5], f"127.0.0.1:{e.port}", "/metrics") for name, e in exporters.items()],
        scrape_s=1.0,
    )
    try:
        server.start()
        want = sum(len(expected(n)) for n in SCRAPES)
        src = PrometheusSource(parse_source(server.url))
        ok = prom_sim.wait_for(lambda: len(src.read(1, time.time()).gpus) == want, 40)
        src.close()
        assert ok, f"Prometheus never answered all {want} GPUs: {server.tail()}"
        yield server, {n: e.port for n, e in exporters.items()}
    finally:
        server.cleanup()
        for e in exporters.values():
            e.stop()


def _same(got, want):
    if isinstance(want, float) and math.isnan(want):
        return is_na(got) and bool(got.reason)
    return not is_na(got) and got == pytest.approx(want, abs=1e-3)


@pytest.mark.parametrize("name", SCRAPES)
def test_each_gpu_shows_the_scrapes_values(scraped, name):
    server, ports = scraped
    src = PrometheusSource(parse_source(server.url))
    try:
        gpus = {g.uuid: g for g in src.read(1, time.time()).gpus}
    finally:
        src.close()
    want = expected(name)
    assert want, f"{name}: no GPU series"
    for uuid, fields in want.items():
        g = gpus[uuid]
        for attr, value in fields.items():
            assert _same(getattr(g, attr), value), f"{name} {uuid} {attr}: {getattr(g, attr)!r}"
        if not HOST_LABEL.search(text(name)):  # no host label: the host is the scrape target
            assert g.host == f"127.0.0.1:{ports[name]}"


def test_the_cluster_views_numbers_are_the_scrapes(scraped):
    server, _ = scraped
    src = PrometheusSource(parse_source(server.url))
    try:
        sample = src.read(1, time.time())
        hist = src.history(4.0, max_samples=5)
    finally:
        src.close()
    by_host = {}
    for g in sample.gpus:
        by_host.setdefault(g.host, []).append(g)
    want = {}
    for name in SCRAPES:
        want.update(expected(name))
    for host, gpus in by_host.items():
        summary = host_summary(gpus)
        fields = [want[g.uuid] for g in gpus]
        utils = [
            f["gpu_util_pct"] for f in fields if not math.isnan(f.get("gpu_util_pct", math.nan))
        ]
        power = [
            f["power_draw_mw"] for f in fields if not math.isnan(f.get("power_draw_mw", math.nan))
        ]
        used = [f["memory_used_bytes"] for f in fields if "memory_used_bytes" in f]
        assert summary["gpus"] == len(gpus)
        assert summary["util_pct"] == (pytest.approx(sum(utils) / len(utils)) if utils else None)
        assert summary["power_draw_mw"] == (pytest.approx(sum(power)) if power else None), host
        assert summary["memory_used_bytes"] == pytest.approx(sum(used)), host
    # the history (one range query) carries the same values at every step the GPUs were scraped
    assert hist
    for s in hist:
        for g in s.gpus:
            for attr, value in want[g.uuid].items():
                assert _same(getattr(g, attr), value), (attr, getattr(g, attr), value)


def test_what_cudamagic_cannot_match_is_na_with_the_reason(scraped):
    """The DCGM 2.x scrape gives FB_USED and FB_FREE but no reserve: the total is not their sum."""
    server, _ = scraped
    src = PrometheusSource(parse_source(server.url))
    try:
        gpus = {g.uuid: g for g in src.read(1, time.time()).gpus}
    finally:
        src.close()
    g = gpus["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert is_na(g.memory_total_bytes) and "at least 15109 MiB" in g.memory_total_bytes.reason
    # the older generation exports no memory at all: N/A, never 0
    old = gpus["GPU-8f640a3c-7e9a-608d-02a3-f4372d72b323"]
    assert is_na(old.memory_used_bytes) and "not exported" in old.memory_used_bytes.reason


def test_the_look_at_other_gpu_metrics_is_valid_promql(scraped):
    """The one extra query made when nothing known is found runs on a real server (RE2, (?i))."""
    from cudamagic.watch import exporters

    server, _ = scraped
    src = PrometheusSource(parse_source(server.url))
    try:
        found = src.client.instant(exporters.OTHER_QUERY)
    finally:
        src.close()
    names = {r["metric"]["__name__"] for r in found}
    assert {"dcgm_gpu_temp", "DCGM_FI_DEV_GPU_UTIL", "gpu_utilization_Percentage"} <= names
    assert not any(n.startswith(("up", "scrape_", "prometheus_")) for n in names)
