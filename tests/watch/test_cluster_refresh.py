"""One cluster refresh read by its label bytes: the same samples as the JSON path, less work."""

from __future__ import annotations

import json

import prom_sim
import pytest

from cudamagic.watch.cluster import PrometheusSource
from cudamagic.watch.prometheus import parse_vector, vector_rows

from .prom_stub import PromStub, body_of, data_of

HOSTS = [
    prom_sim.SimHost("n1", "dcgm", 3, mig=(1,), sentinel=(2,), labels={"hpc_job": "7"}),
    prom_sim.SimHost("n2", "dcgm-old", 2),
    prom_sim.SimHost("laptop", "nvitop", 1),
]


def _answer(hosts, t, down=()):
    """A compact instant-vector body as Prometheus writes it, and its decoded ``result``.

    The hosts in ``down`` answer only ``up == 0``: their exporter is down.
    """
    result = []
    for i, h in enumerate(hosts):
        for name, labels, value in [] if h.name in down else prom_sim.host_metrics(h, i, t):
            metric = {"__name__": name, **labels, "instance": f"{h.name}:9400", "job": h.name}
            result.append({"metric": metric, "value": [t, repr(float(value))]})
        if h.name in down:
            up = {"__name__": "up", "instance": f"{h.name}:9400", "job": h.name}
            result.append({"metric": up, "value": [t, "0"]})
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":")).encode(), result


class _BytesClient:
    """Answers with a body, read the way PrometheusClient.instant_rows reads it."""

    requests = 0

    def __init__(self):
        self.body = b""

    def instant_rows(self, query):
        self.requests += 1
        rows = parse_vector(self.body)
        assert rows is not None  # the fast path read it
        return rows

    def close(self):
        pass


class _JsonClient:
    """Answers with the decoded result only: the path through :mod:`json`."""

    def __init__(self):
        self.result = []

    def instant_rows(self, query):
        return vector_rows(self.result)

    def close(self):
        pass


@pytest.mark.parametrize("name", ["vector", "inf_vector", "vector_empty"])
def test_parse_vector_reads_recorded_answers_as_json_does(name):
    rows = parse_vector(body_of(name))
    want = data_of(name)["result"]
    assert [(json.loads(labels), text.decode()) for labels, text in rows] == [
        (r["metric"], r["value"][1]) for r in want
    ]


@pytest.mark.parametrize("name", ["matrix", "bad_data", "scalar", "not_found"])
def test_parse_vector_leaves_other_answers_to_json(name):
    assert parse_vector(body_of(name)) is None


def test_parse_vector_refuses_a_layout_it_does_not_know():
    pretty = json.dumps(json.loads(body_of("vector")), indent=1).encode()
    assert parse_vector(pretty) is None
    # a series whose value is not a quoted number: not every series matched
    odd = body_of("vector").replace(b'"value":[', b'"value":[0,{"x":1}],"v":[', 1)
    assert parse_vector(odd) is None


def test_instant_rows_fast_and_through_json_give_the_same_rows():
    stub = PromStub()
    try:
        from cudamagic.watch.prometheus import PrometheusClient

        c = PrometheusClient(stub.url, timeout_s=2.0, environ={})
        stub.answer = "vector"
        fast = c.instant_rows("q")
        pretty = json.dumps(json.loads(body_of("vector")), indent=1)
        stub.answer = (200, "application/json", pretty.encode())
        slow = c.instant_rows("q")
        assert [(json.loads(a), b.decode()) for a, b in fast] == [
            (json.loads(a), b) for a, b in slow
        ]
        assert slow == vector_rows(data_of("vector")["result"]) and len(fast) == 2
        assert stub.requests[-1]["params"] == {"query": ["q"]} and c.requests == 2
        c.close()
    finally:
        stub.close()


def test_refreshes_by_label_bytes_equal_the_json_path_and_reuse_unchanged_gpus():
    fast, slow = _BytesClient(), _JsonClient()
    a = PrometheusSource("http://unused:1", client=fast, job="7")
    b = PrometheusSource("http://unused:1", client=slow, job="7")
    c, d = (
        PrometheusSource("http://unused:1", client=_BytesClient()),
        PrometheusSource("http://unused:1", client=_JsonClient()),
    )
    before = None
    for seq, (hosts, t, down) in enumerate(
        [
            (HOSTS, 1000, ()),
            (HOSTS, 1000, ()),  # the same answer again
            (HOSTS, 1007, ("n2",)),  # new values, an exporter down
            (HOSTS[:2], 1007, ()),  # a host gone: other series
        ]
    ):
        body, result = _answer(hosts, t, down)
        fast.body, slow.result = body, result
        c.client.body, d.client.result = body, result
        got, want = a.read(seq, 5.0 + seq), b.read(seq, 5.0 + seq)
        assert got == want and a.job_match == b.job_match == "hpc_job=7 (from --job 7)"
        assert [g.host for g in got.gpus] == ["n1"] * 3
        all_got, all_want = c.read(seq, 5.0 + seq), d.read(seq, 5.0 + seq)
        assert all_got == all_want
        assert len(all_got.gpus) == sum(h.gpus for h in hosts if h.name not in down)
        assert c.stale_hosts == d.stale_hosts
        if seq == 1:  # nothing changed: the very same sample objects
            assert all(x is y for x, y in zip(all_got.gpus, before.gpus, strict=True))
        if seq == 2:
            assert "exporter is down" in c.stale_hosts["n2"]["reason"]
        if seq == 3:
            assert list(c.stale_hosts) == ["laptop"]
        before = all_got
    assert fast.requests == 4


def test_only_the_gpus_whose_values_changed_are_built_again():
    client = _BytesClient()
    src = PrometheusSource("http://unused:1", client=client)
    body, result = _answer(HOSTS, 1000)
    client.body = body
    first = src.read(1, 1.0).gpus
    # one value of one GPU changes (n2 GPU 1's temperature)
    for r in result:
        m = r["metric"]
        if m["job"] == "n2" and m["__name__"] == "DCGM_FI_DEV_GPU_TEMP" and m["gpu"] == "1":
            r["value"][1] = "99.0"
    client.body = json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}},
        separators=(",", ":"),
    ).encode()
    second = src.read(2, 2.0).gpus
    changed = [i for i, (x, y) in enumerate(zip(first, second, strict=True)) if x is not y]
    assert [(second[i].host, second[i].index) for i in changed] == [("n2", 1)]
    assert second[changed[0]].temperature_c == 99


def test_a_label_value_with_a_brace_sends_the_answer_through_json():
    body, _ = _answer(HOSTS[1:2], 1000)
    odd = body.replace(b'"Hostname":"n2"', b'"Hostname":"n2}"')
    assert odd != body and parse_vector(odd) is None
    stub = PromStub()
    stub.answer = (200, "application/json", odd)
    try:
        src = PrometheusSource(stub.url, timeout_s=2.0, environ={})
        gpus = src.read(1, 1.0).gpus
        assert [(g.host, g.index) for g in gpus] == [("n2}", 0), ("n2}", 1)]
        assert src.client.requests == 1
        src.close()
    finally:
        stub.close()
