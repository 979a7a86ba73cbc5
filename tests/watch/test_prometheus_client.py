"""The Prometheus HTTP client against a local stub.

The Prometheus HTTP client against a local stub replaying a real Prometheus's answers
(prom_stub.py): what it sends (path, parameters, headers, one kept connection, no redirect
followed), what it returns, and the one-line reason of each failure (TLS, DNS, timeouts, proxies'
pages, servers that are not Prometheus).
"""

from __future__ import annotations

import base64
import json
import math
import select
import socket
import ssl
import subprocess
import threading
import time

import numpy as np
import pytest
import urllib3

from cudamagic.watch import prometheus
from cudamagic.watch.prometheus import (
    PrometheusClient,
    PrometheusError,
    SourceURLError,
    parse_source,
)

from .prom_stub import PromStub, body_of, data_of

EXAMPLE = "`%gpuwatch --source prometheus://localhost:9090`"


@pytest.fixture
def stub():
    s = PromStub()
    try:
        yield s
    finally:
        s.close()


def client_of(stub, timeout_s=2.0, **environ):
    return PrometheusClient(stub.url, timeout_s=timeout_s, environ=environ)


# ---- parse_source
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, url",
    [
        ("prometheus+http://prom.example:9090", "http://prom.example:9090"),
        ("PROMETHEUS+HTTPS://prom.example", "https://prom.example"),
        (
            "https://gw.example/PROM-X/",
            "https://gw.example/PROM-X",
        ),  # the path kept as typed, less the last /
    ],
)
def test_source_schemes_and_paths(text, url):
    assert parse_source(text) == url


@pytest.mark.parametrize(
    "text, start, end",
    [
        (
            "ftp://x",
            "--source 'ftp://x' is not a Prometheus URL; give prometheus://HOST:PORT or "
            "https://HOST, e.g. ",
            EXAMPLE,
        ),
        (
            "https://alice@prom.example",
            (
                "--source must not contain a user name or password (it would be shown and "
                "saved with the notebook); set CUDAMAGIC_PROMETHEUS_TOKEN, or "
                "CUDAMAGIC_PROMETHEUS_USER and "
                "CUDAMAGIC_PROMETHEUS_PASSWORD, or a ~/.netrc entry, then type e.g. "
            ),
            "`%gpuwatch --source https://prom.example`",
        ),
        ("prometheus://", "--source 'prometheus://' names no host; type e.g. ", EXAMPLE),
        (
            "http://h/?q=1",
            "--source 'http://h/?q=1' has a query string; give only the server's address, e.g. ",
            EXAMPLE,
        ),
        ("http://h:x", "--source 'http://h:x' has an invalid port; type e.g. ", EXAMPLE),
    ],
)
def test_bad_source_says_what_to_type(text, start, end):
    with pytest.raises(SourceURLError, match="--source") as info:
        parse_source(text)
    msg = str(info.value)
    assert msg.startswith(start) and msg.endswith(end) and "alice" not in msg


# ---- credentials
# ------------------------------------------------------------------------------------------------


def _basic(user_pw: bytes) -> str:
    return "Basic " + base64.b64encode(user_pw).decode()


def test_credentials_sent_from_env_netrc_and_home_netrc(stub, tmp_path, monkeypatch):
    host_rc = tmp_path / "rc"
    host_rc.write_text("machine 127.0.0.1 login bob\n")  # no password: an empty one
    host_rc.chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text("machine 127.0.0.1 login carol password c4rol\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NETRC", raising=False)
    cases = [
        (
            {"CUDAMAGIC_PROMETHEUS_USER": "al"},
            _basic(b"al:"),
            "basic auth from CUDAMAGIC_PROMETHEUS_USER",
        ),
        ({"NETRC": str(host_rc)}, _basic(b"bob:"), f"basic auth from {host_rc}"),
        ({}, _basic(b"carol:c4rol"), f"basic auth from {home / '.netrc'}"),
    ]
    for environ, header, how in cases:
        c = client_of(stub, **environ)
        c.instant("up")
        assert stub.requests[-1]["headers"]["authorization"] == header and c.auth.startswith(how)
        c.close()
    assert stub.requests[-1]["headers"]["accept"] == "application/json"


def test_unreadable_or_missing_netrc_means_no_credentials(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("machine h login\n")  # a parse error
    bad.chmod(0o600)
    for path in (str(bad), str(tmp_path / "missing"), str(tmp_path)):
        assert prometheus.auth_headers("https://h", {"NETRC": path}) == ({}, "none")


# ---- what is sent, what comes back
# -----------------------------------------------------------------------------


def test_instant_sends_query_and_time_and_returns_the_vector(stub):
    c = client_of(stub)
    assert c.requests == 0 and c.last_request_s == 0.0
    q = '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"}'
    stub.delay_s = 0.2
    result = c.instant(q, at_s=1000.5)
    assert 0.2 <= c.last_request_s < 2
    assert stub.requests[-1]["path"] == "/api/v1/query"
    assert stub.requests[-1]["params"] == {"query": [q], "time": ["1000.500"]}
    assert result == data_of("vector")["result"] and len(result) == 2
    stub.delay_s = 0
    c.instant("up")
    assert stub.requests[-1]["params"] == {"query": ["up"]}
    stub.answer = "inf_vector"
    assert math.isinf(float(c.instant("x")[0]["value"][1]))
    assert c.requests == len(stub.requests) == 3 and stub.connections == 1  # one kept connection
    c.close()


def test_range_sends_start_end_step_and_returns_every_series(stub):
    c = client_of(stub)
    stub.answer = "matrix"
    got = c.range_columns("up", 1000.0, 1060.5, 15.25)
    assert stub.requests[-1]["path"] == "/api/v1/query_range"
    assert stub.requests[-1]["params"] == {
        "query": ["up"],
        "start": ["1000.000"],
        "end": ["1060.500"],
        "step": ["15.250"],
    }
    want = data_of("matrix")["result"]
    assert len(got) == len(want) == 2
    for (labels, times, values), w in zip(got, want, strict=True):
        assert labels == w["metric"] and times.dtype == values.dtype == np.float64
        assert times.tolist() == [p[0] for p in w["values"]]
        assert values.tolist() == [float(p[1]) for p in w["values"]]
    assert c.requests == 1
    c.close()


def test_range_columns_reads_prometheus_answers_without_per_point_python(stub, monkeypatch):
    calls = []
    monkeypatch.setattr(prometheus, "_columns", lambda r: calls.append(r))
    c = client_of(stub)
    for name in ("matrix", "matrix_nan", "matrix_empty"):
        stub.answer = name
        got = c.range_columns("x", 0, 1, 1)
        assert len(got) == len(data_of(name)["result"])
    assert calls == []  # the numpy path read all three


def test_compact_matrix_with_bare_numbers_and_points_that_are_not_pairs():
    """Another server's compact layout is read like Prometheus's.

    Another server's compact layout with unquoted numbers is read like Prometheus's; a point of
    three numbers is not taken apart into pairs (the JSON path decides).
    """
    head = (
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"1"},"values":'
    )
    ((labels, times, values),) = prometheus.parse_matrix(head + b"[[1,5],[2,65]]}]}}")
    assert labels == {"a": "1"} and times.tolist() == [1, 2] and values.tolist() == [5, 65]
    assert prometheus.parse_matrix(head + b'[[1,"2","3"]]}]}}') is None


def test_range_columns_other_layouts_go_through_json(stub):
    """Other JSON layouts go through the json decoder.

    A proxy that re-serialises JSON (spaces), a series without values (native histograms), malformed
    points: the same columns as the compact answer, the series without values left out, bad points
    skipped or NaN.
    """
    c = client_of(stub)
    stub.answer = "matrix"
    fast = c.range_columns("x", 0, 1, 1)
    spaced = json.dumps(json.loads(body_of("matrix")))
    assert spaced != body_of("matrix").decode()
    stub.answer = (200, "application/json", spaced)
    slow = c.range_columns("x", 0, 1, 1)
    assert [(m, t.tolist(), v.tolist()) for m, t, v in slow] == [
        (m, t.tolist(), v.tolist()) for m, t, v in fast
    ]
    odd = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"a": "1"}, "histograms": [[1, {"count": "1"}]]},
                [1, 2],
                {"metric": {"a": "2"}, "values": [[1, "5"], ["x", "6"], [3, "bad"], [4, "7"]]},
            ],
        },
    }
    stub.answer = (200, "application/json", json.dumps(odd))
    ((labels, times, values),) = c.range_columns("x", 0, 1, 1)
    assert labels == {"a": "2"} and times.tolist() == [1, 3, 4]
    assert values[0] == 5 and math.isnan(values[1]) and values[2] == 7
    c.close()


# ---- failures: one line each
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["instant", "instant_rows", "range_columns"])
@pytest.mark.parametrize(
    "answer, reason",
    [
        (
            "too_many_points",
            (
                "HTTP 400 bad_data: exceeded maximum resolution of 11,000 points per timeseries. "
                "Try decreasing the query resolution (?step=XX)"
            ),
        ),
        (
            "not_found",
            (
                "the server at {url} answered HTTP 404 at {path} (404 page not found): is this a "
                "Prometheus "
                "server? Check --source: it must be the address the Prometheus API is served "
                "under (the one "
                "whose /api/v1/query answers JSON), e.g. prometheus://HOST:9090 or "
                "https://HOST/prometheus "
                "behind a proxy"
            ),
        ),
    ],
)
def test_error_answers_of_every_request(stub, method, answer, reason):
    c = client_of(stub)
    stub.answer = answer
    args = ("up", 0, 1, 1) if method == "range_columns" else ("up",)
    path = "/api/v1/query_range" if method == "range_columns" else "/api/v1/query"
    with pytest.raises(PrometheusError, match="HTTP") as info:
        getattr(c, method)(*args)
    assert str(info.value) == reason.format(url=stub.url, path=path)


@pytest.mark.parametrize(
    "method, got",
    [
        ("instant", "expected an instant vector, got scalar"),
        ("instant_rows", "expected an instant vector, got scalar"),
        ("range_columns", "expected a range matrix, got vector"),
    ],
)
def test_an_answer_of_another_type_is_refused(stub, method, got):
    c = client_of(stub)
    stub.answer = "vector" if method == "range_columns" else "scalar"
    args = ("up", 0, 1, 1) if method == "range_columns" else ("1+1",)
    with pytest.raises(PrometheusError, match="expected") as info:
        getattr(c, method)(*args)
    assert str(info.value) == got
    stub.answer = (
        200,
        "application/json",
        json.dumps({"status": "success", "data": {"resultType": "x" * 40}}),
    )
    with pytest.raises(PrometheusError, match="expected") as info:
        getattr(c, method)(*args)
    assert str(info.value) == got.rsplit(" ", 1)[0] + " " + "x" * 20  # an odd type name is cut


def _reason_for(stub, answer, method="instant"):
    stub.answer = answer
    c = client_of(stub)
    with pytest.raises(PrometheusError, match=r"\S") as info:
        getattr(c, method)("up") if method == "instant" else getattr(c, method)("up", 0, 1, 1)
    c.close()
    return str(info.value).replace(stub.url, "URL")


NGINX_400 = (
    "<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS "
    "port</title></head>\r\n<body>\r\n"
    "<center><h1>400 Bad Request</h1></center>\r\n<center>The plain HTTP request was sent to "
    "HTTPS port"
    "</center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n"
)
ADVICE = (
    ": is this a Prometheus server? Check --source: it must be the address the Prometheus API is "
    "served under "
    "(the one whose /api/v1/query answers JSON), e.g. prometheus://HOST:9090 or "
    "https://HOST/prometheus "
    "behind a proxy"
)
RETRY = ": a server or proxy error, retried at the next refresh"
AT = "the server at URL answered HTTP "
NOT_API = (
    "the server at URL answered /api/v1/query with JSON that is not a Prometheus API answer: is "
    "this a "
    "Prometheus server? Check --source"
)


@pytest.mark.parametrize(
    "answer, reason",
    [
        # plain HTTP to nginx's HTTPS port: an HTML page with status 400
        ((400, "text/html", NGINX_400), AT + "400 at /api/v1/query with an HTML page" + ADVICE),
        # an HTML page sent as text/plain, after a blank line
        (
            (502, "text/plain", "\n<html><body>Bad gateway</body></html>"),
            AT + "502 at /api/v1/query with an HTML page" + RETRY,
        ),
        # text/html that is not markup
        (
            (503, "text/html; charset=utf-8", "Service Unavailable"),
            AT + "503 at /api/v1/query with an HTML page" + RETRY,
        ),
        # a proxy's empty answer without a Content-Type
        ((502, None, b""), AT + "502 at /api/v1/query" + RETRY),
        # a gateway's JSON error: not echoed
        (
            (502, "application/json", '{"message": "Bad Gateway"}'),
            AT + "502 at /api/v1/query" + RETRY,
        ),
        # a short plain-text answer is kept on one line, undecodable bytes replaced
        (
            (
                502,
                "text/plain; charset=iso-8859-1",
                "Passerelle\n  d\xe9faillante".encode("latin-1"),
            ),
            AT + "502 at /api/v1/query (Passerelle d\ufffdfaillante)" + RETRY,
        ),
        (
            (429, "text/plain", "slow down " * 30),
            AT + "429 at /api/v1/query (" + "slow down " * 12 + ")",
        ),
        (
            (200, "text/plain", "OK\n"),
            AT + "200 at /api/v1/query (OK)" + ADVICE,
        ),  # a load balancer's health page
        # only the first 2000 bytes are looked at
        ((502, "text/plain", " " * 2000 + "late words"), AT + "502 at /api/v1/query" + RETRY),
        # an OAuth proxy's redirect to its login page: not followed
        (
            (302, "text/html", '<a href="/login">Found</a>', {"Location": "/login"}),
            AT + "302 at /api/v1/query with an HTML page" + ADVICE,
        ),
        # a 3xx with Prometheus's JSON is still not an answer
        ((300, "application/json", body_of("vector")), AT + "300 at /api/v1/query"),
        (
            (403, "text/plain", "no"),
            (
                "HTTP 403 forbidden: the server wants credentials (set CUDAMAGIC_PROMETHEUS_TOKEN, "
                "or CUDAMAGIC_PROMETHEUS_USER and CUDAMAGIC_PROMETHEUS_PASSWORD, or a ~/.netrc "
                "entry; now using: none)"
            ),
        ),
        # JSON APIs that are not Prometheus (JSend's answers)
        ((200, "application/json", '{"status": "fail", "data": {"query": "required"}}'), NOT_API),
        ((200, "application/json", '{"status": "success", "data": null}'), NOT_API),
        ((422, "application/json", '{"status": "error"}'), "HTTP 422 error: "),
        (
            (
                422,
                "application/json",
                json.dumps({"status": "error", "errorType": "execution", "error": "e" * 300}),
            ),
            "HTTP 422 execution: " + "e" * 200,
        ),
    ],
)
def test_answers_that_are_not_prometheus_are_one_line_reasons(stub, answer, reason):
    got = _reason_for(stub, answer)
    assert got == reason and "\n" not in got and "<" not in got
    assert len(stub.requests) == 1  # no redirect followed, no retry


def _tls_pair(tmp_path):
    """A self-signed certificate for 127.0.0.1, its key, and the server-side SSL context.

    ``openssl``.
    """
    crt, key = tmp_path / "ca.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(crt),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    return crt, ctx


def test_tls_is_verified_and_a_private_ca_can_be_named(tmp_path):
    crt, ctx = _tls_pair(tmp_path)
    s = PromStub(tls_context=ctx)
    try:
        c = PrometheusClient(s.url, timeout_s=5, environ={})
        with pytest.raises(
            PrometheusError,
            match=r"^TLS error: .*certificate verify failed.* \(set "
            r"CUDAMAGIC_PROMETHEUS_CA_BUNDLE for a private CA\)$",
        ):
            c.instant("up")
        assert s.requests == []
        c = PrometheusClient(
            s.url, timeout_s=5, environ={"CUDAMAGIC_PROMETHEUS_CA_BUNDLE": str(crt)}
        )
        assert c.instant("up") == data_of("vector")["result"]
        c.close()
    finally:
        s.close()


def test_a_per_request_timeout_overrides_the_clients(stub):
    c = client_of(stub, timeout_s=5)
    stub.delay_s = 30.0
    t0 = time.monotonic()
    with pytest.raises(PrometheusError, match=r"^no answer within 0\.2 s \(timed out\)$"):
        c.range_columns("up", 0, 1, 1, timeout_s=0.2)
    assert time.monotonic() - t0 < 4  # not the 30 s answer, nor the client's 5 s
    assert 0.2 <= c.last_request_s < 4


def test_connect_timeout_when_the_server_never_accepts():
    """A server whose accept queue is full never completes the TCP handshake.

    The connect timeout ends it.
    """
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    port = srv.getsockname()[1]
    fillers = []
    for _ in range(3):
        f = socket.socket()
        f.setblocking(False)
        try:
            f.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(f)
    # the first connection completes its handshake and fills the queue: wait until it has
    assert select.select([], fillers[:1], [], 5)[1]
    c = PrometheusClient(f"http://127.0.0.1:{port}", timeout_s=0.3, environ={})
    out = []
    t = threading.Thread(target=lambda: out.append(_catch(lambda: c.instant("up"))), daemon=True)
    t.start()
    t.join(3)
    for f in fillers + [srv]:
        f.close()
    assert out == ["no answer within 0.3 s (timed out)"]


def _catch(fn):
    try:
        fn()
    except PrometheusError as exc:
        return str(exc)
    return "no error"


def test_connection_closed_without_an_answer(stub):
    stub.drop = True
    msg = _reason_for(stub, "vector")
    assert msg.startswith(
        "connection broken: ('Connection aborted.', RemoteDisconnected('Remote end closed "
        "connection without response'))"
    )


def test_a_body_that_cannot_be_decoded_is_named(stub):
    stub.headers = {"Content-Encoding": "gzip"}
    msg = _reason_for(stub, "vector")
    assert msg == (
        "DecodeError: ('Received response with content-encoding: gzip, but failed to decode it.', "
        "error('Error -3 while decompressing data: incorrect header check'))"
    )


@pytest.mark.parametrize(
    "exc, reason",
    [
        (
            urllib3.exceptions.NameResolutionError(
                "nonexistent.invalid", None, socket.gaierror(-2, "Name or service not known")
            ),
            "host name not found",
        ),
        (
            urllib3.exceptions.NameResolutionError(
                "h", None, socket.gaierror(11001, "getaddrinfo failed")
            ),
            "host name not found",
        ),  # Windows' words
        (
            urllib3.exceptions.NewConnectionError(
                None, "Failed to establish a new connection: [Errno 111] Connection refused"
            ),
            "connection refused (is the Prometheus server running?)",
        ),
        (
            urllib3.exceptions.NewConnectionError(
                urllib3.connection.HTTPConnection("10.0.0.9", 9090),
                "Failed to establish a new connection: [Errno 101] Network is unreachable",
            ),
            "cannot connect: Failed to establish a new connection: [Errno 101] Network is "
            "unreachable",
        ),
        (
            urllib3.exceptions.NewConnectionError(None, "x: " + "y" * 300),
            "cannot connect: x: " + "y" * 157,
        ),
        (
            urllib3.exceptions.SSLError("z" * 300),
            "TLS error: " + "z" * 160 + " (set CUDAMAGIC_PROMETHEUS_CA_BUNDLE for a private CA)",
        ),
        (urllib3.exceptions.ProtocolError("p" * 300), "connection broken: " + "p" * 160),
        (urllib3.exceptions.DecodeError("d" * 300), "DecodeError: " + "d" * 160),
    ],
)
def test_reasons_name_the_cause_on_one_short_line(exc, reason):
    assert prometheus._reason(exc, 1.0) == reason


def test_a_real_unknown_host_and_a_refused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url, reason in [
        (f"http://127.0.0.1:{port}", "connection refused (is the Prometheus server running?)"),
        ("http://nonexistent.invalid", "host name not found"),
    ]:
        client = PrometheusClient(url, timeout_s=2, environ={})
        assert _catch(lambda: client.instant("up")) == reason  # noqa: B023 - called at once


# ---- the query parts
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "span, min_step, max_points, step",
    [
        (0.5, 0.001, 2, 0.5),  # a tiny limit: the span in one step
        (0.5, 0.001, 1, 0.5),
        (10, 0.001, 11, 1.0),
        (0, 0, 11_000, 0.001),  # Prometheus refuses a zero step ("zero_step" answer): 1 ms at least
        (-5, 2, 11_000, 2.0),  # end before start: the minimum step
    ],
)
def test_range_step_edges(span, min_step, max_points, step):
    assert prometheus.range_step(100.0, 100.0 + span, min_step, max_points) == step


def test_selector_matches_exactly_the_names_after_promql_unquoting():
    """The selector matches exactly the names after PromQL unquoting.

    PromQL's double-quoted strings unescape like JSON's: the regex the server sees matches each name
    (UTF-8 names with dots, as Prometheus 3 allows) and nothing else.
    """
    import re

    names = ["DCGM_FI_DEV_GPU_UTIL", "gpu.utilization", "a+b"]
    sel = prometheus.selector(names)
    assert sel.startswith('{__name__=~"') and sel.endswith('"}')
    regex = json.loads(sel[len("{__name__=~") : -1])
    assert all(re.fullmatch(regex, n) for n in names)
    assert not any(
        re.fullmatch(regex, n) for n in ("gpuXutilization", "aab", "DCGM_FI_DEV_GPU_UTIL|gpu")
    )
