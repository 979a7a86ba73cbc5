"""The stand-in NVML library: hundreds of GPUs, and what nvitop and gpustat call (real pynvml)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

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


_PEER_CHECK = r"""
import os, sys
from tests import fake_nvml as fm, nvml_stub
from cudamagic.core import nvml

scenario = fm.scenario_with_gpus(64)
for i, g in enumerate(scenario["gpus"]):
    g.update(util_gpu=i % 100, temperature=30 + i % 50, memory_used=(1 + i % 7) * fm.GIB)
    g["uuid"] = f"GPU-{i:08x}-0000-0000-0000-000000000000"
    g["processes"] = [(os.getpid(), 2 * fm.GIB)]
nvml_stub.install(scenario)
fields = ["uuid", "utilization.gpu", "temperature.gpu", "memory.used"]
ours = [nvml.device(i).read(fields) for i in range(64)]
if sys.argv[1] == "gpustat":
    import gpustat

    got = [
        {"uuid": g.uuid, "utilization.gpu": g.utilization, "temperature.gpu": g.temperature,
         "memory.used": g.memory_used * 1024**2, "pids": [p["pid"] for p in g.processes]}
        for g in gpustat.new_query()
    ]
else:
    import nvitop

    got = [
        {"uuid": d.uuid(), "utilization.gpu": d.gpu_utilization(),
         "temperature.gpu": d.temperature(), "memory.used": d.memory_used(),
         "pids": {pid: p.gpu_memory() for pid, p in d.processes().items()}}
        for d in nvitop.Device.all()
    ]
pids = [os.getpid()] if sys.argv[1] == "gpustat" else {os.getpid(): 2 * fm.GIB}
want = [dict(o, pids=pids) for o in ours]
assert got == want, (got[:2], want[:2])
print("SAME", len(got))
"""


@pytest.mark.parametrize("peer", ["gpustat", "nvitop"])
def test_peers_read_64_stand_in_gpus_as_cudamagic_does(_nvml_stub_path, peer):
    """In a child process: importing gpustat patches the pynvml module for the whole process."""
    if importlib.util.find_spec(peer) is None:  # not imported here: see above
        pytest.skip(f"{peer} is not installed (pip install {peer})")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run(
        [sys.executable, "-c", _PEER_CHECK, peer],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # nvitop: the process structure it picks matches what the stand-in writes (no garbage pids)
    assert res.returncode == 0 and "SAME 64" in res.stdout, res.stderr[-3000:]


def test_a_peer_that_shuts_nvml_down_leaves_the_other_initialisation(stub_nvml):
    """NVML counts nvmlInit calls: gpustat's nvmlShutdown must not cut cudamagic off."""
    stub_nvml({"gpus": [fm._gpu(0)]})
    p = _pynvml()
    assert nvml.device(0).get("temperature.gpu") == 35  # cudamagic's init
    lib = p.nvmlLib
    assert lib.nvmlInitWithFlags(0) == 0 and lib.nvmlShutdown() == 0  # a peer's init, shutdown
    assert nvml.device(0).get("fan.speed") == 30
    assert lib.nvmlShutdown() == 0  # cudamagic's
    assert lib.nvmlShutdown() == p.NVML_ERROR_UNINITIALIZED
