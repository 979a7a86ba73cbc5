"""A local GPU cluster for ``%gpuwatch --source prometheus://...``.

Exporter simulator + a real Prometheus.

* :class:`ExporterSim` serves, with ``prometheus_client``, the metrics of several simulated hosts on
    one local
  HTTP port, one path per host (``/metrics/node01``): DCGM-exporter format with the older
      ``Hostname`` label or
  the newer ``hostname`` label, or nvitop-exporter format; values change with time; a host can have
  MIG instances, DCGM blank sentinels, and Slurm / Kubernetes job labels.
* :class:`PrometheusServer` runs Debian's ``prometheus`` binary on 127.0.0.1 with its own config and
    data
  directory, scraping the simulator every second; it is stopped by its pid.
* :func:`backfill` writes a known history with ``promtool tsdb create-blocks-from openmetrics``.

Used by the tests (``tests/watch/test_cluster*.py``, ``tests/watch/test_prometheus.py``),
``examples/cluster_watch.ipynb`` and ``benchmarks/bench_prometheus.py``. Nothing here is part of the
``cudamagic`` package.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

DCGM_BLANK_FP64 = float(2**47)
DCGM_BLANK_INT32 = float(0x7FFFFFF0)
DCGM_NOT_SUPPORTED_INT32 = float(0x7FFFFFF2)
MIB = 1024**2


@dataclass
class SimHost:
    """One simulated host.

    Attributes:
        name: host name. schema: ``"dcgm"`` (label ``hostname``), ``"dcgm-old"`` (label
            ``Hostname``) or ``"nvitop"``. gpus: number of GPUs. mig: indices of GPUs in MIG mode (2
            instances each).
        sentinel: GPU indices whose power reads DCGM's blank FP64 sentinel and fan the INT32
            not-supported one.
        labels: extra labels on every series (``{"hpc_job": "4242"}``, ``{"pod": "train-0"}``).
        memory_total_mib: framebuffer size.
    """

    name: str
    schema: str = "dcgm"
    gpus: int = 4
    mig: tuple = ()
    sentinel: tuple = ()
    labels: dict = field(default_factory=dict)
    memory_total_mib: int = 81559


def util_at(t: float, host_i: int, gpu: int) -> float:
    """The simulated utilization (%) of a GPU at epoch second ``t`` (a whole number, 0-100)."""
    return float((int(t) * 7 + host_i * 13 + gpu * 29) % 101)


def used_mib_at(t: float, host_i: int, gpu: int) -> float:
    """The simulated framebuffer use (MiB) at ``t``."""
    return float(1000 + ((int(t) // 5 + host_i * 3 + gpu * 11) % 60) * 1000)


def host_metrics(h: SimHost, host_i: int, t: float) -> list:
    """``[(metric name, labels dict, value)]`` of one host at epoch second ``t``."""
    out = []
    for g in range(h.gpus):
        uuid = f"GPU-{host_i:04x}{g:04x}-0000-0000-0000-{h.name.encode().hex()[:12]:0>12}"
        util, used = util_at(t, host_i, g), used_mib_at(t, host_i, g)
        power = 100.0 + util * 5
        if h.schema == "nvitop":
            lab = {
                "hostname": h.name,
                "index": str(g),
                "devicename": "NVIDIA H100 80GB HBM3",
                "uuid": uuid,
                **h.labels,
            }
            out += [
                ("gpu_utilization_Percentage", lab, util),
                ("gpu_memory_utilization_Percentage", lab, util / 2),
                ("gpu_memory_used_MiB", lab, used),
                ("gpu_memory_total_MiB", lab, float(h.memory_total_mib)),
                ("gpu_temperature_C", lab, 40.0 + g),
                ("gpu_power_usage_W", lab, power),
                ("gpu_power_limit_W", lab, 700.0),
                ("gpu_fan_speed_Percentage", lab, 30.0),
                ("gpu_clock_sm_MHz", lab, 1980.0),
                ("gpu_clock_memory_MHz", lab, 2619.0),
            ]
            continue
        host_label = "Hostname" if h.schema == "dcgm-old" else "hostname"
        base = {
            "gpu": str(g),
            "UUID": uuid,
            "device": f"nvidia{g}",
            "modelName": "NVIDIA H100 80GB HBM3",
            host_label: h.name,
            "DCGM_FI_DRIVER_VERSION": "570.86.15",
            **h.labels,
        }
        if g in h.mig:
            for inst, profile in ((1, "3g.40gb"), (2, "4g.40gb")):
                lab = dict(base, GPU_I_ID=str(inst), GPU_I_PROFILE=profile)
                out += [
                    ("DCGM_FI_DEV_GPU_UTIL", lab, DCGM_BLANK_INT32),
                    ("DCGM_FI_DEV_FB_USED", lab, 1000.0 * inst),
                    ("DCGM_FI_DEV_FB_FREE", lab, 39000.0),
                    ("DCGM_FI_DEV_FB_RESERVED", lab, 0.0),
                    ("DCGM_FI_DEV_POWER_USAGE", lab, 250.0),
                    ("DCGM_FI_DEV_GPU_TEMP", lab, 50.0),
                    ("DCGM_FI_DEV_SM_CLOCK", lab, 1755.0),
                    ("DCGM_FI_DEV_MEM_CLOCK", lab, 2619.0),
                    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lab, 0.25 * inst),
                ]
            continue
        blank = g in h.sentinel
        out += [
            ("DCGM_FI_DEV_GPU_UTIL", base, util),
            ("DCGM_FI_DEV_MEM_COPY_UTIL", base, util / 2),
            ("DCGM_FI_DEV_FB_USED", base, used),
            ("DCGM_FI_DEV_FB_FREE", base, h.memory_total_mib - used - 500),
            ("DCGM_FI_DEV_FB_RESERVED", base, 500.0),
            ("DCGM_FI_DEV_GPU_TEMP", base, 40.0 + g),
            ("DCGM_FI_DEV_POWER_USAGE", base, DCGM_BLANK_FP64 if blank else power),
            ("DCGM_FI_DEV_FAN_SPEED", base, DCGM_NOT_SUPPORTED_INT32 if blank else 30.0),
            ("DCGM_FI_DEV_SM_CLOCK", base, 1980.0),
            ("DCGM_FI_DEV_MEM_CLOCK", base, 2619.0),
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", base, round(util / 100, 2)),
            ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", base, round(util / 250, 3)),
        ]
    return out


class _HostCollector:
    """A ``prometheus_client`` collector yielding one host's gauges at scrape time."""

    def __init__(self, sim: ExporterSim, host_i: int):
        self.sim, self.host_i = sim, host_i

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        fams = {}
        for name, labels, value in host_metrics(
            self.sim.hosts[self.host_i], self.host_i, self.sim.clock()
        ):
            keys = sorted(labels)
            fam = fams.get((name, tuple(keys)))
            if fam is None:
                fam = fams[(name, tuple(keys))] = GaugeMetricFamily(
                    name, f"simulated {name}", labels=keys
                )
            fam.add_metric([labels[k] for k in keys], value)
        yield from fams.values()


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # no access log on stderr
        pass


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExporterSim:
    """Serves every host's metrics on ``http://127.0.0.1:PORT/metrics/<host>``.

    Serves every host's metrics on ``http://127.0.0.1:PORT/metrics/<host>`` (a thread; :meth:`stop`
    ends it). A host name added to :attr:`down` answers 503 instead, as an exporter that stopped
    working.
    """

    def __init__(self, hosts, clock=time.time):
        from prometheus_client import CollectorRegistry, generate_latest

        self.hosts = list(hosts)
        self.clock = clock
        self.registries = {}
        for i, h in enumerate(self.hosts):
            reg = CollectorRegistry(auto_describe=False)
            reg.register(_HostCollector(self, i))
            self.registries[h.name] = reg
        self.scrapes = 0
        self.down = set()  # host names whose exporter answers 503 (Prometheus then sets up == 0)

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            reg = (
                self.registries.get(path.rsplit("/", 1)[-1])
                if path.startswith("/metrics/")
                else None
            )
            if reg is None:
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"no such host\n"]
            if path.rsplit("/", 1)[-1] in self.down:
                start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
                return [b"exporter down\n"]
            self.scrapes += 1
            body = generate_latest(reg)
            start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
            return [body]

        self.port = free_port()
        self._server = make_server(
            "127.0.0.1", self.port, app, server_class=_ThreadingWSGIServer, handler_class=_Quiet
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="exporter-sim", daemon=True
        )
        self._thread.start()

    @property
    def targets(self) -> list:
        """``[(host name, metrics path)]`` for the Prometheus config."""
        return [(h.name, f"/metrics/{h.name}") for h in self.hosts]

    def stop(self):
        """Stop serving (joins the thread)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def cluster(n_gpus: int, per_host: int = 8, job: str = "") -> list:
    """``n_gpus`` GPUs on ``n_gpus // per_host`` DCGM hosts (alternating label casings)."""
    hosts = []
    for i in range(max(1, n_gpus // per_host)):
        labels = {"hpc_job": job} if job and i == 0 else {}
        hosts.append(
            SimHost(
                f"node{i + 1:02d}",
                schema="dcgm" if i % 2 else "dcgm-old",
                gpus=per_host,
                labels=labels,
            )
        )
    return hosts


def demo_cluster() -> list:
    """Four hosts showing every case.

    Both DCGM label casings, MIG, sentinels, a Slurm job, nvitop, a pod.
    """
    return [
        SimHost("node01", "dcgm-old", 4, labels={"hpc_job": "4242"}),
        SimHost("node02", "dcgm", 4, sentinel=(1,), labels={"hpc_job": "4242"}),
        SimHost("node03", "dcgm", 2, mig=(0,), labels={"pod": "train-0", "namespace": "ml"}),
        SimHost("node04", "nvitop", 2),
    ]


#: Run by a watchdog process (its own session, so a kill of the kernel's process group spares it)
#: with the pids of the process that started Prometheus and of Prometheus, and the temporary
#: folder: when the starter is gone (a kernel killed with -9, no atexit hook ran), it stops
#: Prometheus and removes the folder. It ends when Prometheus does.
WATCHDOG = r"""
import shutil, sys, time, psutil
def proc(pid):
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None
def alive(p):
    try:
        return p is not None and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
starter, prom, tmp = proc(int(sys.argv[1])), proc(int(sys.argv[2])), sys.argv[3]
while alive(prom):
    if not alive(starter):
        try:
            prom.terminate()
            prom.wait(10)
        except psutil.TimeoutExpired:
            prom.kill()
        except psutil.Error:
            pass
        shutil.rmtree(tmp, ignore_errors=True)
        break
    time.sleep(0.5)
"""


def prometheus_binary() -> str | None:
    """Path of the ``prometheus`` program, or None."""
    return shutil.which("prometheus")


class PrometheusServer:
    """A real Prometheus on 127.0.0.1 (own port, config and data directory), stopped by its pid.

    Args:
        targets: ``[(host name, "host:port", metrics path)]`` to scrape every ``scrape_s`` seconds.
        data_dir: TSDB directory (default: a new temporary one, removed by :meth:`cleanup`).
    """

    def __init__(
        self,
        targets=(),
        data_dir: str | None = None,
        scrape_s: float = 1.0,
        port: int | None = None,
    ):
        self.binary = prometheus_binary()
        if self.binary is None:
            raise FileNotFoundError(
                "the `prometheus` program is not installed (apt-get install prometheus)"
            )
        self.tmp = tempfile.mkdtemp(prefix="cudamagic-prom-")
        self.data_dir = data_dir or os.path.join(self.tmp, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.port = port or free_port()
        self.config = os.path.join(self.tmp, "prometheus.yml")
        lines = [
            "global:",
            f"  scrape_interval: {scrape_s:g}s",
            f"  scrape_timeout: {scrape_s:g}s",
            "scrape_configs:",
        ]
        for host, addr, path in targets:
            lines += [
                f"  - job_name: {host}",
                f"    metrics_path: {path}",
                "    static_configs:",
                f"      - targets: ['{addr}']",
            ]
        if not targets:
            lines.append("  []")
            lines[-2] = "scrape_configs: []"
            lines.pop()
        with open(self.config, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        self.proc = self.watchdog = None
        self.log = os.path.join(self.tmp, "prometheus.log")

    @property
    def url(self) -> str:
        return f"prometheus://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0):
        """Start the server and wait until ``/-/ready`` answers."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=30d",
                    "--query.lookback-delta=5m",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # never outlive this process: stopped at its exit (a kernel shut down or restarted), and
        # by the watchdog when it is killed
        atexit.register(self.cleanup)
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, str(os.getpid()), str(self.proc.pid), self.tmp],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/-/ready", timeout=1
                ) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout_s:g} s: {self.tail()}")

    def tail(self) -> str:
        try:
            with open(self.log, "rb") as fh:
                return fh.read()[-600:].decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 15.0):
        """SIGTERM to our process by its pid, SIGKILL after ``timeout_s``; idempotent."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(5)
        self._end_watchdog()

    def _end_watchdog(self):
        """Wait for the watchdog (it ends within 0.5 s of Prometheus); idempotent."""
        w, self.watchdog = self.watchdog, None
        if w is not None:
            try:
                w.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(w.pid, signal.SIGKILL)
                w.wait(5)

    def kill(self):
        """SIGKILL by pid (a crash, for the stale test)."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(5)
        self._end_watchdog()

    def cleanup(self):
        """Stop and remove the temporary directory."""
        atexit.unregister(self.cleanup)
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def wait_for(pred, timeout_s: float = 20.0, every_s: float = 0.2):
    """Poll ``pred()`` until it returns something truthy.

    Returns it (or None after ``timeout_s``).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every_s)
    return None


def openmetrics_history(hosts, start_s: int, end_s: int, step_s: int = 15) -> str:
    """OpenMetrics text with every host's gauges from ``start_s`` to ``end_s`` every ``step_s``.

    OpenMetrics text with every host's gauges from ``start_s`` to ``end_s`` every ``step_s`` (for
    promtool).
    """
    series = {}
    for t in range(int(start_s), int(end_s) + 1, int(step_s)):
        for i, h in enumerate(hosts):
            for name, labels, value in host_metrics(h, i, t):
                lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                series.setdefault(name, []).append(f"{name}{{{lab}}} {value!r} {t}")
    out = []
    for name, lines in series.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def backfill(hosts, data_dir: str, start_s: int, end_s: int, step_s: int = 15):
    """Write the hosts' history into ``data_dir`` with ``promtool``.

    Runs ``promtool tsdb create-blocks-from openmetrics``.
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        raise FileNotFoundError("promtool is not installed (apt-get install prometheus)")
    os.makedirs(data_dir, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".om", delete=False) as fh:
        fh.write(openmetrics_history(hosts, start_s, end_s, step_s))
        path = fh.name
    try:
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", path, data_dir],
            check=True,
            capture_output=True,
            timeout=300,
        )
    finally:
        os.unlink(path)


def start_cluster(hosts, scrape_s: float = 1.0):
    """Start the simulator and a Prometheus scraping it.

    ``(sim, server)``; stop both with :func:`stop_cluster`.
    """
    sim = ExporterSim(hosts)
    server = PrometheusServer(
        [(h, f"127.0.0.1:{sim.port}", path) for h, path in sim.targets], scrape_s=scrape_s
    )
    try:
        server.start()
    except Exception:
        sim.stop()
        server.cleanup()
        raise
    return sim, server


def stop_cluster(sim, server):
    """Stop and clean up what :func:`start_cluster` started."""
    server.cleanup()
    sim.stop()


if __name__ == "__main__":  # pragma: no cover - manual check
    s, p = start_cluster(demo_cluster())
    print(p.url, "scraping", s.port)
    try:
        time.sleep(float(os.environ.get("SIM_SECONDS", "5")))
    finally:
        stop_cluster(s, p)
