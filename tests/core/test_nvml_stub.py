"""The stand-in NVML library under the real pynvml binding plays the fake module's scenarios."""

from __future__ import annotations

import pytest

from cudamagic.core import nvml
from cudamagic.core.na import is_na
from cudamagic.core.nvml import ProcessRow
from tests import fake_nvml as fm

GIB = 1024**3


def _snapshot():
    """Everything cudamagic.core.nvml reads, as comparable data (NA -> ("NA", code))."""

    def norm(v):
        if is_na(v):
            return ("NA", v.code)
        if isinstance(v, list):
            return [norm(x) for x in v]
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        return v

    info = nvml.system_info()
    out = {"system": norm(info._asdict())}
    n = nvml.device_count()
    if not is_na(n):
        for i in range(n):
            d = nvml.device(i)
            out[i] = norm(
                {
                    **d.read(list(nvml.FIELD_GROUP)),
                    "processes": d.processes(),
                    "mig": d.mig_devices(),
                }
            )
    return out


def _frozen(scenario, t=5):
    """The scenario with every moving value ``f(tick)`` fixed at tick ``t``.

    Both players then agree.
    """

    def fix(v):
        return v(t) if callable(v) else v

    gpus = [
        {k: ([(pid, fix(b)) for pid, b in v] if k == "processes" else fix(v)) for k, v in g.items()}
        for g in scenario.get("gpus", [])
    ]
    return dict(scenario, gpus=gpus)


def test_binding_loads_the_stand_in_by_its_soname(stub_nvml):
    import pynvml

    stub_nvml("one_gpu")
    assert nvml.init() is None
    # the binding's own CDLL("libnvidia-ml.so.1") answered with the stand-in
    assert pynvml.nvmlLib._name == "libnvidia-ml.so.1"
    assert hasattr(pynvml.nvmlLib, "stub_reset")
    assert nvml.device(0).get("name") == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("name", sorted(fm.SCENARIOS))
def test_every_fake_scenario_reads_the_same_through_the_real_binding(name, fake_nvml, stub_nvml):
    fake_nvml(_frozen(fm.SCENARIOS[name]))
    want = _snapshot()
    stub_nvml(_frozen(fm.SCENARIOS[name]))
    got = _snapshot()
    assert got == want
    if name == "process_in_other_pid_namespace":
        assert got[0]["processes"] == [ProcessRow(28290, GIB, "C")]
    if name == "gpu_without_fan":
        assert got[1]["fan.speed"] == ("NA", "not_supported")


def test_lost_gpu_through_the_binding(stub_nvml):
    stub = stub_nvml(fm.scenario_with_gpus(2))
    assert nvml.device(1).get("name") == "NVIDIA H100 80GB HBM3"
    stub.lose_gpu(1)
    got = nvml.device(1).get("temperature.gpu")
    assert is_na(got) and got.code == "gpu_lost"
    assert nvml.device(0).get("temperature.gpu") == 35


MIB = 1024**2


def test_memory_v2_as_nvidia_smi_reports_it(stub_nvml):
    """An idle A100 80GB with 4 MiB allocated.

    Used 4 MiB, the 908 MiB reserve apart (driver >= R510).
    """
    stub_nvml(fm.a100())
    got = nvml.device(0).read(
        ["memory.total", "memory.used", "memory.free", "memory.reserved", "memory.api"]
    )
    assert got == {
        "memory.total": 81920 * MIB,
        "memory.used": 4 * MIB,
        "memory.reserved": 908 * MIB,
        "memory.free": (81920 - 908 - 4) * MIB,
        "memory.api": "v2",
    }


def test_old_driver_falls_back_to_v1_and_says_so(stub_nvml):
    stub_nvml(fm.a100(memory_v2=False))
    got = nvml.device(0).read(["memory.used", "memory.reserved", "memory.api"])
    assert got["memory.api"] == "v1"
    assert got["memory.used"] == 912 * MIB  # the legacy struct counts the reserve as used
    assert is_na(got["memory.reserved"]) and "v1" in got["memory.reserved"].reason


def test_impossible_numbers_become_na_with_what_nvml_returned(stub_nvml):
    """NVML_SUCCESS with 3.7 kW on a 450 W board, 0xFFFFFFFF %, 200 C, a clock above the maximum."""
    stub_nvml(
        {
            "driver_version": "580.65.06",
            "cuda_driver_version": 13000,
            "nvml_version": "13.580.65.06",
            "gpus": [
                fm._gpu(
                    0,
                    name="NVIDIA GeForce RTX 4090",
                    cc=(8, 9),
                    memory_total=24 * 1024**3,
                    power_draw_mw=3_700_000,
                    power_limit_mw=450_000,
                    util_gpu=0xFFFFFFFF,
                    util_mem=250,
                    temperature=200,
                    clock_sm=9000,
                    max_clock_sm=2520,
                    fan=0xFFFFFFFF,
                )
            ],
        }
    )
    got = nvml.device(0).read(
        [
            "power.draw",
            "power.limit",
            "utilization.gpu",
            "utilization.memory",
            "temperature.gpu",
            "clocks.sm",
            "clocks.mem",
            "fan.speed",
        ]
    )
    assert got["power.limit"] == 450_000 and got["clocks.mem"] == 2619
    assert got["power.draw"].code == "implausible" and "3700000 mW" in got["power.draw"].reason
    assert (
        got["utilization.gpu"].code == "not_available"
        and "0xFFFFFFFF" in got["utilization.gpu"].reason
    )
    assert got["fan.speed"].code == "not_available"
    assert (
        got["utilization.memory"].code == "implausible"
        and "250 %" in got["utilization.memory"].reason
    )
    assert got["temperature.gpu"].code == "implausible" and "200 C" in got["temperature.gpu"].reason
    assert got["clocks.sm"].code == "implausible" and "2520 MHz" in got["clocks.sm"].reason


def test_process_struct_mismatch_is_not_a_process_list(stub_nvml):
    """The driver writes 16-byte v1 rows where the binding reads 24-byte v3 rows.

    Pids and memory are garbage.
    """
    stub_nvml(
        {
            "driver_version": "535.104.05",
            "cuda_driver_version": 12020,
            "nvml_version": "12.535.104.05",
            "gpus": [
                fm._gpu(
                    0,
                    proc_struct_bytes=16,
                    processes=[(4242, 9 * 1024**3), (5151, 20 * 1024**3), (6161, 1024**3)],
                )
            ],
        }
    )
    got = nvml.device(0).processes()
    import pynvml

    raw = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert [p.pid for p in raw] != [4242, 5151, 6161]  # what the binding really returned
    assert (
        is_na(got) and got.code == "implausible" and "nvidia-ml-py" in got.reason
    )  # no row is trusted


def test_process_rows_and_not_available_process_memory(stub_nvml):
    stub_nvml(
        {
            "gpus": [fm._gpu(0, processes=[(4242, 3 * GIB), (99, None)])],
            "driver_version": "550.54.15",
            "nvml_version": "12.550.54.15",
            "cuda_driver_version": 12040,
        }
    )
    got = nvml.device(0).processes()
    assert got[0] == ProcessRow(99, got[0].used_memory_bytes, "C")
    assert is_na(got[0].used_memory_bytes)  # NVML_VALUE_NOT_AVAILABLE_ulonglong -> None -> NA
    assert got[1] == ProcessRow(4242, 3 * GIB, "C")


def test_health_fields_read_through_the_binding(stub_nvml):
    stub_nvml(
        fm.a100(
            ecc={
                "current": 1,
                "volatile_uncorrected": 2,
                "aggregate_uncorrected": 7,
                "retired_pages_pending": 1,
                "remapped_pending": 1,
                "remapped_failure": 0,
            }
        )
    )
    got = nvml.device(0).read(
        [
            "ecc.mode.current",
            "ecc.errors.uncorrected.volatile.total",
            "ecc.errors.uncorrected.aggregate.total",
            "retired_pages.pending",
            "remapped_rows.pending",
            "remapped_rows.failure",
        ]
    )
    assert got == {
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 2,
        "ecc.errors.uncorrected.aggregate.total": 7,
        "retired_pages.pending": 1,
        "remapped_rows.pending": 1,
        "remapped_rows.failure": 0,
    }
    stub_nvml("driver_470")  # a GeForce: no ECC memory
    na = nvml.device(0).get("ecc.errors.uncorrected.volatile.total")
    assert is_na(na) and na.code == "not_supported"


def test_mig_instance_memory_goes_through_the_check(stub_nvml):
    sc = fm.SCENARIOS["mig"]
    gpu = dict(
        sc["gpus"][0],
        mig_devices=[
            {"uuid": "MIG-1", "memory_total": 10 * GIB, "memory_used": 0xFFFFFFFFFFFFFFFF}
        ],
    )
    stub_nvml(dict(sc, gpus=[gpu]))
    (m,) = nvml.device(0).mig_devices()
    assert m["memory.total"] == 10 * GIB and m["memory.used"].code == "not_available"
