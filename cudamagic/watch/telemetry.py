"""Telemetry for ``%gpuwatch``: immutable samples, the sampler thread, JSON-lines logs and their replay.

A :class:`Sample` is one reading of every visible GPU (through :mod:`cudamagic.nvml`,
the only NVML seam), of the host (``psutil``: CPU %, RAM, this kernel's DataLoader
workers) and of this kernel's PyTorch caching allocator. Attribute names carry the
unit (``memory_used_bytes``, ``power_draw_mw``); values are raw NVML units. A value
that could not be read is an :class:`~cudamagic.values.NA` with the reason.

Records (``history`` rows, log lines) use ``nvidia-smi --query-gpu`` key names
(``utilization.gpu``, ``memory.used``...) with the *raw* units of
:data:`cudamagic.nvml.FIELD_UNITS` (bytes and mW, not MiB and W).

The :class:`Sampler` runs one daemon thread driven by ``Event.wait(interval)``;
clock and wait are injectable so tests run it with a fake clock. It never prints
and never raises: failures are recorded in ``Sampler.error``.

Nothing here imports IPython or ipywidgets. ``torch`` is only looked at when the
user already imported it *and* initialised CUDA (``torch.cuda.is_initialized()``):
the monitor never creates a CUDA context.
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass

from ..core import nvml
from ..core.na import NA, is_na, jsonable

TRACE_VERSION = 1

#: nvidia-smi field name -> attribute name of :class:`GpuSample` (unit in the name).
GPU_FIELDS = {
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
    "memory.used": "memory_used_bytes",
    "memory.total": "memory_total_bytes",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_draw_mw",
    "power.limit": "power_limit_mw",
    "fan.speed": "fan_speed_pct",
    "clocks.sm": "clock_sm_mhz",
    "clocks.mem": "clock_mem_mhz",
    "pstate": "pstate",
    "clocks_event_reasons.active": "throttle_reasons_mask",
}

OTHER_NAMESPACE = NA("process in another PID namespace (container): run the container with --pid=host "
                     "to see its name", "other_namespace")
MIG_UTIL = NA("not reported in MIG mode", "mig")


class TraceError(ValueError):
    """A log/replay file that is not a valid ``%gpuwatch`` trace (the message says where and why)."""


class EndOfTrace(Exception):
    """Raised by :meth:`ReplaySource.read` after the last recorded sample."""


# ---- immutable samples ------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessSample:
    """One process on a GPU (``nvmlDeviceGetComputeRunningProcesses`` + graphics processes).

    Attributes:
        pid: process id as NVML reports it (the host's PID namespace).
        name: executable name from ``psutil``, or NA (another PID namespace, no permission).
        cmdline: command line (truncated to 200 characters), or NA.
        used_memory_bytes: GPU memory of the process in bytes (``used_gpu_memory``), or NA.
        type: ``"C"`` compute, ``"G"`` graphics, ``"C+G"``.
        own: True for this kernel's own process.
        visible: False when the pid does not exist here (``psutil.NoSuchProcess``, F04).
    """

    pid: int
    name: object
    cmdline: object
    used_memory_bytes: object
    type: str = "C"
    own: bool = False
    visible: bool = True


@dataclass(frozen=True)
class MigSample:
    """One MIG instance: 0-based slot index, ``MIG-...`` UUID, memory in bytes (F06)."""

    index: int
    uuid: object
    memory_used_bytes: object
    memory_total_bytes: object


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. Index is the 0-based NVML index (``nvidia-smi`` order).

    Units: ``*_pct`` percent (0-100), ``*_bytes`` bytes, ``temperature_c`` degrees C,
    ``*_mw`` milliwatts, ``*_mhz`` MHz, ``pstate`` P-state number (0 = max performance),
    ``throttle_reasons_mask`` the ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask.
    ``lost`` is an NA once the GPU fell off the bus, else ``None``. ``processes`` is a
    tuple of :class:`ProcessSample` or an NA.

    From a cluster source (``--source prometheus://...``): ``host`` is the exporter's host name (``""`` for
    this machine), ``ratios`` the DCGM profiling ratios as ``((name, 0-1 float or NA), ...)``, ``labels``
    the job labels ``((label, value), ...)`` (pod, namespace, hpc_job).
    """

    index: int
    name: object
    uuid: object
    gpu_util_pct: object
    mem_util_pct: object
    memory_used_bytes: object
    memory_total_bytes: object
    temperature_c: object
    power_draw_mw: object
    power_limit_mw: object
    fan_speed_pct: object
    clock_sm_mhz: object
    clock_mem_mhz: object
    pstate: object
    throttle_reasons_mask: object
    mig_enabled: object = False
    mig_devices: tuple = ()
    processes: object = ()
    lost: object = None
    host: str = ""
    ratios: tuple = ()
    labels: tuple = ()

    @property
    def throttle_reasons(self):
        """Decoded clock-event reasons: list of words (``[]`` = none) or NA."""
        return nvml.decode_throttle_reasons(self.throttle_reasons_mask)

    def get(self, key: str):
        """A value by its nvidia-smi name (``"memory.used"``) or attribute name."""
        return getattr(self, GPU_FIELDS.get(key, key))


@dataclass(frozen=True)
class WorkerSample:
    """One DataLoader worker (a child process of this kernel): pid, CPU % of one core, RSS bytes."""

    pid: int
    cpu_pct: object
    rss_bytes: object


@dataclass(frozen=True)
class HostSample:
    """The host: ``cpu_util_pct`` all CPUs (0-100), ``kernel_cpu_pct`` this process in % of one core,
    RAM in bytes, ``workers`` this kernel's DataLoader worker processes."""

    cpu_util_pct: object
    cpu_count: object
    memory_used_bytes: object
    memory_total_bytes: object
    kernel_cpu_pct: object
    workers: tuple = ()


@dataclass(frozen=True)
class TorchSample:
    """This kernel's PyTorch caching allocator, summed over its CUDA devices (bytes).

    ``nvml_process_bytes`` is what NVML says this process uses on all GPUs; ``gap_bytes``
    is that minus ``reserved_bytes`` (the CUDA context and other libraries), or NA.
    """

    allocated_bytes: object
    reserved_bytes: object
    peak_bytes: object
    nvml_process_bytes: object = NA("not measured", "error")
    gap_bytes: object = NA("not measured", "error")


@dataclass(frozen=True)
class Sample:
    """One complete reading. ``timestamp_s`` is wall-clock seconds since the epoch (``time.time``).

    ``nvml_status`` is ``None`` when NVML works, else the NA saying why there is no GPU data (F01/F02).
    ``torch`` is a :class:`TorchSample` or an NA (PyTorch not imported / CUDA not initialised).
    ``hint`` is a plain-words diagnosis or ``""``.
    """

    seq: int
    timestamp_s: float
    nvml_status: object
    gpus: tuple
    host: HostSample
    torch: object
    hint: str = ""

    @property
    def timestamp(self) -> str:
        """ISO 8601 local time with milliseconds (nvidia-smi's ``timestamp`` column)."""
        return _iso(self.timestamp_s)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).isoformat(timespec="milliseconds")


# ---- host -------------------------------------------------------------------------------

def _cpu_busy_total(times):
    total = sum(times)
    idle = getattr(times, "idle", 0.0) + getattr(times, "iowait", 0.0)
    return total - idle, total


class HostReader:
    """Reads the host with ``psutil``; keeps the previous CPU times so percentages are deltas.

    CPU % needs two readings at least 0.05 s apart; before that it is NA. DataLoader workers
    are this kernel's child processes that run Python's multiprocessing (``spawn``/``forkserver``
    command lines) or share the kernel's command line (``fork``).
    """

    def __init__(self, pid: int | None = None, clock=time.monotonic):
        import psutil

        self._psutil = psutil
        self._clock = clock
        self.pid = os.getpid() if pid is None else pid
        try:
            self._proc = psutil.Process(self.pid)
            self._cmdline = self._proc.cmdline()
        except Exception:
            self._proc, self._cmdline = None, []
        self._last = None
        self._last_child = {}
        self._known = {}
        self._cpu_count = psutil.cpu_count() or NA("unknown", "error")
        self.prime()

    def prime(self):
        """Take the reference reading that the next :meth:`read` compares against."""
        try:
            busy, total = _cpu_busy_total(self._psutil.cpu_times())
            own = sum(self._proc.cpu_times()[:2]) if self._proc is not None else None
        except Exception:
            busy = total = own = None
        self._last = (self._clock(), busy, total, own)

    def _child_pids(self):
        """Pids of direct children. Linux: ``/proc/PID/task/*/children`` (cheap); else psutil's full scan."""
        import glob

        files = glob.glob(f"/proc/{self.pid}/task/*/children")
        if not files:
            return {c.pid for c in self._proc.children(recursive=False)}
        pids = set()
        for name in files:
            try:
                with open(name, encoding="ascii") as fh:
                    pids.update(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                continue
        return pids

    def _workers(self, dt):
        if self._proc is None:
            return ()
        try:
            pids = self._child_pids()
        except Exception:
            return ()
        known = {}
        out, seen = [], {}
        for pid in sorted(pids):
            entry = self._known.get(pid)
            if entry is None:  # classify once per pid: the command line does not change
                try:
                    child = self._psutil.Process(pid)
                    cmd = child.cmdline()
                    entry = (child, cmd == self._cmdline or any("multiprocessing" in c for c in cmd))
                except Exception:
                    continue
            known[pid] = entry
            child, is_worker = entry
            if not is_worker:
                continue
            try:
                with child.oneshot():
                    cpu = sum(child.cpu_times()[:2])
                    rss = int(child.memory_info().rss)
            except Exception:
                continue
            prev = self._last_child.get(pid)
            seen[pid] = cpu
            pct = (NA("needs two readings", "warming_up") if prev is None or dt <= 0
                   else round(max(0.0, 100.0 * (cpu - prev) / dt), 1))
            out.append(WorkerSample(pid=pid, cpu_pct=pct, rss_bytes=rss))
        self._known = known
        self._last_child = seen
        return tuple(out)

    def read(self) -> HostSample:
        """One :class:`HostSample` (never raises)."""
        ps = self._psutil
        now = self._clock()
        t0, busy0, total0, own0 = self._last
        dt = now - t0
        warming = NA("needs two readings at least 0.05 s apart", "warming_up")
        try:
            busy, total = _cpu_busy_total(ps.cpu_times())
            cpu = warming if busy0 is None or dt < 0.05 or total <= total0 else \
                round(min(100.0, max(0.0, 100.0 * (busy - busy0) / (total - total0))), 1)
        except Exception as exc:
            busy = total = None
            cpu = NA(f"psutil.cpu_times failed: {exc}", "error")
        try:
            own = sum(self._proc.cpu_times()[:2]) if self._proc is not None else None
            kcpu = warming if own is None or own0 is None or dt < 0.05 else \
                round(max(0.0, 100.0 * (own - own0) / dt), 1)
        except Exception as exc:
            own, kcpu = None, NA(f"psutil failed: {exc}", "error")
        try:
            vm = ps.virtual_memory()
            used, tot = int(vm.total - vm.available), int(vm.total)
        except Exception as exc:
            used = tot = NA(f"psutil.virtual_memory failed: {exc}", "error")
        workers = self._workers(dt)
        if dt >= 0.05 or busy0 is None:
            self._last = (now, busy, total, own)
        return HostSample(cpu_util_pct=cpu, cpu_count=self._cpu_count,
                          memory_used_bytes=used, memory_total_bytes=tot, kernel_cpu_pct=kcpu,
                          workers=workers)


# ---- PyTorch allocator (never creates a CUDA context) ------------------------------------

def read_torch_allocator():
    """This kernel's PyTorch caching allocator, summed over CUDA devices, or NA.

    Reads ``torch.cuda.memory_stats(i)`` (``allocated_bytes.all.current``,
    ``reserved_bytes.all.current``, ``allocated_bytes.all.peak``) only if the user
    already imported torch and ``torch.cuda.is_initialized()`` is True.

    Returns:
        TorchSample (bytes; ``nvml_process_bytes``/``gap_bytes`` filled in by the source) or NA.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return NA("PyTorch is not imported in this kernel", "no_torch")
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():
            return NA("CUDA is not initialised in this kernel (the monitor never creates a CUDA context)",
                      "not_initialized")
        alloc = reserved = peak = 0
        for i in range(cuda.device_count()):
            st = cuda.memory_stats(i)
            alloc += int(st.get("allocated_bytes.all.current", 0))
            reserved += int(st.get("reserved_bytes.all.current", 0))
            peak += int(st.get("allocated_bytes.all.peak", 0))
    except Exception as exc:
        return NA(f"PyTorch allocator not readable: {type(exc).__name__}: {exc}", "error")
    return TorchSample(allocated_bytes=alloc, reserved_bytes=reserved, peak_bytes=peak)


# ---- processes ----------------------------------------------------------------------------

def process_info(pid: int):
    """``(name, cmdline, visible)`` for ``pid`` via psutil; NA name when it is not visible here (F04)."""
    import psutil

    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name()
            try:
                cmd = " ".join(p.cmdline())[:200]
            except psutil.AccessDenied:
                cmd = NA("permission denied", "no_permission")
        return name, cmd, True
    except psutil.NoSuchProcess:
        return OTHER_NAMESPACE, OTHER_NAMESPACE, False
    except psutil.AccessDenied:
        na = NA("permission denied reading the process", "no_permission")
        return na, na, True
    except Exception as exc:
        na = NA(f"psutil failed: {exc}", "error")
        return na, na, True


def idle_gpu_hint(gpus, host: HostSample, torch_state, own_on_gpu: bool) -> str:
    """Plain-words hint when the GPU sits idle while the CPU side is saturated, else ``""``.

    Fires only when this kernel uses a GPU (CUDA initialised, or its pid listed by NVML), every
    readable GPU is at most 30 % busy, and either all host CPUs are at least 90 % busy or this
    kernel's process uses a full core with no DataLoader workers.
    """
    if not (own_on_gpu or isinstance(torch_state, TorchSample)):
        return ""
    utils = [g.gpu_util_pct for g in gpus if not is_na(g.gpu_util_pct)]
    if not utils or max(utils) > 30:
        return ""
    cpu, kcpu = host.cpu_util_pct, host.kernel_cpu_pct
    if not is_na(cpu) and cpu >= 90:
        return (f"The GPU is nearly idle ({max(utils)} %) while the host CPUs are {cpu:.0f} % busy: the GPU is "
                "probably waiting for data. More DataLoader workers (num_workers), pin_memory=True or lighter "
                "CPU preprocessing usually help.")
    if not is_na(kcpu) and kcpu >= 90 and not host.workers:
        return (f"The GPU is nearly idle ({max(utils)} %) while this kernel's process keeps a CPU core busy "
                f"({kcpu:.0f} %) and has no DataLoader workers: loading data in the main process is probably "
                "the bottleneck. Try DataLoader(..., num_workers=4, pin_memory=True).")
    return ""


# ---- sources ------------------------------------------------------------------------------

_READ_FIELDS = [f for f in GPU_FIELDS if f not in ("memory.total",)] + ["memory.total"]


class LiveSource:
    """Reads the live machine: NVML (through :mod:`cudamagic.nvml`), psutil and the torch allocator.

    Args:
        devices: 0-based NVML indices to read, or None for all.
        host: a :class:`HostReader` (default: a new one for this process).
        torch_reader: callable returning a TorchSample or NA (default :func:`read_torch_allocator`).
        proc_info: callable ``pid -> (name, cmdline, visible)`` (default :func:`process_info`).
        pid: this kernel's pid (default ``os.getpid()``).

    NVML faults never raise: no driver gives ``nvml_status`` NA and no GPUs (F01); unsupported
    fields are remembered by :class:`cudamagic.nvml.Device` (F03); a lost GPU is marked lost.
    """

    kind = "live"

    def __init__(self, devices=None, *, host=None, torch_reader=read_torch_allocator, proc_info=process_info,
                 pid=None):
        self.pid = os.getpid() if pid is None else pid
        self.status = nvml.init()
        count = 0
        if self.status is None:
            count = nvml.device_count()
            if is_na(count):
                self.status, count = count, 0
        self.device_count = count
        self.devices = list(range(count)) if devices is None else [int(d) for d in devices]
        self.host = host if host is not None else HostReader(self.pid)
        self.torch_reader = torch_reader
        self.proc_info = proc_info
        self._static = {}      # index -> (name, uuid, mig_enabled)
        self._names = {}       # pid -> (name, cmdline, visible), pruned to pids still listed
        self.label = "live"

    def _static_facts(self, dev):
        facts = self._static.get(dev.index)
        if facts is None:
            got = dev.read(["name", "uuid", "mig.mode.current"])
            mig = got["mig.mode.current"]
            mig = (mig == "Enabled") if not is_na(mig) else False
            facts = (got["name"], got["uuid"], mig)
            if dev.lost is None:
                self._static[dev.index] = facts
        return facts

    def _processes(self, dev, names):
        procs = dev.processes()
        if is_na(procs):
            return procs
        rows = []
        for p in procs:
            pid = p["pid"]
            info = self._names.get(pid) or self.proc_info(pid)
            names[pid] = info
            rows.append(ProcessSample(pid=pid, name=info[0], cmdline=info[1], used_memory_bytes=p["used_memory"],
                                      type=p.get("type", "C"), own=(pid == self.pid), visible=bool(info[2])))
        return tuple(rows)

    def read_gpu(self, index, names) -> GpuSample:
        """One :class:`GpuSample` for NVML index ``index`` (never raises)."""
        dev = nvml.device(index)
        name, uuid, mig = self._static_facts(dev)
        vals = dev.read(_READ_FIELDS)
        mig_devs = ()
        if mig:
            vals["utilization.gpu"] = vals["utilization.memory"] = MIG_UTIL
            got = dev.mig_devices()
            if not is_na(got):
                mig_devs = tuple(MigSample(index=m["index"], uuid=m["uuid"], memory_used_bytes=m["memory.used"],
                                           memory_total_bytes=m["memory.total"]) for m in got)
        procs = self._processes(dev, names) if dev.lost is None else dev.lost
        return GpuSample(index=index, name=name, uuid=uuid, mig_enabled=mig, mig_devices=mig_devs,
                         processes=procs, lost=dev.lost,
                         **{attr: vals[key] for key, attr in GPU_FIELDS.items()})

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """Read everything once."""
        names = {}
        gpus = tuple(self.read_gpu(i, names) for i in self.devices) if self.status is None else ()
        self._names = names
        host = self.host.read()
        torch_state = self.torch_reader()
        own = [p.used_memory_bytes for g in gpus if not is_na(g.processes) for p in g.processes if p.own]
        if isinstance(torch_state, TorchSample):
            if own and not any(is_na(b) for b in own):
                nv = sum(own)
                gap = nv - torch_state.reserved_bytes if not is_na(torch_state.reserved_bytes) else \
                    torch_state.reserved_bytes
            else:
                nv = gap = NA("this kernel's pid is not in NVML's process list (another PID namespace, "
                              "or NVML unavailable)", "other_namespace")
            torch_state = TorchSample(torch_state.allocated_bytes, torch_state.reserved_bytes,
                                      torch_state.peak_bytes, nv, gap)
        hint = idle_gpu_hint(gpus, host, torch_state, bool(own))
        return Sample(seq=seq, timestamp_s=timestamp_s, nvml_status=self.status, gpus=gpus, host=host,
                      torch=torch_state, hint=hint)


class ReplaySource:
    """Plays the samples of a trace file (see :func:`read_trace`) one per :meth:`read`."""

    kind = "replay"

    def __init__(self, path: str):
        self.path = path
        self.header, self.samples = read_trace(path, max_bytes=MAX_TRACE_BYTES, tail=True)
        self.pos = 0
        self.devices = sorted({g.index for s in self.samples for g in s.gpus})
        self.device_count = len(self.devices)
        self.status = self.samples[0].nvml_status if self.samples else None
        skipped = self.header.get("skipped_bytes", 0)
        # a long --log run: only its end fits the replay memory bound; say so in the label
        self.label = f"replay of {path}" + (f" (last {len(self.samples)} samples)" if skipped else "")

    def read(self, seq: int, timestamp_s: float) -> Sample:
        """The next recorded sample (its own recorded timestamp); :class:`EndOfTrace` after the last."""
        if self.pos >= len(self.samples):
            raise EndOfTrace()
        s = self.samples[self.pos]
        self.pos += 1
        return s


# ---- JSON (log lines and history rows) ----------------------------------------------------

def _na_or(v):
    return v.to_json() if is_na(v) else v


def sample_to_json(s: Sample) -> dict:
    """One log line's object: nested, nvidia-smi key names, raw units (bytes, mW), NA as ``{"na", "code"}``."""
    gpus = []
    for g in s.gpus:
        d = {"index": g.index, "name": g.name, "uuid": g.uuid}
        for key, attr in GPU_FIELDS.items():
            d[key] = getattr(g, attr)
        d["mig.mode.current"] = g.mig_enabled if is_na(g.mig_enabled) else ("Enabled" if g.mig_enabled else "Disabled")
        d["mig.devices"] = [{"index": m.index, "uuid": m.uuid, "memory.used": m.memory_used_bytes,
                             "memory.total": m.memory_total_bytes} for m in g.mig_devices]
        d["processes"] = g.processes if is_na(g.processes) else [
            {"pid": p.pid, "name": p.name, "cmdline": p.cmdline, "used_memory": p.used_memory_bytes,
             "type": p.type, "own": p.own, "visible": p.visible} for p in g.processes]
        d["lost"] = g.lost
        if g.host or g.ratios or g.labels:  # cluster sources only: live traces keep their old shape
            d["host"] = g.host
            d["prof"] = dict(g.ratios)
            d["labels"] = dict(g.labels)
        gpus.append(d)
    h = s.host
    t = s.torch
    return jsonable({
        "seq": s.seq, "timestamp": s.timestamp, "timestamp_s": s.timestamp_s,
        "nvml.status": "ok" if s.nvml_status is None else s.nvml_status,
        "gpus": gpus,
        "host": {"cpu.utilization": h.cpu_util_pct, "cpu.count": h.cpu_count, "memory.used": h.memory_used_bytes,
                 "memory.total": h.memory_total_bytes, "kernel.cpu.utilization": h.kernel_cpu_pct,
                 "dataloader_workers": [{"pid": w.pid, "cpu.utilization": w.cpu_pct, "memory.rss": w.rss_bytes}
                                        for w in h.workers]},
        "torch": t if is_na(t) else {"allocated": t.allocated_bytes, "reserved": t.reserved_bytes,
                                     "peak": t.peak_bytes, "nvml.process_memory": t.nvml_process_bytes,
                                     "gap": t.gap_bytes},
        "hint": s.hint,
    })


def sample_rows(s: Sample) -> list:
    """Flat records for ``watch.history``: one dict per GPU (one host-only dict when there is no GPU).

    Keys are nvidia-smi names (``timestamp``, ``index``, ``name``, ``utilization.gpu``, ``memory.used``
    [bytes], ``power.draw`` [mW] ...) plus ``host.*`` and ``torch.*``. Every value is a plain scalar
    (int, float, str or bool), so ``pandas.DataFrame(rows)`` gets numeric columns: a number that could
    not be read is ``float('nan')`` and a text that could not be read is ``"N/A"``; why is in the
    ``na_reasons`` column (``"fan.speed, power.draw: not supported on this GPU"``, ``""`` when all
    were read). :attr:`GpuWatch.samples` keeps the :class:`~cudamagic.values.NA` objects themselves.
    """
    t = s.torch
    common = {
        "timestamp": s.timestamp, "timestamp_s": s.timestamp_s, "seq": s.seq,
        "host.cpu.utilization": s.host.cpu_util_pct, "host.memory.used": s.host.memory_used_bytes,
        "host.memory.total": s.host.memory_total_bytes, "host.kernel.cpu.utilization": s.host.kernel_cpu_pct,
        "host.dataloader_workers": len(s.host.workers),
        "torch.allocated": t if is_na(t) else t.allocated_bytes,
        "torch.reserved": t if is_na(t) else t.reserved_bytes,
        "torch.peak": t if is_na(t) else t.peak_bytes,
        "torch.gap": t if is_na(t) else t.gap_bytes,
    }
    if not s.gpus:
        status = s.nvml_status if s.nvml_status is not None else NA("no GPU selected", "error")
        return [_flat(dict(common, index=status))]
    rows = []
    for g in s.gpus:
        r = dict(common)
        r.update({"index": g.index, "name": g.name, "uuid": g.uuid})
        if g.host or g.ratios:  # a cluster GPU: its host, not this kernel's host.* / torch.* columns
            r = {k: v for k, v in r.items() if not k.startswith(("host.", "torch."))}
            r["host"] = g.host
            r.update({f"prof.{k}": v for k, v in g.ratios})
        for key, attr in GPU_FIELDS.items():
            r[key] = getattr(g, attr)
        reasons = g.throttle_reasons
        r["clocks_event_reasons"] = reasons if is_na(reasons) else ", ".join(reasons)
        r["mig.mode.current"] = "Enabled" if g.mig_enabled is True else "Disabled"
        r["processes.count"] = g.processes if is_na(g.processes) else len(g.processes)
        r["lost"] = g.lost is not None
        rows.append(_flat(r))
    return rows


_TEXT_KEYS = frozenset({"timestamp", "name", "uuid", "host", "clocks_event_reasons", "mig.mode.current"})


def _flat(row: dict) -> dict:
    """NA values -> NaN (numbers) or "N/A" (text), their reasons gathered in ``na_reasons``."""
    by_reason = {}
    for key, v in row.items():
        if is_na(v):
            by_reason.setdefault(v.reason, []).append(key)
            row[key] = "N/A" if key in _TEXT_KEYS else math.nan
    row["na_reasons"] = "; ".join(f"{', '.join(keys)}: {reason}" for reason, keys in by_reason.items())
    return row


# ---- trace files: writer and strict reader ------------------------------------------------

MAX_TRACE_BYTES = 64 * 1024 ** 2
MAX_LINE_BYTES = 1024 ** 2
MAX_SAMPLES = 500_000
MAX_GPUS = 1024
MAX_PROCESSES = 4096
MAX_STR = 4096


def trace_header(source: str, interval_s: float | None = None) -> dict:
    """The first line of a trace: ``{"cudamagic_trace": 1, "source": ..., "created": ..., "units": ...}``."""
    from .. import __version__

    head = {"cudamagic_trace": TRACE_VERSION, "source": source, "created": _iso(time.time()),
            "cudamagic_version": __version__, "units": dict(nvml.FIELD_UNITS)}
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
                    ok = isinstance(json.loads(first), dict) and json.loads(first).get("cudamagic_trace") == TRACE_VERSION
                except ValueError:
                    ok = False
                if not ok:
                    raise TraceError(f"{path} exists and is not a cudamagic trace (its first line is not a "
                                     '{"cudamagic_trace": 1, ...} header); refusing to append to it')
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


def _reject_constant(name):
    raise ValueError(f"{name} is not allowed")


class _Checker:
    """Schema checks for one line; raises TraceError naming the line and the key."""

    def __init__(self, path, lineno):
        self.where = f"{path}, line {lineno}"

    def fail(self, what):
        raise TraceError(f"{self.where}: {what}")

    def na(self, v, key):
        if set(v) - {"na", "code"} or not isinstance(v.get("na"), str) or not isinstance(v.get("code", ""), str):
            self.fail(f"{key!r}: an object here must be a not-available value {{\"na\": reason, \"code\": code}}")
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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
            self.fail(f"{key!r} must be a {'whole ' if integer else ''}number{' or a not-available value' if na else ''}, "
                      f"not {json.dumps(v)[:40]}")
        if isinstance(v, float) and not math.isfinite(v):
            self.fail(f"{key!r} must be finite")
        if abs(v) > 2 ** 63:
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


_GPU_KEYS = ["index", "name", "uuid", *GPU_FIELDS, "mig.mode.current", "mig.devices", "processes", "lost",
             "host", "prof", "labels"]
_SAMPLE_KEYS = ["seq", "timestamp", "timestamp_s", "nvml.status", "gpus", "host", "torch", "hint"]
_HOST_KEYS = ["cpu.utilization", "cpu.count", "memory.used", "memory.total", "kernel.cpu.utilization",
              "dataloader_workers"]
_TORCH_KEYS = ["allocated", "reserved", "peak", "nvml.process_memory", "gap"]


def sample_from_json(obj, where: str = "<trace>", lineno: int = 0) -> Sample:
    """Validate one decoded log line and rebuild the :class:`Sample` (strict: unknown keys are rejected)."""
    c = _Checker(where, lineno)
    c.obj(obj, "sample", _SAMPLE_KEYS, required=["timestamp_s", "gpus", "host"])
    status = obj.get("nvml.status", "ok")
    status = None if status == "ok" else (c.na(status, "nvml.status") if isinstance(status, dict)
                                          else c.fail("'nvml.status' must be \"ok\" or a not-available value"))
    gpus = []
    for g in c.lst(obj["gpus"], "gpus", MAX_GPUS):
        c.obj(g, "gpus[]", _GPU_KEYS, required=["index"])
        vals = {attr: c.num(g.get(key, {"na": "not recorded", "code": "error"}), key)
                for key, attr in GPU_FIELDS.items()}
        mig = g.get("mig.mode.current", "Disabled")
        mig = c.na(mig, "mig.mode.current") if isinstance(mig, dict) else (c.text(mig, "mig.mode.current") == "Enabled")
        migs = []
        for m in c.lst(g.get("mig.devices", []), "mig.devices", 64):
            c.obj(m, "mig.devices[]", ["index", "uuid", "memory.used", "memory.total"], required=["index"])
            migs.append(MigSample(index=c.num(m["index"], "index", na=False, integer=True),
                                  uuid=c.str_or_na(m.get("uuid", ""), "uuid"),
                                  memory_used_bytes=c.num(m.get("memory.used", 0), "memory.used"),
                                  memory_total_bytes=c.num(m.get("memory.total", 0), "memory.total")))
        procs = g.get("processes", [])
        if isinstance(procs, dict):
            procs = c.na(procs, "processes")
        else:
            rows = []
            for p in c.lst(procs, "processes", MAX_PROCESSES):
                c.obj(p, "processes[]", ["pid", "name", "cmdline", "used_memory", "type", "own", "visible"],
                      required=["pid"])
                own, vis = p.get("own", False), p.get("visible", True)
                if not isinstance(own, bool) or not isinstance(vis, bool):
                    c.fail("'own' and 'visible' must be true or false")
                name = c.str_or_na(p.get("name", ""), "name")
                if own and isinstance(name, str):
                    # "this kernel" was the recording kernel, not the one replaying the file
                    name, own = f"{name} (the recording kernel)", False
                rows.append(ProcessSample(pid=c.num(p["pid"], "pid", na=False, integer=True),
                                          name=name,
                                          cmdline=c.str_or_na(p.get("cmdline", ""), "cmdline"),
                                          used_memory_bytes=c.num(p.get("used_memory", 0), "used_memory"),
                                          type=c.text(p.get("type", "C"), "type")[:8], own=own, visible=vis))
            procs = tuple(rows)
        lost = g.get("lost")
        lost = None if lost is None else c.na(lost, "lost") if isinstance(lost, dict) else c.fail(
            "'lost' must be null or a not-available value")
        prof, labels = g.get("prof", {}), g.get("labels", {})
        c.obj(prof, "prof", list(prof))
        c.obj(labels, "labels", list(labels))
        gpus.append(GpuSample(index=c.num(g["index"], "index", na=False, integer=True),
                              name=c.str_or_na(g.get("name", ""), "name"), uuid=c.str_or_na(g.get("uuid", ""), "uuid"),
                              mig_enabled=mig, mig_devices=tuple(migs), processes=procs, lost=lost,
                              host=c.text(g.get("host", ""), "host"),
                              ratios=tuple((c.text(k, "prof"), c.num(v, k)) for k, v in prof.items()),
                              labels=tuple((c.text(k, "labels"), c.text(v, k)) for k, v in labels.items()),
                              **vals))
    h = c.obj(obj["host"], "host", _HOST_KEYS)
    workers = []
    for w in c.lst(h.get("dataloader_workers", []), "dataloader_workers", MAX_PROCESSES):
        c.obj(w, "dataloader_workers[]", ["pid", "cpu.utilization", "memory.rss"], required=["pid"])
        workers.append(WorkerSample(pid=c.num(w["pid"], "pid", na=False, integer=True),
                                    cpu_pct=c.num(w.get("cpu.utilization", 0), "cpu.utilization"),
                                    rss_bytes=c.num(w.get("memory.rss", 0), "memory.rss")))
    missing = {"na": "not recorded", "code": "error"}
    host = HostSample(cpu_util_pct=c.num(h.get("cpu.utilization", missing), "cpu.utilization"),
                      cpu_count=c.num(h.get("cpu.count", missing), "cpu.count"),
                      memory_used_bytes=c.num(h.get("memory.used", missing), "memory.used"),
                      memory_total_bytes=c.num(h.get("memory.total", missing), "memory.total"),
                      kernel_cpu_pct=c.num(h.get("kernel.cpu.utilization", missing), "kernel.cpu.utilization"),
                      workers=tuple(workers))
    t = obj.get("torch", {"na": "not recorded", "code": "error"})
    if isinstance(t, dict) and "na" in t:
        torch_state = c.na(t, "torch")
    else:
        c.obj(t, "torch", _TORCH_KEYS)
        torch_state = TorchSample(*(c.num(t.get(k, missing), k) for k in _TORCH_KEYS))
    seq = c.num(obj.get("seq", lineno), "seq", na=False, integer=True)
    if "timestamp" in obj:
        c.text(obj["timestamp"], "timestamp")
    return Sample(seq=seq, timestamp_s=float(c.num(obj["timestamp_s"], "timestamp_s", na=False)),
                  nvml_status=status, gpus=tuple(gpus), host=host, torch=torch_state,
                  hint=c.text(obj.get("hint", ""), "hint"))


def _chain_first(first, rest):
    yield first
    yield from rest


def read_trace(path: str, *, max_bytes: int = MAX_TRACE_BYTES, max_line_bytes: int = MAX_LINE_BYTES,
               max_samples: int = MAX_SAMPLES, tail: bool = False):
    """Read and validate a ``%gpuwatch --log`` file: ``(header dict, [Sample, ...])``.

    Only JSON is parsed (no pickle, no eval); ``NaN``/``Infinity`` are rejected; the file, each
    line and the number of samples are bounded; the first line must be the
    ``{"cudamagic_trace": 1, ...}`` header; every later line must match the sample schema.

    Args:
        tail: for a file larger than ``max_bytes`` (a long ``--log`` run), read the header and then
            only the samples in the last ``max_bytes`` bytes, instead of refusing the file; the header
            gets ``"skipped_bytes"`` (how much of the start was left out). Line numbers in errors are
            then counted from the first line read after the skip.

    Raises:
        TraceError: with the file, the line number and what is wrong.
    """
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    skip = 0
    if size > max_bytes:
        if not tail:
            raise TraceError(f"{path} is {size} bytes, more than the {max_bytes}-byte limit for a replay file")
        skip = size - max_bytes
    samples = []
    header = None
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with fh:
        lines = iter(lambda: fh.readline(max_line_bytes + 1), b"")
        if skip:
            first = fh.readline(max_line_bytes + 1)
            fh.seek(max(skip, len(first)))
            if fh.tell() > len(first):
                fh.readline()  # the rest of a sample line cut by the seek
            lines = _chain_first(first, lines)
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
                raise TraceError(f"{path}, line {lineno}: not valid JSON ({str(exc)[:120]})") from exc
            if header is None:
                if not (isinstance(obj, dict) and obj.get("cudamagic_trace") == TRACE_VERSION):
                    raise TraceError(f"{path}, line {lineno}: the first line must be the trace header "
                                     '{"cudamagic_trace": 1, ...} that `%gpuwatch --log` writes')
                for key in ("source", "created"):
                    if key in obj and (not isinstance(obj[key], str) or len(obj[key]) > MAX_STR):
                        raise TraceError(f"{path}, line {lineno}: header {key!r} must be a short string")
                header = dict(obj, skipped_bytes=skip) if skip else obj
                continue
            if len(samples) >= max_samples:
                raise TraceError(f"{path}: more than {max_samples} samples")
            try:
                samples.append(sample_from_json(obj, path, lineno))
            except RecursionError as exc:  # pragma: no cover - json depth is bounded by line size
                raise TraceError(f"{path}, line {lineno}: nested too deeply") from exc
    if header is None:
        raise TraceError(f"{path} is empty: no trace header and no samples")
    if not samples:
        raise TraceError(f"{path} has a header but no samples")
    return header, samples


# ---- the sampler --------------------------------------------------------------------------

#: Longest interval the sampler accepts (``Event.wait`` overflows for huge timeouts).
MAX_INTERVAL_S = 3600.0


class Sampler:
    """Takes a sample every ``interval_s`` seconds into a bounded history.

    Args:
        source: object with ``read(seq, timestamp_s) -> Sample`` (:class:`LiveSource`, :class:`ReplaySource`);
            raising :class:`EndOfTrace` ends the run.
        interval_s: seconds between samples (deadline-based: no drift; missed ticks are skipped).
        history_len: samples kept (``collections.deque(maxlen=...)``): constant memory for runs of days.
        count: stop after this many samples (None = until stopped).
        writer: a :class:`TraceWriter` or None.
        on_sample: ``callback(sample)`` after each sample (widget update); its errors are recorded.
        on_finish: ``callback()`` when the loop ends, in the sampler's thread; its errors are recorded.
        clock: monotonic seconds (injectable for tests). wall: epoch seconds for timestamps.

    State (read from any thread): ``latest``, ``history``, ``samples_taken``, ``error`` (last failure text,
    ``""`` if none), ``errors`` (count), ``finished`` (why it ended, ``""`` while running),
    ``thread_cpu_s`` (CPU seconds the sampler thread used).
    """

    def __init__(self, source, *, interval_s: float = 1.0, history_len: int = 600, count: int | None = None,
                 writer: TraceWriter | None = None, on_sample=None, on_finish=None, clock=time.monotonic,
                 wall=time.time, name: str = "cudamagic-gpuwatch"):
        self.source = source
        self.interval_s = float(interval_s)
        if not 0 < self.interval_s <= MAX_INTERVAL_S:  # also NaN; inf would overflow Event.wait
            raise ValueError(f"interval_s must be in (0, {MAX_INTERVAL_S:g}] seconds, not {interval_s!r}")
        self.history = collections.deque(maxlen=int(history_len))
        self.count = count
        self.writer = writer
        self.on_sample = on_sample
        self.on_finish = on_finish
        self.clock, self.wall = clock, wall
        self.name = name
        self.latest = None
        self.samples_taken = 0
        self.error = ""
        self.errors = 0
        self.finished = ""
        self.thread_cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()

    # -- one step ----------------------------------------------------------------------
    def step(self):
        """Take one sample now. Returns it, or None after a recorded failure. Raises EndOfTrace at the end."""
        try:
            s = self.source.read(self.samples_taken + 1, self.wall())
        except EndOfTrace:
            raise
        except Exception as exc:
            self._record(f"reading failed: {type(exc).__name__}: {exc}")
            return None
        with self._lock:
            self.history.append(s)
            self.latest = s
            self.samples_taken += 1
        if self.writer is not None:
            try:
                self.writer.write(s)
            except Exception as exc:
                self._record(f"writing {self.writer.path} failed: {type(exc).__name__}: {exc}; logging stopped")
                self.writer = None
        if self.on_sample is not None:
            try:
                self.on_sample(s)
            except Exception as exc:
                self._record(f"display update failed: {type(exc).__name__}: {exc}")
        return s

    def _record(self, text):
        self.errors += 1
        self.error = f"{time.strftime('%H:%M:%S')} {text}"

    def done(self) -> bool:
        """True once ``count`` samples were taken."""
        return self.count is not None and self.samples_taken >= self.count

    # -- the loop ------------------------------------------------------------------------
    def run_loop(self, wait=None, first_delay: float = 0.0):
        """Sample until stopped, ``count`` reached or the trace ends (runs in the calling thread).

        Args:
            wait: ``wait(seconds) -> bool`` returning True when asked to stop (default: the stop Event's wait).
            first_delay: seconds to wait before the first sample.
        """
        wait = wait or self._stop.wait
        t_cpu = time.thread_time()
        cpu0 = self.thread_cpu_s
        try:
            next_t = self.clock() + first_delay
            if first_delay and wait(first_delay):
                self.finished = "stopped"
                return
            while not self.done():
                try:
                    self.step()
                except EndOfTrace:
                    self.finished = "end of replay"
                    return
                self.thread_cpu_s = cpu0 + time.thread_time() - t_cpu
                if self.done():
                    break
                next_t += self.interval_s
                now = self.clock()
                if next_t < now:  # fell behind (suspended laptop, slow NVML): skip missed ticks
                    next_t = now
                if wait(next_t - now):
                    self.finished = "stopped"
                    return
            self.finished = f"{self.samples_taken} samples taken (--count)"
        except BaseException as exc:  # KeyboardInterrupt in the foreground loop, or a bug
            self.finished = "interrupted" if isinstance(exc, KeyboardInterrupt) else \
                f"sampler crashed: {type(exc).__name__}: {exc}"
            if not isinstance(exc, Exception):
                raise
            self._record(self.finished)
        finally:
            self.thread_cpu_s = cpu0 + time.thread_time() - t_cpu
            if self.writer is not None:
                self.writer.close()
            if self.on_finish is not None:
                try:
                    self.on_finish()
                except Exception as exc:
                    self._record(f"display update failed: {type(exc).__name__}: {exc}")

    def start(self, first_delay: float = 0.0):
        """Start the daemon thread (once)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run_loop, kwargs={"first_delay": first_delay},
                                        name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0):
        """Ask the thread to stop and wait for it (at most ``timeout_s``). Safe from any thread, idempotent."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout_s)
        if not self.finished:
            self.finished = "stopped"
        if self.writer is not None and (t is None or not t.is_alive()):
            self.writer.close()

    @property
    def running(self) -> bool:
        """True while the thread is alive and not asked to stop."""
        t = self._thread
        return t is not None and t.is_alive() and not self._stop.is_set()

    def snapshot(self):
        """``(latest sample, list of history samples)`` taken consistently."""
        with self._lock:
            return self.latest, list(self.history)
