"""Tier 1: cudamagic.nvml through the fake NVML seam."""

import pytest

from cudamagic.core import nvml
from cudamagic.core.na import NA, is_na
from cudamagic.core.nvml import ProcessRow
from tests.fake_nvml import GIB


@pytest.mark.parametrize(
    "raw, expected",
    [
        (11040, "11.4"),
        (12080, "12.8"),
        (11000, "11.0"),
        (12040, "12.4"),
        (10020, "10.2"),
        (13000, "13.0"),
    ],
)
def test_decode_cuda_driver_version(raw, expected):
    assert nvml.decode_cuda_driver_version(raw) == expected


@pytest.mark.parametrize("raw", [0, -1, "x", None])
def test_decode_cuda_driver_version_bad(raw):
    assert is_na(nvml.decode_cuda_driver_version(raw))


def test_no_driver(fake_nvml):
    fake_nvml("no_driver")
    info = nvml.system_info()
    assert is_na(info.status) and info.status.code == "no_driver"
    assert "no NVIDIA driver" in info.status.reason
    assert is_na(nvml.device_count())
    assert is_na(nvml.device(0).get("memory.total"))


def test_version_mismatch(fake_nvml, monkeypatch):
    fake_nvml("version_mismatch")
    monkeypatch.setattr(nvml, "kernel_module_version", lambda: "535.54.03")
    monkeypatch.setattr(nvml, "library_version", lambda: "535.86.10")
    status = nvml.system_info().status
    assert status.code == "version_mismatch"
    assert "535.54.03" in status.reason and "535.86.10" in status.reason
    assert "reboot" in status.reason


def test_unsupported_fields_are_asked_once(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
    fields = ["fan.speed", "power.draw", "power.limit", "utilization.gpu", "memory.used"]
    for _ in range(5):
        g0 = nvml.device(0).read(fields)
        g1 = nvml.device(1).read(fields)
    assert all(not is_na(v) for v in g0.values())
    assert g1["fan.speed"] == NA("not supported on this GPU", "not_supported")
    assert is_na(g1["power.draw"]) and is_na(g1["power.limit"])
    assert not is_na(g1["utilization.gpu"]) and not is_na(g1["memory.used"])
    # asked once, then remembered per (GPU, field group)
    assert fake.call_count("nvmlDeviceGetFanSpeed", 1) == 1
    assert fake.call_count("nvmlDeviceGetPowerUsage", 1) == 1
    assert fake.call_count("nvmlDeviceGetUtilizationRates", 1) == 5


def test_process_in_other_pid_namespace(fake_nvml):
    fake_nvml("process_in_other_pid_namespace")
    procs = nvml.device(0).processes()
    assert procs == [ProcessRow(28290, GIB, "C")]


@pytest.mark.parametrize("scenario", ["bytes_names", "driver_470"])
def test_bytes_or_str_names(fake_nvml, scenario):
    fake_nvml(scenario)
    d = nvml.device(0)
    assert isinstance(d.get("name"), str) and not d.get("name").startswith("b'")
    assert nvml.system_info().driver_version == "470.86"
    assert d.get("uuid").startswith("GPU-")


def test_bytes_and_str_identical(fake_nvml):
    from tests.fake_nvml import SCENARIOS

    fake_nvml(dict(SCENARIOS["bytes_names"], bytes=True))
    a = (nvml.system_info().driver_version, nvml.device(0).read(["name", "uuid", "pci.bus_id"]))
    fake_nvml(dict(SCENARIOS["bytes_names"], bytes=False))
    b = (nvml.system_info().driver_version, nvml.device(0).read(["name", "uuid", "pci.bus_id"]))
    assert a == b


def test_mig_instances(fake_nvml):
    fake_nvml("mig")
    d = nvml.device(0)
    assert d.get("mig.mode.current") == "Enabled"
    assert is_na(d.get("utilization.gpu"))
    migs = d.mig_devices()
    assert [m["uuid"][:4] for m in migs] == ["MIG-", "MIG-"]
    assert migs[0]["memory.total"] == 10 * GIB


def test_gpu_lost_midway(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
    assert not is_na(nvml.device(0).get("utilization.gpu"))
    fake.lose_gpu(0)
    v = nvml.device(0).get("utilization.gpu")
    assert is_na(v) and v.code == "gpu_lost"
    assert nvml.device(0).lost is not None
    assert not is_na(nvml.device(1).get("utilization.gpu"))


def test_throttle_decode():
    assert nvml.decode_throttle_reasons(0) == []
    assert nvml.decode_throttle_reasons(0x4 | 0x40) == ["power cap", "thermal (hardware)"]


def test_real_machine_has_no_driver_and_says_why():
    """On this CPU machine the real binding must report NA with a reason, never raise."""
    nvml.reset()
    try:
        st = nvml.system_info().status
        if st == "ok":  # pragma: no cover - a machine with a driver
            pytest.skip("this machine has an NVIDIA driver")
        assert is_na(st) and st.reason
    finally:
        nvml.reset()


def test_na_copies_and_pickles():
    import copy
    import dataclasses
    import pickle

    n = NA("not supported on this GPU", "not_supported")
    assert copy.deepcopy(n) == n and pickle.loads(pickle.dumps(n)) == n

    @dataclasses.dataclass
    class Row:
        v: object

    assert dataclasses.asdict(Row(n)) == {"v": n}
    assert not n and str(n) == "N/A" and n.describe() == "N/A (not supported on this GPU)"
