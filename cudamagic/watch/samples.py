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
from ..core.na import NA, NaOr, is_na

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
    """One process on a GPU (``nvidia-smi --query-compute-apps``, graphics processes too).

    ``visible`` is False when the pid does not exist here (another PID namespace, or it exited);
    True for another user's process hidden by ``/proc`` ``hidepid`` (it exists; its name is NA
    with code ``"hidden"``). The kind is ``name.code`` when ``name`` is NA: ``"other_namespace"``,
    ``"hidden"``, ``"exited"``, ``"no_permission"``.
    """

    #: ``pid`` as NVML reports it (the host's PID namespace).
    pid: int
    #: ``process_name``: the executable name from ``psutil``.
    name: NaOr[str]
    #: The command line (at most 200 characters).
    cmdline: NaOr[str]
    #: ``used_memory`` in bytes (NVML's ``usedGpuMemory``).
    used_memory_bytes: NaOr[int]
    #: ``"C"`` compute, ``"G"`` graphics, ``"C+G"``.
    type: str = "C"
    #: True for this kernel's own process.
    own: bool = False
    #: False when the pid does not exist in this PID namespace.
    visible: bool = True
    #: Where ``used_memory_bytes`` comes from: ``"NVML"``, or under Windows WDDM
    #: :data:`cudamagic.core.wincounters.SOURCE_LABEL` (the process's ``Dedicated Usage``).
    memory_source: str = "NVML"
    #: System RAM the GPU uses for the process (Windows ``Shared Usage``); NVML has no such figure.
    shared_memory_bytes: NaOr[int] = NA("NVML reports dedicated GPU memory only", "not_supported")


@dataclass(frozen=True)
class MigSample:
    """One MIG instance of a GPU (``nvmlDeviceGetMigDeviceHandleByIndex``)."""

    #: 0-based slot index.
    index: int
    #: ``MIG-...`` UUID (``nvmlDeviceGetUUID``).
    uuid: NaOr[str]
    #: ``memory.used`` of the instance, bytes.
    memory_used_bytes: NaOr[int]
    #: ``memory.total`` of the instance, bytes.
    memory_total_bytes: NaOr[int]
    #: From a cluster source: DCGM profiling ratios ``((name, 0-1 float or NA), ...)``
    #: (``DCGM_FI_PROF_*`` of its ``GPU_I_ID``); ``()`` otherwise.
    ratios: tuple = ()


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant, in raw NVML units; every number passed ``nvml.check_value``.

    From a cluster source (``--source prometheus://...``): ``host`` is the exporter's host name
    (``""`` for this machine), ``ratios`` the DCGM profiling ratios ``((name, 0-1 float or NA),
    ...)``, ``labels`` the job labels ``((label, value), ...)`` (pod, namespace, hpc_job).
    """

    #: ``index``: 0-based NVML index (``nvidia-smi`` order).
    index: int
    #: ``name`` (``nvmlDeviceGetName``).
    name: NaOr[str]
    #: ``uuid`` (``nvmlDeviceGetUUID``).
    uuid: NaOr[str]
    #: ``utilization.gpu``, % (``nvmlDeviceGetUtilizationRates``).
    gpu_util_pct: NaOr[int]
    #: ``utilization.memory``, %.
    mem_util_pct: NaOr[int]
    #: ``memory.used``, bytes: what nvidia-smi shows (``nvmlDeviceGetMemoryInfo`` v2, without the
    #: driver's reserve).
    memory_used_bytes: NaOr[int]
    #: ``memory.total``, bytes.
    memory_total_bytes: NaOr[int]
    #: ``temperature.gpu``, degrees C (``nvmlDeviceGetTemperature``).
    temperature_c: NaOr[int]
    #: ``power.draw``, mW (``nvmlDeviceGetPowerUsage``).
    power_draw_mw: NaOr[int]
    #: ``power.limit``, mW (``nvmlDeviceGetEnforcedPowerLimit``).
    power_limit_mw: NaOr[int]
    #: ``fan.speed``, % (``nvmlDeviceGetFanSpeed``).
    fan_speed_pct: NaOr[int]
    #: ``clocks.sm``, MHz (``nvmlDeviceGetClockInfo``).
    clock_sm_mhz: NaOr[int]
    #: ``clocks.mem``, MHz.
    clock_mem_mhz: NaOr[int]
    #: ``pstate``: P-state number, 0 = max performance (``nvmlDeviceGetPerformanceState``).
    pstate: NaOr[int]
    #: ``clocks_event_reasons.active``: ``nvmlDeviceGetCurrentClocksEventReasons`` bitmask.
    throttle_reasons_mask: NaOr[int]
    #: ``mig.mode.current`` is ``Enabled``; NA from a trace that recorded it so.
    mig_enabled: NaOr[bool] = False
    mig_devices: tuple[MigSample, ...] = ()
    #: The processes on it (``nvidia-smi --query-compute-apps``).
    processes: NaOr[tuple[ProcessSample, ...]] = ()
    #: None, or the NA once the GPU fell off the bus.
    lost: NA | None = None
    host: str = ""
    ratios: tuple = ()
    labels: tuple = ()
    #: ``memory.reserved``, bytes: the driver's reserve; NA on drivers before R510 (where used
    #: includes it) and in traces recorded before the field existed.
    memory_reserved_bytes: NaOr[int] = NA("not recorded", "error")
    #: ``driver_model.current``: ``"WDDM"``, ``"TCC"`` or ``"MCDM"`` on Windows
    #: (``nvmlDeviceGetDriverModel``), NA elsewhere.
    driver_model: NaOr[str] = NA("not read", "not_supported")

    @property
    def throttle_reasons(self) -> NaOr[list[str]]:
        """Decoded clock-event reasons: list of words (``[]`` = none) or NA."""
        return nvml.decode_throttle_reasons(self.throttle_reasons_mask)

    def get(self, key: str):
        """A value by its nvidia-smi name (``"memory.used"``) or attribute name."""
        return getattr(self, GPU_FIELDS.get(key, key))


@dataclass(frozen=True)
class WorkerSample:
    """One DataLoader worker (a child process of this kernel)."""

    pid: int
    #: CPU use in % of one core.
    cpu_pct: NaOr[float]
    #: Resident memory, bytes.
    rss_bytes: NaOr[int]


@dataclass(frozen=True)
class HostSample:
    """The host, read with ``psutil``."""

    #: All CPUs, 0-100 %.
    cpu_util_pct: NaOr[float]
    cpu_count: NaOr[int]
    memory_used_bytes: NaOr[int]
    memory_total_bytes: NaOr[int]
    #: This kernel's process, in % of one core.
    kernel_cpu_pct: NaOr[float]
    #: This kernel's DataLoader worker processes.
    workers: tuple[WorkerSample, ...] = ()


@dataclass(frozen=True)
class TorchSample:
    """This kernel's PyTorch caching allocator, summed over its CUDA devices (bytes)."""

    #: ``allocated_bytes.all.current`` of ``torch.cuda.memory_stats``.
    allocated_bytes: NaOr[int]
    #: ``reserved_bytes.all.current``.
    reserved_bytes: NaOr[int]
    #: ``allocated_bytes.all.peak``.
    peak_bytes: NaOr[int]
    #: What NVML says this process uses on all GPUs.
    nvml_process_bytes: NaOr[int] = NA("not measured", "error")
    #: ``nvml_process_bytes - reserved_bytes``: the CUDA context and other libraries.
    gap_bytes: NaOr[int] = NA("not measured", "error")


@dataclass(frozen=True)
class Sample:
    """One complete reading of every shown GPU, the host and the PyTorch allocator."""

    seq: int
    #: Wall-clock seconds since the epoch (``time.time``).
    timestamp_s: float
    #: None when NVML works, else the NA saying why there is no GPU data.
    nvml_status: NA | None
    gpus: tuple[GpuSample, ...]
    host: HostSample
    #: NA when PyTorch is not imported or CUDA not initialised.
    torch: NaOr[TorchSample]
    #: A plain-words diagnosis, or ``""``.
    hint: str = ""

    @property
    def timestamp(self) -> str:
        """ISO 8601 local time with milliseconds (nvidia-smi's ``timestamp`` column)."""
        return iso_timestamp(self.timestamp_s)


def iso_timestamp(ts: float) -> str:
    """ISO 8601 local time with milliseconds of epoch seconds ``ts``.

    As nvidia-smi's ``timestamp`` column.
    """
    return _dt.datetime.fromtimestamp(ts).isoformat(timespec="milliseconds")


# ---- flat records (watch.history rows) -----------------------------------------------------


def sample_rows(s: Sample) -> list:
    """Flat records for ``watch.history``, one dict per GPU.

    Flat records for ``watch.history``: one dict per GPU (one host-only dict when there is no GPU).

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
