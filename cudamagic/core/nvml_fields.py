"""What each NVML field is: how it is read, its unit, and which values can be true.

The per-field readers (``nvmlDevice...`` calls grouped so one NVML call fills several nvidia-smi
fields), the units of every field (raw NVML units: bytes, mW, MHz, %, C), the clock-event reason
bits, and the one plausibility check every number read from NVML goes through (bounds documented
beside it). :mod:`cudamagic.core.nvml` (the seam: init, error translation, ``Device``) uses them;
nothing here initialises NVML or keeps state.
"""

from __future__ import annotations

from . import platform
from .na import NA, is_na


def decode(value) -> str:
    """Return ``value`` as ``str`` whether the binding gave ``bytes`` or ``str``."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


# ---- per-device reads -------------------------------------------------------------

# Answers of nvmlDeviceGetMemoryInfo_v2 that mean "this driver has no v2 memory call": use v1.
_MEM_V1_CODES = {
    3,
    13,
    25,
}  # NVML_ERROR_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH


def read_memory(mod, h, dev=None):
    """``nvmlDeviceGetMemoryInfo`` with the v2 structure where the driver has it (R510 and later).

    v2 reports the driver's reserve apart (``memory.reserved``) and ``used`` without it, as
    ``nvidia-smi``
    prints. On older drivers the legacy v1 structure is read: its ``used`` includes the reserve, so
    ``memory.reserved`` is NA and ``memory.api`` says ``"v1"``.
    """
    version = getattr(mod, "nvmlMemory_v2", None)
    if version is not None and not (dev is not None and dev.memory_api == "v1"):
        try:
            m = mod.nvmlDeviceGetMemoryInfo(h, version=version)
        except TypeError:  # a binding whose function takes no version
            m = None
        except Exception as exc:
            if getattr(exc, "value", None) not in _MEM_V1_CODES:
                raise
            m = None
        if m is not None and getattr(m, "reserved", None) is not None:
            if dev is not None:
                dev.memory_api = "v2"
            return {
                "memory.total": int(m.total),
                "memory.used": int(m.used),
                "memory.free": int(m.free),
                "memory.reserved": int(m.reserved),
                "memory.api": "v2",
            }
    if dev is not None:
        dev.memory_api = "v1"
    m = mod.nvmlDeviceGetMemoryInfo(h)
    return {
        "memory.total": int(m.total),
        "memory.used": int(m.used),
        "memory.free": int(m.free),
        "memory.reserved": MEMORY_V1_RESERVED,
        "memory.api": "v1",
    }


def _q_util(mod, h):
    u = mod.nvmlDeviceGetUtilizationRates(h)
    return {"utilization.gpu": int(u.gpu), "utilization.memory": int(u.memory)}


def _int_reader(field: str, function: str, *constants: tuple[str, int]):
    """A reader of one integer field: ``pynvml.<function>(handle, *constants)``.

    Args:
        field: the nvidia-smi field it fills.
        function: the ``pynvml`` function to call.
        *constants: ``(pynvml constant name, its value if the binding lacks it)`` arguments.
    """

    def read(mod, h):
        if not constants:
            return {field: int(getattr(mod, function)(h))}
        args = [getattr(mod, name, default) for name, default in constants]
        return {field: int(getattr(mod, function)(h, *args))}

    return read


def _q_throttle(mod, h):
    fn = (
        getattr(mod, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or mod.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return {"clocks_event_reasons.active": int(fn(h))}


def _q_name(mod, h):
    return {"name": decode(mod.nvmlDeviceGetName(h))}


def _q_uuid(mod, h):
    return {"uuid": decode(mod.nvmlDeviceGetUUID(h))}


def _q_pci(mod, h):
    pci = mod.nvmlDeviceGetPciInfo(h)
    bus = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", "")
    return {"pci.bus_id": decode(bus)}


def _q_cc(mod, h):
    major, minor = mod.nvmlDeviceGetCudaComputeCapability(h)
    return {"compute_cap": f"{int(major)}.{int(minor)}"}


def _enabled(flag) -> str:
    return "Enabled" if int(flag) else "Disabled"


def _q_persistence(mod, h):
    return {"persistence_mode": _enabled(mod.nvmlDeviceGetPersistenceMode(h))}


def _q_clocks_max(mod, h):
    return {
        **_int_reader("clocks.max.sm", "nvmlDeviceGetMaxClockInfo", _SM)(mod, h),
        **_int_reader("clocks.max.mem", "nvmlDeviceGetMaxClockInfo", _MEM)(mod, h),
    }


def _q_ecc_mode(mod, h):
    current, _pending = mod.nvmlDeviceGetEccMode(h)
    return {"ecc.mode.current": _enabled(current)}


def _q_remapped(mod, h):
    _corr, _unc, pending, failure = mod.nvmlDeviceGetRemappedRows(h)
    return {"remapped_rows.pending": int(pending), "remapped_rows.failure": int(failure)}


def _q_mig(mod, h):
    current, pending = mod.nvmlDeviceGetMigMode(h)
    return {"mig.mode.current": _enabled(current), "mig.mode.pending": _enabled(pending)}


#: ``nvmlDeviceGetDriverModel`` values -> the words of nvidia-smi's header.
DRIVER_MODELS = {0: "WDDM", 1: "TCC", 2: "MCDM"}


def _q_driver_model(mod, h):
    if not platform.is_windows():  # NVML answers NotSupported elsewhere: do not ask
        na = NA("the driver model (WDDM/TCC) exists only on Windows", "not_supported")
        return {"driver_model.current": na, "driver_model.pending": na}
    fn = getattr(mod, "nvmlDeviceGetDriverModel", None)
    if fn is None:
        na = NA("this nvidia-ml-py has no nvmlDeviceGetDriverModel", "not_supported")
        return {"driver_model.current": na, "driver_model.pending": na}
    current, pending = fn(h)
    return {
        "driver_model.current": DRIVER_MODELS.get(int(current), f"model {int(current)}"),
        "driver_model.pending": DRIVER_MODELS.get(int(pending), f"model {int(pending)}"),
    }


_SM, _MEM = ("NVML_CLOCK_SM", 1), ("NVML_CLOCK_MEM", 2)
_ECC = ("nvmlDeviceGetTotalEccErrors", ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1))

#: Query group -> (the nvidia-smi fields it fills, its reader ``(pynvml, handle) -> {field:
#: value}``). One NVML call fills a group; a failure is remembered per (GPU, group).
GROUPS = {
    "name": (["name"], _q_name),
    "uuid": (["uuid"], _q_uuid),
    "pci": (["pci.bus_id"], _q_pci),
    "compute_cap": (["compute_cap"], _q_cc),
    "memory": (
        ["memory.total", "memory.used", "memory.free", "memory.reserved", "memory.api"],
        read_memory,
    ),
    "utilization": (["utilization.gpu", "utilization.memory"], _q_util),
    "temperature": (
        ["temperature.gpu"],
        _int_reader("temperature.gpu", "nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU", 0)),
    ),
    "power_draw": (["power.draw"], _int_reader("power.draw", "nvmlDeviceGetPowerUsage")),
    "power_limit": (
        ["power.limit"],
        _int_reader("power.limit", "nvmlDeviceGetEnforcedPowerLimit"),
    ),
    "fan": (["fan.speed"], _int_reader("fan.speed", "nvmlDeviceGetFanSpeed")),
    "clock_sm": (["clocks.sm"], _int_reader("clocks.sm", "nvmlDeviceGetClockInfo", _SM)),
    "clock_mem": (["clocks.mem"], _int_reader("clocks.mem", "nvmlDeviceGetClockInfo", _MEM)),
    "pstate": (["pstate"], _int_reader("pstate", "nvmlDeviceGetPerformanceState")),
    "throttle": (["clocks_event_reasons.active"], _q_throttle),
    "persistence": (["persistence_mode"], _q_persistence),
    "mig": (["mig.mode.current", "mig.mode.pending"], _q_mig),
    "clocks_max": (["clocks.max.sm", "clocks.max.mem"], _q_clocks_max),
    "ecc_mode": (["ecc.mode.current"], _q_ecc_mode),
    # two groups: an A100 in MIG mode reports the aggregate count and no volatile one
    "ecc_volatile": (
        ["ecc.errors.uncorrected.volatile.total"],
        _int_reader("ecc.errors.uncorrected.volatile.total", *_ECC, ("NVML_VOLATILE_ECC", 0)),
    ),
    "ecc_aggregate": (
        ["ecc.errors.uncorrected.aggregate.total"],
        _int_reader("ecc.errors.uncorrected.aggregate.total", *_ECC, ("NVML_AGGREGATE_ECC", 1)),
    ),
    "retired_pages": (
        ["retired_pages.pending"],
        _int_reader("retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus"),
    ),
    "remapped_rows": (["remapped_rows.pending", "remapped_rows.failure"], _q_remapped),
    "driver_model": (["driver_model.current", "driver_model.pending"], _q_driver_model),
}
#: nvidia-smi field -> its query group.
FIELD_GROUP = {field: group for group, (fields, _) in GROUPS.items() for field in fields}

#: Units of each field as stored (raw NVML units). nvidia-smi prints MiB and W; we convert only
#: when rendering.
FIELD_UNITS = {
    "memory.total": "bytes",
    "memory.used": "bytes",
    "memory.free": "bytes",
    "memory.reserved": "bytes",
    "utilization.gpu": "%",
    "utilization.memory": "%",
    "temperature.gpu": "degrees C",
    "power.draw": "mW",
    "power.limit": "mW",
    "fan.speed": "%",
    "clocks.sm": "MHz",
    "clocks.mem": "MHz",
    "pstate": "P-state number (0 = max performance)",
    "clocks_event_reasons.active": "bitmask",
    "clocks.max.sm": "MHz",
    "clocks.max.mem": "MHz",
    "ecc.errors.uncorrected.volatile.total": "count",
    "ecc.errors.uncorrected.aggregate.total": "count",
    "retired_pages.pending": "0/1",
    "remapped_rows.pending": "0/1",
    "remapped_rows.failure": "0/1",
}

#: ``memory.reserved`` when only the legacy v1 memory call exists (drivers before R510).
MEMORY_V1_RESERVED = NA(
    "this driver's NVML has only the legacy v1 memory call (before R510): its memory.used "
    "includes the driver's reserved memory",
    "not_supported",
)

# ---- plausibility: every number read from NVML passes here ---------------------------------------
#
# Bounds (a value outside them is what a sentinel, a broken sensor or a binding/driver struct
# mismatch produces, never a real reading):
# * 0xFFFFFFFF / 0xFFFFFFFFFFFFFFFF (NVML_VALUE_NOT_AVAILABLE_uint / _ulonglong): NVML's "not
# available".
#   * percentages (utilization.gpu/.memory, fan.speed): 0..100 (nvidia-smi's range).
#   * temperature.gpu: 0..150 degrees C (GPUs shut down near 100-110 C; the sensor is unsigned).
# * power.draw: at most 2 x power.limit when the limit is known (transients reach ~1.5 x), and at
# most
#     5,000,000 mW (5 kW) always; power.limit at most 5,000,000 mW (the largest boards are ~1.2 kW).
# * clocks.sm / clocks.mem: at most 1.05 x the GPU's maximum (nvmlDeviceGetMaxClockInfo) when known,
# and
#     at most 20,000 MHz always (GDDR6X reports ~10,500 MHz).
#   * memory.used / .free / .reserved: at most memory.total; memory.total at most 2**50 bytes
#     (1 PiB).
#   * pstate: 0..15 (NVML_PSTATE_UNKNOWN is 32).
# * process rows: pid 1..4,194,304 (Linux PID_MAX_LIMIT on 64-bit), used memory at most
# memory.total.
#   * counters (ECC errors) and flags: only the sentinels.
PID_MAX = 4_194_304
MAX_POWER_MW = 5_000_000
MAX_CLOCK_MHZ = 20_000
MAX_TEMPERATURE_C = 150
MAX_MEMORY_BYTES = 2**50
_PCT_FIELDS = ("utilization.gpu", "utilization.memory", "fan.speed")


def implausible(field, raw, why):
    """The NA for a number NVML returned that cannot be true."""
    return NA(f"implausible reading: NVML returned {raw} for {field} ({why})", "implausible")


#: Absolute bounds: field -> (largest plausible value, unit shown, why a larger one cannot be).
_TOP = {
    **dict.fromkeys(_PCT_FIELDS, (100, " %", "a percentage above 100")),
    "temperature.gpu": (
        MAX_TEMPERATURE_C,
        " C",
        f"above {MAX_TEMPERATURE_C} C, outside a physical range",
    ),
    "power.draw": (MAX_POWER_MW, " mW", f"above {MAX_POWER_MW // 1000} W, more than any GPU draws"),
    "power.limit": (MAX_POWER_MW, " mW", f"above {MAX_POWER_MW // 1000} W"),
    **dict.fromkeys(
        ("clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem"),
        (MAX_CLOCK_MHZ, " MHz", f"above {MAX_CLOCK_MHZ} MHz"),
    ),
    "memory.total": (MAX_MEMORY_BYTES, " bytes", "more than 1 PiB"),
}
#: Bounds by another reading of the same GPU: field -> (that reading, its largest sane value,
#: factor, unit shown, why, with ``{}`` for that reading).
_BY = {
    "power.draw": (
        "power.limit",
        MAX_POWER_MW,
        2,
        " mW",
        "more than twice the enforced limit {} mW",
    ),
    **{
        f"clocks.{c}": (
            f"clocks.max.{c}",
            MAX_CLOCK_MHZ,
            1.05,
            " MHz",
            "above this GPU's maximum {} MHz",
        )
        for c in ("sm", "mem")
    },
    **dict.fromkeys(
        ("memory.used", "memory.free", "memory.reserved"),
        ("memory.total", MAX_MEMORY_BYTES, 1, " bytes", "more than the GPU's {} bytes"),
    ),
}


def _bound(field, ctx):
    """``(the reading bounding field in ctx, factor)``, or ``(None, 0)`` where none applies."""
    other, sane, factor, *_ = _BY[field]
    b = ctx.get(other)
    return (b, factor) if isinstance(b, int) and 0 < b <= sane else (None, 0)


def check_value(field: str, value, context: dict | None = None):
    """One NVML number through the plausibility bounds above.

    Returns it unchanged or an NA saying why.

    Args:
        field: nvidia-smi field name (``"power.draw"``...).
        value: the raw number (NVML units) or NA.
        context: other raw readings of the same GPU used as bounds (``power.limit``,
            ``memory.total``, ``clocks.max.sm``, ``clocks.max.mem``); missing or NA entries leave
            only the absolute bound.
    """
    if is_na(value) or isinstance(value, str) or value is None:
        return value
    v = int(value)
    if v == 0xFFFFFFFFFFFFFFFF or (v == 0xFFFFFFFF and FIELD_UNITS.get(field) != "bytes"):
        return NA(f"NVML returned its 'not available' value 0x{v:X} for {field}", "not_available")
    if v < 0:
        return implausible(field, v, "negative")
    top, unit, why = _TOP.get(field, (v, "", ""))
    if v > top:
        return implausible(field, f"{v}{unit}", why)
    if field in _BY:
        b, factor = _bound(field, context or {})
        if b is not None and v > b * factor:
            return implausible(field, f"{v}{_BY[field][3]}", _BY[field][4].format(b))
    if field == "pstate" and v > 15:
        return NA(f"NVML returned P-state {v} (unknown)", "not_available")
    return value


def check_values(values: dict, context: dict | None = None) -> dict:
    """:func:`check_value` on every entry of ``values`` (``{field: raw}``); a new dict.

    ``values`` + ``context`` are the bounds.
    """
    # a bound that is itself no reading (a sentinel, negative, above its own absolute bound, an
    # NA) is left out by _bound: without a context, the values are their own context
    ctx = (
        values if not context else {**context, **{k: v for k, v in values.items() if not is_na(v)}}
    )
    out = {}
    for k, v in values.items():  # a plain int below every bound passes at once (~20 per GPU)
        if type(v) is int and 0 <= v <= _PLAIN_TOP.get(k, 0xFFFFFFFE):
            if k not in _BY:
                out[k] = v
                continue
            b, factor = _bound(k, ctx)
            if b is None or v <= b * factor:
                out[k] = v
                continue
        out[k] = check_value(k, v, ctx)
    return out


#: The largest value of a field :func:`check_value` passes whatever the other readings: below
#: NVML's "not available" sentinels (0xFFFFFFFF counts as bytes), P-states 0-15.
_PLAIN_TOP = {
    f: _TOP[f][0]
    if f in _TOP
    else 15
    if f == "pstate"
    else 2**64 - 2
    if unit == "bytes"
    else 0xFFFFFFFE
    for f, unit in FIELD_UNITS.items()
}


def check_process(pid, used, memory_total=None):
    """``(pid_ok, used)`` for one process row.

    An impossible pid (0 or above Linux PID_MAX_LIMIT) makes the row implausible; used memory goes
    through the sentinel and ``memory.total`` bounds.
    """
    ok = isinstance(pid, int) and 0 < pid <= PID_MAX
    if (
        type(used) is int
        and type(memory_total) is int
        and 0 <= used <= memory_total <= MAX_MEMORY_BYTES
    ):
        return ok, used  # within the GPU's memory: what check_value passes, at once
    if not is_na(used):
        used = check_value("memory.used", used, {"memory.total": memory_total})
        if is_na(used) and used.code == "implausible":
            used = NA(
                used.reason.replace("memory.used", "a process's used GPU memory"), "implausible"
            )
    return ok, used


#: Clock event (throttle) reason bits -> words (nvmlClocksEventReason*).
THROTTLE_REASONS = [
    (0x1, "idle"),
    (0x2, "application clocks setting"),
    (0x4, "power cap"),
    (0x8, "hardware slowdown"),
    (0x10, "sync boost"),
    (0x20, "thermal (software)"),
    (0x40, "thermal (hardware)"),
    (0x80, "power brake (hardware)"),
    (0x100, "display clock setting"),
]


def decode_throttle_reasons(mask):
    """Bitmask from ``nvmlDeviceGetCurrentClocksEventReasons`` -> list of words (``[]`` = none)."""
    if is_na(mask):
        return mask
    return [words for bit, words in THROTTLE_REASONS if int(mask) & bit]
