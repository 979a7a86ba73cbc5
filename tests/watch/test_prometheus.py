"""Error answers through a local HTTP stub.

4xx/5xx, bad_data, slow answers, auth; credentials never shown.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from IPython.core.error import UsageError

from cudamagic.watch.cluster import PrometheusSource
from cudamagic.watch.clusterview import ClusterViews
from cudamagic.watch.prometheus import PrometheusClient, PrometheusError

GOOD = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {
                "metric": {
                    "__name__": "DCGM_FI_DEV_GPU_UTIL",
                    "gpu": "0",
                    "Hostname": "<b>evil</b>",
                    "UUID": "GPU-1",
                },
                "value": [1.0, "42"],
            }
        ],
    },
}

#: What a web server that is not Prometheus (here nginx's default) answers for /api/v1/query.
NGINX_404 = (
    "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not "
    "Found</h1>"
    "</center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n"
)


class Stub:
    """A local HTTP server answering what ``self.mode`` says; records each request's headers."""

    def __init__(self):
        self.mode = "ok"
        self.headers = []
        self.released = threading.Event()  # set by close(): the "slow" answer goes out at once
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                stub.headers.append(dict(self.headers))
                mode = stub.mode
                if mode == "slow":
                    stub.released.wait(30)
                status, body = {
                    "ok": (200, GOOD),
                    "slow": (200, GOOD),
                    "bad_data": (
                        400,
                        {
                            "status": "error",
                            "errorType": "bad_data",
                            "error": 'invalid parameter "query": parse error',
                        },
                    ),
                    "500": (500, None),
                    "503": (
                        503,
                        {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"},
                    ),
                    "404": (404, None),
                    "html": (200, None),
                    "404page": (404, NGINX_404),
                    "text404": (404, "404 page not found\n"),
                }.get(mode, (200, GOOD))
                if mode == "auth":
                    ok = self.headers.get("Authorization") == "Bearer s3cret-token"
                    status, body = (200, GOOD) if ok else (401, None)
                if isinstance(body, str):  # a web page or a plain-text answer, not JSON
                    data, kind = (
                        body.encode(),
                        "text/html" if body.startswith("<") else "text/plain",
                    )
                else:
                    data = json.dumps(body).encode() if body is not None else b"<html>nope</html>"
                    kind = "application/json" if body is not None else "text/html"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (
                    BrokenPipeError,
                    ConnectionResetError,
                ):  # the client timed out first ("slow")
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def stub():
    s = Stub()
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize(
    "mode, match",
    [
        ("bad_data", r"HTTP 400 bad_data: invalid parameter"),
        ("500", r"answered HTTP 500 at /api/v1/query with an HTML page: a server or proxy error"),
        ("503", r"HTTP 503 unavailable: TSDB not ready"),
        ("404", r"HTTP 404"),
        (
            "html",
            r"answered HTTP 200 at /api/v1/query with an HTML page: is this a Prometheus server\?",
        ),
        (
            "text404",
            r"answered HTTP 404 at /api/v1/query \(404 page not found\): is this a Prometheus "
            r"server\?",
        ),
        ("slow", r"no answer within 0.5 s \(timed out\)"),
        ("auth", r"HTTP 401 unauthorized: the server wants credentials .*now using: none"),
    ],
)
def test_error_answers_are_one_line_reasons(stub, mode, match):
    stub.mode = mode
    client = PrometheusClient(stub.url, timeout_s=0.5, environ={})
    with pytest.raises(PrometheusError, match=match):
        client.instant("up")


def test_a_web_page_404_is_one_paragraph_without_its_html(stub, ip):
    stub.mode = "404page"
    client = PrometheusClient(stub.url, timeout_s=2, environ={})
    with pytest.raises(
        PrometheusError,
        match=r"answered HTTP 404 at /api/v1/query with an HTML page: is this a "
        r"Prometheus server\?",
    ) as info:
        client.instant("up")
    msg = str(info.value)
    assert "<" not in msg and "nginx" not in msg and "\n" not in msg and stub.url in msg
    watch = ip.run_line_magic("gpuwatch", f"--source {stub.url} --text")
    shown = repr(watch)
    assert "is this a Prometheus server?" in " ".join(shown.split()) and "<html" not in shown
    ip.run_line_magic("gpuwatch", "--stop")
    src = PrometheusSource(stub.url, environ={})
    s = src.read(1, 1000.0)
    html = ClusterViews(src).html(s, [s], src.label, "running", 1, "")
    assert "is this a Prometheus server?" in html and "<center" not in html and "nginx" not in html
    src.close()


def test_stale_then_recovers_keeps_the_first_failure_time(stub):
    src = PrometheusSource(stub.url, interval_s=0.5, environ={})
    good = src.read(1, 1000.0)
    assert [g.host for g in good.gpus] == ["<b>evil</b>"] and good.gpus[0].gpu_util_pct == 42
    stub.mode = "503"
    s2 = src.read(2, 1001.0)
    stub.mode = "bad_data"
    s3 = src.read(3, 1002.0)
    assert (
        s2.gpus == ()
        and s2.nvml_status.code == "stale"
        and "TSDB not ready" in s2.nvml_status.reason
    )
    since = time.strftime("%H:%M:%S", time.localtime(1001.0))
    assert s3.nvml_status.reason.startswith(f"stale since {since}: HTTP 400 bad_data")
    text = ClusterViews(src).text(s3, [good, s2, s3], src.label, "running", "")
    html = ClusterViews(src).html(s3, [good, s2, s3], src.label, "running", 3, "")
    assert "stale since" in text and "42%" in text  # the last good values stay
    assert "&lt;b&gt;evil&lt;/b&gt;" in html and "<b>evil</b>" not in html  # label values escaped
    stub.mode = "ok"
    s4 = src.read(4, 1003.0)
    assert s4.gpus and src.stale_since is None and s4.nvml_status is None


def test_bearer_token_from_env_is_sent_and_never_shown(stub, ip, monkeypatch, tmp_path):
    stub.mode = "auth"
    monkeypatch.setenv("CUDAMAGIC_PROMETHEUS_TOKEN", "s3cret-token")
    log = tmp_path / "c.jsonl"
    watch = ip.run_line_magic(
        "gpuwatch", f"--source {stub.url} --text --log {log} --count 2 --interval 0.1"
    )
    assert watch.wait(10)
    assert watch.latest.gpus[0].gpu_util_pct == 42
    assert stub.headers[-1]["Authorization"] == "Bearer s3cret-token"
    shown = (
        repr(watch)
        + watch._repr_mimebundle_()["text/plain"]
        + log.read_text()
        + json.dumps(watch.history)
    )
    assert "s3cret" not in shown and "s3cret" not in repr(
        watch.sampler.source.__dict__.get("label")
    )
    monkeypatch.delenv("CUDAMAGIC_PROMETHEUS_TOKEN")
    watch = ip.run_line_magic("gpuwatch", f"--source {stub.url} --text")
    assert "HTTP 401 unauthorized" in repr(watch) and "stale since" in repr(watch)


def test_slow_server_does_not_block_the_kernel_longer_than_the_timeout(stub, ip):
    stub.mode = "slow"
    t0 = time.monotonic()
    watch = ip.run_line_magic("gpuwatch", f"--source {stub.url} --text --interval 0.2")
    assert time.monotonic() - t0 < 10  # timeout = max(1 s, 2 intervals), not the server's 30 s
    assert "timed out" in repr(watch)


@pytest.mark.parametrize(
    "line, match",
    [
        ("--source ftp://x", r"not a Prometheus URL"),
        ("--source https://u:pw@prom.example", r"must not contain a user name or password"),
        ("--job", r"--job needs a cluster source"),
        ("--hosts a,b", r"--hosts needs a cluster source"),
        (
            "--source prometheus://h:9090 --replay x.jsonl",
            r"--source and --replay cannot be combined",
        ),
        ("--source prometheus://h:9090 --devices 0", r"choose hosts instead"),
        ("--source prometheus://h:9090 --hosts ,", r"names no host"),
        ("--source prometheus://[::1", r"not a valid URL .*IPv6 address in brackets"),
        ("--source prometheus://]", r"not a valid URL"),
    ],
)
def test_usage_errors(ip, line, match):
    with pytest.raises(UsageError, match=match) as info:
        ip.run_line_magic("gpuwatch", line)
    assert "pw@" not in str(info.value)


def test_hosts_without_source_names_hosts_not_job(ip):
    with pytest.raises(UsageError, match=r"--hosts needs a cluster source") as info:
        ip.run_line_magic("gpuwatch", "--hosts node07")
    assert "--job" not in str(info.value) and "--hosts node07`" in str(info.value)


def test_counts_are_singular_or_plural():
    import prom_sim

    from cudamagic.watch.cluster import PrometheusSource, classify
    from cudamagic.watch.clusterview import cluster_html, cluster_text

    rows = [
        ({"__name__": n, **lab}, v)
        for n, lab, v in prom_sim.host_metrics(prom_sim.SimHost("solo", "dcgm", 1), 0, 1000)
    ]
    src = PrometheusSource("http://unused:1")
    kept = [(s, repr(v)) for s, v in ((classify(m), v) for m, v in rows) if s is not None]
    gpus = src.build([s for s, _ in kept], [text for _, text in kept])
    sample = src._sample(1, 1000.0, gpus)
    text = cluster_text(sample, [sample])
    assert "1 GPU on 1 host at" in text and "GPUs" not in text.split("\n")[1]
    html = cluster_html(sample, [sample])
    assert "1&nbsp;GPU " in html and "1 GPU at" in html and "1 GPUs" not in html


def test_unreachable_server_starts_stale_not_an_error(ip):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    watch = ip.run_line_magic("gpuwatch", f"--source prometheus://127.0.0.1:{port} --text")
    assert "connection refused" in repr(watch) and "No GPU data" in repr(watch)
