"""Tier 1: the Prometheus source's plain functions (no server).

URLs, auth, steps, schema, sentinels, MIG, job.
"""

from __future__ import annotations

import base64
import re

import prom_sim
import pytest

from cudamagic.core.na import is_na
from cudamagic.watch import cluster, prometheus
from cudamagic.watch.cluster import PrometheusSource, classify, job_candidates
from cudamagic.watch.clusterview import ClusterViews
from cudamagic.watch.prometheus import SourceURLError, parse_source, range_step


@pytest.mark.parametrize(
    "text, url",
    [
        ("prometheus://prom.example:9090", "http://prom.example:9090"),
        ("prometheus+https://prom.example/", "https://prom.example"),
        ("https://prom.example/prometheus/", "https://prom.example/prometheus"),
        ("http://[::1]:9090", "http://[::1]:9090"),
    ],
)
def test_source_urls(text, url):
    assert parse_source(text) == url


@pytest.mark.parametrize(
    "text, match",
    [
        ("ftp://x", "not a Prometheus URL"),
        ("https://alice:secret@prom.example", "must not contain a user name or password"),
        ("prometheus://", "names no host"),
        ("https://prom.example/?query=up", "query string"),
        ("prometheus://h:99999", "invalid port"),
    ],
)
def test_bad_source_urls(text, match):
    with pytest.raises(SourceURLError, match=match) as info:
        parse_source(text)
    assert "secret" not in str(info.value)


def test_auth_from_env_and_netrc(tmp_path):
    h, how = prometheus.auth_headers("https://p", {"CUDAMAGIC_PROMETHEUS_TOKEN": "tok123"})
    assert h == {"Authorization": "Bearer tok123"} and "tok123" not in how
    h, how = prometheus.auth_headers(
        "https://p", {"CUDAMAGIC_PROMETHEUS_USER": "al", "CUDAMAGIC_PROMETHEUS_PASSWORD": "pw"}
    )
    assert h["authorization"] == "Basic " + base64.b64encode(b"al:pw").decode() and "pw" not in how
    rc = tmp_path / "netrc"
    rc.write_text("machine prom.example login bob password hunter2\n")
    rc.chmod(0o600)
    h, how = prometheus.auth_headers("https://prom.example:443", {"NETRC": str(rc)})
    assert h["authorization"] == "Basic " + base64.b64encode(b"bob:hunter2").decode()
    assert "hunter2" not in how and str(rc) in how
    assert prometheus.auth_headers("https://other.example", {"NETRC": str(rc)}) == ({}, "none")


@pytest.mark.parametrize(
    "span, min_step", [(3600, 1), (86400 * 30, 1), (60, 15), (10, 0.1), (86400 * 365, 60)]
)
def test_range_step_keeps_every_series_under_11000_points(span, min_step):
    step = range_step(1e9, 1e9 + span, min_step)
    assert step >= min_step
    assert span / step + 1 <= prometheus.MAX_POINTS_PER_SERIES
    assert span / (step - 0.002) + 1 > prometheus.MAX_POINTS_PER_SERIES or step == pytest.approx(
        min_step, abs=0.001
    )


def _rows(host, i=0, t=1000):
    return [({"__name__": n, **lab}, v) for n, lab, v in prom_sim.host_metrics(host, i, t)]


def _gpus(rows, **kw):
    src = PrometheusSource("http://unused:1", **kw)
    kept = [(s, repr(v)) for s, v in ((classify(m), v) for m, v in rows) if s is not None]
    return src, src.build([s for s, _ in kept], [text for _, text in kept])


def test_dcgm_both_label_casings_and_units():
    old = prom_sim.SimHost("n-old", "dcgm-old", 2)
    new = prom_sim.SimHost("n-new", "dcgm", 2)
    src, gpus = _gpus(_rows(old, 0) + _rows(new, 1))
    assert [(g.host, g.index) for g in gpus] == [
        ("n-new", 0),
        ("n-new", 1),
        ("n-old", 0),
        ("n-old", 1),
    ]
    g = gpus[2]
    assert g.gpu_util_pct == prom_sim.util_at(1000, 0, 0)
    assert g.memory_used_bytes == prom_sim.used_mib_at(1000, 0, 0) * 2**20
    assert g.memory_total_bytes == old.memory_total_mib * 2**20  # used + free + reserved
    assert g.power_draw_mw == (100 + g.gpu_util_pct * 5) * 1000
    assert g.uuid.startswith("GPU-") and g.name == "NVIDIA H100 80GB HBM3"
    assert dict(g.ratios)["gr_engine_active"] == pytest.approx(g.gpu_util_pct / 100, abs=0.01)
    assert all(0 <= v <= 1 for _, v in g.ratios)  # ratios, never percent
    assert is_na(g.pstate) and "not exported by the DCGM exporter" in g.pstate.reason
    assert src.exporters == {"DCGM"}


def test_nvitop_schema():
    src, gpus = _gpus(_rows(prom_sim.SimHost("laptop", "nvitop", 1), 3))
    (g,) = gpus
    assert src.exporters == {"nvitop"} and g.host == "laptop"
    assert g.memory_total_bytes == 81559 * 2**20 and g.power_limit_mw == 700_000
    assert g.gpu_util_pct == prom_sim.util_at(1000, 3, 0) and g.ratios == ()


def test_dcgm_sentinels_become_na_with_the_reason():
    _, gpus = _gpus(_rows(prom_sim.SimHost("n", "dcgm", 2, sentinel=(1,))))
    assert not is_na(gpus[0].power_draw_mw)
    assert is_na(gpus[1].power_draw_mw) and gpus[1].power_draw_mw.code == "blank"
    assert is_na(gpus[1].fan_speed_pct) and "not supported" in gpus[1].fan_speed_pct.reason
    assert cluster._num(str(float(0x7FFFFFFFFFFFFFF0)), "clocks.sm", 1, "DCGM").code == "blank"
    assert cluster._num("NaN", "clocks.sm", 1, "DCGM").code == "error"


def test_mig_instances_grouped_under_their_gpu_power_counted_once():
    _, gpus = _gpus(_rows(prom_sim.SimHost("n", "dcgm", 2, mig=(0,))))
    g = gpus[0]
    assert g.mig_enabled is True and len(g.mig_devices) == 2
    assert g.power_draw_mw == 250_000  # both instances report the device's 250 W: not 500
    assert g.memory_used_bytes == 3000 * 2**20  # 1000 + 2000 MiB over the instances
    assert is_na(g.gpu_util_pct) and g.gpu_util_pct.code == "mig"
    assert [m.uuid for m in g.mig_devices] == ["3g.40gb #1", "4g.40gb #2"]
    assert gpus[1].mig_enabled is False and len(gpus) == 2


def test_mig_instances_show_their_own_profiling_ratios():
    from cudamagic.watch import trace
    from cudamagic.watch.clusterview import detail_html
    from cudamagic.watch.samples import sample_rows

    src, gpus = _gpus(_rows(prom_sim.SimHost("n", "dcgm", 2, mig=(0,))))
    g = gpus[0]
    assert [m.ratios for m in g.mig_devices] == [
        (("gr_engine_active", 0.25),),
        (("gr_engine_active", 0.5),),
    ]
    assert (
        g.ratios == () and g.power_draw_mw == 250_000
    )  # not merged into the GPU; power counted once
    # the GPU without MIG keeps its own device-level ratio, the exporter's reading of its
    # utilization
    assert dict(gpus[1].ratios)["gr_engine_active"] == pytest.approx(
        gpus[1].gpu_util_pct / 100, abs=0.01
    )
    html = detail_html(gpus)
    assert "3g.40gb #1" in html and "0.25" in html and "0.50" in html
    # key columns only (it fits a 950 px output): the instances are rows, not a column
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", html)
    assert heads == [
        *("GPU", "name", "util", "memory", "temp", "power", "SM clock"),
        "engine active (0-1)",
        "tensor active (0-1)",
    ]
    assert all(r.count("<td") == len(heads) for r in re.findall(r"<tr>.*?</tr>", html)[1:])
    row = sample_rows(src._sample(1, 1000.0, gpus))[0]
    assert row["mig.1.prof.gr_engine_active"] == 0.25 and row["mig.2.prof.gr_engine_active"] == 0.5
    back = trace.sample_from_json(trace.sample_to_json(src._sample(1, 1000.0, gpus)))
    assert back.gpus[0].mig_devices == g.mig_devices


def test_matrix_fast_path_equals_json():
    import json

    import numpy as np

    from cudamagic.watch.prometheus import _columns, parse_matrix

    result = [
        {
            "metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": 'q"x\\é}', "gpu": "0"},
            "values": [
                [1000, "1"],
                [1001.5, "NaN"],
                [1003, "+Inf"],
                [1004, "-Inf"],
                [1005, "9223372036854775807"],
                [1006, "2.5e-07"],
            ],
        },
        {"metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "1"}, "values": [[1000, "42"]]},
    ]
    body = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    fast = parse_matrix(body)
    slow = [_columns(r) for r in result]
    assert len(fast) == 2 and fast[0][0]["Hostname"] == 'q"x\\é}'
    for (m1, t1, v1), (m2, t2, v2) in zip(fast, slow, strict=True):
        assert m1 == m2 and t1.tolist() == t2.tolist()
        np.testing.assert_array_equal(v1, v2)
    assert fast[0][1].tolist() == [1000, 1001.5, 1003, 1004, 1005, 1006]
    # what it does not recognise goes to json: spaces, an error answer, native histograms, a bad
    # number
    assert (
        parse_matrix(
            json.dumps(
                {"status": "success", "data": {"resultType": "matrix", "result": result}}
            ).encode()
        )
        is None
    )
    assert parse_matrix(b'{"status":"error","errorType":"bad_data","error":"x"}') is None
    assert (
        parse_matrix(
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},'
            b'"histograms":[[1,{"count":"1"}]]}]}}'
        )
        is None
    )
    assert (
        parse_matrix(
            b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},'
            b'"values":[[1,"x"]]}]}}'
        )
        is None
    )
    assert parse_matrix(b'{"status":"success","data":{"resultType":"matrix","result":[]}}') == []


def test_history_equals_a_refresh_at_each_time_with_mig_sentinels_and_gaps():
    import numpy as np

    hosts = [
        prom_sim.SimHost("a", "dcgm", 2, mig=(1,), sentinel=(0,)),
        prom_sim.SimHost("b", "nvitop", 1),
        prom_sim.SimHost("c", "dcgm-old", 1),
    ]
    points = {}
    for t in range(1000, 1060, 5):
        for i, h in enumerate(hosts):
            if h.name == "c" and 1020 <= t < 1040:
                continue  # a gap: host c was not scraped
            for name, lab, v in prom_sim.host_metrics(h, i, t - t % 15):  # values change every 15 s
                points.setdefault(tuple(sorted({"__name__": name, **lab}.items())), []).append(
                    (t, v)
                )
    live, hist = PrometheusSource("http://unused:1"), PrometheusSource("http://unused:1")
    times, frames = hist.assemble_columns(
        [
            (
                classify(dict(k)),
                np.array([t for t, _ in p], float),
                np.array([v for _, v in p], float),
            )
            for k, p in points.items()
        ]
    )
    series, refreshes = {k: classify(dict(k)) for k in points}, {}
    for t in range(1000, 1060, 5):
        at = [(series[k], repr(float(v))) for k, p in points.items() for u, v in p if u == t]
        refreshes[t] = live.build([s for s, _ in at], [text for _, text in at])
    assert times == [float(t) for t in refreshes] and frames == list(refreshes.values())
    assert {len(f) for f in frames} == {4, 3} and hist.exporters == live.exporters
    assert frames[1][0] is frames[2][0]  # 1005 and 1010 repeat the values of 1005: one sample


def test_host_tracker_marks_a_missing_host_stale_keeps_its_since_and_forgets_it():
    from cudamagic.watch.clusterview import cluster_text

    a, b = prom_sim.SimHost("a", "dcgm", 1), prom_sim.SimHost("b", "nvitop", 2)
    src, both = _gpus(_rows(a, 0) + _rows(b, 1))
    only_a = tuple(g for g in both if g.host == "a")
    src.track_hosts(src._sample(1, 1000.0, both), {})
    src.track_hosts(src._sample(2, 1001.0, only_a), {})
    assert src.stale_hosts["b"]["since"] == 1001.0 and src.stale_hosts["b"]["gpus"] == both[1:]
    assert (
        src.stale_hosts["b"]["reason"]
        == "its GPU series went stale (no longer in Prometheus's answer)"
    )
    src.track_hosts(
        src._sample(3, 1002.0, only_a), {"b": "its exporter is down (up == 0 for job=b instance=x)"}
    )
    assert src.stale_hosts["b"]["since"] == 1001.0 and "up == 0" in src.stale_hosts["b"]["reason"]
    text = cluster_text(src._sample(3, 1002.0, only_a), [], "cluster", "running", source=src)
    assert "1 GPU on 1 host at" in text and "; 1 host stale" in text and "b (stale)" in text
    src.track_hosts(src._sample(4, 1002.0 + 3601, only_a), {})
    assert src.stale_hosts == {}  # gone for over an hour: forgotten
    src.track_hosts(src._sample(5, 9000.0, both), {})
    assert src.stale_hosts == {}


def test_replay_marks_a_host_missing_from_later_samples_stale(tmp_path):
    from cudamagic.watch.cluster import ClusterReplay
    from cudamagic.watch.sources import ReplaySource
    from cudamagic.watch.trace import TraceWriter

    src, both = _gpus(
        _rows(prom_sim.SimHost("a", "dcgm", 1), 0) + _rows(prom_sim.SimHost("b", "dcgm", 1), 1)
    )
    path = str(tmp_path / "t.jsonl")
    writer = TraceWriter(path, source="test", interval_s=1.0)
    for i, gpus in enumerate((both, both[:1], both[:1])):
        writer.write(src._sample(i, 1000.0 + i, gpus))
    writer.close()
    replay = ClusterReplay.wrap(ReplaySource(path))
    replay.read(0, 0.0)
    assert replay.stale_hosts == {}
    replay.read(1, 0.0)
    s = replay.read(2, 0.0)
    info = replay.stale_hosts["b"]
    assert info["since"] == 1001.0 and "missing from the recording" in info["reason"]
    assert "b (stale): exporter down since" in ClusterViews(replay).text(
        s, [], "replay", "running", ""
    )


def test_job_matching_slurm_pod_host():
    hosts = [
        prom_sim.SimHost("a", "dcgm", 1, labels={"hpc_job": "77"}),
        prom_sim.SimHost("b.cluster.local", "dcgm-old", 1, labels={"pod": "train-0"}),
        prom_sim.SimHost("c", "nvitop", 1),
    ]
    rows = [r for i, h in enumerate(hosts) for r in _rows(h, i)]
    src, gpus = _gpus(rows, job="", environ={"SLURM_JOB_ID": "77"}, hostname="zz")
    assert [g.host for g in gpus] == ["a"] and src.job_match == "hpc_job=77 (from SLURM_JOB_ID)"
    src, gpus = _gpus(
        rows,
        job="",
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "train-0"},
        hostname="train-0",
    )
    assert [g.host for g in gpus] == [
        "b.cluster.local"
    ] and src.job_match == "pod=train-0 (from HOSTNAME)"
    src, gpus = _gpus(rows, job="", environ={}, hostname="b")
    assert [g.host for g in gpus] == ["b.cluster.local"] and src.job_match.startswith("host=b")
    src, gpus = _gpus(rows, job="nope", environ={}, hostname="zz")
    assert gpus == () and "hpc_job=nope" in src.no_job_text()
    assert job_candidates(None, {}, "h") == [("host", "h", "this kernel's host name")]


def test_hosts_filter_matches_short_names():
    rows = _rows(prom_sim.SimHost("node07.cluster.local", "dcgm", 1), 0) + _rows(
        prom_sim.SimHost("node08"), 1
    )
    _, gpus = _gpus(rows, hosts=["node07"])
    assert [g.host for g in gpus] == ["node07.cluster.local"]


def test_selector_is_one_query_for_both_exporters():
    q = PrometheusSource("http://unused:1").query
    assert (
        q.startswith('{__name__=~"')
        and "DCGM_FI_DEV_GPU_UTIL" in q
        and "gpu_utilization_Percentage" in q
    )
    assert q.endswith(" or (up == 0)")  # and only the scrape targets that are down


def test_outside_strings_are_escaped_in_text_and_html():
    from cudamagic.watch.clusterview import cluster_html, cluster_text

    evil = prom_sim.SimHost(
        "n\x1b[31m<img src=x onerror=alert(1)>", "dcgm", 1, labels={"pod": "p\u202e<script>"}
    )
    src, gpus = _gpus(_rows(evil))
    sample = src._sample(1, 1000.0, gpus)
    text = cluster_text(sample, [sample], "cluster", "running")
    html = cluster_html(sample, [sample], "cluster", "running")
    assert "\x1b" not in text and "\\x1b" in text and "\u202e" not in text
    assert (
        "<img" not in html
        and "&lt;img" in html
        and "<script>" not in html
        and "&lt;script&gt;" in html
    )


def test_the_host_picker_changes_options_and_value_in_one_message(monkeypatch):
    src, both = _gpus(
        _rows(prom_sim.SimHost("a", "dcgm", 1), 0) + _rows(prom_sim.SimHost("b", "dcgm", 1), 1)
    )
    view = ClusterViews(src).view("cluster")
    s1 = src._sample(1, 1000.0, both[:1])
    view.apply(s1, [s1])
    assert list(view.picker.options) == ["a"] and view.picker.value == "a"
    sent = []
    orig = view.picker._send
    monkeypatch.setattr(
        view.picker,
        "_send",
        lambda msg, buffers=None: sent.append(sorted(msg["state"])) or orig(msg, buffers),
    )
    s2 = src._sample(2, 1001.0, both)
    view.apply(s2, [s1, s2])
    assert list(view.picker.options) == ["a", "b"] and view.picker.value == "a"
    assert len(sent) == 1 and "_options_labels" in sent[0]  # one message, not one per trait
    view.close()
