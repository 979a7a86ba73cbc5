"""Record what a real Prometheus answers to the requests cudamagic's client sends.

Record what a real Prometheus answers to the requests cudamagic's client sends (the tests' stub
replays it).

Starts the exporter simulator and a real Prometheus (``scripts/prom_sim.py``), sends each request of
``REQUESTS`` and writes ``tests/watch/prom_answers.json``: per name, the request (path, parameters
with the times it used) and the answer (status, Content-Type, body text, byte for byte). A live test
(``tests/watch/test_cluster_prometheus.py``) checks that the installed Prometheus still answers with
the same shapes.

Usage: python scripts/prom_answers.py [--write]   (without --write: print the answers)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import prom_sim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH = os.path.join(ROOT, "tests", "watch", "prom_answers.json")

# : name -> (path, parameters); "NOW" in a value is replaced by the request time (epoch seconds, 3
# decimals)
REQUESTS = {
    "vector": (
        "/api/v1/query",
        {"query": '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"}', "time": "NOW"},
    ),
    "vector_empty": ("/api/v1/query", {"query": "nope_metric", "time": "NOW"}),
    "scalar": ("/api/v1/query", {"query": "1+1", "time": "NOW"}),
    "inf_vector": ("/api/v1/query", {"query": "DCGM_FI_DEV_GPU_UTIL / 0", "time": "NOW"}),
    "bad_data": ("/api/v1/query", {"query": "up{"}),
    "no_query": ("/api/v1/query", {}),
    "matrix": (
        "/api/v1/query_range",
        {
            "query": '{__name__=~"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_FB_USED"}',
            "start": "NOW-3",
            "end": "NOW",
            "step": "1.000",
        },
    ),
    "matrix_nan": (
        "/api/v1/query_range",
        {
            "query": "DCGM_FI_DEV_GPU_UTIL / 0 - DCGM_FI_DEV_GPU_UTIL / 0",
            "start": "NOW-2",
            "end": "NOW",
            "step": "1.000",
        },
    ),
    "matrix_empty": (
        "/api/v1/query_range",
        {"query": "nope_metric", "start": "NOW-2", "end": "NOW", "step": "1.000"},
    ),
    "too_many_points": (
        "/api/v1/query_range",
        {"query": "up", "start": "NOW-20000", "end": "NOW", "step": "1.000"},
    ),
    "zero_step": (
        "/api/v1/query_range",
        {"query": "up", "start": "NOW-20", "end": "NOW", "step": "0.000"},
    ),
    "not_found": ("/api/v1/nope", {}),
}


def resolve(params: dict, now: float) -> dict:
    """``params`` with ``NOW`` and ``NOW-<seconds>`` replaced by epoch seconds (3 decimals)."""
    out = {}
    for k, v in params.items():
        if v.startswith("NOW"):
            v = f"{now - float(v[4:] or 0):.3f}"
        out[k] = v
    return out


def fetch(base: str, path: str, params: dict) -> dict:
    """``{"status", "content_type", "body"}`` of one GET (any status)."""
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            status, ctype, body = r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as exc:
        status, ctype, body = exc.code, exc.headers.get("Content-Type"), exc.read()
    return {"status": status, "content_type": ctype, "body": body.decode("utf-8")}


def record(base: str) -> dict:
    """Every request of ``REQUESTS`` against the Prometheus at ``base`` (``http://host:port``)."""
    now = round(time.time(), 3)
    out = {}
    for name, (path, params) in REQUESTS.items():
        p = resolve(params, now)
        out[name] = {"path": path, "params": p, **fetch(base, path, p)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"write {os.path.relpath(PATH, ROOT)}")
    a = ap.parse_args(argv)
    sim, server = prom_sim.start_cluster([prom_sim.SimHost("node01", "dcgm", 1)], scrape_s=1.0)
    try:
        base = f"http://127.0.0.1:{server.port}"
        ok = prom_sim.wait_for(
            lambda: (
                len(
                    json.loads(
                        fetch(base, "/api/v1/query", {"query": "DCGM_FI_DEV_GPU_UTIL"})["body"]
                    )["data"]["result"]
                )
                == 1
            ),
            30,
        )
        if not ok:
            raise SystemExit(f"Prometheus never scraped the simulator: {server.tail()}")
        time.sleep(4)  # a few scrapes, so the range answers have several points
        version = json.loads(fetch(base, "/api/v1/status/buildinfo", {})["body"])["data"]["version"]
        answers = {"prometheus_version": version, "answers": record(base)}
    finally:
        prom_sim.stop_cluster(sim, server)
    text = json.dumps(answers, indent=1, ensure_ascii=False) + "\n"
    if a.write:
        with open(PATH, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {PATH} (Prometheus {version})")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
