"""The cluster sample source of ``%gpuwatch --source prometheus://...``.

GPU samples are read from Prometheus. :class:`PrometheusSource` has the same ``read(seq,
timestamp_s) -> Sample`` as the live NVML source and the replay, so the sampler,
``watch.history``, ``--log`` and ``--replay`` work unchanged. A GPU is identified by its UUID
(``UUID``/``uuid`` label) when the exporter gives one, else by ``host`` (the exporter's
``Hostname``/``hostname`` label, else the scrape target ``instance``) and ``index`` (0-based on
that host): series of one GPU whose labels change are merged by time, and a host that changes its
name keeps its GPUs (:func:`gpu_ids`). Hosts are matched as addresses (:func:`host_matches`).

One refresh is one HTTP request: an instant query selecting every metric of the exporters
(:mod:`.exporters`). The schema is told by the names that come back (``DCGM_FI_*``: DCGM exporter,
``dcgm_*``: its older generation, ``gpu_*_<unit>``: nvitop's exporter). DCGM's blank sentinels
become NA with the reason; profiling ratios (``DCGM_FI_PROF_*``, 0-1) go to ``GpuSample.ratios``;
MIG instances (``GPU_I_ID``) are grouped under their physical GPU: memory is summed over the
instances, device-wide values (power, temperature, clocks) are taken once.

A failed request never raises: :meth:`PrometheusSource.read` returns a sample without GPUs whose
``nvml_status`` is ``NA("stale since HH:MM:SS: <reason>", "stale")``; the views keep showing the
last good values, and the next successful request clears it. No IPython import here.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import math
import operator
import os
import re
import socket
import time

from ..core.na import NA, is_na
from . import exporters as ex
from .prometheus import PrometheusClient, PrometheusError, range_step, selector
from .samples import GPU_FIELDS, GpuSample, HostSample, MigSample, Sample
from .sources import MIG_UTIL, ReplaySource, Source

NOT_HOST = NA("not read: the source is a cluster's Prometheus, not this kernel's host", "cluster")
_CLUSTER_HOST = HostSample(
    cpu_util_pct=NOT_HOST,
    cpu_count=NOT_HOST,
    memory_used_bytes=NOT_HOST,
    memory_total_bytes=NOT_HOST,
    kernel_cpu_pct=NOT_HOST,
)
_NO_TORCH = NA("not read: the source is a cluster's Prometheus", "cluster")
_INT_FIELDS = {
    "memory.used",
    "memory.total",
    "power.draw",
    "power.limit",
    "clocks_event_reasons.active",
    "pstate",
}


def split_host(name: str) -> tuple:
    """``(host, port)`` of a host label or ``instance``.

    ``'10.1.2.7:9400'`` -> ``('10.1.2.7', '9400')``, ``'[fe80::1]:9400'`` -> ``('fe80::1',
    '9400')``, ``'fe80::1'`` -> ``('fe80::1', '')``, ``'node07'`` -> ``('node07', '')``.
    """
    name = name.strip()
    m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?", name)
    if m:
        return m.group(1), m.group(2) or ""
    host, sep, port = name.rpartition(":")
    if sep and host.count(":") == 0 and port.isdigit():  # one colon: IPv4 or a name with a port
        return host, port
    return name, ""


def _address(host: str):
    """The IP address ``host`` writes (IPv4-mapped IPv6 as IPv4), or None for a name."""
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return None
    return getattr(addr, "ipv4_mapped", None) or addr


@functools.lru_cache(maxsize=4096)
def host_matches(host: str, wanted: str) -> bool:
    """Whether ``wanted`` (a ``--hosts`` or ``--job`` value) names ``host`` (a GPU's host).

    The ports are stripped (compared only when both give one); IP addresses are compared whole as
    addresses (``10.1.2.7`` never matches ``10.1.2.70`` or ``10.1.9.9``; ``::1`` matches
    ``0:0::1``); names are compared case-insensitively, a name without a dot also matching a full
    name's first label (``node07`` matches ``node07.cluster.local``, and the other way round).
    """
    h, hport = split_host(host)
    w, wport = split_host(wanted)
    if hport and wport and hport != wport:
        return False
    ha, wa = _address(h), _address(w)
    if ha is not None or wa is not None:
        return ha == wa
    h, w = h.lower().rstrip("."), w.lower().rstrip(".")
    if h == w:
        return True
    return ("." not in w and h.split(".", 1)[0] == w) or ("." not in h and w.split(".", 1)[0] == h)


def parse_hosts(text: str) -> list:
    """``'node07, node08'`` -> ``['node07', 'node08']`` (empty list: every host)."""
    return [h for h in (x.strip() for x in (text or "").split(",")) if h]


def job_candidates(value: str | None, environ=os.environ, hostname: str | None = None) -> list:
    """What ``--job`` matches, in order: ``[(label or "host", value, why), ...]``.

    ``--job`` alone reads this kernel's Slurm job (``SLURM_JOB_ID`` against
    ``hpc_job``/``slurm_job_id``), its Kubernetes pod (``POD_NAME``, or ``HOSTNAME`` inside a pod,
    against ``pod``/``exported_pod``) and its host name (against the host labels). ``--job VALUE``
    matches VALUE against every job label and the host.
    """
    if value:
        return [
            *((label, value, f"--job {value}") for label, _ in ex.JOB_LABELS),
            ("host", value, f"--job {value}"),
        ]
    out = []
    for label, env in ex.JOB_LABELS:
        v = environ.get(env, "")
        if not v and env == "POD_NAME" and environ.get("KUBERNETES_SERVICE_HOST"):
            v, env = environ.get("HOSTNAME", ""), "HOSTNAME"
        if v:
            out.append((label, v, env))
    host = hostname if hostname is not None else socket.gethostname()
    if host:
        out.append(("host", host, "this kernel's host name"))
    return out


def _num(text, field: str, scale: float, exporter: str):
    """Prometheus value text -> the sample's raw unit, or NA (DCGM sentinel, NaN)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return NA(f"not a number in the {exporter} exporter's answer", "error")
    return _convert(v, field, scale, exporter)


def _convert(v: float, field: str, scale: float, exporter: str):
    """:func:`_num` of the float ``v``."""
    hit = ex.DCGM_SENTINELS.get(v)
    if hit is not None or v >= 9.2e18:
        reason, code = hit or ex.DCGM_SENTINELS[float(0x7FFFFFFFFFFFFFF0)]
        return NA(reason, code)
    if not math.isfinite(v):
        text = "NaN" if math.isnan(v) else "+Inf" if v > 0 else "-Inf"  # as Prometheus writes it
        return NA(f"the exporter reports {text}", "error")
    v *= scale
    if field in _INT_FIELDS or float(v).is_integer():
        return int(round(v))
    return round(v, 3)


def _convert_text(cache: dict, s, text):
    """Series ``s``'s value text (str or bytes) converted by :func:`_num`, kept in ``cache``."""
    v = _num(text.decode() if isinstance(text, bytes) else text, s.field, s.scale, s.exporter)
    if len(cache) < 20_000:
        cache[text] = v
    return v


class _Series:
    """What one Prometheus series is: GPU place, MIG instance, field, scale (once per label set)."""

    __slots__ = (
        "key",
        "host",
        "index",
        "uuid",
        "name",
        "mig",
        "field",
        "scale",
        "ratio",
        "exporter",
        "labels",
        "target",
    )


def classify(metric: dict):
    """A :class:`_Series` for one series' labels (with ``__name__``); None if not a GPU metric."""
    name = metric.get("__name__", "")
    s = _Series()
    if name in ex.DCGM_FIELDS:
        s.field, s.scale = ex.DCGM_FIELDS[name]
        s.ratio, s.exporter = False, "DCGM"
    elif name in ex.LEGACY_DCGM_FIELDS:
        s.field, s.scale = ex.LEGACY_DCGM_FIELDS[name]
        s.ratio, s.exporter = False, "DCGM (older dcgm_* names)"
    elif name in ex.DCGM_PROF_FIELDS:
        s.field, s.scale, s.ratio, s.exporter = ex.DCGM_PROF_FIELDS[name], 1, True, "DCGM"
    elif name in ex.NVITOP_FIELDS:
        s.field, s.scale = ex.NVITOP_FIELDS[name]
        s.ratio, s.exporter = False, "nvitop"
    else:
        return None
    s.host = next((metric[k] for k in ex.HOST_LABELS if metric.get(k)), "")
    raw = next((metric[k] for k in ex.INDEX_LABELS if k in metric), "")
    m = re.match(r"\(?\s*(\d+)(?:\s*[,:]\s*(\d+))?", raw)
    if not m:
        return None
    s.index = int(m.group(1))
    s.uuid = next((metric[k] for k in ex.UUID_LABELS if metric.get(k)), "")
    s.name = next((metric[k] for k in ex.NAME_LABELS if metric.get(k)), "")
    mig = metric.get("GPU_I_ID") or (m.group(2) if m.group(2) is not None else "")
    s.mig = (
        (int(mig) if str(mig).isdigit() else str(mig), metric.get("GPU_I_PROFILE", ""))
        if mig != ""
        else None
    )
    s.labels = tuple(
        (k, metric[k])
        for k in (
            "hpc_job",
            "slurm_job_id",
            "pod",
            "exported_pod",
            "pod_name",
            "namespace",
            "pod_namespace",
            "container",
        )
        if metric.get(k)
    )
    s.key = (s.host, s.index)
    s.target = (
        metric.get("job", ""),
        metric.get("instance", ""),
    )  # the scrape target, as `up` names it
    return s


def gpu_ids(series) -> list:
    """One GPU identity per :class:`_Series` of ``series``.

    ``("uuid", UUID)`` when the series or another series of its (host, index) carries the GPU's
    UUID, else ``("place", host, index)``.

    The identity is the GPU's, not the series' label set: the series of one GPU whose labels
    change (a pod label appears, the exporter pod restarts under a new host name) share it. A MIG
    instance's own ``MIG-`` UUID (nvitop's exporter) is not its GPU's: it takes the UUID of its
    physical GPU's series at the same (host, index).
    """
    physical = {}
    for s in series:
        if s.uuid and not s.uuid.startswith("MIG-"):
            physical.setdefault(s.key, s.uuid)
    out = []
    for s in series:
        uuid = s.uuid if s.uuid and not s.uuid.startswith("MIG-") else physical.get(s.key)
        out.append(("uuid", uuid) if uuid else ("place", *s.key))
    return out


_MISSING = {}
_PROF = "prof."  # a MIG instance's profiling ratio among its fields: "prof.sm_active"
_NO_PROCESSES = NA("not exported to Prometheus", "not_exported")


def _mem_total(f: dict, missing):
    """DCGM's total framebuffer in bytes, or an NA with the reason.

    ``DCGM_FI_DEV_FB_TOTAL`` when exported, else used + free + reserved; NA: the first NA part, or
    no reserve exported (used + free is then only a lower bound, given in the reason, since the
    driver's reserve is not counted).
    """
    if "memory.total" in f:
        return f["memory.total"]
    if "memory.used" not in f or "memory.free" not in f:
        return missing
    parts = [f["memory.used"], f["memory.free"], f.get("memory.reserved", 0)]
    bad = [p for p in parts if is_na(p)]
    if bad:
        return bad[0]
    if "memory.reserved" not in f:
        known = (f["memory.used"] + f["memory.free"]) // ex.MIB
        return NA(
            f"not exported: used + free = {known} MiB, without the driver's reserve (the exporter "
            "gives neither DCGM_FI_DEV_FB_TOTAL nor DCGM_FI_DEV_FB_RESERVED), so the total is at "
            f"least {known} MiB",
            "incomplete",
        )
    return sum(parts)


def _gpu(meta: dict, slots: list, values: list) -> GpuSample:
    """One GpuSample from the values of its series.

    Args:
        meta: the GPU's identity (see :meth:`PrometheusSource._note_series`).
        slots: per value, ``(place, MIG instance, field)``; place is ``"phys"`` (the physical
            GPU), ``"ratio"`` (its profiling ratios) or ``"mig"`` (a MIG instance's field).
        values: the converted values, None where a series has no point.
    """
    phys, migs, ratios = {}, {}, {}
    for (place, mig, field), v in zip(slots, values, strict=True):
        if v is None:
            continue
        if place == "mig":
            migs.setdefault(mig, {})[field] = v
        else:
            (ratios if place == "ratio" else phys)[field] = v
    host, index = meta["host"], meta["index"]
    uuid, name, exporter, labels = meta["uuid"], meta["name"], meta["exporter"], meta["labels"]
    missing = _MISSING.get(exporter)
    if missing is None:
        missing = _MISSING[exporter] = NA(
            f"not exported by the {exporter} exporter", "not_exported"
        )
    mig_devs = ()
    if migs:
        inst = []
        for (mid, profile), f in sorted(migs.items(), key=lambda kv: str(kv[0][0])):
            used = f.get("memory.used", missing)
            total = _mem_total(f, missing)
            # DCGM labels name the GPU instance (GPU_I_ID) and profile, not the MIG UUID: shown as
            # "3g.40gb #1"
            inst.append(
                MigSample(
                    index=mid if isinstance(mid, int) else len(inst),
                    uuid=f"{profile or 'MIG'} #{mid}",
                    memory_used_bytes=used,
                    memory_total_bytes=total,
                    ratios=tuple(
                        sorted((k[len(_PROF) :], v) for k, v in f.items() if k.startswith(_PROF))
                    ),
                )
            )
            for k, v in f.items():  # device-wide values: taken once (never summed over instances)
                if k not in (
                    "memory.used",
                    "memory.free",
                    "memory.reserved",
                    "memory.total",
                ) and not k.startswith(_PROF):
                    phys.setdefault(k, v)
        mig_devs = tuple(inst)
        if "memory.used" not in phys:
            used = [m.memory_used_bytes for m in inst]
            tot = [m.memory_total_bytes for m in inst]
            phys["memory.used"] = (
                sum(used) if not any(is_na(u) for u in used) else next(u for u in used if is_na(u))
            )
            phys["memory.total"] = (
                sum(tot) if not any(is_na(t) for t in tot) else next(t for t in tot if is_na(t))
            )
        phys["utilization.gpu"] = phys["utilization.memory"] = MIG_UTIL
    if "memory.free" in phys:
        phys["memory.total"] = _mem_total(phys, missing)
    fields = {attr: phys.get(k, missing) for k, attr in GPU_FIELDS.items()}
    return GpuSample(
        index=index,
        name=name or missing,
        uuid=uuid or missing,
        mig_enabled=bool(migs),
        mig_devices=mig_devs,
        processes=_NO_PROCESSES,
        host=host,
        ratios=tuple(sorted(ratios.items())),
        labels=labels,
        **fields,
    )


#: A host whose exporter stays away this long (seconds) is no longer shown as stale.
FORGET_HOST_S = 3600.0


class HostTracker:
    """Per-host staleness for the cluster sources: which hosts were shown and are now missing.

    ``stale_hosts`` is ``{host: {"since": epoch s, "reason": str, "gpus": last GpuSamples}}`` for
    every host that had GPUs in an earlier sample and has none in the newest one (its exporter is no
    longer scraped: ``up == 0``, or its series went stale) while the server itself answered. The
    views keep showing those last values marked "exporter down since HH:MM:SS". It is replaced,
    never changed in place, so a view in another thread reads a consistent dict.
    """

    stale_hosts: dict = {}
    _seen: dict = {}

    def track_hosts(self, sample, down=None):
        """Update :attr:`stale_hosts` from ``sample`` (a sample of a working server).

        A host whose GPUs (by UUID) all answer under another host name now was renamed (its
        exporter pod restarted): it is dropped, never shown as a second host whose exporter is down.

        Args:
            sample: the newest :class:`Sample`.
            down: ``{host: reason}`` for hosts whose scrape target has ``up == 0`` (None when
                unknown, e.g. in a replay).
        """
        now = sample.timestamp_s
        groups = {}
        for g in sample.gpus:
            groups.setdefault(g.host, []).append(g)
        seen = {
            h: v
            for h, v in self._seen.items()
            if h not in groups and now - v["seen_s"] <= FORGET_HOST_S
        }
        seen.update({h: {"gpus": tuple(gs), "seen_s": now} for h, gs in groups.items()})
        # a host whose GPUs all answer under another name now was renamed (its exporter pod
        # restarted with a new host name): the same host, not a second one that went down
        uuids = {g.uuid for g in sample.gpus if isinstance(g.uuid, str) and g.uuid}
        for host in [h for h in seen if h not in groups]:
            mine = [g.uuid for g in seen[host]["gpus"] if isinstance(g.uuid, str) and g.uuid]
            if mine and uuids.issuperset(mine):
                del seen[host]
        stale = {}
        for host, v in seen.items():
            if host in groups:
                continue
            old = self.stale_hosts.get(host)
            reason = (down or {}).get(host) or (
                "its GPU series went stale (no longer in Prometheus's answer)"
                if down is not None
                else "its GPUs are missing from the recording"
            )
            stale[host] = {
                "since": old["since"] if old else now,
                "reason": reason,
                "gpus": v["gpus"],
            }
        self._seen, self.stale_hosts = seen, stale


def _texts_at(positions: list):
    """``f(texts) -> tuple`` of the texts at ``positions`` (one C call: an itemgetter)."""
    if len(positions) == 1:
        only = positions[0]
        return lambda texts: (texts[only],)
    return operator.itemgetter(*positions)


class PrometheusSource(HostTracker, Source):
    """Reads GPU samples of a cluster from a Prometheus server (see the module docstring).

    Args:
        url: the ``--source`` base URL (from :func:`cudamagic.watch.prometheus.parse_source`).
        hosts: host names to keep (``--hosts``; empty: all). A name matches the full host label or
            its short form (``node07`` matches ``node07.cluster.local``).
        job: ``None`` (every GPU), ``""`` (``--job``: this kernel's job) or a value (``--job
            VALUE``).
        interval_s: seconds between refreshes (the smallest history step). timeout_s: per request.
        client: a :class:`~cudamagic.watch.prometheus.PrometheusClient` (tests inject their own).
        environ, hostname: where ``--job`` looks (tests inject their own).

    State for the views: ``exporters`` (names seen, e.g. ``{"DCGM"}``), ``job_match``
    (``"hpc_job=42 (from SLURM_JOB_ID)"`` or ``""``), ``stale_since`` (epoch seconds or None).
    """

    kind = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        hosts=(),
        job: str | None = None,
        interval_s: float = 1.0,
        timeout_s: float | None = None,
        client: PrometheusClient | None = None,
        environ=os.environ,
        hostname: str | None = None,
    ):
        self.url = url
        self.hosts = list(hosts)
        self.interval_s = float(interval_s)
        timeout = timeout_s if timeout_s is not None else min(5.0, max(1.0, 2 * self.interval_s))
        self.client = client or PrometheusClient(url, timeout_s=timeout, environ=environ)
        self.job = job
        self.job_candidates = job_candidates(job, environ, hostname) if job is not None else []
        self.job_match = ""
        #: the instant query of one refresh: every GPU metric, and the `up` series of the scrape
        #: targets that are down (only those: a cluster's Prometheus may scrape thousands more)
        self.query = f"{selector(ex.all_metric_names())} or (up == 0)"
        #: the range query of the history (GPU metrics only)
        self.history_query = selector(ex.all_metric_names())
        self.stale_hosts, self._seen, self._targets = {}, {}, {}
        self.exporters = set()
        self.stale_since = None
        self.devices = []
        self.device_count = 0
        self.status = None
        self._vcache = {}
        self._raw_kinds = {}  # labels JSON bytes -> _Series, (job, instance) of `up`, or None
        self._plan = None  # see _instant_plan
        self._other = None  # (time, text) of the last look at what GPU metrics the server has
        what = f" --hosts {','.join(self.hosts)}" if self.hosts else ""
        what += (" --job" + (f" {job}" if job else "")) if job is not None else ""
        self.label = f"cluster via {url}{what}"

    # -- classification and filtering ------------------------------------------------------
    def _host_ok(self, host: str) -> bool:
        return not self.hosts or any(host_matches(host, w) for w in self.hosts)

    def _job_filter(self, series: list) -> list:
        """Keep the series of this job; sets :attr:`job_match`; ``[]`` when no candidate matched."""
        if self.job is None:
            return series
        for label, value, why in self.job_candidates:
            if label == "host":
                kept = [x for x in series if host_matches(x[0].host, value)]
            else:
                kept = [x for x in series if (label, value) in x[0].labels]
            if kept:
                self.job_match = f"{'host' if label == 'host' else label}={value} (from {why})"
                return kept
        self.job_match = ""
        return []

    def no_job_text(self) -> str:
        """Why ``--job`` kept nothing: the label=value pairs tried."""
        tried = (
            ", ".join(f"{label}={value} ({why})" for label, value, why in self.job_candidates)
            or "nothing (no SLURM_JOB_ID, POD_NAME or host name)"
        )
        return f"--job: no GPU series carries {tried}"

    # -- building samples -------------------------------------------------------------------
    def _note_series(self, meta, gid, s, newness):
        """Record series ``s``'s exporter and, in ``meta[gid]``, its GPU's identity.

        The identity is host, index, uuid, name, exporter, labels: the newest series names it
        (``newness``: its last time, then its first time, so that of two series that both reach
        the end of the window, within Prometheus's look-back, the one that began later wins).
        """
        self.exporters.add(s.exporter)
        m = meta.get(gid)
        if m is None or newness > m["newness"]:
            meta[gid] = {
                "host": s.host,
                "index": s.index,
                "uuid": gid[1] if gid[0] == "uuid" else "",
                "name": s.name,
                "exporter": s.exporter,
                "labels": s.labels,
                "newness": newness,
            }
        elif s.labels and not m["labels"]:
            m["labels"] = s.labels

    def _group(self, series: list, newness=None) -> tuple:
        """Which series make which GPU, after the ``--job`` and ``--hosts`` filters.

        The series of one GPU (:func:`gpu_ids`) are merged: of two with the same field, the later
        in ``series`` wins where both have a value.

        Args:
            series: :class:`_Series`, the oldest first.
            newness: per series, ``(last time, first time)`` (None: all equal, an instant).

        Returns:
            ``(kept, gpus)``: the series the ``--job`` filter kept, and per GPU, sorted by (host,
            index), ``(meta, [(position in series, _Series, (place, MIG instance, field))])``
            (see :func:`_gpu`).
        """
        kept = self._job_filter([(s, i) for i, s in enumerate(series)])
        mine = [(s, i) for s, i in kept if self._host_ok(s.host)]
        meta, members = {}, {}
        for (s, i), gid in zip(mine, gpu_ids([s for s, _ in mine]), strict=True):
            self._note_series(meta, gid, s, newness[i] if newness else (0.0, 0.0))
            place = "mig" if s.mig is not None else "ratio" if s.ratio else "phys"
            field = _PROF + s.field if s.ratio and s.mig is not None else s.field
            members.setdefault(gid, []).append((i, s, (place, s.mig, field)))
        order = sorted(members, key=lambda k: (meta[k]["host"], meta[k]["index"], str(k)))
        return [s for s, _ in kept], [(meta[gid], members[gid]) for gid in order]

    def assemble_columns(self, series) -> tuple:
        """``(times, GpuSamples per time)`` from the columns of a range query.

        Args:
            series: ``[(_Series, times, values)]``: epoch seconds and values as 1-D float64 numpy
                arrays (from :meth:`~cudamagic.watch.prometheus.PrometheusClient.range_columns`).

        Returns:
            ``(times, frames)``: the sorted distinct times (a list of floats) and, for each, the
            tuple of GpuSamples sorted by (host, index).

        The series of one GPU (:func:`gpu_ids`) are merged by time, the later-ending (then
        later-beginning) series winning where both have a point. Each series' distinct values
        are converted once (:func:`_convert`); each GPU's fields become one row of value codes per
        time, and a GpuSample is built only at the times where a code changed (a step finer than
        the scrape interval repeats values): the others reuse the previous, immutable one.
        """
        import numpy as np

        series = sorted(
            [x for x in series if len(x[1])], key=lambda x: (float(x[1][-1]), float(x[1][0]))
        )
        if not series:
            return [], []
        times = np.unique(np.concatenate([t for _, t, _ in series]))
        n = len(times)
        newness = [(float(t[-1]), float(t[0])) for _, t, _ in series]
        per_gpu = []
        for meta, members in self._group([s for s, _, _ in series], newness)[1]:
            merged = {}  # (place, MIG instance, field) -> (value code per time, values)
            for i, s, slot in members:
                _, t, v = series[i]
                uniq, inverse = np.unique(v, return_inverse=True)
                conv = [_convert(x, s.field, s.scale, s.exporter) for x in uniq.tolist()]
                code = np.full(n, -1, dtype=np.int64)
                code[np.searchsorted(times, t)] = inverse.reshape(-1)
                prev = merged.get(slot)
                if prev is not None:  # another series of this GPU and field: fill what it covers
                    code = np.where(code >= 0, code + len(prev[1]), prev[0])
                    conv = prev[1] + conv
                merged[slot] = (code, conv)
            slots = list(merged)
            convs = [conv for _, conv in merged.values()]
            codes = np.stack([code for code, _ in merged.values()])
            present = (codes >= 0).any(axis=0)
            changed = np.ones(n, dtype=bool)
            changed[1:] = (codes[:, 1:] != codes[:, :-1]).any(axis=0)
            column = [None] * n
            build = np.flatnonzero(changed & present).tolist()
            rows = codes[:, build].T.tolist() if build else []
            for row_i, row in zip(build, rows, strict=True):
                values = [conv[c] if c >= 0 else None for conv, c in zip(convs, row, strict=True)]
                column[row_i] = _gpu(meta, slots, values)
            last = None
            for i, here in enumerate(present.tolist()):  # fill the repeats with the previous sample
                if column[i] is not None:
                    last = column[i]
                elif here:
                    column[i] = last
            per_gpu.append(column)
        frames = [tuple(g for g in row if g is not None) for row in zip(*per_gpu, strict=True)]
        return times.tolist(), frames

    def build(self, series: list, texts: list) -> tuple:
        """GpuSamples, sorted by (host, index), of one instant's series and their value texts.

        What depends only on which series the answer holds (:meth:`_instant_plan`) is kept while
        the next answer holds the same series, in the same order; a GPU whose value texts are
        those of the previous answer keeps its (immutable) sample.
        """
        plan = self._plan
        if (
            plan is None
            or len(plan["series"]) != len(series)
            or not all(map(operator.is_, plan["series"], series))
        ):
            plan = self._plan = self._instant_plan(series)
        self.job_match = plan["job_match"]
        self._targets.update(plan["targets"])
        now, gpus = [], []
        for (meta, slots, pick, caches, of), prev in zip(plan["gpus"], plan["last"], strict=True):
            got = pick(texts)  # this GPU's value texts
            if prev is None or prev[0] != got:
                values = [
                    c[t] if t in c else _convert_text(c, s, t)
                    for c, s, t in zip(caches, of, got, strict=True)
                ]
                prev = (got, _gpu(meta, slots, values))
            now.append(prev)
            gpus.append(prev[1])
        plan["last"] = now
        return tuple(gpus)

    def _instant_plan(self, series: list) -> dict:
        """What does not change while an instant answer holds the same series (in the same order).

        The hosts seen, the ``--job`` match, each host's scrape target, and per GPU its identity,
        its series' slots (see :func:`_gpu`), the function picking their value texts, the
        caches of converted values and the series.
        """
        kept, gpus = self._group(series)
        plan = []
        for meta, members in gpus:
            pick = _texts_at([i for i, _, _ in members])
            caches = [
                self._vcache.setdefault((s.field, s.scale, s.exporter), {}) for _, s, _ in members
            ]
            plan.append(
                (meta, [slot for _, _, slot in members], pick, caches, [s for _, s, _ in members])
            )
        return {
            "series": series,
            "any_gpu": bool(series),
            "seen_hosts": sorted({s.host for s in series}),
            "job_match": self.job_match,
            "targets": {s.host: s.target for s in kept},
            "gpus": plan,
            "last": [None] * len(gpus),  # per GPU: (its texts, GpuSample) of the last answer
        }

    def _sample(self, seq, timestamp_s, gpus, status: NA | None = None) -> Sample:
        return Sample(
            seq=seq,
            timestamp_s=timestamp_s,
            nvml_status=status,
            gpus=gpus,
            host=_CLUSTER_HOST,
            torch=_NO_TORCH,
        )

    def stale_sample(self, seq: int, timestamp_s: float, reason: str) -> Sample:
        """A sample without GPUs that says since when the data is stale and why."""
        if self.stale_since is None:
            self.stale_since = timestamp_s
        since = time.strftime("%H:%M:%S", time.localtime(self.stale_since))
        return self._sample(seq, timestamp_s, (), NA(f"stale since {since}: {reason}", "stale"))

    # -- the source protocol ----------------------------------------------------------------
    def _kind(self, labels: bytes):
        """A new series' :class:`_Series`, ``(job, instance)`` for an ``up`` series, else None."""
        try:
            metric = json.loads(labels)
        except ValueError:
            metric = None
        kind = None
        if isinstance(metric, dict):
            kind = classify(metric)
            if kind is None and metric.get("__name__", "up") == "up" and "instance" in metric:
                kind = (metric.get("job", ""), metric["instance"])  # a filter keeps the name
        if len(self._raw_kinds) > 200_000:
            self._raw_kinds.clear()
        self._raw_kinds[labels] = kind
        return kind

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """One instant query (one HTTP request) -> one :class:`Sample`; stale on a failure.

        The series are recognised by their label bytes (:meth:`_kind` the first time), then built
        by :meth:`build`.
        """
        try:
            answer = self.client.instant_rows(self.query)
        except PrometheusError as exc:
            return self.stale_sample(seq, timestamp_s, str(exc))
        series, texts, up = [], [], {}
        known = self._raw_kinds
        for labels, text in answer:
            k = known.get(labels, False)
            if k is False:
                k = self._kind(labels)
            if k is None:
                continue
            if isinstance(k, tuple):
                up[k] = text
            else:
                series.append(k)
                texts.append(text)
        gpus = self.build(series, texts)
        any_gpu, seen_hosts = self._plan["any_gpu"], self._plan["seen_hosts"]
        sample = self._sample(seq, timestamp_s, gpus)
        if not gpus:
            why = (
                self.no_job_text()
                if self.job is not None and not self.job_match and any_gpu
                else (
                    f"no GPU of --hosts {','.join(self.hosts)} in the answer (its hosts: "
                    f"{', '.join(seen_hosts[:12])}{' ...' if len(seen_hosts) > 12 else ''})"
                    if self.hosts and any_gpu
                    else self.nothing_known_text(timestamp_s)
                )
            )
            sample = self._sample(seq, timestamp_s, (), NA(why, "no_gpus"))
        down = {}
        for host, (job, instance) in self._targets.items():
            if up.get((job, instance)) in (b"0", "0"):
                down[host] = f"its exporter is down (up == 0 for job={job} instance={instance})"
        self.track_hosts(sample, down)
        self.stale_since = None
        self.devices = [(g.host, g.index) for g in gpus]
        self.device_count = len(gpus)
        return sample

    def nothing_known_text(self, now_s: float) -> str:
        """Why no GPU came back when no metric cudamagic reads is on the server.

        Says what GPU metrics are there instead (one extra request, ``count by (__name__)`` of the
        names that start with ``dcgm_``, ``nvidia_`` or ``gpu_``, repeated at most once a minute)
        and what to run.

        Args:
            now_s: epoch seconds of this refresh.
        """
        if self._other is not None and now_s - self._other[0] < 60.0:
            return self._other[1]
        known = "dcgm-exporter's DCGM_FI_DEV_* (or its older dcgm_* names) or nvitop-exporter's"
        try:
            found = self.client.instant(ex.OTHER_QUERY)
        except PrometheusError as exc:
            return f"the server has none of {known} GPU metrics (what else it has: {exc})"
        names = sorted(
            {
                r["metric"]["__name__"]
                for r in found
                if isinstance(r, dict)
                and isinstance(r.get("metric"), dict)
                and r["metric"].get("__name__")
            }
        )
        if not names:
            text = (
                f"the server has no GPU metrics at all (none of {known}, and no other dcgm_*, "
                "nvidia_* or gpu_* name): check that it scrapes a GPU exporter (its /targets "
                "page), e.g. NVIDIA's dcgm-exporter or nvitop-exporter on each GPU node"
            )
        else:
            kinds = []
            for prefix, what in ex.OTHER_EXPORTERS:
                if any(n.startswith(prefix) for n in names) and what not in kinds:
                    kinds.append(what)
            text = (
                f"the server has none of {known} GPU metrics, but has {len(names)} other GPU "
                f"metric name(s): {', '.join(names[:8])}{' ...' if len(names) > 8 else ''} "
                f"({'; '.join(kinds) or 'an exporter cudamagic does not read'}): run NVIDIA's "
                "dcgm-exporter (version 2 or later, DCGM_FI_* names) or nvitop-exporter on the GPU "
                "nodes, scraped by this server"
            )
        self._other = (now_s, text)
        return text

    def history(
        self,
        span_s: float,
        end_s: float | None = None,
        max_samples: int = 600,
        timeout_s: float = 30.0,
    ) -> list:
        """Samples of the last ``span_s`` seconds from one range query (one HTTP request).

        The step is at least ``interval_s`` and at least ``span_s / max_samples`` (the monitor keeps
        no more), and keeps every series under Prometheus's 11,000 points. ``timeout_s`` bounds the
        request.

        Returns:
            list of :class:`Sample` (oldest first; ``seq`` 0, -1, ... counts back from the newest),
            or ``[]`` when the request failed (the next refresh says why).
        """
        end = time.time() if end_s is None else float(end_s)
        start = end - float(span_s)
        step = range_step(start, end, max(self.interval_s, span_s / max(1, max_samples - 1)))
        try:
            result = self.client.range_columns(
                self.history_query, start, end, step, timeout_s=timeout_s
            )
        except PrometheusError:
            return []
        series = [(s, t, v) for metric, t, v in result if (s := classify(metric)) is not None]
        times, frames = self.assemble_columns(series)
        return [
            self._sample(i - len(times) + 1, t, gpus)
            for i, (t, gpus) in enumerate(zip(times, frames, strict=True))
        ]

    def close(self):
        """Close the connection pool."""
        self.client.close()

    def preload(self, history_len: int) -> list:
        """The history a new monitor starts with.

        :meth:`history` over ``history_len`` refresh intervals (it runs in the kernel's thread when
        the monitor starts, so it waits no longer than one refresh request).
        """
        return self.history(
            history_len * self.interval_s, max_samples=history_len, timeout_s=self.client.timeout_s
        )


class ClusterReplay(HostTracker, ReplaySource):
    """A replay of a trace recorded from a cluster source, shown in the cluster view.

    Same samples; a host missing from a later sample is shown stale with its last values, as live.
    """

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """The next recorded sample (see :class:`ReplaySource`), hosts tracked as live."""
        sample = ReplaySource.read(self, seq, timestamp_s)
        if sample.gpus or not is_na(sample.nvml_status) or sample.nvml_status.code != "stale":
            self.track_hosts(sample)
        return sample

    @classmethod
    def wrap(cls, replay: ReplaySource):
        """The cluster replay with ``replay``'s state if its samples carry host names; else it."""
        if not any(g.host for s in replay.samples[:1] for g in s.gpus):
            return replay
        obj = cls.__new__(cls)
        obj.__dict__.update(replay.__dict__)
        obj.stale_hosts, obj._seen = {}, {}
        return obj
