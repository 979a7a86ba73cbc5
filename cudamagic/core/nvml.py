"""The only module that talks to NVML (``pynvml``, from ``nvidia-ml-py``).

NVML is initialised lazily, once, on first use (never at import). Every query
returns a value or an :class:`~cudamagic.core.na.NA` carrying the reason, so no
NVML fault ever reaches the caller as an exception:

* :func:`init` -> ``None`` on success, or NA with the reason (no driver, a
  driver/library mismatch after an upgrade without reboot, permissions...).
* :class:`Device` reads one GPU by *0-based NVML index* (the order of
  ``nvidia-smi``, which is PCI bus order). Field names are ``nvidia-smi
  --query-gpu`` names; values are in raw NVML units (bytes, mW, MHz, degrees C, %).
  An answer of "not supported" / "no permission" / "function not found" is
  remembered per (GPU, query group), so NVML is asked once, not on every tick.
  A GPU that reports "GPU is lost" is marked lost and reads NA from then on.
* Typed records: :func:`system_info` gives a :class:`SystemInfo`, :meth:`Device.processes` a
  list of :class:`ProcessRow`; each field names the NVML call and nvidia-smi key it reads.

Tests replace ``pynvml`` in ``sys.modules`` by the fake in ``tests/fake_nvml.py``
and call :func:`reset`; that is the single seam.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import threading
from typing import NamedTuple

from . import platform
from .na import NA, NaOr, is_na
from .nvml_errors import CONTAINER_LOST_GPU, NVML_ERRORS
from .nvml_fields import (
    FIELD_GROUP,
    FIELD_UNITS,
    GROUPS,
    MAX_CLOCK_MHZ,
    MAX_MEMORY_BYTES,
    MAX_POWER_MW,
    MAX_TEMPERATURE_C,
    PID_MAX,
    check_process,
    check_value,
    check_values,
    decode,
    decode_throttle_reasons,
    implausible,
    read_memory,
)

__all__ = [
    "FIELD_GROUP",
    "FIELD_UNITS",
    "MAX_CLOCK_MHZ",
    "MAX_MEMORY_BYTES",
    "MAX_POWER_MW",
    "MAX_TEMPERATURE_C",
    "PID_MAX",
    "Device",
    "ProcessRow",
    "SystemInfo",
    "call",
    "check_process",
    "check_value",
    "check_values",
    "decode",
    "decode_cuda_driver_version",
    "decode_throttle_reasons",
    "device",
    "device_count",
    "init",
    "kernel_module_version",
    "library_path",
    "library_version",
    "process_gpu_memory",
    "process_name",
    "reset",
    "system_info",
    "translate",
]

_lock = threading.RLock()
_state = {"module": None, "initialized": False, "error": None}

# NVML error codes (mirrors pynvml's NVML_ERROR_*; kept here so translation works without importing
# it).
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_FUNCTION_NOT_FOUND = 13
_LIB_RM_VERSION_MISMATCH = 18
_UNKNOWN = 999

# Answers that will not change while the process lives: remembered per (GPU, group).
_STICKY_CODES = {_NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}


def _module():
    """Import ``pynvml`` (or the test fake already in ``sys.modules``); NA if not installed."""
    if _state["module"] is None:
        try:
            import pynvml  # the nvidia-ml-py distribution
        except Exception as exc:  # ImportError, or a broken binding
            return NA(
                f"the NVML Python binding is not importable ({exc}); install it with "
                "`pip install nvidia-ml-py`",
                "no_binding",
            )
        _state["module"] = pynvml
    return _state["module"]


def kernel_module_version():
    """The NVIDIA kernel module's version, or NA.

    NVIDIA kernel module version (Linux: ``/proc/driver/nvidia/version`` through
    :func:`cudamagic.core.platform.nvidia_kernel_module_text`), or NA.
    """
    text = platform.nvidia_kernel_module_text()
    if text is None:
        if platform.is_windows():
            return NA(
                "Windows has no NVIDIA kernel module file: the driver version comes from NVML",
                "no_driver",
            )
        return NA(
            "the NVIDIA kernel module version file (/proc/driver/nvidia/version) is not readable "
            "(no NVIDIA kernel module loaded)",
            "no_driver",
        )
    m = re.search(r"Kernel Module(?: for [^ ]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return (
        m.group(1)
        if m
        else NA("version not found in the NVIDIA kernel module version file", "error")
    )


def library_version():
    """Version of the user-space ``libnvidia-ml.so.<version>`` found on disk, or NA."""
    patterns = [
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*",
        "/usr/lib64/libnvidia-ml.so.*.*",
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.*.*",
        "/usr/lib/libnvidia-ml.so.*.*",
    ]
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            m = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", path)
            if m:
                return m.group(1)
    return NA("libnvidia-ml.so.<version> not found on disk", "no_driver")


def library_path():
    r"""Where the NVML library was loaded from, or NA.

    ``pynvml.nvmlLib._name``: ``C:\Windows\System32\nvml.dll`` on Windows,
    ``libnvidia-ml.so.1`` as the loader resolved it on Linux; NA before a successful init.
    """
    err = init()
    if err is not None:
        return err
    lib = getattr(_state["module"], "nvmlLib", None)
    name = getattr(lib, "_name", None)
    return (
        decode(name)
        if name
        else NA("this nvidia-ml-py does not say which library it loaded", "not_supported")
    )


def translate(exc) -> NA:
    """Turn an exception from an NVML call into an NA with a plain-words reason and its fix.

    Every ``NVML_ERROR_*`` code has an entry in :data:`~cudamagic.core.nvml_errors.NVML_ERRORS`.
    Two are completed from this machine: a driver/library mismatch names both versions, and
    "Unknown Error" inside a container is the known "container lost its GPU devices" failure.
    """
    code = getattr(exc, "value", None)
    err = NVML_ERRORS.get(code) if isinstance(code, int) else None
    if err is None:
        return NA(
            f"NVML error: {type(exc).__name__}: {exc}",
            "error",
            "run `nvidia-smi` in a terminal: it reports the same failure in its own words",
        )
    if code == _UNKNOWN and platform.in_container():
        err = CONTAINER_LOST_GPU
    if code == _LIB_RM_VERSION_MISMATCH:
        kmod, lib = kernel_module_version(), library_version()
        seen = []
        if not is_na(kmod):
            seen.append(f"kernel module {kmod}")
        if not is_na(lib):
            seen.append(f"user-space library {lib}")
        both = f" ({', '.join(seen)})" if seen else ""
        err = err._replace(
            cause="driver/library version mismatch: the loaded NVIDIA kernel module and the "
            f"user-space NVML library differ{both}, usually after a driver update without a "
            "reboot; reboot, or unload and reload the nvidia kernel modules"
        )
    return NA(err.cause, err.code, err.fix)


def init():
    """Initialise NVML once. Returns ``None`` when NVML works, else the NA that says why not.

    The outcome is cached: a failed init is not retried until :func:`reset`.
    """
    with _lock:
        if _state["initialized"]:
            return None
        if _state["error"] is not None:
            return _state["error"]
        mod = _module()
        if is_na(mod):
            _state["error"] = mod
            return mod
        try:
            mod.nvmlInit()
        except Exception as exc:
            _state["error"] = translate(exc)
            return _state["error"]
        _state["initialized"] = True
        return None


def reset():
    """Shut NVML down and forget every cached answer (used by tests and ``%unload_ext``)."""
    with _lock:
        mod = _state["module"]
        if _state["initialized"] and mod is not None:
            with contextlib.suppress(Exception):
                mod.nvmlShutdown()
        _state.update(module=None, initialized=False, error=None)
        _devices.clear()


def call(func_name: str, *args):
    """Call ``pynvml.<func_name>(*args)``; return its value or an NA (never raises)."""
    err = init()
    if err is not None:
        return err
    mod = _state["module"]
    func = getattr(mod, func_name, None)
    if func is None:
        return NA(f"this nvidia-ml-py has no {func_name}", "not_supported")
    try:
        return func(*args)
    except Exception as exc:
        return translate(exc)


# ---- system-level facts -----------------------------------------------------------


def decode_cuda_driver_version(value):
    """Decode ``nvmlSystemGetCudaDriverVersion``'s integer.

    Decode ``nvmlSystemGetCudaDriverVersion``'s integer: ``11040`` -> ``'11.4'``, ``12080`` ->
    ``'12.8'``.

    The encoding is ``1000 * major + 10 * minor``. Returns NA for non-integers or non-positive
    values.
    """
    if is_na(value):
        return value
    try:
        value = int(value)
    except (TypeError, ValueError):
        return NA(f"unreadable CUDA driver version {value!r}", "error")
    if value <= 0:
        return NA(f"unreadable CUDA driver version {value!r}", "error")
    return f"{value // 1000}.{(value % 1000) // 10}"


class SystemInfo(NamedTuple):
    """Driver-level facts from NVML; a field that could not be read is an NA."""

    #: ``"ok"``, or the NA saying why NVML is unavailable (``nvmlInit``).
    status: NaOr[str]
    #: ``"550.54.15"``: ``nvmlSystemGetDriverVersion``, ``nvidia-smi --query-gpu=driver_version``.
    driver_version: NaOr[str]
    #: The newest CUDA this driver supports, ``"12.4"``: ``nvmlSystemGetCudaDriverVersion``.
    cuda_driver_version: NaOr[str]
    #: The same as NVML encodes it (``12040``).
    cuda_driver_version_raw: NaOr[int]
    #: ``nvmlSystemGetNVMLVersion``.
    nvml_version: NaOr[str]
    #: GPUs NVML sees: ``nvmlDeviceGetCount``, ``nvidia-smi --query-gpu=count``.
    device_count: NaOr[int]


class ProcessRow(NamedTuple):
    """One process on a GPU, as ``nvidia-smi --query-compute-apps`` lists it."""

    #: Process id in the host's PID namespace (``pid``).
    pid: int
    #: GPU memory in bytes (``used_memory``; ``usedGpuMemory`` of the NVML process info).
    used_memory_bytes: NaOr[int]
    #: ``"C"`` compute, ``"G"`` graphics (``nvmlDeviceGetGraphicsRunningProcesses``), ``"C+G"``.
    type: str = "C"


def system_info() -> SystemInfo:
    """Driver-level facts from NVML (see :class:`SystemInfo`)."""
    err = init()
    if err is not None:
        see = NA("NVML not available: see NVML status", err.code)
        return SystemInfo(err, see, see, see, see, see)
    raw = call("nvmlSystemGetCudaDriverVersion")
    drv = call("nvmlSystemGetDriverVersion")
    ver = call("nvmlSystemGetNVMLVersion")
    return SystemInfo(
        status="ok",
        driver_version=drv if is_na(drv) else decode(drv),
        cuda_driver_version=decode_cuda_driver_version(raw),
        cuda_driver_version_raw=raw,
        nvml_version=ver if is_na(ver) else decode(ver),
        device_count=call("nvmlDeviceGetCount"),
    )


_GROUPS_OF = {}  # a tuple of fields -> the query groups Device.read asks for them
_BOUNDS = {
    "power.draw": ["power.limit"],
    "clocks.sm": ["clocks.max.sm"],
    "clocks.mem": ["clocks.max.mem"],
    "memory.used": ["memory.total"],
}


class Device:
    """One GPU, by 0-based NVML index (``nvidia-smi`` order).

    ``get(field)`` returns the value in raw NVML units or an NA. Sticky failures
    (not supported, no permission, missing function) are remembered per query
    group, and a lost GPU stops being queried.
    """

    def __init__(self, index: int):
        self.index = index
        self._handle = None
        self._sticky = {}  # group -> NA
        self.lost = None  # NA once the GPU is lost
        self.memory_api = None  # "v2" or "v1" once memory was read (see read_memory)
        self._max_clocks = None  # static: read once
        self.memory_total = None  # bytes, from the last memory reading (bound for process rows)

    def handle(self):
        """The NVML handle, or NA."""
        if self.lost is not None:
            return self.lost
        if self._handle is None:
            h = call("nvmlDeviceGetHandleByIndex", self.index)
            if is_na(h):
                if h.code == "gpu_lost":
                    self.lost = h
                return h
            self._handle = h
        return self._handle

    def query(self, group: str, h=None) -> dict:
        """Run one query group; returns ``{field: value-or-NA}``.

        ``h``: the handle (or its NA) when the caller holds it already, else asked here.
        """
        fields, reader = GROUPS[group]
        if group in self._sticky:
            return dict.fromkeys(fields, self._sticky[group])
        if h is None or self.lost is not None:  # lost by an earlier group: not asked again
            h = self.handle()
        if is_na(h):
            return dict.fromkeys(fields, h)
        mod = _state["module"]
        try:
            if group == "memory":
                got = read_memory(mod, h, self)
                self.memory_total = got["memory.total"]
                return got
            return reader(mod, h)
        except Exception as exc:
            return dict.fromkeys(fields, self._failed(group, exc))

    def _failed(self, group: str, exc) -> NA:
        """The NA for ``exc``; remembered for ``group`` when it cannot change, or the GPU lost."""
        na = translate(exc)
        if getattr(exc, "value", None) in _STICKY_CODES:
            self._sticky[group] = na
        elif na.code == "gpu_lost":
            self.lost = na
        return na

    def get(self, field: str):
        """One field by its nvidia-smi name, checked by :func:`check_value`.

        See :data:`FIELD_UNITS`.
        """
        return self.read([field])[field]

    def read(self, fields) -> dict:
        """Several fields, each query group asked once, every number through :func:`check_values`.

        ``power.draw`` also reads ``power.limit`` and the clocks read the GPU's maximum clocks
        (once; they do not change) so that their bounds are known.
        """
        fields = tuple(fields)
        groups = _GROUPS_OF.get(fields)
        if groups is None:  # the groups of a field list, worked out once (a monitor asks ~20)
            want = [*fields, *(b for f in fields for b in _BOUNDS.get(f, []))]
            groups = _GROUPS_OF[fields] = tuple(dict.fromkeys(FIELD_GROUP[f] for f in want))
        out = {}
        h = self.handle()  # asked once for every group
        for group in groups:
            if group == "clocks_max" and self._max_clocks is not None:
                out.update(self._max_clocks)
                continue
            out.update(self.query(group, h))
            if group == "clocks_max" and self.lost is None:
                self._max_clocks = {k: out[k] for k in ("clocks.max.sm", "clocks.max.mem")}
        checked = check_values(out)
        return {f: checked[f] for f in fields}

    def processes(self) -> NaOr[list[ProcessRow]]:
        """Processes using this GPU, by pid, or the NA saying why NVML cannot list them.

        Compute (``nvmlDeviceGetComputeRunningProcesses``) and graphics processes, merged by pid
        (one ``"C+G"`` row with the larger memory figure).
        """
        key = "processes"
        if key in self._sticky:
            return self._sticky[key]
        h = self.handle()
        if is_na(h):
            return h
        mod = _state["module"]
        rows = {}
        errors = []
        bad = []  # impossible pids: a binding/driver struct mismatch, not processes
        if (
            self.memory_total is None
        ):  # the bound for each row: the last memory reading, or one taken now
            self.read(["memory.total"])  # sets memory_total (an NA leaves only the absolute bound)
        total = self.memory_total
        for kind, fname in (
            ("C", "nvmlDeviceGetComputeRunningProcesses"),
            ("G", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            fn = getattr(mod, fname, None)
            if fn is None:
                continue
            try:
                procs = fn(h)
            except Exception as exc:
                errors.append(exc)
                continue
            for p in procs:
                used = p.usedGpuMemory  # pynvml: None for NVML_VALUE_NOT_AVAILABLE
                used = self._unattributed_memory() if used is None else int(used)
                pid = int(p.pid)
                pid_ok, used = check_process(pid, used, total)
                if not pid_ok:
                    bad.append(pid)
                    continue
                row = ProcessRow(pid, used, kind)
                if pid in rows:  # listed as compute and graphics: one C+G row, the larger figure
                    old = rows[pid].used_memory_bytes
                    used = old if is_na(used) else used if is_na(old) else max(old, used)
                    row = ProcessRow(pid, used, "C+G")
                rows[pid] = row
        if not rows and errors:
            return self._failed(key, errors[0])
        if bad:  # with a layout mismatch no row can be trusted, even one that looks right
            return implausible(
                "the process list",
                f"pid {bad[0]}" + (f" and {len(bad) - 1} more" if len(bad) > 1 else ""),
                f"no Linux pid is 0 or above {PID_MAX}: the nvidia-ml-py binding and the driver "
                "disagree on the process structure; install the nvidia-ml-py that matches the "
                "driver",
            )
        return sorted(rows.values())

    def driver_model(self):
        """The Windows driver model, asked once, or NA.

        ``"WDDM"``, ``"TCC"`` or ``"MCDM"`` (``nvmlDeviceGetDriverModel``, Windows only;
        nvidia-smi's header), or NA (Linux: not supported). Set at boot (``nvidia-smi -dm`` needs a
        reboot), so asked once per Device.
        """
        model = self.__dict__.get("_driver_model")
        if model is None:
            model = self.get("driver_model.current")
            if not is_na(model):  # an NA "not supported" is remembered as sticky by query() already
                self.__dict__["_driver_model"] = model
        return model

    def _unattributed_memory(self) -> NA:
        """The NA for a process whose GPU memory NVML reports as not available.

        ``usedGpuMemory`` None.
        """
        if self.driver_model() == "WDDM":
            return NA(
                "Windows manages GPU memory under WDDM, so NVML cannot attribute it to a process "
                "(nvidia-smi shows N/A too)",
                "wddm",
            )
        return NA("not reported by the driver", "not_supported")

    def mig_devices(self):
        """MIG instances: list of ``{"index", "uuid", "memory.total", "memory.used"}``, or NA.

        Memory in bytes.
        """
        h = self.handle()
        if is_na(h):
            return h
        count = call("nvmlDeviceGetMaxMigDeviceCount", h)
        if is_na(count):
            return count
        out = []
        for i in range(int(count)):
            mh = call("nvmlDeviceGetMigDeviceHandleByIndex", h, i)
            if is_na(mh):
                continue  # unpopulated slot
            uuid = call("nvmlDeviceGetUUID", mh)
            mem = call("nvmlDeviceGetMemoryInfo", mh)
            vals = check_values(
                {
                    "memory.total": mem if is_na(mem) else int(mem.total),
                    "memory.used": mem if is_na(mem) else int(mem.used),
                }
            )
            out.append({"index": i, "uuid": uuid if is_na(uuid) else decode(uuid), **vals})
        return out


def process_name(pid: int):
    """The name NVML gives process ``pid``, or NA.

    The name NVML gives process ``pid`` (``nvmlSystemGetProcessName``, what nvidia-smi prints), or
    NA (``no_permission`` for a process of another user or the system: nvidia-smi's "Insufficient
    Permissions").
    """
    name = call("nvmlSystemGetProcessName", int(pid))
    return name if is_na(name) else decode(name)


_devices = {}


def device(index: int) -> Device:
    """The shared :class:`Device` for a 0-based NVML index.

    Its memo lives as long as NVML's init.
    """
    with _lock:
        dev = _devices.get(index)
        if dev is None:
            dev = _devices[index] = Device(index)
        return dev


def device_count():
    """Number of GPUs NVML sees (``nvmlDeviceGetCount``), or NA with the reason."""
    n = call("nvmlDeviceGetCount")
    return n if is_na(n) else int(n)


def process_gpu_memory(pid: int | None = None) -> dict:
    """GPU memory of process ``pid`` per NVML index.

    GPU memory used by process ``pid`` (default: this one) per NVML index: ``{index: bytes-or-NA}``.

    Includes the CUDA context and non-PyTorch allocations. Returns ``{}`` when
    NVML is unavailable or the process uses no GPU.
    """
    pid = os.getpid() if pid is None else pid
    n = device_count()
    if is_na(n):
        return {}
    out = {}
    for i in range(n):
        procs = device(i).processes()
        if is_na(procs):
            continue
        for p in procs:
            if p.pid == pid:
                out[i] = p.used_memory_bytes
    return out
