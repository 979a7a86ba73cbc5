"""Tier 1.

Where each %cudainfo fact comes from: the kernel's Python and the one a terminal would run,
PyTorch's build and (only once CUDA is initialised) its device properties, NCCL and cuDNN, the
environment variables, nvcc run in a thread beside the rest, and a failing source read as N/A with
its cause.
"""

import os
import platform as pyplatform
import stat
import sys
import threading
import types

import pytest
import torch

from cudamagic.core.na import NA, is_na
from cudamagic.info import facts
from cudamagic.info.magic import InfoSettings


def _exe(folder, name, text="#!/bin/sh\nexit 0\n"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


# ---- Python --------------------------------------------------------------------------------------


def test_python_facts_are_the_kernels_interpreter():
    py = facts._python_facts({"PATH": ""})
    assert py["executable"] == sys.executable and py["prefix"] == sys.prefix
    assert py["version"] == pyplatform.python_version()


def test_python_on_path_prefers_python3_then_python_from_the_given_path(tmp_path, monkeypatch):
    both, only_python, empty, kernel = (
        tmp_path / "both",
        tmp_path / "only",
        tmp_path / "empty",
        tmp_path / "kernel",
    )
    py3 = _exe(both, "python3")
    _exe(both, "python")
    py = _exe(only_python, "python")
    empty.mkdir()
    _exe(kernel, "python3")
    _exe(kernel, "python")
    monkeypatch.setenv("PATH", str(kernel))  # the kernel's own PATH is not the one asked about
    assert facts._python_facts({"PATH": str(both)})["shell_python"] == py3
    assert facts._python_facts({"PATH": str(only_python)})["shell_python"] == py
    assert facts._python_facts({"PATH": str(empty)})["shell_python"] == NA(
        "no python or python3 on PATH", "not_installed"
    )


# ---- PyTorch -------------------------------------------------------------------------------------


def test_torch_build_facts_of_this_cpu_build(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    t = facts._torch_facts()
    assert t["installed"] and t["version"] == "2.13.0+cpu"
    assert t["variant"]["kind"] == "cpu" and t["file"] == torch.__file__
    assert t["cuda_build"] == NA("this PyTorch build has no CUDA support", "not_available")
    assert t["nccl"] == NA("no NCCL in a build without CUDA", "not_available")
    assert t["cuda_initialized"] is False and t["devices"] == []
    assert (t["cuda_available"], t["device_count"]) == (False, 0)


def test_device_count_and_arch_list_come_from_torch_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_80", "sm_90", "compute_90"])
    t = facts._torch_facts()
    assert (t["device_count"], t["arch_list"]) == (3, ["sm_80", "sm_90", "compute_90"])


@pytest.fixture
def cuda_build(monkeypatch):
    """This CPU torch made to answer as a CUDA 12.4 build with NCCL 2.21.5 and cuDNN 9.1.0."""
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 21, 5))
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    return monkeypatch


def test_cuda_build_versions(cuda_build):
    t = facts._torch_facts()
    assert (t["cuda_build"], t["nccl"], t["cudnn"]) == ("12.4", "2.21.5", "9.1.0")
    assert t["hip_build"] == NA("not a ROCm build", "not_available")
    cuda_build.setattr(torch.cuda.nccl, "version", lambda: 2708)  # older PyTorch: one integer
    cuda_build.setattr(torch.version, "hip", "6.2.4")
    t = facts._torch_facts()
    assert (t["nccl"], t["hip_build"]) == ("2708", "6.2.4")


def test_cudnn_not_loaded_is_na_with_the_cause(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 90100)
    cudnn = facts._torch_facts()["cudnn"]
    assert is_na(cudnn) and "no cuDNN" in cudnn.reason


def _boom(what):
    def fail(*a, **k):
        raise RuntimeError(f"{what} exploded")

    return fail


@pytest.mark.parametrize(
    "target, key, reason",
    [
        (
            (torch.backends.cudnn, "version"),
            "cudnn",
            "cuDNN version unreadable: RuntimeError: version exploded",
        ),
        (
            (torch.cuda.nccl, "version"),
            "nccl",
            "NCCL version unreadable: RuntimeError: version exploded",
        ),
        (
            (torch.cuda, "is_available"),
            "cuda_available",
            "torch.cuda.is_available() failed: RuntimeError: is_available exploded",
        ),
        (
            (torch.cuda, "device_count"),
            "device_count",
            "torch.cuda.device_count() failed: RuntimeError: device_count exploded",
        ),
        (
            (torch.cuda, "get_arch_list"),
            "arch_list",
            "torch.cuda.get_arch_list() failed: RuntimeError: get_arch_list exploded",
        ),
        (
            (torch.cuda, "is_initialized"),
            "cuda_initialized",
            "torch.cuda.is_initialized() failed: RuntimeError: is_initialized exploded",
        ),
    ],
)
def test_a_failing_torch_call_is_na_with_call_and_cause(cuda_build, target, key, reason):
    cuda_build.setattr(*target, _boom(target[1]))
    t = facts._torch_facts()
    assert t[key] == NA(reason, "error")
    assert t["version"] == str(torch.__version__)  # the rest is still read


def _props(
    name, uuid=None, bus=None, domain=None, device=None, sms=132, mem=80 * 1024**3, cc=(9, 0)
):
    p = types.SimpleNamespace(
        name=name, multi_processor_count=sms, total_memory=mem, major=cc[0], minor=cc[1]
    )
    for attr, v in (
        ("uuid", uuid),
        ("pci_bus_id", bus),
        ("pci_domain_id", domain),
        ("pci_device_id", device),
    ):
        if v is not None:
            setattr(p, attr, v)
    return p


@pytest.fixture
def initialised(monkeypatch):
    """CUDA already initialised by the user's code.

    Call with the device properties (or the exception reading one raises); returns the ordinals
    whose properties were read.
    """
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    seen = []

    def install(props):
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(props))

        def get(i):
            seen.append(i)
            if isinstance(props[i], Exception):
                raise props[i]
            return props[i]

        monkeypatch.setattr(torch.cuda, "get_device_properties", get)
        return seen

    return install


def test_device_properties_are_read_once_cuda_is_initialised(initialised):
    initialised(
        [
            _props(
                "NVIDIA H100 80GB HBM3",
                uuid="5ad7c2b5-0000-1111-2222-333344445555",
                bus=0x3B,
                domain=1,
                device=2,
            ),
            _props(
                "NVIDIA A100 MIG 1g.10gb",
                uuid="MIG-0bd1",
                bus=0x17,
                sms=14,
                mem=10 * 1024**3,
                cc=(8, 0),
            ),
            _props("old torch", uuid="GPU-77", bus=0xAF),
            _props("no uuid, no bus"),
            RuntimeError("device 4 fell off the bus"),
        ]
    )
    t = facts._torch_facts()
    assert t["cuda_initialized"] is True
    d0, d1, d2, d3, d4 = t["devices"]
    assert d0 == {
        "ordinal": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-5ad7c2b5-0000-1111-2222-333344445555",
        "pci.bus_id": "00000001:3B:02.0",
        "multiprocessor_count": 132,
        "total_memory": 80 * 1024**3,
        "compute_cap": "9.0",
    }
    assert (d1["ordinal"], d1["uuid"], d1["pci.bus_id"], d1["compute_cap"]) == (
        1,
        "MIG-0bd1",
        "00000000:17:00.0",
        "8.0",
    )
    assert (d1["multiprocessor_count"], d1["total_memory"]) == (14, 10 * 1024**3)
    assert (d2["uuid"], d2["pci.bus_id"]) == ("GPU-77", "00000000:AF:00.0")
    assert (d3["uuid"], d3["pci.bus_id"]) == (None, None)
    assert d4 == NA(
        "properties of CUDA device 4 unreadable: RuntimeError: device 4 fell off the bus", "error"
    )


def test_no_device_properties_when_the_count_is_unreadable(initialised, monkeypatch):
    seen = initialised([_props("x")])
    monkeypatch.setattr(torch.cuda, "device_count", _boom("device_count"))
    assert facts._torch_facts()["devices"] == [] and seen == []


def test_no_device_properties_before_cuda_is_initialised(initialised, monkeypatch):
    seen = initialised([_props("x", uuid="GPU-1")])
    monkeypatch.setattr(
        torch.cuda, "is_initialized", lambda: 1
    )  # only True itself means initialised
    t = facts._torch_facts()
    assert t["devices"] == [] and seen == []


def test_initialised_devices_decide_the_ordinals_and_the_sm_count_shown(fake_nvml, initialised):
    fake_nvml("gpu_without_fan")
    nv = facts.collect_facts(env={})["gpus"]
    initialised(
        [
            _props("Tesla T4", uuid=nv[1]["uuid"][4:], sms=40),
            _props("H100", uuid=nv[0]["uuid"], sms=132),
        ]
    )
    r = facts.collect(
        env={"CUDA_VISIBLE_DEVICES": "0"}
    )  # ignored: the running context is the truth
    assert [g["cuda_ordinal"] for g in r.facts["gpus"]] == [1, 0] and r.facts["mapping"]["certain"]
    gpus = r.to_dict()["gpus"]
    assert [g["multiprocessor_count"] for g in gpus] == [132, 40]


# ---- environment ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "var",
    [
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_HOME",
        "CUDA_PATH",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "NVIDIA_VISIBLE_DEVICES",
    ],
)
def test_each_cuda_variable_is_reported_set_or_not(var):
    assert facts._env_facts({var: "set-value"})[var] == "set-value"
    assert facts._env_facts({var: ""})[var] == ""  # set to empty is not unset
    assert facts._env_facts({})[var] == NA("not set", "not_set")


def test_cuda_entries_of_the_search_paths():
    env = {
        "PATH": os.pathsep.join(
            ["/usr/bin", "/usr/local/CUDA-12.4/bin", "", "/opt/Nvidia/bin", "/home/u/bin"]
        ),
        "LD_LIBRARY_PATH": os.pathsep.join(["/usr/lib/nvidia", "/usr/lib/x86_64-linux-gnu"]),
    }
    got = facts._env_facts(env)
    assert got["PATH (CUDA entries)"] == ["/usr/local/CUDA-12.4/bin", "/opt/Nvidia/bin"]
    assert got["LD_LIBRARY_PATH (CUDA entries)"] == ["/usr/lib/nvidia"]
    assert facts._env_facts({})["LD_LIBRARY_PATH (CUDA entries)"] == []


def test_environment_section_of_the_report(fake_nvml):
    fake_nvml("one_gpu")
    r = facts.collect(env={"CUDA_LAUNCH_BLOCKING": "1", "PATH": "/usr/local/cuda/bin"})
    text = r.to_text()
    assert "/usr/local/cuda/bin" in text
    line = [x for x in text.splitlines() if "CUDA_LAUNCH_BLOCKING" in x][0]
    assert line.split()[-1] == "1"
    data = r.to_dict()
    assert data["env"]["CUDA_DEVICE_ORDER"] == {"na": "not set", "code": "not_set"}
    assert data["cuda_visible_devices"]["set"] is False


# ---- collect_facts: sources wired together -------------------------------------------------------

NVCC_V = "#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n"


def test_nvcc_is_found_through_the_given_env_and_run_with_the_given_time_limit(
    fake_nvml, tmp_path, monkeypatch
):
    fake_nvml("one_gpu")
    nvcc = _exe(tmp_path / "cuda" / "bin", "nvcc", NVCC_V)
    env = {"CUDA_HOME": str(tmp_path / "cuda"), "PATH": ""}
    f = facts.collect_facts(env=env)
    assert (f["toolkit"]["path"], f["toolkit"]["release"], f["toolkit"]["build"]) == (
        nvcc,
        "12.4",
        "12.4.131",
    )
    assert f["toolkit"]["cuda_home_problem"] is None
    calls = []
    real = facts.nvcc_info
    monkeypatch.setattr(
        facts, "nvcc_info", lambda path, timeout_s: calls.append((path, timeout_s)) or real(path)
    )
    facts.collect(nvcc_timeout_s=0.25, env=env)
    facts.collect(env=env)
    facts.collect_facts(env=env)
    default = (
        InfoSettings.nvcc_timeout_s.default_value
    )  # %cudainfo's default: the API waits as long
    assert calls == [(nvcc, 0.25), (nvcc, default), (nvcc, default)]


def test_a_cuda_home_without_nvcc_is_reported(fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    f = facts.collect_facts(env={"CUDA_HOME": str(tmp_path / "nope"), "PATH": ""})
    assert f["toolkit"]["cuda_home_problem"] == (
        "CUDA_HOME",
        f"CUDA_HOME={tmp_path / 'nope'} does not exist",
    )


def test_env_defaults_to_the_process_environment(fake_nvml, monkeypatch):
    fake_nvml("one_gpu")
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    f = facts.collect_facts()
    assert f["env"]["CUDA_LAUNCH_BLOCKING"] == "1" and f["cuda_visible_devices"]["raw"] == "0"


def test_nvml_library_is_read_only_when_nvml_works(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.module.nvmlLib = types.SimpleNamespace(_name="/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    f = facts.collect_facts(env={})
    assert f["driver"]["nvml_library"] == "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    fake_nvml("no_driver")
    f = facts.collect_facts(env={})
    assert f["driver"]["nvml_library"] is f["driver"]["status"] and is_na(f["driver"]["status"])


def test_a_lost_gpu_is_not_given_an_ordinal_and_skips_the_health_reads(fake_nvml):
    fake_nvml("gpu_without_fan").lose_gpu(1)
    f = facts.collect_facts(env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert f["gpus"][0]["cuda_ordinal"] == 0 and f["gpus"][1]["cuda_ordinal"].code == "gpu_lost"
    assert "ecc.mode.current" in f["gpus"][0] and "ecc.mode.current" not in f["gpus"][1]
    assert f["gpus"][1]["mig_devices"] == [] and f["gpus"][1]["index"] == 1


def test_mig_gpu_keeps_a_utilisation_it_could_read(fake_nvml):
    fake = fake_nvml("mig")
    fake.gpus[0].update(unsupported=set(), util_gpu=42)
    g = facts.collect_facts(env={})["gpus"][0]
    assert (
        g["mig.mode.current"] == "Enabled"
        and len(g["mig_devices"]) == 2
        and g["utilization.gpu"] == 42
    )


# ---- nvcc in a thread beside the rest ------------------------------------------------------------


def test_nvcc_runs_in_a_worker_thread(monkeypatch):
    seen = {}

    def nvcc_info(path, timeout_s):
        t = threading.current_thread()
        seen.update(main=t is threading.main_thread(), name=t.name.startswith("cudamagic-facts"))
        return {"path": path, "release": "13.0", "build": "13.0.88"}

    monkeypatch.setattr(facts, "nvcc_info", nvcc_info)
    assert facts.collect_facts(env={})["toolkit"]["release"] == "13.0"
    assert seen == {"main": False, "name": True}


def test_nvcc_error_is_raised_in_the_caller(monkeypatch):
    def nvcc_info(path, timeout_s):
        raise KeyboardInterrupt("stop nvcc")

    monkeypatch.setattr(facts, "nvcc_info", nvcc_info)
    with pytest.raises(KeyboardInterrupt, match="stop nvcc"):
        facts.collect_facts(env={})
