"""A small Prometheus HTTP API client for ``%gpuwatch --source``.

urllib3, no IPython. One :class:`PrometheusClient` per monitor keeps one connection pool.
:meth:`PrometheusClient.instant_rows` is one ``GET /api/v1/query`` (the current values of every
needed metric at once, read without decoding each series' labels);
:meth:`PrometheusClient.range_columns` is one ``GET /api/v1/query_range`` whose step keeps every
series under Prometheus's 11,000-point limit.

Every failure (refused connection, timeout, HTTP 4xx/5xx, an ``{"status": "error", "errorType":
"bad_data"}`` answer, invalid JSON) raises :class:`PrometheusError` whose message never contains the
credentials. Credentials come from an environment variable or ``~/.netrc``, never from the URL:

* ``CUDAMAGIC_PROMETHEUS_TOKEN``: a bearer token (``Authorization: Bearer ...``);
* ``CUDAMAGIC_PROMETHEUS_USER`` and ``CUDAMAGIC_PROMETHEUS_PASSWORD``: HTTP basic auth;
* otherwise the ``machine`` entry of ``~/.netrc`` (or ``$NETRC``) for the server's host name.

TLS certificates are verified (``CUDAMAGIC_PROMETHEUS_CA_BUNDLE`` names a CA file for a private CA).
"""

from __future__ import annotations

import json
import math
import netrc
import os
import re
import time
import urllib.parse
import warnings

#: Prometheus refuses a range query answering more than this many points per series.
MAX_POINTS_PER_SERIES = 11_000

TOKEN_ENV = "CUDAMAGIC_PROMETHEUS_TOKEN"
USER_ENV = "CUDAMAGIC_PROMETHEUS_USER"
PASSWORD_ENV = "CUDAMAGIC_PROMETHEUS_PASSWORD"
CA_ENV = "CUDAMAGIC_PROMETHEUS_CA_BUNDLE"


class PrometheusError(Exception):
    """A request to Prometheus failed.

    ``str()`` is a one-line reason fit to show (no credentials).
    """


class SourceURLError(ValueError):
    """A ``--source`` value that is not a Prometheus URL (the message says what to type)."""


def parse_source(text: str) -> str:
    """The base URL (``http(s)://host:port/prefix``, no trailing slash) of a ``--source`` value.

    ``prometheus://host:port`` means plain HTTP, ``prometheus+https://host`` and ``https://host``
    mean TLS, ``http://host:port`` plain HTTP. A URL with a user name or password is refused (it
    would be shown in the monitor's title and kept in the notebook): use the environment variables
    or ``~/.netrc``.

    Raises:
        SourceURLError: another scheme, no host, credentials in the URL, a query string.
    """
    text = text.strip()
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:  # "Invalid IPv6 URL": an unbalanced [ or ]
        raise SourceURLError(
            f"--source {text!r} is not a valid URL ({exc}); write an IPv6 address in brackets, "
            "e.g. `%gpuwatch --source prometheus://[::1]:9090`"
        ) from exc
    scheme = {
        "prometheus": "http",
        "prometheus+http": "http",
        "prometheus+https": "https",
        "http": "http",
        "https": "https",
    }.get(parts.scheme.lower())
    if scheme is None:
        raise SourceURLError(
            f"--source {text!r} is not a Prometheus URL; give prometheus://HOST:PORT or "
            "https://HOST, e.g. `%gpuwatch --source prometheus://localhost:9090`"
        )
    if parts.username or parts.password:
        raise SourceURLError(
            "--source must not contain a user name or password (it would be shown and saved "
            f"with the notebook); set {TOKEN_ENV}, or {USER_ENV} and {PASSWORD_ENV}, or a "
            "~/.netrc entry, then type e.g. `%gpuwatch --source https://prom.example`"
        )
    if not parts.hostname:
        raise SourceURLError(
            f"--source {text!r} names no host; type e.g. "
            "`%gpuwatch --source prometheus://localhost:9090`"
        )
    if parts.query or parts.fragment:
        raise SourceURLError(
            f"--source {text!r} has a query string; give only the server's address, e.g. "
            "`%gpuwatch --source prometheus://localhost:9090`"
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise SourceURLError(
            f"--source {text!r} has an invalid port; type e.g. "
            "`%gpuwatch --source prometheus://localhost:9090`"
        ) from exc
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host + (f":{port}" if port else "")
    return f"{scheme}://{netloc}{parts.path.rstrip('/')}"


def auth_headers(base_url: str, environ=os.environ, netrc_path: str | None = None) -> tuple:
    """The credentials for ``base_url`` and what they are.

    ``(headers dict, description)`` of the credentials for ``base_url``; description names the
    source (``"bearer token from CUDAMAGIC_PROMETHEUS_TOKEN"``), never the secret; ``({}, "none")``
    without any.
    """
    import urllib3

    token = environ.get(TOKEN_ENV, "").strip()
    if token:
        return {"Authorization": f"Bearer {token}"}, f"bearer token from {TOKEN_ENV}"
    user = environ.get(USER_ENV, "")
    if user:
        return (
            urllib3.make_headers(basic_auth=f"{user}:{environ.get(PASSWORD_ENV, '')}"),
            f"basic auth from {USER_ENV}/{PASSWORD_ENV}",
        )
    host = urllib.parse.urlsplit(base_url).hostname
    path = netrc_path or environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (
        netrc.NetrcParseError,
        OSError,
    ):  # a missing or unreadable netrc is ignored, as curl and requests do
        return {}, "none"
    if entry and entry[0]:
        return urllib3.make_headers(
            basic_auth=f"{entry[0]}:{entry[2] or ''}"
        ), f"basic auth from {path}"
    return {}, "none"


def range_step(
    start_s: float, end_s: float, min_step_s: float, max_points: int = MAX_POINTS_PER_SERIES
) -> float:
    """Step in seconds for a range query.

    Step in seconds for a range query over ``[start_s, end_s]``: at least ``min_step_s`` and large
    enough that each series has at most ``max_points`` points (Prometheus answers ``(end - start) /
    step + 1``).
    """
    span = max(0.0, end_s - start_s)
    need = span / max(1, max_points - 1)
    step = max(float(min_step_s), need, 0.001)
    return math.ceil(step * 1000) / 1000  # Prometheus takes milliseconds


def selector(metrics) -> str:
    """PromQL selecting every metric of ``metrics`` in one instant vector.

    ``{__name__=~"A|B|..."}``.
    """
    names = "|".join(re.escape(m) for m in metrics)
    escaped = names.replace("\\", "\\\\")
    return f'{{__name__=~"{escaped}"}}'


class PrometheusClient:
    """GET requests to one Prometheus server.

    GET requests to one Prometheus server (urllib3 pool keeping one connection; no retries, no
    redirects followed; TLS verified).

    Args:
        base_url: from :func:`parse_source`. timeout_s: connect and read timeout of one request
            (seconds).
        environ: where the credentials and ``CUDAMAGIC_PROMETHEUS_CA_BUNDLE`` are looked up.

    Attributes:
        requests: number of HTTP requests sent (the benchmark counts requests per refresh).
        last_request_s: wall-clock seconds the last request took, answer read (0.0 before the
            first).
        auth: which credentials are used (``"none"``, ``"bearer token from ..."``), never the
            secret.
    """

    def __init__(self, base_url: str, timeout_s: float, environ=os.environ):
        import urllib3

        self.base_url = base_url
        self.timeout_s = float(timeout_s)
        self._headers, self.auth = auth_headers(base_url, environ)
        self._headers = dict(self._headers, Accept="application/json")
        ca = environ.get(CA_ENV)
        kw = {"cert_reqs": "CERT_REQUIRED"}
        if ca:
            kw["ca_certs"] = ca
        # one host, one kept connection (urllib3's default maxsize=1): the sampler thread asks one
        # at a time
        self._pool = urllib3.PoolManager(retries=False, **kw)
        self.requests = 0
        self.last_request_s = 0.0

    def _fetch(self, path: str, params: dict, timeout_s: float | None = None) -> tuple:
        """``(status, headers, body bytes)`` of one GET.

        :class:`PrometheusError` when no answer came.
        """
        import urllib3

        url = f"{self.base_url}{path}"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        self.requests += 1
        t0 = time.perf_counter()
        try:
            resp = self._pool.request(
                "GET",
                url,
                fields=params,
                headers=self._headers,
                redirect=False,
                timeout=urllib3.Timeout(connect=timeout, read=timeout),
                preload_content=True,
            )
        except (
            urllib3.exceptions.HTTPError
        ) as exc:  # retries=False: urllib3 raises the cause itself
            raise PrometheusError(_reason(exc, timeout)) from None
        finally:
            self.last_request_s = time.perf_counter() - t0
        return resp.status, resp.headers, resp.data

    def _data(self, path: str, status: int, headers, body: bytes) -> dict:
        """``data`` of an answer (see :meth:`_result`)."""
        try:
            obj = json.loads(body)
        except ValueError:  # an empty body too
            obj = None
        if status in (401, 403):
            raise PrometheusError(
                f"HTTP {status} {'unauthorized' if status == 401 else 'forbidden'}: "
                f"the server wants credentials (set {TOKEN_ENV}, or {USER_ENV} and "
                f"{PASSWORD_ENV}, or a ~/.netrc entry; now using: {self.auth})"
            )
        if isinstance(obj, dict) and obj.get("status") == "error":
            raise PrometheusError(
                f"HTTP {status} {obj.get('errorType', 'error')}: {str(obj.get('error', ''))[:200]}"
            )
        if not 200 <= status < 300 or not isinstance(obj, dict):
            raise PrometheusError(
                self._not_prometheus(path, status, headers.get("Content-Type", ""), body, obj)
            )
        if obj.get("status") != "success" or not isinstance(obj.get("data"), dict):
            raise PrometheusError(
                f"the server at {self.base_url} answered {path} with JSON that is not a "
                "Prometheus API answer: is this a Prometheus server? Check --source"
            )
        return obj["data"]

    def _not_prometheus(self, path: str, status: int, content_type: str, body: bytes, obj) -> str:
        """One paragraph for an answer that is not Prometheus JSON.

        One paragraph for an answer that is not Prometheus JSON (a web page, a proxy's error): the
        status and what it means, never the page's HTML; a short plain-text body (``404 page not
        found``) is kept.
        """
        text = body[:2000].decode("utf-8", "replace")
        html_page = "html" in content_type.lower() or text.lstrip()[:1] == "<"
        what = ""
        if html_page:
            what = " with an HTML page"
        elif text.strip() and obj is None:
            line = " ".join(text.split())[:120]
            what = f" ({line})"
        where = f"answered HTTP {status} at {path}{what}"
        if status >= 500:
            return (
                f"the server at {self.base_url} {where}: a server or proxy error, retried at the "
                "next refresh"
            )
        if status == 404 or (200 <= status < 300) or html_page:
            return (
                f"the server at {self.base_url} {where}: is this a Prometheus server? Check "
                "--source: it "
                "must be the address the Prometheus API is served under (the one whose "
                "/api/v1/query "
                "answers JSON), e.g. prometheus://HOST:9090 or https://HOST/prometheus behind a "
                "proxy"
            )
        return f"the server at {self.base_url} {where}"

    def _result(self, path: str, params: dict, kind: str, fast, slow, timeout_s=None) -> list:
        """The ``result`` of one GET answering a ``kind`` (``vector`` or ``matrix``).

        Args:
            path: the API path.
            params: the query parameters.
            kind: the ``resultType`` expected.
            fast: reads the compact body Prometheus writes (None where it does not).
            slow: the same rows from the :mod:`json`-decoded ``result``.
            timeout_s: for this request (None: the client's).

        Raises:
            PrometheusError: connection refused or timed out, a non-2xx status, ``status: error``
                answers (``bad_data``, ``execution``...), an answer that is not Prometheus JSON,
                another ``resultType``.
        """
        status, headers, body = self._fetch(path, params, timeout_s)
        if status == 200:
            rows = fast(body)
            if rows is not None:
                return rows
        data = self._data(path, status, headers, body)
        if data.get("resultType") != kind or not isinstance(data.get("result"), list):
            what = "an instant vector" if kind == "vector" else "a range matrix"
            raise PrometheusError(f"expected {what}, got {str(data.get('resultType'))[:20]}")
        return slow(data["result"])

    def instant(self, query: str, at_s: float | None = None) -> list:
        """``result`` of ``/api/v1/query``: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        params = {"query": query}
        if at_s is not None:
            params["time"] = f"{at_s:.3f}"
        return self._result("/api/v1/query", params, "vector", _none, list)

    def instant_rows(self, query: str) -> list:
        """:meth:`instant` as ``[(labels JSON bytes, value text bytes), ...]``, one per series.

        The answer (one request) is read by :func:`parse_vector`, which leaves each series' labels
        as the bytes the server wrote, so a caller decodes a label set once and recognises it at
        later refreshes by those bytes; an answer it does not recognise goes through :mod:`json`
        (:func:`vector_rows`).
        """
        return self._result("/api/v1/query", {"query": query}, "vector", parse_vector, vector_rows)

    def range_columns(
        self,
        query: str,
        start_s: float,
        end_s: float,
        step_s: float,
        timeout_s: float | None = None,
    ) -> list:
        """``/api/v1/query_range`` as ``[(labels dict, times, values), ...]``, one per series.

        ``times`` (epoch seconds) and ``values`` are 1-D float64 numpy arrays of the same length
        (NaN and +-Inf kept). The step keeps every series under Prometheus's 11,000-point limit
        when it comes from :func:`range_step`.

        The answer (one request) is read by :func:`parse_matrix`, which decodes each series' labels
        as JSON and its points with numpy in one call, instead of building a Python list, int and
        str per point (an hour at a 1 s step for 64 GPUs is 2.8 million points); an answer it does
        not recognise goes through :mod:`json` (:func:`_columns`).
        """
        params = {
            "query": query,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{step_s:.3f}",
        }
        return self._result(
            "/api/v1/query_range",
            params,
            "matrix",
            parse_matrix,
            lambda result: [cols for r in result if (cols := _columns(r)) is not None],
            timeout_s,
        )

    def close(self):
        """Close the pooled connections."""
        self._pool.clear()


_MATRIX_HEAD = re.compile(rb'\s*\{"status":"success","data":\{"resultType":"matrix","result":\[')
_METRIC = b'{"metric":'
_VALUES = b'},"values":['
_POINT_CHARS = bytes.maketrans(b'[]"', b"   ")


def _none(body: bytes) -> None:
    """No fast path: the answer goes through :mod:`json`."""


def parse_matrix(body: bytes) -> list | None:
    """The series of a ``query_range`` answer, parsed fast.

    The series of a ``query_range`` answer as ``[(labels dict, times, values)]`` (float64 numpy
    arrays), or None when ``body`` is not the compact JSON Prometheus writes for a successful matrix
    (an error answer, native histograms, another server's layout): the caller then decodes it with
    :mod:`json`.

    Each series' labels are decoded by :func:`json.loads`; its ``[[t, "v"], ...]`` points, which
    hold only numbers and quoted numbers (``"NaN"``, ``"+Inf"`` included), are read by one
    :func:`numpy.fromstring`.
    """
    m = _MATRIX_HEAD.match(body)
    if m is None:
        return None
    import numpy as np

    out, pos = [], m.end()
    while not body.startswith(b"]", pos):
        if not body.startswith(_METRIC, pos):
            return None
        labels_end = body.find(_VALUES, pos)
        points_end = body.find(b"]]}", labels_end)
        if labels_end < 0 or points_end < 0:
            return None
        try:
            labels = json.loads(body[pos + len(_METRIC) : labels_end + 1])
        except ValueError:
            return None
        points = body[labels_end + len(_VALUES) : points_end + 1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns (and stops) at text that is not a number
            try:
                flat = np.fromstring(points.translate(_POINT_CHARS), sep=",")
            except (ValueError, DeprecationWarning):
                return None
        # (labels is a dict: the slice ends with "}", so only an object decodes)
        if flat.size % 2 or flat.size // 2 != points.count(b"],[") + 1:
            return None
        out.append((labels, flat[0::2], flat[1::2]))
        pos = points_end + 3
        if body.startswith(b",", pos):
            pos += 1
    return out


_VECTOR_HEAD = re.compile(rb'\s*\{"status":"success","data":\{"resultType":"vector","result":\[')
# One series: labels without a "}" (a label value holding one leaves that series unmatched, so the
# answer goes through json), then the value as a quoted number.
_VECTOR_ROW = re.compile(rb'\{"metric":(\{[^}]*\}),"value":\[[^,\]]*,"([^"\\]*)"\]\}')


def parse_vector(body: bytes) -> list | None:
    """The series of a ``query`` answer as ``[(labels JSON bytes, value text bytes)]``, or None.

    None when ``body`` is not the compact JSON Prometheus writes for a successful instant vector
    (an error answer, another server's layout): the caller then decodes it with :mod:`json`. One
    regular-expression pass finds every series; nothing is decoded.
    """
    m = _VECTOR_HEAD.match(body)
    if m is None:
        return None
    rows = _VECTOR_ROW.findall(body, m.end())
    # every series matched: in compact JSON the key `{"metric":` appears once per series
    if len(rows) != body.count(b'{"metric":', m.end()):
        return None
    return rows


def vector_rows(result: list) -> list:
    """A :mod:`json`-decoded instant vector as :func:`parse_vector`'s rows.

    The labels are re-encoded as compact JSON; the value is left as it came (a str). A series
    without labels or value is left out.
    """
    rows = []
    for r in result:
        try:
            metric, text = r["metric"], r["value"][1]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(metric, dict):
            rows.append((json.dumps(metric, separators=(",", ":")).encode(), text))
    return rows


def _columns(r):
    """One series of a decoded matrix as arrays.

    One series of a :mod:`json`-decoded matrix as ``(labels, times, values)`` arrays; None if
    malformed (a value that is not a number becomes NaN).
    """
    import numpy as np

    if (
        not isinstance(r, dict)
        or not isinstance(r.get("metric"), dict)
        or not isinstance(r.get("values"), list)
    ):
        return None
    times, values = [], []
    for point in r["values"]:
        try:
            t, text = point
            t = float(t)
        except (TypeError, ValueError):
            continue
        try:
            v = float(text)
        except (TypeError, ValueError):
            v = math.nan
        times.append(t)
        values.append(v)
    return r["metric"], np.array(times, dtype=float), np.array(values, dtype=float)


def _reason(exc, timeout) -> str:
    import urllib3

    if isinstance(exc, urllib3.exceptions.NameResolutionError):  # any OS's words for it
        return "host name not found"
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        text = str(exc)
        if "refused" in text.lower():
            return "connection refused (is the Prometheus server running?)"
        return "cannot connect: " + text.split(": ", 1)[-1][:160]
    # NewConnectionError subclasses ConnectTimeoutError in urllib3 2: it is handled first
    if isinstance(
        exc,
        (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError),
    ):
        return f"no answer within {timeout:g} s (timed out)"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return f"TLS error: {str(exc)[:160]} (set {CA_ENV} for a private CA)"
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return f"connection broken: {str(exc)[:160]}"
    return f"{type(exc).__name__}: {str(exc)[:160]}"
