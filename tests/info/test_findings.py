"""Tier 1: the compatibility rules behind %cudainfo, table-driven, and the findings on whole fact sets built
through the fake NVML, with field reports as cases."""

import os

import pytest

from cudamagic.core.na import NA
from cudamagic.info.findings import arch_supported, best_wheel_for_driver, findings
from tests.info.factsets import facts_for, ids, torch_facts


@pytest.mark.parametrize("cc, arch, ok", [
    ("8.6", ["sm_80", "sm_90"], True),         # same major, lower minor cubin runs
    ("9.0", ["sm_80", "sm_86"], False),        # newer major, no PTX
    ("9.0", ["sm_80", "compute_80"], True),    # PTX JIT
    ("3.7", ["sm_50", "sm_60", "sm_70"], False),  # too old for the build (Kepler)
    ("12.0", ["sm_90", "sm_100", "sm_120"], True),
])
def test_arch_supported(cc, arch, ok):
    assert arch_supported(cc, arch) is ok


@pytest.mark.parametrize("driver, wheel", [((11, 4), "cu118"), ((12, 8), "cu128"), ((12, 4), "cu124"),
                                            ((12, 5), "cu124"), ((13, 0), "cu130"), ((11, 0), "cu118"),
                                            ((10, 2), None)])
def test_best_wheel_for_driver(driver, wheel):
    assert best_wheel_for_driver(driver) == wheel


NVCC_101_FACTS = {"path": "/usr/local/cuda-10.1/bin/nvcc", "release": "10.1", "build": "10.1.243"}


def test_f16_three_cuda_versions(fake_nvml):
    f = facts_for(fake_nvml, "driver_450", torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]), nvcc=NVCC_101_FACTS)
    assert f["driver"]["cuda_driver_version"] == "11.0"
    found = findings(f)
    assert "toolkit-differs" in ids(found) and "driver-too-old" not in ids(found)
    differs = [x for x in found if x.id == "toolkit-differs"][0]
    assert "10.1" in differs.cause and "10.2" in differs.cause and "extensions" in differs.cause
    assert found[-1].severity == "ok" and found[-1].title == "Verdict: ready"


def test_f16_variant_no_nvcc(fake_nvml):
    missing = NA("not installed; not needed to run PyTorch (only to compile CUDA extensions)", "not_installed")
    f = facts_for(fake_nvml, "driver_450", torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]),
                  nvcc={"path": missing, "release": missing, "build": missing})
    found = findings(f)
    nv = [x for x in found if x.id == "nvcc-missing"][0]
    assert "not needed to run PyTorch" in nv.cause
    assert found[-1].title == "Verdict: ready"


def test_f17_cpu_wheel_on_gpu_machine(fake_nvml):
    f = facts_for(fake_nvml, "driver_470", torch_facts("2.3.1+cpu"))
    found = findings(f)
    cpu = [x for x in found if x.id == "cpu-only-build"][0]
    assert cpu.severity == "error"
    assert "GPU and driver found, but this PyTorch build has no CUDA support" == cpu.title
    assert "whl/cu118" in cpu.fix          # the newest wheel an 11.4 driver runs
    assert found[-1].severity == "error"
    assert "no GPU" not in " ".join(x.title for x in found)


def test_f19_driver_too_old(fake_nvml):
    f = facts_for(fake_nvml, "driver_470", torch_facts("2.1.0+cu121", "12.1", False, 0, ["sm_80", "sm_86"]))
    found = findings(f)
    old = [x for x in found if x.id == "driver-too-old"][0]
    assert "11.4" in old.cause and "12.1" in old.cause
    assert "525.60.13" in old.fix and "whl/cu118" in old.fix
    assert "toolkit does not help" in old.fix


def test_f18_interpreter_hint(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    f["python"] = {"executable": "/opt/conda/envs/a/bin/python", "version": "3.11", "prefix": "/opt",
                   "shell_python": "/usr/bin/python3"}
    found = findings(f)
    hint = [x for x in found if x.id == "interpreter"][0]
    assert "/opt/conda/envs/a/bin/python" in hint.cause and "/usr/bin/python3" in hint.cause


def test_f02_mismatch_is_an_error(fake_nvml):
    f = facts_for(fake_nvml, "version_mismatch", torch_facts("2.4.0+cu121", "12.1"))
    found = findings(f)
    nv = [x for x in found if x.id == "nvml-unavailable"][0]
    assert nv.severity == "error" and "reboot" in nv.fix
    assert "mismatch" in nv.cause


def test_no_kernel_image_finding(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03", torch_facts("2.0.0+cu117", "11.7", True, 2, ["sm_75", "sm_80"]),
                  env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    found = findings(f)
    bad = [x for x in found if x.id == "no-kernel-image"]
    assert len(bad) == 1 and "9.0" in bad[0].cause  # the H100; the T4 (7.5) is fine


def test_f17_advice_does_not_trigger_own_driver_warning(fake_nvml):
    """The recommended wheel for a 12.4 driver must not be newer than 12.4."""
    f = facts_for(fake_nvml, "one_gpu", torch_facts("2.3.1+cpu"))
    cpu = [x for x in findings(f) if x.id == "cpu-only-build"][0]
    assert cpu.fix.endswith("whl/cu124")


@pytest.mark.parametrize("setup, expect", [("missing", "does not exist"), ("nobin", "has no bin/nvcc"),
                                           ("noexec", "is not executable")])
def test_bad_cuda_home(tmp_path, setup, expect, fake_nvml):
    home = tmp_path / "cuda"
    if setup != "missing":
        (home / "bin").mkdir(parents=True)
    if setup == "noexec":
        (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    f = facts_for(fake_nvml, "no_driver", env={"CUDA_HOME": str(home), "PATH": os.environ["PATH"]})
    found = [x for x in findings(f) if x.id == "cuda-home"]
    assert found and expect in found[0].cause and "cpp_extension" in found[0].cause


def test_f18_two_venvs_of_one_base_python(tmp_path, fake_nvml):
    """A venv's python on PATH that is not the kernel's venv must be flagged, though both resolve to one binary."""
    import sys
    venv = tmp_path / "other"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = x\n")
    os.symlink(os.path.realpath(sys.executable), venv / "bin" / "python3")
    f = facts_for(fake_nvml, "no_driver", env={"PATH": str(venv / "bin")})
    assert f["python"]["shell_python"] == str(venv / "bin" / "python3")
    assert "interpreter" in ids(findings(f))
    kernel_bin = os.path.dirname(sys.executable)
    f = facts_for(fake_nvml, "no_driver", env={"PATH": kernel_bin})
    if os.path.exists(os.path.join(kernel_bin, "python3")):
        assert "interpreter" not in ids(findings(f))


def test_cvd_invalid_entry_flagged_without_nvml(fake_nvml):
    f = facts_for(fake_nvml, "no_driver", env={"CUDA_VISIBLE_DEVICES": "0,foo"})
    bad = [x for x in findings(f) if x.id == "cvd-unknown"]
    assert bad and "'foo'" in bad[0].cause
