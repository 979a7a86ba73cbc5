"""``%gpuwatch`` trace files: the JSON-lines log format, its writer and its strict reader.

The first line of a trace is the header ``{"cudamagic_trace": 1, "source": ..., "units": ...}``;
every later line is one :class:`~.samples.Sample` as :func:`sample_to_json` writes it (nested,
nvidia-smi key names, raw units, NA as ``{"na": reason, "code": code}``). :func:`read_trace` parses
only JSON and checks every line against the schema and the size limits below (a replay file may come
from anywhere).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import time

from ..core import nvml
from ..core.na import NA, is_na, jsonable
from ..core.version import __version__
from .samples import (
    GPU_FIELDS,
    GpuSample,
    HostSample,
    MigSample,
    ProcessSample,
    Sample,
    TorchSample,
    WorkerSample,
    iso_timestamp,
)

TRACE_VERSION = 1


class TraceError(ValueError):
    """A log/replay file that is not a valid ``%gpuwatch`` trace.

    The message says where and why.
    """


# : Bounds of what :func:`read_trace` accepts: file bytes, bytes per line, samples, GPUs and
# processes
#: per sample, characters per string.
MAX_TRACE_BYTES = 64 * 1024**2
MAX_LINE_BYTES = 1024**2
MAX_SAMPLES = 500_000
MAX_GPUS = 1024  # a cluster trace (--source) holds every GPU of the cluster
MAX_PROCESSES = 4096
MAX_STR = 4096


# ---- writing -----------------------------------------------------------------------------


def sample_to_json(s: Sample) -> dict:
    """One log line's object.

    Nested, nvidia-smi key names, raw units (bytes, mW), NA as ``{"na", "code"}``.
    """
    gpus = []
    for g in s.gpus:
        d = {"index": g.index, "name": g.name, "uuid": g.uuid}
        for key, attr in GPU_FIELDS.items():
            d[key] = getattr(g, attr)
        d["mig.mode.current"] = (
            g.mig_enabled if is_na(g.mig_enabled) else ("Enabled" if g.mig_enabled else "Disabled")
        )
        d["mig.devices"] = [
            {
                "index": m.index,
                "uuid": m.uuid,
                "memory.used": m.memory_used_bytes,
                "memory.total": m.memory_total_bytes,
                **({"prof": dict(m.ratios)} if m.ratios else {}),
            }
            for m in g.mig_devices
        ]
        d["processes"] = (
            g.processes
            if is_na(g.processes)
            else [
                {
                    "pid": p.pid,
                    "name": p.name,
                    "cmdline": p.cmdline,
                    "used_memory": p.used_memory_bytes,
                    "type": p.type,
                    "own": p.own,
                    "visible": p.visible,
                    **(
                        {}
                        if p.memory_source == "NVML"
                        else {
                            "used_memory.source": p.memory_source,
                            "shared_memory": p.shared_memory_bytes,
                        }
                    ),
                }
                for p in g.processes
            ]
        )
        d["lost"] = g.lost
        d["driver_model.current"] = g.driver_model
        if g.host or g.ratios or g.labels:  # cluster sources only: live traces keep their old shape
            d["host"] = g.host
            d["prof"] = dict(g.ratios)
            d["labels"] = dict(g.labels)
        gpus.append(d)
    h = s.host
    t = s.torch
    return jsonable(
        {
            "seq": s.seq,
            "timestamp": s.timestamp,
            "timestamp_s": s.timestamp_s,
            "nvml.status": "ok" if s.nvml_status is None else s.nvml_status,
            "gpus": gpus,
            "host": {
                "cpu.utilization": h.cpu_util_pct,
                "cpu.count": h.cpu_count,
                "memory.used": h.memory_used_bytes,
                "memory.total": h.memory_total_bytes,
                "kernel.cpu.utilization": h.kernel_cpu_pct,
                "dataloader_workers": [
                    {"pid": w.pid, "cpu.utilization": w.cpu_pct, "memory.rss": w.rss_bytes}
                    for w in h.workers
                ],
            },
            "torch": t
            if is_na(t)
            else {
                "allocated": t.allocated_bytes,
                "reserved": t.reserved_bytes,
                "peak": t.peak_bytes,
                "nvml.process_memory": t.nvml_process_bytes,
                "gap": t.gap_bytes,
            },
            "hint": s.hint,
        }
    )


def trace_header(source: str, interval_s: float | None = None) -> dict:
    """The first line of a trace.

    ``{"cudamagic_trace": 1, "source": ..., "created": ..., "units": ...}``.
    """
    head = {
        "cudamagic_trace": TRACE_VERSION,
        "source": source,
        "created": iso_timestamp(time.time()),
        "cudamagic_version": __version__,
        "units": dict(nvml.FIELD_UNITS),
    }
    if interval_s is not None:
        head["interval_s"] = interval_s
    return head


class TraceWriter:
    """Appends samples to a JSON-lines trace; writes the header when the file is new or empty.

    Raises:
        TraceError: the file exists, is not empty and its first line is not a cudamagic trace
            header (we refuse to append to somebody else's file), or it cannot be opened.
    """

    def __init__(self, path: str, source: str = "live", interval_s: float | None = None):
        self.path = path
        try:
            size = os.path.getsize(path) if os.path.exists(path) else 0
            if size:
                with open(path, "rb") as fh:
                    first = fh.readline(MAX_LINE_BYTES)
                try:
                    ok = (
                        isinstance(json.loads(first), dict)
                        and json.loads(first).get("cudamagic_trace") == TRACE_VERSION
                    )
                except ValueError:
                    ok = False
                if not ok:
                    raise TraceError(
                        f"{path} exists and is not a cudamagic trace (its first line is not a "
                        '{"cudamagic_trace": 1, ...} header); refusing to append to it'
                    )
            self._fh = open(path, "a", encoding="utf-8")
        except OSError as exc:
            raise TraceError(f"cannot open {path} for writing: {exc.strerror or exc}") from exc
        if not size:
            self._write(trace_header(source, interval_s))

    def _write(self, obj):
        self._fh.write(json.dumps(jsonable(obj), separators=(",", ":"), allow_nan=False) + "\n")
        self._fh.flush()

    def write(self, sample: Sample):
        """Append one sample as one line (flushed, so a crash keeps what was written)."""
        self._write(sample_to_json(sample))

    def close(self):
        """Close the file (idempotent)."""
        if not self._fh.closed:
            self._fh.close()


# ---- the strict reader ---------------------------------------------------------------------


def _reject_constant(name):
    raise ValueError(f"{name} is not allowed")


class _Checker:
    """Schema checks for one line; raises TraceError naming the line and the key."""

    def __init__(self, path, lineno):
        self.where = f"{path}, line {lineno}"

    def fail(self, what):
        raise TraceError(f"{self.where}: {what}")

    def na(self, v, key):
        if (
            set(v) - {"na", "code"}
            or not isinstance(v.get("na"), str)
            or not isinstance(v.get("code", ""), str)
        ):
            self.fail(
                f"{key!r}: an object here must be a not-available value "
                f'{{"na": reason, "code": code}}'
            )
        return NA(self.text(v["na"], key), self.text(v.get("code", "error"), key))

    def text(self, v, key):
        if not isinstance(v, str):
            self.fail(f"{key!r} must be a string, not {type(v).__name__}")
        if len(v) > MAX_STR:
            self.fail(f"{key!r} is longer than {MAX_STR} characters")
        return v

    def num(self, v, key, na=True, integer=False):
        if na and isinstance(v, dict):
            return self.na(v, key)
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (integer and not isinstance(v, int))
        ):
            self.fail(
                f"{key!r} must be a "
                f"{'whole ' if integer else ''}number{' or a not-available value' if na else ''}, "
                f"not {json.dumps(v)[:40]}"
            )
        if isinstance(v, float) and not math.isfinite(v):
            self.fail(f"{key!r} must be finite")
        if abs(v) > 2**63:
            self.fail(f"{key!r} is out of range")
        return v

    def str_or_na(self, v, key):
        return self.na(v, key) if isinstance(v, dict) else self.text(v, key)

    def obj(self, v, key, allowed, required=()):
        if not isinstance(v, dict):
            self.fail(f"{key!r} must be a JSON object")
        extra = set(v) - set(allowed)
        if extra:
            self.fail(f"unknown key {sorted(extra)[0]!r} in {key!r}")
        missing = [k for k in required if k not in v]
        if missing:
            self.fail(f"{key!r} lacks the key {missing[0]!r}")
        return v

    def lst(self, v, key, limit):
        if not isinstance(v, list):
            self.fail(f"{key!r} must be a list")
        if len(v) > limit:
            self.fail(f"{key!r} has more than {limit} entries")
        return v


_GPU_KEYS = [
    "index",
    "name",
    "uuid",
    *GPU_FIELDS,
    "mig.mode.current",
    "mig.devices",
    "processes",
    "lost",
    "host",
    "prof",
    "labels",
    "driver_model.current",
]
_SAMPLE_KEYS = ["seq", "timestamp", "timestamp_s", "nvml.status", "gpus", "host", "torch", "hint"]
_HOST_KEYS = [
    "cpu.utilization",
    "cpu.count",
    "memory.used",
    "memory.total",
    "kernel.cpu.utilization",
    "dataloader_workers",
]
_TORCH_KEYS = ["allocated", "reserved", "peak", "nvml.process_memory", "gap"]


def _driver_model(c, v):
    """``"WDDM"``/``"TCC"``/``"MCDM"`` or a not-available value (older traces have neither)."""
    return (
        c.na(v, "driver_model.current")
        if isinstance(v, dict)
        else c.text(v, "driver_model.current")[:8]
    )


def sample_from_json(obj, where: str = "<trace>", lineno: int = 0) -> Sample:
    """Validate one decoded log line and rebuild the :class:`Sample`.

    Strict: unknown keys are rejected.
    """
    c = _Checker(where, lineno)
    c.obj(obj, "sample", _SAMPLE_KEYS, required=["timestamp_s", "gpus", "host"])
    status = obj.get("nvml.status", "ok")
    status = (
        None
        if status == "ok"
        else (
            c.na(status, "nvml.status")
            if isinstance(status, dict)
            else c.fail("'nvml.status' must be \"ok\" or a not-available value")
        )
    )
    gpus = []
    for g in c.lst(obj["gpus"], "gpus", MAX_GPUS):
        c.obj(g, "gpus[]", _GPU_KEYS, required=["index"])
        vals = {
            attr: c.num(g.get(key, {"na": "not recorded", "code": "error"}), key)
            for key, attr in GPU_FIELDS.items()
        }
        mig = g.get("mig.mode.current", "Disabled")
        mig = (
            c.na(mig, "mig.mode.current")
            if isinstance(mig, dict)
            else (c.text(mig, "mig.mode.current") == "Enabled")
        )
        migs = []
        for m in c.lst(g.get("mig.devices", []), "mig.devices", 64):
            c.obj(
                m,
                "mig.devices[]",
                ["index", "uuid", "memory.used", "memory.total", "prof"],
                required=["index"],
            )
            mprof = m.get("prof", {})
            c.obj(mprof, "prof", list(mprof) if isinstance(mprof, dict) else [])
            migs.append(
                MigSample(
                    index=c.num(m["index"], "index", na=False, integer=True),
                    uuid=c.str_or_na(m.get("uuid", ""), "uuid"),
                    memory_used_bytes=c.num(m.get("memory.used", 0), "memory.used"),
                    memory_total_bytes=c.num(m.get("memory.total", 0), "memory.total"),
                    ratios=tuple((c.text(k, "prof"), c.num(v, k)) for k, v in mprof.items()),
                )
            )
        procs = g.get("processes", [])
        if isinstance(procs, dict):
            procs = c.na(procs, "processes")
        else:
            rows = []
            for p in c.lst(procs, "processes", MAX_PROCESSES):
                c.obj(
                    p,
                    "processes[]",
                    [
                        "pid",
                        "name",
                        "cmdline",
                        "used_memory",
                        "type",
                        "own",
                        "visible",
                        "used_memory.source",
                        "shared_memory",
                    ],
                    required=["pid"],
                )
                extra = {}
                if "used_memory.source" in p:
                    extra = {
                        "memory_source": c.text(p["used_memory.source"], "used_memory.source")[:80],
                        "shared_memory_bytes": c.num(p.get("shared_memory", 0), "shared_memory"),
                    }
                own, vis = p.get("own", False), p.get("visible", True)
                if not isinstance(own, bool) or not isinstance(vis, bool):
                    c.fail("'own' and 'visible' must be true or false")
                name = c.str_or_na(p.get("name", ""), "name")
                if own and isinstance(name, str):
                    # "this kernel" was the recording kernel, not the one replaying the file
                    name, own = f"{name} (the recording kernel)", False
                rows.append(
                    ProcessSample(
                        pid=c.num(p["pid"], "pid", na=False, integer=True),
                        name=name,
                        cmdline=c.str_or_na(p.get("cmdline", ""), "cmdline"),
                        used_memory_bytes=c.num(p.get("used_memory", 0), "used_memory"),
                        type=c.text(p.get("type", "C"), "type")[:8],
                        own=own,
                        visible=vis,
                        **extra,
                    )
                )
            procs = tuple(rows)
        lost = g.get("lost")
        lost = (
            None
            if lost is None
            else c.na(lost, "lost")
            if isinstance(lost, dict)
            else c.fail("'lost' must be null or a not-available value")
        )
        prof, labels = g.get("prof", {}), g.get("labels", {})
        c.obj(prof, "prof", list(prof) if isinstance(prof, dict) else [])
        c.obj(labels, "labels", list(labels) if isinstance(labels, dict) else [])
        gpus.append(
            GpuSample(
                index=c.num(g["index"], "index", na=False, integer=True),
                name=c.str_or_na(g.get("name", ""), "name"),
                uuid=c.str_or_na(g.get("uuid", ""), "uuid"),
                mig_enabled=mig,
                mig_devices=tuple(migs),
                processes=procs,
                lost=lost,
                host=c.text(g.get("host", ""), "host"),
                ratios=tuple((c.text(k, "prof"), c.num(v, k)) for k, v in prof.items()),
                labels=tuple((c.text(k, "labels"), c.text(v, k)) for k, v in labels.items()),
                **(
                    {"driver_model": _driver_model(c, g["driver_model.current"])}
                    if "driver_model.current" in g
                    else {}
                ),
                **vals,
            )
        )
    h = c.obj(obj["host"], "host", _HOST_KEYS)
    workers = []
    for w in c.lst(h.get("dataloader_workers", []), "dataloader_workers", MAX_PROCESSES):
        c.obj(w, "dataloader_workers[]", ["pid", "cpu.utilization", "memory.rss"], required=["pid"])
        workers.append(
            WorkerSample(
                pid=c.num(w["pid"], "pid", na=False, integer=True),
                cpu_pct=c.num(w.get("cpu.utilization", 0), "cpu.utilization"),
                rss_bytes=c.num(w.get("memory.rss", 0), "memory.rss"),
            )
        )
    missing = {"na": "not recorded", "code": "error"}
    host = HostSample(
        cpu_util_pct=c.num(h.get("cpu.utilization", missing), "cpu.utilization"),
        cpu_count=c.num(h.get("cpu.count", missing), "cpu.count"),
        memory_used_bytes=c.num(h.get("memory.used", missing), "memory.used"),
        memory_total_bytes=c.num(h.get("memory.total", missing), "memory.total"),
        kernel_cpu_pct=c.num(h.get("kernel.cpu.utilization", missing), "kernel.cpu.utilization"),
        workers=tuple(workers),
    )
    t = obj.get("torch", {"na": "not recorded", "code": "error"})
    if isinstance(t, dict) and "na" in t:
        torch_state = c.na(t, "torch")
    else:
        c.obj(t, "torch", _TORCH_KEYS)
        torch_state = TorchSample(*(c.num(t.get(k, missing), k) for k in _TORCH_KEYS))
    seq = c.num(obj.get("seq", lineno), "seq", na=False, integer=True)
    if "timestamp" in obj:
        c.text(obj["timestamp"], "timestamp")
    return Sample(
        seq=seq,
        timestamp_s=float(c.num(obj["timestamp_s"], "timestamp_s", na=False)),
        nvml_status=status,
        gpus=tuple(gpus),
        host=host,
        torch=torch_state,
        hint=c.text(obj.get("hint", ""), "hint"),
    )


def read_trace(
    path: str,
    *,
    max_bytes: int = MAX_TRACE_BYTES,
    max_line_bytes: int = MAX_LINE_BYTES,
    max_samples: int = MAX_SAMPLES,
    tail: bool = False,
):
    """Read and validate a ``%gpuwatch --log`` file: ``(header dict, [Sample, ...])``.

    Only JSON is parsed (no pickle, no eval); ``NaN``/``Infinity`` are rejected; the file, each
    line and the number of samples are bounded; the first line must be the
    ``{"cudamagic_trace": 1, ...}`` header; every later line must match the sample schema.

    Args:
        path: the trace file.
        max_bytes: largest file read whole.
        max_line_bytes: longest line accepted.
        max_samples: most samples accepted.
        tail: for a file larger than ``max_bytes`` (a long ``--log`` run), read the header and then
            only the samples in the last ``max_bytes`` bytes, instead of refusing the file; the
            header gets ``"skipped_bytes"`` (how much of the start was left out). Line numbers in
            errors are then counted from the first line read after the skip.

    Raises:
        TraceError: with the file, the line number and what is wrong.
    """
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with fh:
        size = os.fstat(fh.fileno()).st_size
        skip = 0
        if size > max_bytes:
            if not tail:
                raise TraceError(
                    f"{path} is {size} bytes, more than the {max_bytes}-byte limit for a replay "
                    "file"
                )
            skip = size - max_bytes
        samples = []
        header = None
        lines = iter(lambda: fh.readline(max_line_bytes + 1), b"")
        if skip:
            first = fh.readline(max_line_bytes + 1)
            fh.seek(max(skip, len(first)))
            if fh.tell() > len(first):
                fh.readline()  # the rest of a sample line cut by the seek
            lines = itertools.chain([first], lines)
        for lineno, raw in enumerate(lines, start=1):
            if len(raw) > max_line_bytes:
                raise TraceError(f"{path}, line {lineno}: longer than {max_line_bytes} bytes")
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
            except UnicodeDecodeError as exc:
                raise TraceError(f"{path}, line {lineno}: not UTF-8 text") from exc
            except (ValueError, RecursionError) as exc:
                raise TraceError(
                    f"{path}, line {lineno}: not valid JSON ({str(exc)[:120]})"
                ) from exc
            if header is None:
                if not (isinstance(obj, dict) and obj.get("cudamagic_trace") == TRACE_VERSION):
                    raise TraceError(
                        f"{path}, line {lineno}: the first line must be the trace header "
                        '{"cudamagic_trace": 1, ...} that `%gpuwatch --log` writes'
                    )
                for key in ("source", "created"):
                    if key in obj and (not isinstance(obj[key], str) or len(obj[key]) > MAX_STR):
                        raise TraceError(
                            f"{path}, line {lineno}: header {key!r} must be a short string"
                        )
                header = dict(obj, skipped_bytes=skip) if skip else obj
                continue
            if len(samples) >= max_samples:
                raise TraceError(f"{path}: more than {max_samples} samples")
            samples.append(sample_from_json(obj, path, lineno))
    if header is None:
        raise TraceError(f"{path} is empty: no trace header and no samples")
    if not samples:
        raise TraceError(f"{path} has a header but no samples")
    return header, samples
