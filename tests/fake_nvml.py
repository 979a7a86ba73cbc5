"""A fake ``pynvml`` that plays whole scenarios: the single NVML seam of the test suite.

The fake copies the real binding's constants and ``NVMLError_*`` classes (so
``cudamagic.nvml`` translates errors exactly as in production) and replaces the
functions with ones driven by a scenario dict:

    {
      "init_error": None | NVML error code,         # e.g. NVML_ERROR_LIBRARY_NOT_FOUND
      "driver_version": "550.54.15", "cuda_driver_version": 12040, "nvml_version": "12.550.54.15",
      "bytes": False,                               # return names/uuids/versions as bytes
      "gpus": [ {gpu spec}, ... ],
    }

A gpu spec has ``name, uuid, pci_bus_id, cc, memory_total, memory_used, util_gpu, util_mem,
temperature, power_draw_mw, power_limit_mw, fan, clock_sm, clock_mem, pstate, throttle, persistence,
mig_mode, mig_devices, processes`` ([(pid, bytes)]), ``unsupported`` (set of pynvml function names
that raise NotSupported) and ``lost`` (bool: every call raises GPU_IS_LOST). Any numeric value may
be a callable ``f(tick)`` where ``tick`` counts ``nvmlDeviceGetUtilizationRates`` calls on that GPU,
so values move.

``FakeNVML.calls`` counts calls per function name and GPU index.

Windows keys: a gpu spec's ``driver_model`` (``(current, pending)`` NVML_DRIVER_* values; absent:
    NotSupported
as on Linux) and ``graphics_processes`` ([(pid, bytes or None)]; ``None`` is what pynvml gives for
NVML_VALUE_NOT_AVAILABLE, i.e. WDDM); the scenario's ``process_names`` (``{pid: name}``, or
``NVML_ERROR_NO_PERMISSION`` for nvidia-smi's "Insufficient Permissions"; absent pids: NotFound) and
``library_path`` (``pynvml.nvmlLib._name``).
"""

from __future__ import annotations

import collections
import copy
import sys
import types

import pynvml as _real

GIB = 1024**3


def _gpu(i, **over):
    spec = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-00000000000{i}",
        "pci_bus_id": f"00000000:{0x17 + i:02X}:00.0",
        "cc": (9, 0),
        "memory_total": 80 * GIB,
        "memory_used": 1 * GIB,
        "util_gpu": 0,
        "util_mem": 0,
        "temperature": 35,
        "power_draw_mw": 70000,
        "power_limit_mw": 700000,
        "fan": 30,
        "clock_sm": 1980,
        "clock_mem": 2619,
        "pstate": 0,
        "throttle": 0,
        "persistence": 1,
        "mig_mode": (0, 0),
        "mig_devices": [],
        "processes": [],
        "graphics_processes": [],
        "unsupported": set(),
        "lost": False,
        "memory_reserved": 0,
        "max_clock_sm": 1980,
        "max_clock_mem": 2619,
        "ecc": {},
    }
    spec.update(over)
    return spec


SCENARIOS = {
    # No driver at all.
    "no_driver": {"init_error": _real.NVML_ERROR_LIBRARY_NOT_FOUND, "gpus": []},
    # The kernel module and user-space library differ after an upgrade without reboot.
    "version_mismatch": {"init_error": _real.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "gpus": []},
    "driver_not_loaded": {"init_error": _real.NVML_ERROR_DRIVER_NOT_LOADED, "gpus": []},
    "one_gpu": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": [
            _gpu(0, util_gpu=lambda t: (t * 7) % 100, memory_used=lambda t: GIB + t * 1024**2)
        ],
    },
    # GPU 1 does not support fan, power draw and enforced power limit.
    "gpu_without_fan": {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": [
            _gpu(0, util_gpu=lambda t: (t * 13) % 100),
            _gpu(
                1,
                name="Tesla T4",
                cc=(7, 5),
                memory_total=16 * GIB,
                util_gpu=lambda t: (t * 5) % 100,
                unsupported={
                    "nvmlDeviceGetFanSpeed",
                    "nvmlDeviceGetPowerUsage",
                    "nvmlDeviceGetEnforcedPowerLimit",
                },
            ),
        ],
    },
    # A process in another PID namespace holds 1 GB.
    "process_in_other_pid_namespace": {
        "driver_version": "535.104.05",
        "cuda_driver_version": 12020,
        "nvml_version": "12.535.104.05",
        "gpus": [
            _gpu(
                0,
                name="NVIDIA A100-SXM4-40GB",
                cc=(8, 0),
                memory_total=40 * GIB,
                processes=[(28290, 1024**3)],
            )
        ],
    },
    # The binding returns bytes.
    "bytes_names": {
        "bytes": True,
        "driver_version": "470.86",
        "cuda_driver_version": 11040,
        "nvml_version": "11.470.86",
        "gpus": [_gpu(0, name="Tesla T4", cc=(7, 5), memory_total=16 * GIB)],
    },
    # MIG mode on; utilization not supported; two instances.
    "mig": {
        "driver_version": "535.104.05",
        "cuda_driver_version": 12020,
        "nvml_version": "12.535.104.05",
        "gpus": [
            _gpu(
                0,
                name="NVIDIA A100-SXM4-80GB",
                cc=(8, 0),
                mig_mode=(1, 1),
                unsupported={"nvmlDeviceGetUtilizationRates"},
                mig_devices=[
                    {
                        "uuid": "MIG-11111111-2222-3333-4444-555555555555",
                        "memory_total": 10 * GIB,
                        "memory_used": 2 * GIB,
                    },
                    {
                        "uuid": "MIG-66666666-7777-8888-9999-000000000000",
                        "memory_total": 20 * GIB,
                        "memory_used": 0,
                    },
                ],
            )
        ],
    },
    # Driver 450.66 supports CUDA 11.0.
    "driver_450": {
        "driver_version": "450.66",
        "cuda_driver_version": 11000,
        "nvml_version": "11.450.66",
        "gpus": [_gpu(0, name="Tesla V100-SXM2-16GB", cc=(7, 0), memory_total=16 * GIB)],
    },
    # Driver 470.86 supports CUDA 11.4.
    "driver_470": {
        "driver_version": "470.86",
        "cuda_driver_version": 11040,
        "nvml_version": "11.470.86",
        "gpus": [_gpu(0, name="NVIDIA GeForce RTX 3090", cc=(8, 6), memory_total=24 * GIB)],
    },
}


def a100(**over):
    """One A100-SXM4-80GB with the memory nvidia-smi reported on a real one (driver 535).

    ``memory.used`` 4 MiB and ``memory.reserved`` 908 MiB of 81920 MiB (so ``memory.free`` is
    81008 MiB); ``over`` sets more fields of the GPU (see :func:`_gpu`).
    """
    return {
        "driver_version": "535.104.05",
        "cuda_driver_version": 12020,
        "nvml_version": "12.535.104.05",
        "gpus": [
            _gpu(
                0,
                name="NVIDIA A100-SXM4-80GB",
                cc=(8, 0),
                memory_total=81920 * 1024**2,
                memory_used=4 * 1024**2,
                memory_reserved=908 * 1024**2,
                **over,
            )
        ],
    }


# ---- Windows -------------------------------------------------------------------------------------
MIB = 1024**2

# : The laptop from the notes: one GeForce RTX 2060 (8192 MiB, 742 MiB used) under WDDM, ten C+G
# processes whose
# : GPU memory NVML reports as N/A, one of them a system process ("Insufficient Permissions").
# Synthetic pids
#: (above the default pid_max of 32768 and within NVML's plausible range of 4194304).
WINDOWS_LAPTOP_PROCESSES = [
    (4100104, "C:\\Windows\\explorer.exe"),
    (4100212, "C:\\Windows\\SystemApps\\MicrosoftWindows.Client.CBS_cw5n1h2txyewy\\SearchHost.exe"),
    (
        4100316,
        "C:\\Windows\\SystemApps\\Microsoft.Windows.StartMenuExperienceHost_cw5n1h2txyewy\\"
        "StartMenuExperienceHost.exe",
    ),
    (
        4100420,
        "C:\\Windows\\SystemApps\\MicrosoftWindows.Client.CBS_cw5n1h2txyewy\\TextInputHost.exe",
    ),
    (4100524, "C:\\Program Files (x86)\\Microsoft\\Edge\\Application\\msedge.exe"),
    (4100628, "C:\\Users\\student\\AppData\\Local\\Programs\\Microsoft VS Code\\Code.exe"),
    (
        4100732,
        "C:\\Windows\\SystemApps\\ShellExperienceHost_cw5n1h2txyewy\\ShellExperienceHost.exe",
    ),
    (
        4100836,
        "C:\\Program Files\\WindowsApps\\Microsoft.YourPhone_1.24012.105.0_x64__8wekyb3d8bbwe\\"
        "PhoneExperienceHost.exe",
    ),
    (4100940, "C:\\Users\\student\\miniconda3\\envs\\torch\\python.exe"),
    (4101044, _real.NVML_ERROR_NO_PERMISSION),  # dwm.exe: a system process
]
# : Windows' "GPU Process Memory" counters for those processes: instance -> (Dedicated Usage, Shared
# Usage)
# : bytes. The dedicated figures sum to 686 MiB of the 742 MiB NVML counts as used (the rest is the
# driver's
# : and Windows' own); a second adapter (the laptop's integrated GPU) holds a little for
# explorer.exe.
WINDOWS_LAPTOP_COUNTERS = {
    f"pid_{pid}_luid_0x00000000_0x0000D1E3_phys_0": (ded * MIB, sh * MIB)
    for (pid, _), ded, sh in zip(
        WINDOWS_LAPTOP_PROCESSES,
        (141, 38, 27, 12, 176, 95, 21, 9, 64, 103),
        (36, 4, 3, 2, 58, 22, 3, 1, 12, 21),
        strict=True,
    )
}
WINDOWS_LAPTOP_COUNTERS["pid_4100104_luid_0x00000000_0x0000A2F1_phys_0"] = (0, 5 * MIB)
WINDOWS_LAPTOP_COUNTERS["_Total"] = (686 * MIB, 167 * MIB)  # not a process: must be skipped


class FakeCounterSource:
    r"""Plays Windows' ``\GPU Process Memory(*)`` performance counters.

    For :func:`cudamagic.core.wincounters.set_source`: ``values`` is ``{instance: (Dedicated
    Usage, Shared Usage)}`` in bytes, or a callable ``f(read_number)`` returning it (so figures move
    between samples).
    """

    def __init__(self, values):
        from cudamagic.core import wincounters

        self.label = wincounters.SOURCE_LABEL
        self.values = values
        self.reads = 0

    def read(self):
        self.reads += 1
        return dict(self.values(self.reads - 1) if callable(self.values) else self.values)


def _windows(driver_model, **over):
    spec = _gpu(
        0,
        name="NVIDIA GeForce RTX 2060",
        cc=(7, 5),
        memory_total=8192 * MIB,
        memory_used=742 * MIB,
        pci_bus_id="00000000:01:00.0",
        util_gpu=3,
        util_mem=7,
        temperature=46,
        power_draw_mw=9000,
        power_limit_mw=80000,
        fan=0,
        clock_sm=300,
        clock_mem=405,
        pstate=8,
        persistence=0,
        driver_model=driver_model,
    )
    spec.update(over)
    return spec


# : Windows scenarios: played by the fake only (the stand-in NVML library of tests/nvml_stub does
# not implement
# : nvmlDeviceGetDriverModel, graphics processes or N/A process memory yet), so kept out of
# SCENARIOS, which the
#: fake-versus-stub parity tests walk. The ``fake_nvml`` fixture finds them by name too.
WINDOWS_SCENARIOS = {
    # The notes' laptop: WDDM, every row C+G with N/A memory, one "Insufficient Permissions".
    "windows_wddm": {
        "driver_version": "546.33",
        "cuda_driver_version": 12030,
        "nvml_version": "12.546.33",
        "library_path": "C:\\Windows\\System32\\nvml.dll",
        "process_names": {pid: name for pid, name in WINDOWS_LAPTOP_PROCESSES},
        "gpus": [
            _windows(
                (0, 0),
                processes=[(pid, None) for pid, _ in WINDOWS_LAPTOP_PROCESSES],
                graphics_processes=[(pid, None) for pid, _ in WINDOWS_LAPTOP_PROCESSES],
            )
        ],
    },
    # A workstation card in TCC mode: NVML reports per-process memory as on Linux.
    "windows_tcc": {
        "driver_version": "546.33",
        "cuda_driver_version": 12030,
        "nvml_version": "12.546.33",
        "library_path": "C:\\Windows\\System32\\nvml.dll",
        "process_names": {4100940: "C:\\Users\\student\\miniconda3\\envs\\torch\\python.exe"},
        "gpus": [
            _gpu(
                0,
                name="NVIDIA RTX A4000",
                cc=(8, 6),
                memory_total=16376 * MIB,
                memory_used=1210 * MIB,
                driver_model=(1, 1),
                processes=[(4100940, 1090 * MIB)],
            )
        ],
    },
}


def _ramp(t, lo, hi, start=3, length=10):
    """A value that ramps from ``lo`` to ``hi`` between ticks ``start`` and ``start + length``."""
    f = min(1.0, max(0.0, (t - start) / length))
    return int(lo + (hi - lo) * f)


def training_scenario() -> dict:
    """GPU 0 warms up into a training run; GPU 1 is a T4 without fan/power readings.

    On GPU 0 util, memory, power, clocks and power-cap throttling move with the tick; process 4242
    is the trainer. Used for the demo trace.
    """

    def util(t):
        return 0 if t < 3 else min(99, 35 + (t * 37) % 64)

    def throttle(t):
        return 0x1 if t < 3 else (0x4 if util(t) > 90 else 0)

    return {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": [
            _gpu(
                0,
                util_gpu=util,
                util_mem=lambda t: util(t) // 2,
                memory_used=lambda t: _ramp(t, GIB // 2, 31 * GIB),
                temperature=lambda t: _ramp(t, 34, 71, length=30),
                power_draw_mw=lambda t: 70000 + util(t) * 6000,
                clock_sm=lambda t: 345 if t < 3 else 1980 - (util(t) > 90) * 240,
                pstate=lambda t: 8 if t < 3 else 0,
                throttle=throttle,
                processes=[(4242, lambda t: max(0, _ramp(t, GIB // 2, 31 * GIB) - GIB // 4))],
            ),
            _gpu(
                1,
                name="Tesla T4",
                cc=(7, 5),
                memory_total=16 * GIB,
                util_gpu=0,
                unsupported={
                    "nvmlDeviceGetFanSpeed",
                    "nvmlDeviceGetPowerUsage",
                    "nvmlDeviceGetEnforcedPowerLimit",
                },
            ),
        ],
    }


HOSTILE_NAME = "<img src=x onerror=alert(1)>"


def scenario_with_gpus(n: int) -> dict:
    """A healthy scenario with ``n`` identical GPUs (benchmarks: per-sample cost, 1 and 8 GPUs)."""
    return {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "nvml_version": "12.550.54.15",
        "gpus": [_gpu(i, util_gpu=lambda t: (t * 3) % 100) for i in range(n)],
    }


class _Handle:
    __slots__ = ("index", "mig")

    def __init__(self, index, mig=None):
        self.index, self.mig = index, mig


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeNVML:
    """A fake NVML playing ``scenario``; ``module`` goes in ``sys.modules['pynvml']``."""

    def __init__(self, scenario: dict):
        self.scenario = copy.deepcopy({k: v for k, v in scenario.items() if k != "gpus"})
        self.gpus = [
            dict(g, unsupported=set(g.get("unsupported", ()))) for g in scenario.get("gpus", [])
        ]
        self.calls = collections.Counter()
        self.ticks = collections.Counter()
        self.initialized = False
        self.module = self._build_module()

    # -- scenario control ------------------------------------------------------------
    def lose_gpu(self, index: int):
        """From now on every call on GPU ``index`` raises ``NVMLError_GpuIsLost``."""
        self.gpus[index]["lost"] = True

    # -- helpers -----------------------------------------------------------------------
    def _s(self, text):
        return text.encode() if self.scenario.get("bytes") else text

    def _val(self, gpu_index, key):
        v = self.gpus[gpu_index][key]
        return v(self.ticks[gpu_index]) if callable(v) else v

    def _enter(self, fname, handle=None):
        self.calls[(fname, None if handle is None else handle.index)] += 1
        if not self.initialized:
            raise _real.NVMLError(_real.NVML_ERROR_UNINITIALIZED)
        if handle is not None:
            g = self.gpus[handle.index]
            if g.get("lost"):
                raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
            if fname in g["unsupported"]:
                raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)

    def _build_module(self):
        m = types.ModuleType("pynvml")
        m.__file__ = __file__
        for name in dir(_real):
            if name.startswith(("NVML_", "NVMLError", "nvmlClocks", "nvmlMemory_v")):
                setattr(m, name, getattr(_real, name))
        f = self

        def nvmlInit():
            f.calls[("nvmlInit", None)] += 1
            if f.scenario.get("init_error"):
                raise _real.NVMLError(f.scenario["init_error"])
            f.initialized = True

        def nvmlShutdown():
            f.initialized = False

        def nvmlSystemGetDriverVersion():
            f._enter("nvmlSystemGetDriverVersion")
            return f._s(f.scenario["driver_version"])

        def nvmlSystemGetCudaDriverVersion():
            f._enter("nvmlSystemGetCudaDriverVersion")
            return f.scenario["cuda_driver_version"]

        def nvmlSystemGetNVMLVersion():
            f._enter("nvmlSystemGetNVMLVersion")
            return f._s(f.scenario["nvml_version"])

        def nvmlDeviceGetCount():
            f._enter("nvmlDeviceGetCount")
            return len(f.gpus)

        def nvmlDeviceGetHandleByIndex(i):
            f._enter("nvmlDeviceGetHandleByIndex")
            if not 0 <= i < len(f.gpus):
                raise _real.NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
            if f.gpus[i].get("lost"):
                raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
            return _Handle(i)

        def simple(fname, fn):
            def wrapper(h, *a, **kw):
                f._enter(fname, h)
                return fn(h, *a, **kw)

            wrapper.__name__ = fname
            setattr(m, fname, wrapper)

        def name(h):
            return f._s(f.gpus[h.index]["name"])

        def uuid(h):
            if h.mig is not None:
                return f._s(f.gpus[h.index]["mig_devices"][h.mig]["uuid"])
            return f._s(f.gpus[h.index]["uuid"])

        def pci(h):
            bus = f.gpus[h.index]["pci_bus_id"]
            return _Obj(busId=f._s(bus), busIdLegacy=f._s(bus[4:]))

        def mem(h, version=None):
            if h.mig is not None:
                md = f.gpus[h.index]["mig_devices"][h.mig]
                return _Obj(
                    total=md["memory_total"],
                    used=md["memory_used"],
                    free=md["memory_total"] - md["memory_used"],
                )
            total, used = f._val(h.index, "memory_total"), f._val(h.index, "memory_used")
            reserved = f._val(h.index, "memory_reserved")
            if version and not f.gpus[h.index].get("memory_v2", True):  # a driver before R510
                raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
            if version:  # nvmlMemory_v2_t: reserved apart, used without it (as nvidia-smi)
                return _Obj(
                    version=version,
                    total=total,
                    reserved=reserved,
                    used=used,
                    free=total - reserved - used,
                )
            return _Obj(
                total=total, used=used + reserved, free=total - used - reserved
            )  # legacy v1

        def util(h):
            f.ticks[h.index] += 1
            return _Obj(gpu=f._val(h.index, "util_gpu"), memory=f._val(h.index, "util_mem"))

        def procs(h, key="processes"):
            # bytes None = NVML_VALUE_NOT_AVAILABLE, which pynvml returns as usedGpuMemory=None
            # (Windows WDDM)
            return [
                _Obj(pid=pid, usedGpuMemory=b(f.ticks[h.index]) if callable(b) else b)
                for pid, b in f.gpus[h.index].get(key, [])
            ]

        def driver_model(h):
            model = f.gpus[h.index].get("driver_model")
            if model is None:
                raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
            return list(model)

        def nvmlSystemGetProcessName(pid):
            f._enter("nvmlSystemGetProcessName")
            got = f.scenario.get("process_names", {}).get(pid)
            if got is None:
                raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
            if isinstance(got, int):
                raise _real.NVMLError(got)
            return f._s(got)

        def mig_handle(h, i):
            devs = f.gpus[h.index]["mig_devices"]
            if i >= len(devs):
                raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
            return _Handle(h.index, mig=i)

        simple("nvmlDeviceGetName", name)
        simple("nvmlDeviceGetUUID", uuid)
        simple("nvmlDeviceGetPciInfo", pci)
        simple("nvmlDeviceGetCudaComputeCapability", lambda h: f.gpus[h.index]["cc"])
        simple("nvmlDeviceGetMemoryInfo", mem)
        simple("nvmlDeviceGetUtilizationRates", util)
        simple("nvmlDeviceGetTemperature", lambda h, s: f._val(h.index, "temperature"))
        simple("nvmlDeviceGetPowerUsage", lambda h: f._val(h.index, "power_draw_mw"))
        simple("nvmlDeviceGetEnforcedPowerLimit", lambda h: f._val(h.index, "power_limit_mw"))
        simple("nvmlDeviceGetFanSpeed", lambda h: f._val(h.index, "fan"))
        simple(
            "nvmlDeviceGetClockInfo",
            lambda h, t: f._val(h.index, "clock_sm" if t == 1 else "clock_mem"),
        )
        simple("nvmlDeviceGetPerformanceState", lambda h: f._val(h.index, "pstate"))
        simple("nvmlDeviceGetCurrentClocksEventReasons", lambda h: f._val(h.index, "throttle"))
        simple("nvmlDeviceGetCurrentClocksThrottleReasons", lambda h: f._val(h.index, "throttle"))
        simple("nvmlDeviceGetPersistenceMode", lambda h: f.gpus[h.index]["persistence"])
        simple("nvmlDeviceGetMigMode", lambda h: f.gpus[h.index]["mig_mode"])
        simple("nvmlDeviceGetComputeRunningProcesses", procs)
        simple("nvmlDeviceGetGraphicsRunningProcesses", lambda h: procs(h, "graphics_processes"))
        simple("nvmlDeviceGetDriverModel", driver_model)
        simple(
            "nvmlDeviceGetMaxClockInfo",
            lambda h, t: f._val(h.index, "max_clock_sm" if t == 1 else "max_clock_mem"),
        )

        def ecc(h):
            e = f.gpus[h.index]["ecc"]
            if not e.get("current"):
                raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
            return e

        simple("nvmlDeviceGetEccMode", lambda h: (ecc(h)["current"], ecc(h)["current"]))

        def ecc_count(h, et, ct):
            if et != 1:
                return 0
            n = ecc(h).get("volatile_uncorrected" if ct == 0 else "aggregate_uncorrected", 0)
            if n is None:  # a counter this GPU does not report (nvidia-smi: N/A)
                raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
            return n

        simple("nvmlDeviceGetTotalEccErrors", ecc_count)
        simple(
            "nvmlDeviceGetRetiredPagesPendingStatus",
            lambda h: ecc(h).get("retired_pages_pending", 0),
        )
        simple(
            "nvmlDeviceGetRemappedRows",
            lambda h: (0, 0, ecc(h).get("remapped_pending", 0), ecc(h).get("remapped_failure", 0)),
        )
        simple(
            "nvmlDeviceGetMaxMigDeviceCount", lambda h: 7 if f.gpus[h.index]["mig_mode"][0] else 0
        )
        simple("nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
        for fn in (
            nvmlInit,
            nvmlShutdown,
            nvmlSystemGetDriverVersion,
            nvmlSystemGetCudaDriverVersion,
            nvmlSystemGetNVMLVersion,
            nvmlDeviceGetCount,
            nvmlDeviceGetHandleByIndex,
            nvmlSystemGetProcessName,
        ):
            setattr(m, fn.__name__, fn)
        if "library_path" in self.scenario:
            m.nvmlLib = _Obj(_name=self.scenario["library_path"])
        return m

    def call_count(self, fname, index=None):
        """How many times ``fname`` was called (on GPU ``index`` when given)."""
        return self.calls[(fname, index)]


def install(fake: FakeNVML, monkeypatch=None):
    """Put ``fake.module`` in ``sys.modules['pynvml']`` and reset cudamagic's NVML state.

    With ``monkeypatch`` the change is undone after the test; without it (inside a
    kernel started by a test) it stays for the life of the process.
    """
    from cudamagic.core import nvml

    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, "pynvml", fake.module)
    else:
        sys.modules["pynvml"] = fake.module
    nvml.reset()
    return fake
