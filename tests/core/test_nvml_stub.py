"""The stand-in NVML library under the real pynvml binding plays the same scenarios as the fake module."""

from __future__ import annotations

import pytest

from cudamagic.core import nvml
from cudamagic.core.na import is_na
from tests import fake_nvml as fm

GIB = 1024 ** 3


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
    out = {"system": norm({k: v for k, v in info.items()})}
    n = nvml.device_count()
    if not is_na(n):
        for i in range(n):
            d = nvml.device(i)
            out[i] = norm({**d.read(list(nvml.FIELD_GROUP)), "processes": d.processes(),
                           "mig": d.mig_devices()})
    return out


def _frozen(scenario, t=5):
    """The scenario with every moving value ``f(tick)`` fixed at tick ``t`` (both players then agree)."""
    def fix(v):
        return v(t) if callable(v) else v

    gpus = [{k: ([(pid, fix(b)) for pid, b in v] if k == "processes" else fix(v)) for k, v in g.items()}
            for g in scenario.get("gpus", [])]
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
    if name == "container_f04":
        assert got[0]["processes"] == [{"pid": 28290, "used_memory": GIB, "type": "C"}]
    if name == "two_gpus_f03":
        assert got[1]["fan.speed"] == ("NA", "not_supported")


def test_lost_gpu_through_the_binding(stub_nvml):
    stub = stub_nvml(fm.scenario_with_gpus(2))
    assert nvml.device(1).get("name") == "NVIDIA H100 80GB HBM3"
    stub.lose_gpu(1)
    got = nvml.device(1).get("temperature.gpu")
    assert is_na(got) and got.code == "gpu_lost"
    assert nvml.device(0).get("temperature.gpu") == 35
