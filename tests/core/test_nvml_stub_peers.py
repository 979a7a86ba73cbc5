"""The stand-in NVML library: hundreds of GPUs, and what nvitop and gpustat call (real pynvml)."""

from __future__ import annotations

import os

import pytest

from cudamagic.core import nvml
from tests import fake_nvml as fm


def _pynvml():
    import pynvml

    return pynvml


def test_plays_512_gpus_each_with_its_own_values(stub_nvml):
    scenario = fm.scenario_with_gpus(512)
    for i, g in enumerate(scenario["gpus"]):
        g["temperature"] = 20 + i % 60
        g["uuid"] = f"GPU-{i:08x}-0000-0000-0000-000000000000"
    stub_nvml(scenario)
    assert nvml.device_count() == 512
    for i in (0, 17, 300, 511):
        got = nvml.device(i).read(["uuid", "temperature.gpu"])
        assert got == {
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "temperature.gpu": 20 + i % 60,
        }


def test_more_gpus_than_the_stand_in_holds_is_refused(stub_nvml):
    from tests import nvml_stub

    with pytest.raises(nvml_stub.StubUnavailable, match="4097 GPUs"):
        stub_nvml({"gpus": [fm._gpu(0)] * 4097})


def test_index_and_mig_handle_flags(stub_nvml):
    scenario = fm.SCENARIOS["mig"]
    stub_nvml(scenario)
    p = _pynvml()
    p.nvmlInit()
    n = p.nvmlDeviceGetCount()
    for i in range(n):
        h = p.nvmlDeviceGetHandleByIndex(i)
        assert p.nvmlDeviceGetIndex(h) == i
        assert p.nvmlDeviceIsMigDeviceHandle(h).value == 0
    mig_gpu = next(i for i, g in enumerate(scenario["gpus"]) if g["mig_devices"])
    mig = p.nvmlDeviceGetMigDeviceHandleByIndex(p.nvmlDeviceGetHandleByIndex(mig_gpu), 0)
    assert p.nvmlDeviceIsMigDeviceHandle(mig).value == 1


def test_codec_pcie_modes_and_limits(stub_nvml):
    gpu = fm._gpu(
        0,
        encoder_util=12,
        decoder_util=34,
        pcie_tx_kbps=1500,
        pcie_rx_kbps=2500,
        compute_mode=3,
        display_mode=1,
        display_active=1,
        temperature=61,
    )
    stub_nvml({"gpus": [gpu, fm._gpu(1)]})
    p = _pynvml()
    p.nvmlInit()
    h, h1 = p.nvmlDeviceGetHandleByIndex(0), p.nvmlDeviceGetHandleByIndex(1)
    assert p.nvmlDeviceGetEncoderUtilization(h)[0] == 12
    assert p.nvmlDeviceGetDecoderUtilization(h)[0] == 34
    assert p.nvmlDeviceGetEncoderUtilization(h1)[0] == 0
    assert p.nvmlDeviceGetPcieThroughput(h, p.NVML_PCIE_UTIL_TX_BYTES) == 1500
    assert p.nvmlDeviceGetPcieThroughput(h, p.NVML_PCIE_UTIL_RX_BYTES) == 2500
    assert p.nvmlDeviceGetComputeMode(h) == p.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert (p.nvmlDeviceGetDisplayMode(h), p.nvmlDeviceGetDisplayActive(h)) == (1, 1)
    assert p.nvmlDeviceGetPowerManagementLimit(h) == gpu["power_limit_mw"]
    assert p.nvmlDeviceGetTemperatureV(h, p.NVML_TEMPERATURE_GPU) == 61
    with pytest.raises(p.NVMLError_NotSupported):
        p.nvmlDeviceGetConfComputeMemSizeInfo(h)


def test_driver_model_not_supported_on_linux_and_read_on_windows(stub_nvml):
    p = _pynvml()
    stub_nvml({"gpus": [fm._gpu(0)]})
    p.nvmlInit()
    with pytest.raises(p.NVMLError_NotSupported):
        p.nvmlDeviceGetDriverModel(p.nvmlDeviceGetHandleByIndex(0))
    stub_nvml({"gpus": [fm._gpu(0, driver_model=(p.NVML_DRIVER_WDDM, p.NVML_DRIVER_WDDM))]})
    p.nvmlInit()
    assert p.nvmlDeviceGetDriverModel(p.nvmlDeviceGetHandleByIndex(0)) == [0, 0]


def test_process_utilization_samples_one_per_process(stub_nvml):
    p = _pynvml()
    stub_nvml(
        {
            "gpus": [
                fm._gpu(0, util_gpu=70, util_mem=20, processes=[(101, fm.GIB), (202, 2 * fm.GIB)]),
                fm._gpu(1),
            ]
        }
    )
    p.nvmlInit()
    samples = p.nvmlDeviceGetProcessUtilization(p.nvmlDeviceGetHandleByIndex(0), 1000)
    assert [(s.pid, s.smUtil, s.memUtil) for s in samples] == [(101, 70, 20), (202, 70, 20)]
    assert all(s.timeStamp > 1000 for s in samples)
    with pytest.raises(p.NVMLError_NotFound):  # no process: no samples
        p.nvmlDeviceGetProcessUtilization(p.nvmlDeviceGetHandleByIndex(1), 0)


def _peer_scenario(n):
    scenario = fm.scenario_with_gpus(n)
    for i, g in enumerate(scenario["gpus"]):
        g.update(util_gpu=i % 100, temperature=30 + i % 50, memory_used=(1 + i % 7) * fm.GIB)
        g["uuid"] = f"GPU-{i:08x}-0000-0000-0000-000000000000"
        g["processes"] = [(os.getpid(), 2 * fm.GIB)]
    return scenario


def test_gpustat_reads_64_stand_in_gpus_as_cudamagic_does(stub_nvml):
    gpustat = pytest.importorskip("gpustat")
    stub_nvml(_peer_scenario(64))
    query = gpustat.new_query()
    assert len(query) == 64
    for g in query:
        ours = nvml.device(g.index).read(["uuid", "utilization.gpu", "temperature.gpu"])
        assert (g.uuid, g.utilization, g.temperature) == (
            ours["uuid"],
            ours["utilization.gpu"],
            ours["temperature.gpu"],
        )
        assert [pr["pid"] for pr in g.processes] == [os.getpid()]


def test_nvitop_reads_64_stand_in_gpus_as_cudamagic_does(stub_nvml):
    nvitop = pytest.importorskip("nvitop")
    stub_nvml(_peer_scenario(64))
    devices = nvitop.Device.all()
    assert len(devices) == 64
    for d in devices:
        ours = nvml.device(d.index).read(["uuid", "utilization.gpu", "memory.used"])
        assert (d.uuid(), d.gpu_utilization(), d.memory_used()) == (
            ours["uuid"],
            ours["utilization.gpu"],
            ours["memory.used"],
        )
        # the process structure nvitop picks matches what the stand-in writes (no garbage pids)
        assert {pid: pr.gpu_memory() for pid, pr in d.processes().items()} == {
            os.getpid(): 2 * fm.GIB
        }
