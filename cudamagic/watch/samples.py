"""Immutable samples for ``%gpuwatch`` and their flat records.

A :class:`Sample` is one reading of every visible GPU (through :mod:`cudamagic.core.nvml`,
the only NVML seam), of the host (``psutil``: CPU %, RAM, this kernel's DataLoader
workers) and of this kernel's PyTorch caching allocator. Attribute names carry the
unit (``memory_used_bytes``, ``power_draw_mw``); values are raw NVML units. A value
that could not be read is an :class:`~cudamagic.core.na.NA` with the reason.

Records (:func:`sample_rows`, the ``watch.history`` rows) use ``nvidia-smi --query-gpu`` key names
(``utilization.gpu``, ``memory.used``...) with the *raw* units of
:data:`cudamagic.core.nvml.FIELD_UNITS` (bytes and mW, not MiB and W).

Nothing here reads a device or imports IPython: the readers are in :mod:`.sources`.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass

from ..core import nvml
from ..core.na import NA, is_na

#: nvidia-smi field name -> attribute name of :class:`GpuSample` (unit in the name).
GPU_FIELDS = {
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
    "memory.used": "memory_used_bytes",
    "memory.total": "memory_total_bytes",
    "memory.reserved": "memory_reserved_bytes",
    "temperature.gpu": "temperature_c",
    "power.draw": "power_draw_mw",
    "power.limit": "power_limit_mw",
    "fan.speed": "fan_speed_pct",
    "clocks.sm": "clock_sm_mhz",
    "clocks.mem": "clock_mem_mhz",
    "pstate": "pstate",
    "clocks_event_reasons.active": "throttle_reasons_mask",
}


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
        visible: False when the pid does not exist here (another PID namespace, F04, or it exited);
            True for another user's process hidden by ``/proc`` ``hidepid`` (it exists, its name is
            NA with code ``"hidden"``). The kind is ``name.code`` when ``name`` is NA:
            ``"other_namespace"``, ``"hidden"``, ``"exited"``, ``"no_permission"``.
        memory_source: where ``used_memory_bytes`` comes from: ``"NVML"`` (``usedGpuMemory``), or on
            Windows under WDDM :data:`cudamagic.core.wincounters.SOURCE_LABEL` (the process's
            ``Dedicated Usage``).
        shared_memory_bytes: system RAM the GPU uses for the process (Windows ``Shared Usage``), or
            NA (NVML does not report it).
    """

    pid: int
    name: object
    cmdline: object
    used_memory_bytes: object
    type: str = "C"
    own: bool = False
    visible: bool = True
    memory_source: str = "NVML"
    shared_memory_bytes: object = NA("NVML reports dedicated GPU memory only", "not_supported")


@dataclass(frozen=True)
class MigSample:
    """One MIG instance: 0-based slot index, ``MIG-...`` UUID, memory in bytes (F06).

    From a cluster source, ``ratios`` are the instance's DCGM profiling ratios ``((name, 0-1 float
    or NA), ...)`` (``DCGM_FI_PROF_*`` of its ``GPU_I_ID``); ``()`` otherwise.
    """

    index: int
    uuid: object
    memory_used_bytes: object
    memory_total_bytes: object
    ratios: tuple = ()


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant. Index is the 0-based NVML index (``nvidia-smi`` order).

    Units: ``*_pct`` percent (0-100), ``*_bytes`` bytes, ``temperature_c`` degrees C,
    ``*_mw`` milliwatts, ``*_mhz`` MHz, ``pstate`` P-state number (0 = max performance),
    ``throttle_reasons_mask`` the ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask.
    ``lost`` is an NA once the GPU fell off the bus, else ``None``. ``processes`` is a
    tuple of :class:`ProcessSample` or an NA. ``memory_used_bytes`` is what ``nvidia-smi`` shows as
    used (``nvmlDeviceGetMemoryInfo`` v2: without the driver's reserve); ``memory_reserved_bytes``
    is that reserve (``memory.reserved``), NA on drivers before R510 (v1 only: used then includes
    the reserve) and in traces recorded before the field existed. Every number passed
    :func:`cudamagic.core.nvml.check_value`. ``driver_model`` is ``"WDDM"``, ``"TCC"`` or ``"MCDM"``
    on Windows (``nvmlDeviceGetDriverModel``, nvidia-smi's header), an NA elsewhere.

    From a cluster source (``--source prometheus://...``): ``host`` is the exporter's host name
        (``""`` for
    this machine), ``ratios`` the DCGM profiling ratios as ``((name, 0-1 float or NA), ...)``,
    ``labels`` the job labels ``((label, value), ...)`` (pod, namespace, hpc_job).
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
    memory_reserved_bytes: object = NA("not recorded", "error")
    driver_model: object = NA("not read", "not_supported")

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
    """The host: ``cpu_util_pct`` all CPUs (0-100), ``kernel_cpu_pct`` this process in % of one
    core, RAM in bytes, ``workers`` this kernel's DataLoader worker processes.
    """

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

    ``nvml_status`` is ``None`` when NVML works, else the NA saying why there is no GPU data
    (F01/F02). ``torch`` is a :class:`TorchSample` or an NA (PyTorch not imported / CUDA not
    initialised). ``hint`` is a plain-words diagnosis or ``""``.
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
        return iso_timestamp(self.timestamp_s)


def iso_timestamp(ts: float) -> str:
    """ISO 8601 local time with milliseconds of epoch seconds ``ts`` (nvidia-smi's ``timestamp`` column)."""
    return _dt.datetime.fromtimestamp(ts).isoformat(timespec="milliseconds")


# ---- flat records (watch.history rows) -----------------------------------------------------


def sample_rows(s: Sample) -> list:
    """Flat records for ``watch.history``: one dict per GPU (one host-only dict when there is no
    GPU).

    Keys are nvidia-smi names (``timestamp``, ``index``, ``name``, ``utilization.gpu``,
    ``memory.used`` [bytes], ``power.draw`` [mW] ...) plus ``host.*`` and ``torch.*``. Every value
    is a plain scalar (int, float, str or bool), so ``pandas.DataFrame(rows)`` gets numeric columns:
    a number that could not be read is ``float('nan')`` and a text that could not be read is
    ``"N/A"``; why is in the ``na_reasons`` column (``"fan.speed, power.draw: not supported on this
    GPU"``, ``""`` when all were read). :attr:`GpuWatch.samples` keeps the
    :class:`~cudamagic.core.na.NA` objects themselves.
    """
    t = s.torch
    common = {
        "timestamp": s.timestamp,
        "timestamp_s": s.timestamp_s,
        "seq": s.seq,
        "host.cpu.utilization": s.host.cpu_util_pct,
        "host.memory.used": s.host.memory_used_bytes,
        "host.memory.total": s.host.memory_total_bytes,
        "host.kernel.cpu.utilization": s.host.kernel_cpu_pct,
        "host.dataloader_workers": len(s.host.workers),
        "torch.allocated": t if is_na(t) else t.allocated_bytes,
        "torch.reserved": t if is_na(t) else t.reserved_bytes,
        "torch.peak": t if is_na(t) else t.peak_bytes,
        "torch.gap": t if is_na(t) else t.gap_bytes,
    }
    if not s.gpus:
        status = (
            s.nvml_status if s.nvml_status is not None else NA("no GPU selected")
        )  # _flat keeps its reason
        return [_flat(dict(common, index=status))]
    rows = []
    for g in s.gpus:
        r = dict(common)
        r.update({"index": g.index, "name": g.name, "uuid": g.uuid})
        if (
            g.host or g.ratios
        ):  # a cluster GPU: its host, not this kernel's host.* / torch.* columns
            r = {k: v for k, v in r.items() if not k.startswith(("host.", "torch."))}
            r["host"] = g.host
            r.update({f"prof.{k}": v for k, v in g.ratios})
            for m in (
                g.mig_devices
            ):  # a MIG instance's ratios: its own columns, never merged with the GPU's
                r.update({f"mig.{m.index}.prof.{k}": v for k, v in m.ratios})
        for key, attr in GPU_FIELDS.items():
            r[key] = getattr(g, attr)
        reasons = g.throttle_reasons
        r["clocks_event_reasons"] = reasons if is_na(reasons) else ", ".join(reasons)
        mig = (
            g.mig_enabled
        )  # NA from a trace that recorded it so: "N/A" with its reason, not a claim of "Disabled"
        r["mig.mode.current"] = mig if is_na(mig) else ("Enabled" if mig is True else "Disabled")
        r["processes.count"] = g.processes if is_na(g.processes) else len(g.processes)
        r["lost"] = g.lost is not None
        rows.append(_flat(r))
    return rows


_TEXT_KEYS = frozenset(
    {"timestamp", "name", "uuid", "host", "clocks_event_reasons", "mig.mode.current"}
)


def _flat(row: dict) -> dict:
    """NA values -> NaN (numbers) or "N/A" (text), their reasons gathered in ``na_reasons``."""
    by_reason = {}
    for key, v in row.items():
        if is_na(v):
            by_reason.setdefault(v.reason, []).append(key)
            row[key] = "N/A" if key in _TEXT_KEYS else math.nan
    row["na_reasons"] = "; ".join(
        f"{', '.join(keys)}: {reason}" for reason, keys in by_reason.items()
    )
    return row
