"""Tier 1: which series are one GPU, which host a value names, which exporter names are read.

A GPU is its UUID whatever its labels (a pod label that appears, an exporter pod restarted under a
new host name); hosts are addresses, not string prefixes; the older exporter generation's
``dcgm_*`` names are read; a memory total is never computed from incomplete data.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudamagic.core.na import is_na
from cudamagic.watch import exporters
from cudamagic.watch.cluster import HostTracker, PrometheusSource, classify, host_matches
from cudamagic.watch.prometheus import vector_rows
from cudamagic.watch.samples import Sample

MIB = 1024**2
UUID = "GPU-8b2281de-6d3c-22ed-0ec8-d3b864870b8b"


def _refresh(src, rows):
    """What a refresh builds from one instant's ``[(series, value text)]``."""
    return src.build([s for s, _ in rows], [text for _, text in rows])


def _labels(host="node01", gpu=0, uuid=UUID, **extra):
    lab = {"gpu": str(gpu), "modelName": "NVIDIA H100 80GB HBM3", "Hostname": host, **extra}
    if uuid:
        lab["UUID"] = uuid
    return lab


def _series(name, labels, times, values):
    return (
        classify({"__name__": name, **labels}),
        np.array(times, dtype=float),
        np.array(values, dtype=float),
    )


def _history(src, series):
    """The frames of a range query's ``series`` (checked: one time per distinct point time)."""
    times, frames = src.assemble_columns(series)
    assert times == sorted({float(t) for _, ts, _ in series for t in ts})
    return times, frames


@pytest.mark.parametrize("uuid", [UUID, ""])
def test_a_gpu_whose_series_gain_a_pod_label_keeps_its_whole_history(uuid):
    """dcgm-exporter#237: the same GPU's series gain exported_pod halfway: one continuous GPU."""
    before = _labels(uuid=uuid)
    after = _labels(uuid=uuid, exported_pod="train-7f9c", exported_namespace="default")
    series = [
        _series("DCGM_FI_DEV_GPU_UTIL", before, range(0, 15), [10.0] * 15),
        _series("DCGM_FI_DEV_FB_USED", before, range(0, 15), [1000.0] * 15),
        _series("DCGM_FI_DEV_GPU_UTIL", after, range(15, 30), [90.0] * 15),
        _series("DCGM_FI_DEV_FB_USED", after, range(15, 30), [5000.0] * 15),
    ]
    src = PrometheusSource("http://unused:1")
    times, frames = _history(src, series)
    assert times == [float(t) for t in range(30)]
    assert [len(f) for f in frames] == [1] * 30
    assert [f[0].gpu_util_pct for f in frames] == [10] * 15 + [90] * 15
    assert [f[0].memory_used_bytes for f in frames] == [1000 * MIB] * 15 + [5000 * MIB] * 15
    assert {(f[0].host, f[0].index) for f in frames} == {("node01", 0)}
    # the newest series names the GPU's job
    assert ("exported_pod", "train-7f9c") in frames[-1][0].labels


def test_overlapping_series_of_one_gpu_merge_point_by_point_the_later_series_winning():
    old = _labels()
    new = _labels(pod="p1")
    series = [
        _series("DCGM_FI_DEV_GPU_UTIL", old, [0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0]),
        _series("DCGM_FI_DEV_GPU_UTIL", new, [2, 3, 4, 5], [30.0, 40.0, 50.0, 60.0]),
    ]
    _, frames = _history(PrometheusSource("http://unused:1"), series)
    assert [f[0].gpu_util_pct for f in frames] == [1, 2, 30, 40, 50, 60]


def test_an_exporter_pod_restarted_under_a_new_host_name_is_the_same_host():
    """Hostname is the exporter pod's name on Kubernetes: a restart renames the host only."""
    series = []
    for host, span in (
        ("dcgm-exporter-7xq2k", range(0, 10)),
        ("dcgm-exporter-m4d9p", range(10, 20)),
    ):
        for g in range(2):
            lab = _labels(host=host, gpu=g, uuid=f"GPU-0000000{g}-aaaa-bbbb-cccc-000000000000")
            series.append(_series("DCGM_FI_DEV_GPU_UTIL", lab, span, [50.0 + g] * len(span)))
    _, frames = _history(PrometheusSource("http://unused:1"), series)
    assert [len(f) for f in frames] == [2] * 20
    # the newest name is the host's name throughout its history
    assert {g.host for f in frames for g in f} == {"dcgm-exporter-m4d9p"}

    # live: the old name is not kept as a second host whose exporter went down
    tracker = HostTracker()
    tracker.stale_hosts, tracker._seen = {}, {}
    for t, host in ((1.0, "dcgm-exporter-7xq2k"), (2.0, "dcgm-exporter-m4d9p")):
        gpus = _refresh(
            PrometheusSource("http://unused:1"),
            [
                (classify({"__name__": "DCGM_FI_DEV_GPU_UTIL", **lab}), "50")
                for lab in (
                    _labels(host=host, gpu=g, uuid=f"GPU-0000000{g}-aaaa-bbbb-cccc-000000000000")
                    for g in range(2)
                )
            ],
        )
        tracker.track_hosts(Sample(0, t, None, gpus, None, None), down={})
    assert tracker.stale_hosts == {}
    assert set(tracker._seen) == {"dcgm-exporter-m4d9p"}


def test_a_host_that_lost_its_gpus_is_still_stale():
    tracker = HostTracker()
    tracker.stale_hosts, tracker._seen = {}, {}
    src = PrometheusSource("http://unused:1")
    a = _refresh(
        src, [(classify({"__name__": "DCGM_FI_DEV_GPU_UTIL", **_labels("a", 0, "GPU-a")}), "1")]
    )
    b = _refresh(
        src, [(classify({"__name__": "DCGM_FI_DEV_GPU_UTIL", **_labels("b", 0, "GPU-b")}), "1")]
    )
    tracker.track_hosts(Sample(0, 1.0, None, a + b, None, None), down={})
    tracker.track_hosts(Sample(0, 2.0, None, b, None, None), down={})
    assert set(tracker.stale_hosts) == {"a"}


@pytest.mark.parametrize(
    "host, wanted, same",
    [
        ("10.1.2.7:9400", "10.1.2.7", True),
        ("10.1.2.7:9400", "10.1.2.7:9400", True),
        ("10.1.2.7:9400", "10.1.2.7:9100", False),
        ("10.1.2.70:9400", "10.1.2.7", False),
        ("10.1.9.9:9400", "10.1.2.7", False),
        ("10.1.2.7:9400", "10", False),
        ("10.1.2.7", "::ffff:10.1.2.7", True),
        ("[2001:db8::7]:9400", "2001:db8:0::7", True),
        ("[2001:db8::7]:9400", "2001:db8::70", False),
        ("[fe80::1]:9400", "[fe80::1]", True),
        ("node07.cluster.local:9400", "node07", True),
        ("node07", "node07.cluster.local", True),
        ("node07.cluster.local", "NODE07.cluster.local", True),
        ("node070", "node07", False),
        ("node07.cluster.local", "node07.other.local", False),
    ],
)
def test_hosts_are_matched_as_addresses(host, wanted, same):
    assert host_matches(host, wanted) is same


def _instance_rows():
    rows = []
    for inst in ("10.1.2.7:9400", "10.1.9.9:9400", "10.1.2.70:9400"):
        for g in range(2):
            lab = {"gpu": str(g), "UUID": f"GPU-{inst}-{g}", "instance": inst, "job": "dcgm"}
            rows.append((classify({"__name__": "DCGM_FI_DEV_GPU_UTIL", **lab}), "5"))
    return rows


@pytest.mark.parametrize("value", ["10.1.2.7", "10.1.2.7:9400"])
def test_hosts_and_job_select_exactly_the_node_with_that_address(value):
    """gpu-monitoring-tools#28: no host label, so the host is `instance`; 10.1.2.7 is one node."""
    src = PrometheusSource("http://unused:1", hosts=[value])
    assert {(g.host, g.index) for g in _refresh(src, _instance_rows())} == {
        ("10.1.2.7:9400", 0),
        ("10.1.2.7:9400", 1),
    }
    job = PrometheusSource("http://unused:1", job=value)
    kept = job._job_filter(_instance_rows())
    assert {s.host for s, _ in kept} == {"10.1.2.7:9400"}
    assert _refresh(PrometheusSource("http://unused:1", hosts=["10"]), _instance_rows()) == ()


#: gpu-monitoring-tools' pod-gpu-metrics-exporter README: the older exporter generation's labels
LEGACY = {"gpu": "1", "uuid": "GPU-9567a9e7-341e-bb7e-fcf5-788d8caa50f9", "pod_name": "pod1"}


def test_the_older_exporter_generations_dcgm_names_are_read():
    rows = [
        ("dcgm_gpu_utilization", "57"),
        ("dcgm_mem_copy_utilization", "20"),
        ("dcgm_fb_used", "21000"),
        ("dcgm_fb_free", "11510"),
        ("dcgm_gpu_temp", "54"),
        ("dcgm_power_usage", "180.5"),
        ("dcgm_sm_clock", "1380"),
        ("dcgm_memory_clock", "877"),
    ]
    lab = dict(LEGACY, instance="10.0.0.5:9400")
    (g,) = _refresh(
        PrometheusSource("http://unused:1"),
        [(classify({"__name__": n, **lab}), v) for n, v in rows],
    )
    assert (g.host, g.index, g.uuid) == ("10.0.0.5:9400", 1, LEGACY["uuid"])
    assert (g.gpu_util_pct, g.mem_util_pct, g.temperature_c) == (57, 20, 54)
    assert (g.power_draw_mw, g.clock_sm_mhz, g.clock_mem_mhz) == (180_500, 1380, 877)
    assert g.memory_used_bytes == 21000 * MIB
    # used + free without a reserve is not the total: NA with the lower bound in the reason
    assert is_na(g.memory_total_bytes) and "at least 32510 MiB" in g.memory_total_bytes.reason
    assert ("pod_name", "pod1") in g.labels
    assert is_na(g.power_limit_mw) and "not exported" in g.power_limit_mw.reason
    assert set(exporters.LEGACY_DCGM_FIELDS) <= set(exporters.all_metric_names())


@pytest.mark.parametrize(
    "extra, total",
    [
        ({"DCGM_FI_DEV_FB_RESERVED": "563"}, (1000 + 79996 + 563) * MIB),
        ({"DCGM_FI_DEV_FB_TOTAL": "81559", "DCGM_FI_DEV_FB_RESERVED": "600"}, 81559 * MIB),
        ({"DCGM_FI_DEV_FB_TOTAL": "81559"}, 81559 * MIB),
        ({}, None),
    ],
)
def test_memory_total_uses_fb_total_and_is_never_a_sum_missing_the_reserve(extra, total):
    rows = {"DCGM_FI_DEV_FB_USED": "1000", "DCGM_FI_DEV_FB_FREE": "79996", **extra}
    (g,) = _refresh(
        PrometheusSource("http://unused:1"),
        [(classify({"__name__": n, **_labels()}), v) for n, v in rows.items()],
    )
    if total is None:
        assert is_na(g.memory_total_bytes) and g.memory_total_bytes.code == "incomplete"
        assert "DCGM_FI_DEV_FB_RESERVED" in g.memory_total_bytes.reason
    else:
        assert g.memory_total_bytes == total


class _Client:
    """A client whose instant query answers ``answers[query]`` (counting the requests)."""

    timeout_s = 1.0

    def __init__(self, answers):
        self.answers, self.queries = answers, []

    def instant(self, query, at_s=None):
        self.queries.append(query)
        return self.answers.get(query, [])

    def instant_rows(self, query):
        return vector_rows(self.instant(query))

    def close(self):
        pass


def _names(*names):
    return [{"metric": {"__name__": n}, "value": [0, "4"]} for n in names]


def test_a_server_with_unknown_gpu_metrics_is_told_what_it_has():
    client = _Client(
        {
            exporters.OTHER_QUERY: _names(
                "nvidia_smi_utilization_gpu_ratio", "nvidia_smi_memory_used_bytes"
            )
        }
    )
    src = PrometheusSource("http://unused:1", client=client)
    st = src.read(1, 100.0).nvml_status
    assert st.code == "no_gpus"
    assert "nvidia_smi_utilization_gpu_ratio" in st.reason and "nvidia_gpu_exporter" in st.reason
    assert "dcgm-exporter" in st.reason and "no DCGM" not in st.reason
    assert client.queries == [src.query, exporters.OTHER_QUERY]
    src.read(2, 101.0)  # the look is not repeated at every refresh
    assert client.queries[-1] == src.query and len(client.queries) == 3


def test_a_server_without_any_gpu_metric_says_so():
    src = PrometheusSource("http://unused:1", client=_Client({}))
    st = src.read(1, 100.0).nvml_status
    assert "no GPU metrics at all" in st.reason and "/targets" in st.reason
