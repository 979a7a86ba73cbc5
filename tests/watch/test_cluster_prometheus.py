"""Tiers 2-3 against a real Prometheus scraping the simulator.

Tiers 2-3 against a REAL Prometheus scraping the exporter simulator: reads, one request per refresh,
the shell magic, --log / --replay, --job, the widget, and a server killed mid-watch (stale, then
recovery).
"""

from __future__ import annotations

import json
import threading
import time

import prom_sim
import pytest
from IPython.core.error import UsageError

from cudamagic.core.na import is_na
from cudamagic.watch import monitor, trace
from cudamagic.watch.cluster import PrometheusSource, classify
from cudamagic.watch.clusterview import ClusterView, ClusterViews
from cudamagic.watch.prometheus import parse_source

from .conftest import need_prometheus

pytestmark = pytest.mark.slow  # a real Prometheus server


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == "cudamagic-gpuwatch" and t.is_alive()]


def test_one_request_per_refresh_every_gpu_by_host(settled):
    _, server = settled
    src = PrometheusSource(parse_source(server.url))
    before = src.client.requests
    s = src.read(1, time.time())
    assert src.client.requests == before + 1
    assert [(g.host, g.index) for g in s.gpus] == [
        ("node01", 0),
        ("node01", 1),
        ("node01", 2),
        ("node01", 3),
        ("node02", 0),
        ("node02", 1),
        ("node02", 2),
        ("node02", 3),
        ("node03", 0),
        ("node03", 1),
        ("node04", 0),
        ("node04", 1),
    ]
    assert src.exporters == {"DCGM", "nvitop"}
    by = {(g.host, g.index): g for g in s.gpus}
    # scraped values are the simulator's formula at some recent second
    now = int(time.time())
    assert any(
        by["node01", 2].gpu_util_pct == prom_sim.util_at(t, 0, 2) for t in range(now - 10, now + 1)
    )
    assert is_na(by["node02", 1].power_draw_mw) and by["node02", 1].power_draw_mw.code == "blank"
    assert by["node03", 0].mig_enabled is True and by["node03", 0].power_draw_mw == 250_000
    assert dict(by["node03", 1].labels) == {"pod": "train-0", "namespace": "ml"}
    src.close()


def test_history_is_one_range_query(cluster):
    _, server = cluster
    src = PrometheusSource(parse_source(server.url), interval_s=1.0)
    # a few scrapes since the start, every host scraped at least 3 times (hosts' first scrapes are
    # up to one scrape interval apart, so the earliest points of a young server lack some hosts)
    assert prom_sim.wait_for(
        lambda: (lambda h: len(h) >= 4 and all(len(s.gpus) == 12 for s in h[-3:]))(src.history(10)),
        20,
    )
    before = src.client.requests
    hist = src.history(10)
    assert src.client.requests == before + 1
    assert 4 <= len(hist) <= 11 and all(len(s.gpus) == 12 for s in hist[-3:])
    assert [s.timestamp_s for s in hist] == sorted(s.timestamp_s for s in hist)
    src.close()


def test_shell_text_snapshot_log_and_replay(ip, settled, tmp_path, capsys):
    _, server = settled
    log = tmp_path / "cluster.jsonl"
    watch = ip.run_line_magic(
        "gpuwatch", f"--source {server.url} --log {log} --interval 0.5 --count 3"
    )
    assert watch.wait(15)
    assert not watch.running and watch.samples_taken == 3
    text = repr(watch)
    assert "node01" in text and "node04" in text and "12 GPUs on 4 hosts" in text
    rows = watch.history
    assert {r["host"] for r in rows} == {"node01", "node02", "node03", "node04"}
    assert all("prof.gr_engine_active" in r for r in rows if r["host"] in ("node01", "node02"))
    header, samples = trace.read_trace(str(log))
    assert "recording of http://127.0.0.1" in header["source"] and len(samples) == 3
    assert samples[-1].gpus[0].host == "node01"
    replay = ip.run_line_magic("gpuwatch", f"--replay {log} --interval 0.05 --text")
    assert type(replay.sampler.source).__name__ == "ClusterReplay"
    assert "12 GPUs on 4 hosts" in repr(replay)
    ip.run_line_magic("gpuwatch", "--stop")
    assert sampler_threads() == []


def test_job_flag_in_the_shell(ip, settled, monkeypatch):
    _, server = settled
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    watch = ip.run_line_magic("gpuwatch", f"--source {server.url} --job --text")
    assert {g.host for g in watch.latest.gpus} == {"node01", "node02"}
    assert "--job matched hpc_job=4242 (from SLURM_JOB_ID)" in " ".join(repr(watch).split())
    assert max(len(line) for line in repr(watch).splitlines()) <= 100
    watch = ip.run_line_magic("gpuwatch", f"--source {server.url} --hosts node04 --text")
    assert [(g.host, g.index) for g in watch.latest.gpus] == [("node04", 0), ("node04", 1)]
    with pytest.raises(UsageError, match=r"--job: no GPU series carries hpc_job=999"):
        ip.run_line_magic("gpuwatch", f"--source {server.url} --job 999 --text")
    with pytest.raises(UsageError, match=r"no GPU of --hosts nodeX") as info:
        ip.run_line_magic("gpuwatch", f"--source {server.url} --hosts nodeX --text")
    assert "--job" not in str(info.value) and "--hosts node07,node08" in str(info.value)


def test_widget_tiles_and_host_detail(settled):
    _, server = settled
    src = PrometheusSource(parse_source(server.url))
    watch = monitor.start_watch(src, interval_s=0.3, history_len=50)
    try:
        view = watch.view
        assert type(view).__name__ == "ClusterView"
        assert prom_sim.wait_for(lambda: view.tiles.value.count('class="cm-tile"') == 12, 15)
        assert list(view.picker.options) == ["node01", "node02", "node03", "node04"]
        assert "engine active (0-1)" in view.detail.value and "util" in view.detail.value
        view.picker.value = "node03"
        assert "3g.40gb #1" in view.detail.value and "pod=train-0" in view.detail.value
        assert len(watch.samples) > 1  # the range query preloaded history
        first = view.tiles.value
        assert prom_sim.wait_for(lambda: view.tiles.value != first, 10)
        bundle = watch._repr_mimebundle_()
        assert "live monitor, started" in bundle["text/html"] and "node02" in bundle["text/plain"]
        assert (
            "cm-cluster" in watch.static_bundle()["text/html"]
        )  # the snapshot it leaves when stopped
    finally:
        watch.stop()
        watch.view.close()
    assert sampler_threads() == []


def test_server_killed_mid_watch_goes_stale_and_recovers():
    need_prometheus()
    sim = prom_sim.ExporterSim(prom_sim.demo_cluster()[:1])
    server = prom_sim.PrometheusServer([(h, f"127.0.0.1:{sim.port}", p) for h, p in sim.targets])
    try:
        server.start()
        src = PrometheusSource(parse_source(server.url), interval_s=0.5)
        assert prom_sim.wait_for(lambda: src.read(0, time.time()).gpus, 20)
        watch = monitor.start_watch(src, interval_s=0.5, history_len=100)
        view = watch.view
        try:
            good_tiles = view.tiles.value
            assert good_tiles.count("cm-tile") == 4
            server.kill()
            # within two refreshes (+ request time) as a rule: 5 s leaves room on a loaded machine
            assert prom_sim.wait_for(lambda: "stale since" in view.status.value, 5)
            since = view.status.value.split("stale since ")[1][:8]
            # the request in flight at the kill may time out; the following ones are refused
            assert prom_sim.wait_for(lambda: "connection refused" in view.status.value, 5)
            assert f"stale since {since}" in view.status.value  # since the first failure
            assert view.tiles.value.count("cm-tile") == 4  # the last good values stay
            assert watch.running and "stale since" in repr(watch)
            stale = watch.latest
            assert stale.gpus == () and stale.nvml_status.code == "stale"
            server.start()  # same port, same data directory
            assert prom_sim.wait_for(lambda: "stale" not in view.status.value, 20)
            assert watch.latest.gpus and watch.running
        finally:
            watch.stop()
            view.close()
    finally:
        server.cleanup()
        sim.stop()
    assert server.proc is None and sampler_threads() == []


def test_one_exporter_down_marks_only_its_host_stale_and_recovers(settled):
    sim, server = settled
    src = PrometheusSource(parse_source(server.url), interval_s=1.0)
    view = ClusterView(src, label=src.label)
    try:
        first = src.read(1, time.time())
        assert {g.host for g in first.gpus} == {
            "node01",
            "node02",
            "node03",
            "node04",
        } and src.stale_hosts == {}
        last04 = [g for g in first.gpus if g.host == "node04"]
        sim.down.add("node04")
        assert prom_sim.wait_for(
            lambda: src.read(2, time.time()) and "node04" in src.stale_hosts, 20
        ), server.tail()
        s = src.read(3, time.time())
        info = src.stale_hosts["node04"]
        assert s.nvml_status is None and {g.host for g in s.gpus} == {"node01", "node02", "node03"}
        assert info[
            "reason"
        ] == f"its exporter is down (up == 0 for job=node04 instance=127.0.0.1:{sim.port})" and [
            g.index for g in info["gpus"]
        ] == [g.index for g in last04]
        since = time.strftime("%H:%M:%S", time.localtime(info["since"]))
        text = ClusterViews(src).text(s, [first, s], src.label, "running", "")
        assert f"node04 (stale): exporter down since {since}: its exporter is down" in " ".join(
            text.split()
        )
        assert "node01 " in text and "12 GPUs" not in text and "10 GPUs on 3 hosts" in text
        view.apply(s, [first, s])
        assert 'class="cm-host cm-stale" data-host="node04"' in view.tiles.value
        assert f"exporter down since {since}" in view.tiles.value
        assert view.tiles.value.count("cm-tile") == 12  # its last tiles stay
        assert "node04" in view.picker.options
        assert view.tiles.value.count("cm-stale") == 1
    finally:
        sim.down.discard("node04")
    assert prom_sim.wait_for(
        lambda: "node04" in {g.host for g in src.read(4, time.time()).gpus}, 20
    )
    assert src.stale_hosts == {}
    view.apply(src.read(5, time.time()), [])
    assert "cm-stale" not in view.tiles.value
    view.close()
    src.close()


def test_backfilled_history_exact_values(tmp_path):
    """Promtool writes a known history.

    A range query reads it back exactly (values and 15 s step).
    """
    need_prometheus()
    hosts = [prom_sim.SimHost("bf01", "dcgm", 2), prom_sim.SimHost("bf02", "nvitop", 1)]
    end = (int(time.time()) // 60) * 60 - 3600  # an hour ago, whole minute
    start = end - 600
    data = tmp_path / "data"
    prom_sim.backfill(hosts, str(data), start, end, step_s=15)
    server = prom_sim.PrometheusServer([], data_dir=str(data))
    try:
        server.start()
        src = PrometheusSource(parse_source(server.url), interval_s=15)
        hist = src.history(600, end_s=end, max_samples=41)
        assert src.client.requests == 1
        assert len(hist) == 41 and [s.timestamp_s for s in hist] == [
            float(t) for t in range(start, end + 1, 15)
        ]
        for s in hist:
            t = int(s.timestamp_s)
            by = {(g.host, g.index): g for g in s.gpus}
            assert set(by) == {("bf01", 0), ("bf01", 1), ("bf02", 0)}
            assert by["bf01", 1].gpu_util_pct == prom_sim.util_at(t, 0, 1)
            assert by["bf02", 0].memory_used_bytes == prom_sim.used_mib_at(t, 1, 0) * 2**20
        json.dumps(trace.sample_to_json(hist[-1]))
        # the history gives what a refresh at the same time gives
        for s in (hist[0], hist[20], hist[-1]):
            result = src.client.instant(src.history_query, at_s=s.timestamp_s)
            rows = [(k, r["value"][1]) for r in result if (k := classify(r["metric"])) is not None]
            assert src.build([k for k, _ in rows], [v for _, v in rows]) == s.gpus
    finally:
        server.cleanup()


def test_unload_stops_a_background_cluster_monitor(ip, cluster, tmp_path):
    _, server = cluster
    watch = ip.run_line_magic(
        "gpuwatch", f"--source {server.url} --log {tmp_path / 'c.jsonl'} --interval 0.2"
    )
    assert watch.running and len(sampler_threads()) == 1
    ip.run_line_magic("unload_ext", "cudamagic")
    assert not watch.running and sampler_threads() == []
    ip.run_line_magic("load_ext", "cudamagic")


def _shape(x, key=""):
    """The structure of a decoded answer.

    Types, keys, label values as "str"; list items' shapes, once each.
    """
    if isinstance(x, dict):
        if key == "metric":
            return "labels" if all(isinstance(v, str) for v in x.values()) else "bad labels"
        return {k: _shape(v, k) for k, v in x.items()}
    if isinstance(x, list):
        return sorted({json.dumps(_shape(v, key)) for v in x})
    return type(x).__name__


def test_the_stubs_recorded_answers_have_the_live_servers_shapes(settled):
    """The stub's recorded answers have the live server's shapes.

    tests/watch/prom_answers.json (what the stub of test_prometheus_client.py replays) against the
    installed Prometheus now: same status, Content-Type and JSON structure; the same error text.
    """
    import prom_answers  # scripts/ is on sys.path (tests/conftest.py)

    from .prom_stub import ANSWERS

    _, server = settled
    base = f"http://127.0.0.1:{server.port}"
    now = round(time.time(), 3)
    assert set(ANSWERS) == set(prom_answers.REQUESTS)
    for name, (path, params) in prom_answers.REQUESTS.items():
        rec, live = ANSWERS[name], prom_answers.fetch(base, path, prom_answers.resolve(params, now))
        assert (live["status"], live["content_type"]) == (rec["status"], rec["content_type"]), name
        if rec["content_type"] != "application/json":
            assert live["body"] == rec["body"], name
            continue
        rec_obj, live_obj = json.loads(rec["body"]), json.loads(live["body"])
        assert _shape(live_obj) == _shape(rec_obj), name
        if rec_obj["status"] == "error":
            assert live_obj == rec_obj, name
        else:
            kind = rec_obj["data"]["resultType"]
            head = f'{{"status":"success","data":{{"resultType":"{kind}","result":['
            assert live["body"].startswith(head), name
