"""Each NVML field as nvidia-smi shows it, read through ``Device.read``; the bounds at their edges.

A hand-made ``pynvml`` answers each call the way the real binding does for one GPU (an
A100-SXM4-80GB on R535 unless said otherwise), so every reader in ``cudamagic.core.nvml_fields`` is
reached with the handle NVML gave and the constants the binding defines (or lacks, as old bindings
do).
"""

from __future__ import annotations

import sys
import types

import pytest

from cudamagic.core import nvml, platform
from cudamagic.core.na import NA, is_na
from cudamagic.core.nvml_fields import MEMORY_V1_RESERVED

MIB = 1024**2
GIB = 1024**3


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class Handle:
    """What nvmlDeviceGetHandleByIndex returns: every call below refuses any other handle."""


H = Handle()


def _on(h):
    if h is not H:
        raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT


@pytest.fixture
def smi(monkeypatch):
    """A ``pynvml`` answering as the real binding does for an A100-SXM4-80GB (R535, Linux)."""
    mod = types.ModuleType("pynvml")
    mod.nvmlInit = mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetHandleByIndex = lambda i: H

    def answer(name, value):
        def fn(h, *args):
            _on(h)
            return value(*args) if callable(value) else value

        setattr(mod, name, fn)

    answer("nvmlDeviceGetName", b"NVIDIA A100-SXM4-80GB")
    answer("nvmlDeviceGetUUID", b"GPU-6d9a3f5c-2a4e-1b0c-8f3e-5d2c7b1a9e40")
    answer(
        "nvmlDeviceGetPciInfo",
        types.SimpleNamespace(busId=b"00000000:07:00.0", busIdLegacy=b"0000:07:00.0"),
    )
    answer("nvmlDeviceGetCudaComputeCapability", (8, 0))
    answer("nvmlDeviceGetUtilizationRates", types.SimpleNamespace(gpu=87, memory=41))
    # NVML_TEMPERATURE_GPU is 0; any other sensor is not the GPU's
    answer("nvmlDeviceGetTemperature", lambda sensor: {0: 64}[sensor])
    answer("nvmlDeviceGetPowerUsage", 287_412)
    answer("nvmlDeviceGetEnforcedPowerLimit", 400_000)
    answer("nvmlDeviceGetFanSpeed", 0)
    answer("nvmlDeviceGetClockInfo", lambda kind: {1: 1410, 2: 1593}[kind])  # SM 1, MEM 2
    answer("nvmlDeviceGetMaxClockInfo", lambda kind: {1: 1410, 2: 1593}[kind])
    answer("nvmlDeviceGetPerformanceState", 0)
    answer("nvmlDeviceGetCurrentClocksEventReasons", 0x4 | 0x20)
    answer("nvmlDeviceGetPersistenceMode", 1)
    answer("nvmlDeviceGetMigMode", (0, 1))  # enabled at the next reset
    answer("nvmlDeviceGetEccMode", (1, 0))
    # (error type: UNCORRECTED 1, counter: VOLATILE 0 / AGGREGATE 1)
    answer("nvmlDeviceGetTotalEccErrors", lambda et, ct: {(1, 0): 0, (1, 1): 3}[(et, ct)])
    answer("nvmlDeviceGetRetiredPagesPendingStatus", 0)
    answer("nvmlDeviceGetRemappedRows", (2, 1, 1, 0))  # corrected, uncorrected, pending, failure
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    nvml.reset()
    yield mod
    nvml.reset()


def _read(*fields):
    return nvml.device(0).read(list(fields))


def test_every_field_reads_as_nvidia_smi_prints_it(smi):
    assert _read(
        "name",
        "uuid",
        "pci.bus_id",
        "compute_cap",
        "utilization.gpu",
        "utilization.memory",
        "temperature.gpu",
        "power.draw",
        "power.limit",
        "fan.speed",
        "clocks.sm",
        "clocks.mem",
        "clocks.max.sm",
        "clocks.max.mem",
        "pstate",
        "clocks_event_reasons.active",
        "persistence_mode",
        "mig.mode.current",
        "mig.mode.pending",
        "ecc.mode.current",
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.uncorrected.aggregate.total",
        "retired_pages.pending",
        "remapped_rows.pending",
        "remapped_rows.failure",
    ) == {
        "name": "NVIDIA A100-SXM4-80GB",
        "uuid": "GPU-6d9a3f5c-2a4e-1b0c-8f3e-5d2c7b1a9e40",
        "pci.bus_id": "00000000:07:00.0",
        "compute_cap": "8.0",
        "utilization.gpu": 87,
        "utilization.memory": 41,
        "temperature.gpu": 64,
        "power.draw": 287_412,
        "power.limit": 400_000,
        "fan.speed": 0,
        "clocks.sm": 1410,
        "clocks.mem": 1593,
        "clocks.max.sm": 1410,
        "clocks.max.mem": 1593,
        "pstate": 0,
        "clocks_event_reasons.active": 0x24,
        "persistence_mode": "Enabled",
        "mig.mode.current": "Disabled",
        "mig.mode.pending": "Enabled",
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 0,
        "ecc.errors.uncorrected.aggregate.total": 3,
        "retired_pages.pending": 0,
        "remapped_rows.pending": 1,
        "remapped_rows.failure": 0,
    }
    assert nvml.decode_throttle_reasons(0x24) == ["power cap", "thermal (software)"]


def test_the_opposite_modes_and_a_failing_row_remap(smi):
    smi.nvmlDeviceGetPersistenceMode = lambda h: 0
    smi.nvmlDeviceGetMigMode = lambda h: (1, 0)  # disabled at the next reset
    smi.nvmlDeviceGetEccMode = lambda h: (0, 1)
    smi.nvmlDeviceGetRemappedRows = lambda h: (0, 4, 0, 1)
    assert _read(
        "persistence_mode",
        "mig.mode.current",
        "mig.mode.pending",
        "ecc.mode.current",
        "remapped_rows.pending",
        "remapped_rows.failure",
    ) == {
        "persistence_mode": "Disabled",
        "mig.mode.current": "Enabled",
        "mig.mode.pending": "Disabled",
        "ecc.mode.current": "Disabled",
        "remapped_rows.pending": 0,
        "remapped_rows.failure": 1,
    }


def test_a_binding_without_the_constants_passes_nvmls_values(smi):
    # the hand-made module defines no NVML_* constant, as bindings older than the constant
    assert not [n for n in dir(smi) if n.startswith("NVML_")]
    assert _read("temperature.gpu", "clocks.sm", "clocks.mem") == {
        "temperature.gpu": 64,
        "clocks.sm": 1410,
        "clocks.mem": 1593,
    }
    # a binding that defines them: its values are passed (here deliberately other numbers)
    smi.NVML_CLOCK_SM, smi.NVML_CLOCK_MEM = 2, 1
    smi.NVML_VOLATILE_ECC, smi.NVML_AGGREGATE_ECC = 1, 0
    nvml.reset()  # a new GPU object: the maximum clocks are read again with the new constants
    assert _read(
        "clocks.sm",
        "clocks.mem",
        "ecc.errors.uncorrected.volatile.total",
        "ecc.errors.uncorrected.aggregate.total",
    ) == {
        "clocks.sm": 1593,
        "clocks.mem": 1410,
        "ecc.errors.uncorrected.volatile.total": 3,
        "ecc.errors.uncorrected.aggregate.total": 0,
    }


def test_bytes_names_lose_the_c_strings_padding_and_bad_bytes_do_not_raise(smi):
    smi.nvmlDeviceGetName = lambda h: b"Tesla T4\x00\x00\x00"
    smi.nvmlDeviceGetUUID = lambda h: "GPU-\x00str"  # a str is kept as it is
    assert _read("name", "uuid") == {"name": "Tesla T4", "uuid": "GPU-\x00str"}
    smi.nvmlDeviceGetName = lambda h: b"NVIDIA GeForce GTX TITAN X\x00"  # only NULs are padding
    assert nvml.device(0).get("name") == "NVIDIA GeForce GTX TITAN X"
    smi.nvmlDeviceGetName = lambda h: b"\x00GPU \xff\xfe"
    assert nvml.device(0).get("name") == "\x00GPU \ufffd\ufffd"


def test_pci_bus_id_of_a_binding_with_only_the_legacy_field(smi):
    smi.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(
        busId=b"", busIdLegacy=b"0000:3B:00.0"
    )
    assert nvml.device(0).get("pci.bus_id") == "0000:3B:00.0"
    smi.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busIdLegacy=b"0000:3B:00.0")
    assert nvml.device(0).get("pci.bus_id") == "0000:3B:00.0"
    smi.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace()
    assert nvml.device(0).get("pci.bus_id") == ""


def test_throttle_reasons_of_a_binding_before_the_clocks_event_name(smi):
    del smi.nvmlDeviceGetCurrentClocksEventReasons
    smi.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: _on(h) or 0x1
    assert nvml.device(0).get("clocks_event_reasons.active") == 0x1
    assert nvml.decode_throttle_reasons(0x1) == ["idle"]
    # where both exist, the current name is asked
    smi.nvmlDeviceGetCurrentClocksEventReasons = lambda h: _on(h) or 0x40
    assert nvml.device(0).get("clocks_event_reasons.active") == 0x40


@pytest.mark.parametrize(
    "mask, words",
    [
        (0, []),
        (
            0x1FF,
            [
                "idle",
                "application clocks setting",
                "power cap",
                "hardware slowdown",
                "sync boost",
                "thermal (software)",
                "thermal (hardware)",
                "power brake (hardware)",
                "display clock setting",
            ],
        ),
        (0x80 | 0x8, ["hardware slowdown", "power brake (hardware)"]),
        (0x200, []),  # a bit this table does not know
    ],
)
def test_throttle_reason_words(mask, words):
    assert nvml.decode_throttle_reasons(mask) == words


def test_throttle_reasons_of_an_unreadable_mask_stay_na():
    na = NA("not supported on this GPU", "not_supported")
    assert nvml.decode_throttle_reasons(na) is na


# ---- the Windows driver model ------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, current, pending",
    [
        ((0, 0), "WDDM", "WDDM"),
        ((1, 1), "TCC", "TCC"),
        ((2, 0), "MCDM", "WDDM"),  # MCDM now, WDDM after the reboot nvidia-smi -dm asked for
        ((0, 1), "WDDM", "TCC"),
        ((7, 0), "model 7", "WDDM"),  # a model newer than this table
        ((0, 9), "WDDM", "model 9"),
    ],
)
def test_driver_model_on_windows(smi, monkeypatch, answer, current, pending):
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    smi.nvmlDeviceGetDriverModel = lambda h: _on(h) or answer
    assert _read("driver_model.current", "driver_model.pending") == {
        "driver_model.current": current,
        "driver_model.pending": pending,
    }


def test_driver_model_elsewhere_is_not_asked(smi, monkeypatch):
    monkeypatch.setattr(platform, "SYSTEM", "linux")
    asked = []
    smi.nvmlDeviceGetDriverModel = lambda h: asked.append(h) or (0, 0)
    got = _read("driver_model.current", "driver_model.pending")
    na = NA("the driver model (WDDM/TCC) exists only on Windows", "not_supported")
    assert got == {"driver_model.current": na, "driver_model.pending": na} and asked == []


def test_driver_model_with_a_binding_that_lacks_the_call(smi, monkeypatch):
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    got = _read("driver_model.current", "driver_model.pending")
    na = NA("this nvidia-ml-py has no nvmlDeviceGetDriverModel", "not_supported")
    assert got == {"driver_model.current": na, "driver_model.pending": na}


# ---- memory: the v2 structure, and v1 on drivers before R510 ------------------------------------


def _mem(total, used, reserved=None):
    m = types.SimpleNamespace(total=total, used=used, free=total - used - (reserved or 0))
    if reserved is not None:
        m.reserved = reserved
    return m


V2 = object()  # pynvml.nvmlMemory_v2


def _memory_call(v2, v1=None):
    """nvmlDeviceGetMemoryInfo: ``v2`` answers version=V2 (a value or an exception), ``v1`` none."""
    asked = []

    def get(h, version=None):
        _on(h)
        asked.append(version)
        got = v2 if version is V2 else v1
        if isinstance(got, BaseException):
            raise got
        return got

    return get, asked


A100_V2 = _mem(81920 * MIB, 4 * MIB, 908 * MIB)  # nvidia-smi: 81920 total, 908 reserved, 4 used
A100_V1 = _mem(81920 * MIB, 912 * MIB)  # the legacy call counts the reserve as used


def test_memory_v2_gives_the_reserve_apart_as_nvidia_smi(smi):
    smi.nvmlMemory_v2 = V2
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(A100_V2, A100_V1)
    dev = nvml.device(0)
    fields = ["memory.total", "memory.used", "memory.free", "memory.reserved", "memory.api"]
    assert dev.read(fields) == {
        "memory.total": 81920 * MIB,
        "memory.used": 4 * MIB,
        "memory.free": 81008 * MIB,
        "memory.reserved": 908 * MIB,
        "memory.api": "v2",
    }
    assert asked == [V2] and dev.memory_api == "v2" and dev.memory_total == 81920 * MIB


@pytest.mark.parametrize(
    "code", [3, 13, 25]
)  # NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH
def test_memory_falls_back_to_v1_where_the_driver_has_no_v2(smi, code):
    smi.nvmlMemory_v2 = V2
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(NVMLError(code), A100_V1)
    dev = nvml.device(0)
    fields = ["memory.total", "memory.used", "memory.free", "memory.reserved", "memory.api"]
    got = dev.read(fields)
    assert got == {
        "memory.total": 81920 * MIB,
        "memory.used": 912 * MIB,
        "memory.free": 81008 * MIB,
        "memory.reserved": MEMORY_V1_RESERVED,
        "memory.api": "v1",
    }
    assert got["memory.reserved"].code == "not_supported"
    assert "before R510" in got["memory.reserved"].reason
    assert asked == [V2, None] and dev.memory_api == "v1"
    dev.read(fields)
    assert asked == [V2, None, None]  # v2 is not asked again


def test_memory_v2_failing_otherwise_is_that_failure_not_v1(smi):
    smi.nvmlMemory_v2 = V2
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(NVMLError(15), A100_V1)  # GPU lost
    got = nvml.device(0).get("memory.used")
    assert is_na(got) and got.code == "gpu_lost" and asked == [V2]


def test_memory_v2_failing_with_a_plain_exception_is_that_exception(smi):
    smi.nvmlMemory_v2 = V2
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(RuntimeError("binding broke"), A100_V1)
    got = nvml.device(0).get("memory.used")
    assert got == NA("NVML error: RuntimeError: binding broke", "error") and asked == [V2]


def test_memory_of_a_binding_without_the_version_argument_or_the_reserve(smi):
    smi.nvmlMemory_v2 = V2

    def no_version(h):
        _on(h)
        return A100_V1

    smi.nvmlDeviceGetMemoryInfo = no_version  # TypeError on version=
    assert nvml.device(0).read(["memory.used", "memory.api"]) == {
        "memory.used": 912 * MIB,
        "memory.api": "v1",
    }
    # a v2 answer without ``reserved`` (a binding whose struct lacks it): the v1 call decides
    nvml.reset()
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(_mem(81920 * MIB, 4 * MIB), A100_V1)
    assert nvml.device(0).read(["memory.used", "memory.api"]) == {
        "memory.used": 912 * MIB,
        "memory.api": "v1",
    }
    assert asked == [V2, None]
    # reserve 0 (a GPU that reserves nothing) is still the v2 answer
    nvml.reset()
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(_mem(16 * GIB, GIB, 0), A100_V1)
    assert nvml.device(0).read(["memory.used", "memory.reserved", "memory.api"]) == {
        "memory.used": GIB,
        "memory.reserved": 0,
        "memory.api": "v2",
    }


def test_memory_of_a_binding_without_v2_asks_v1_only(smi):
    smi.nvmlDeviceGetMemoryInfo, asked = _memory_call(A100_V2, A100_V1)
    assert nvml.device(0).get("memory.api") == "v1" and asked == [None]


# ---- plausibility bounds at their exact edges -------------------------------------------------


def _both(field, value, context=None):
    """check_value and check_values (the fast path) must agree; returns what they give."""
    one = nvml.check_value(field, value, context)
    many = nvml.check_values({field: value}, context)[field]
    assert one == many, (one, many)
    return one


@pytest.mark.parametrize(
    "field, top",
    [
        ("utilization.gpu", 100),
        ("utilization.memory", 100),
        ("fan.speed", 100),
        ("temperature.gpu", 150),
        ("power.draw", 5_000_000),
        ("power.limit", 5_000_000),
        ("clocks.sm", 20_000),
        ("clocks.mem", 20_000),
        ("clocks.max.sm", 20_000),
        ("clocks.max.mem", 20_000),
        ("memory.total", 2**50),
        ("pstate", 15),
    ],
)
def test_each_absolute_bound_is_the_last_value_that_passes(field, top):
    assert _both(field, top) == top and _both(field, 0) == 0
    got = _both(field, top + 1)
    assert is_na(got) and got.code == ("not_available" if field == "pstate" else "implausible")
    assert f"{top + 1}" in got.reason and (field in got.reason or "P-state" in got.reason)


def test_the_words_of_each_bound():
    assert _both("utilization.gpu", 101).reason == (
        "implausible reading: NVML returned 101 % for utilization.gpu (a percentage above 100)"
    )
    assert _both("temperature.gpu", 151).reason == (
        "implausible reading: NVML returned 151 C for temperature.gpu "
        "(above 150 C, outside a physical range)"
    )
    assert _both("power.draw", 5_000_001).reason.endswith(
        "5000001 mW for power.draw (above 5000 W, more than any GPU draws)"
    )
    assert _both("power.limit", 5_000_001).reason.endswith("(above 5000 W)")
    assert _both("clocks.sm", 20_001).reason.endswith("20001 MHz for clocks.sm (above 20000 MHz)")
    assert _both("memory.total", 2**50 + 1).reason.endswith(
        f"{2**50 + 1} bytes for memory.total (more than 1 PiB)"
    )
    assert _both("pstate", 16) == NA("NVML returned P-state 16 (unknown)", "not_available")
    assert _both("fan.speed", -1) == NA(
        "implausible reading: NVML returned -1 for fan.speed (negative)", "implausible"
    )
    assert _both("power.draw", 800_001, {"power.limit": 400_000}) == NA(
        "implausible reading: NVML returned 800001 mW for power.draw "
        "(more than twice the enforced limit 400000 mW)",
        "implausible",
    )
    assert _both("clocks.mem", 1673, {"clocks.max.mem": 1593}) == NA(
        "implausible reading: NVML returned 1673 MHz for clocks.mem "
        "(above this GPU's maximum 1593 MHz)",
        "implausible",
    )


@pytest.mark.parametrize(
    "field, bound, last",
    [
        ("power.draw", ("power.limit", 400_000), 800_000),  # twice the enforced limit
        ("clocks.sm", ("clocks.max.sm", 2000), 2100),  # 1.05 x the maximum
        ("clocks.mem", ("clocks.max.mem", 1593), 1672),  # 1672.65
        ("memory.used", ("memory.total", 80 * GIB), 80 * GIB),
        ("memory.free", ("memory.total", 80 * GIB), 80 * GIB),
        ("memory.reserved", ("memory.total", 16 * GIB), 16 * GIB),
    ],
)
def test_each_bound_by_another_reading_is_the_last_value_that_passes(field, bound, last):
    ctx = dict([bound])
    assert _both(field, last, ctx) == last
    got = _both(field, last + 1, ctx)
    assert got.code == "implausible" and f"{bound[1]}" in got.reason
    # the same bound among the values read together
    both = nvml.check_values({field: last + 1, bound[0]: bound[1]})
    assert both[field].code == "implausible" and both[bound[0]] == bound[1]
    assert nvml.check_values({field: last, bound[0]: bound[1]})[field] == last


@pytest.mark.parametrize(
    "other, bad",
    [
        ("power.limit", 0),  # a limit of 0 mW is no limit known
        ("power.limit", 0xFFFFFFFF),  # NVML's "not available"
        ("power.limit", 5_000_001),  # itself implausible
        ("power.limit", NA("not supported on this GPU", "not_supported")),
        ("power.limit", "400000"),  # not a number read
    ],
)
def test_a_bound_that_is_no_reading_leaves_only_the_absolute_one(other, bad):
    ctx = {other: bad}
    assert _both("power.draw", 5_000_000, ctx) == 5_000_000
    assert _both("power.draw", 5_000_001, ctx).code == "implausible"
    got = nvml.check_values({"power.draw": 4_000_000, other: bad})
    assert got["power.draw"] == 4_000_000


def test_a_bound_at_its_own_largest_sane_value_still_bounds():
    ctx = {"clocks.max.sm": 20_000}
    assert _both("clocks.sm", 20_000, ctx) == 20_000
    ctx = {"power.limit": 5_000_000}
    assert _both("power.draw", 5_000_000, ctx) == 5_000_000
    ctx = {"memory.total": 2**50}
    assert _both("memory.used", 2**50, ctx) == 2**50
    assert (
        _both("memory.used", 2**50 + 1, ctx).code == "implausible"
    )  # no absolute bound of its own
    ctx = {"memory.total": 1}  # the smallest total there is bounds too
    assert _both("memory.used", 2, ctx).code == "implausible"


@pytest.mark.parametrize(
    "field, value, passes",
    [
        ("memory.free", 0xFFFFFFFF, True),  # 4 GiB is a size
        ("memory.used", 2**64 - 2, False),  # more than memory.total of 1 PiB... no total known
        ("memory.used", 0xFFFFFFFFFFFFFFFF, False),
        ("ecc.errors.uncorrected.volatile.total", 0xFFFFFFFE, True),
        ("ecc.errors.uncorrected.volatile.total", 0xFFFFFFFF, False),
        ("retired_pages.pending", 0xFFFFFFFF, False),
        ("clocks_event_reasons.active", 0x1FF, True),
        ("clocks_event_reasons.active", 0xFFFFFFFF, False),
    ],
)
def test_sentinels(field, value, passes):
    got = _both(field, value)
    if passes:
        assert got == value
    elif field == "memory.used" and value != 0xFFFFFFFFFFFFFFFF:
        assert got == value  # no bound on used memory without a total: only the sentinel
    else:
        assert got == NA(
            f"NVML returned its 'not available' value 0x{value:X} for {field}", "not_available"
        )


def test_a_number_of_a_field_without_a_unit_passes_below_the_sentinel():
    # e.g. an encoder session count: not in FIELD_UNITS, only NVML's 'not available' is refused
    got = nvml.check_values(
        {"encoder.stats.sessionCount": 3, "encoder.stats.averageFps": 0xFFFFFFFF}
    )
    assert got["encoder.stats.sessionCount"] == 3
    assert got["encoder.stats.averageFps"].code == "not_available"
    assert _both("encoder.stats.averageFps", 0xFFFFFFFE) == 0xFFFFFFFE


def test_na_strings_and_none_pass_untouched():
    na = NA("not supported on this GPU", "not_supported")
    for v in (na, "Enabled", None):
        assert _both("utilization.gpu", v) is v


def test_check_values_keeps_every_field_and_takes_bounds_from_the_context():
    got = nvml.check_values(
        {"clocks.sm": 1500, "clocks.mem": 9000, "pstate": 32, "name": "NVIDIA A100-SXM4-80GB"},
        {"clocks.max.mem": 1593, "clocks.max.sm": 0xFFFFFFFF},
    )
    assert got["clocks.sm"] == 1500 and got["name"] == "NVIDIA A100-SXM4-80GB"
    assert got["clocks.mem"].code == "implausible" and got["pstate"].code == "not_available"
    # a bound read as NA among the values is no bound
    na = NA("not supported on this GPU", "not_supported")
    assert nvml.check_values({"power.draw": 900_000, "power.limit": na}) == {
        "power.draw": 900_000,
        "power.limit": na,
    }


# ---- process rows -----------------------------------------------------------------------------


@pytest.mark.parametrize("pid", [1, 4242, 4_194_304])
def test_process_row_pids_that_can_be(pid):
    assert nvml.check_process(pid, GIB, 80 * GIB) == (True, GIB)


@pytest.mark.parametrize("pid", [0, -1, 4_194_305, 0xFFFFFFFF, "4242", 4242.0, None])
def test_process_row_pids_that_cannot_be(pid):
    assert nvml.check_process(pid, GIB, 80 * GIB) == (False, GIB)


def test_process_row_memory():
    na = NA("not available in WDDM mode", "not_available")
    assert nvml.check_process(4242, na) == (True, na)
    assert nvml.check_process(4242, 80 * GIB, 80 * GIB) == (True, 80 * GIB)
    assert nvml.check_process(4242, 81 * GIB) == (True, 81 * GIB)  # no total known: no bound
    ok, used = nvml.check_process(4242, 81 * GIB, 80 * GIB)
    assert ok and used == NA(
        f"implausible reading: NVML returned {81 * GIB} bytes for a process's used GPU memory "
        f"(more than the GPU's {80 * GIB} bytes)",
        "implausible",
    )
    ok, used = nvml.check_process(4242, 0xFFFFFFFFFFFFFFFF, 80 * GIB)
    assert ok and used.code == "not_available" and "memory.used" in used.reason
