"""Tier 1.

The compatibility rules behind %cudainfo, table-driven, and the findings on whole fact sets built
through the fake NVML, with field reports as cases.
"""

import os

import pytest

from cudamagic.core.na import NA
from cudamagic.core.wheels import MIN_DRIVER, WHEEL_CUDA, best_for_driver, tag, wheel_runs_on_driver
from cudamagic.info.findings import arch_supported, findings
from tests.info.factsets import facts_for, ids, torch_facts


@pytest.mark.parametrize(
    "cc, arch, ok",
    [
        ("8.6", ["sm_80", "sm_90"], True),  # same major, lower minor cubin runs
        ("9.0", ["sm_80", "sm_86"], False),  # newer major, no PTX
        ("9.0", ["sm_80", "compute_80"], True),  # PTX JIT
        ("3.7", ["sm_50", "sm_60", "sm_70"], False),  # too old for the build (Kepler)
        ("12.0", ["sm_90", "sm_100", "sm_120"], True),
    ],
)
def test_arch_supported(cc, arch, ok):
    assert arch_supported(cc, arch) is ok


# (driver version, CUDA it reports, the wheels it runs). A wheel runs when its CUDA is not newer
# than the driver's, or is a newer minor of the same major and the driver reaches MIN_DRIVER of that
# major (minor version compatibility).
DRIVERS = [
    ("418.87.00", (10, 1), set()),
    ("450.66", (11, 0), set()),  # 11.x minor compatibility needs 450.80.02
    ("450.80.02", (11, 0), {(11, 8)}),
    ("470.86", (11, 4), {(11, 8)}),
    ("520.61.05", (11, 8), {(11, 8)}),
    ("525.60.12", (12, 0), {(11, 8)}),  # one patch below 12.x minor compatibility
    ("525.60.13", (12, 0), {(11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9)}),
    ("550.54.15", (12, 4), {(11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9)}),
    ("575.51.03", (12, 9), {(11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9)}),
    ("580.65.06", (13, 0), set(WHEEL_CUDA)),
]


@pytest.mark.parametrize("version, cuda, runs", DRIVERS, ids=[d[0] for d in DRIVERS])
@pytest.mark.parametrize("wheel", WHEEL_CUDA, ids=[f"cu{a}{b}" for a, b in WHEEL_CUDA])
def test_every_driver_wheel_pair(version, cuda, runs, wheel):
    assert wheel_runs_on_driver(wheel, cuda, version) is (wheel in runs)


@pytest.mark.parametrize("version, cuda, runs", DRIVERS, ids=[d[0] for d in DRIVERS])
def test_recommended_wheel_runs_on_its_driver(version, cuda, runs):
    pick = best_for_driver(cuda, version)
    if not runs:
        assert pick is None
    else:
        major, minor = pick
        assert (major, minor) in runs
        if wheel_runs_on_driver(
            (major, minor), cuda, None
        ):  # prefer a wheel the driver runs natively
            assert all(w <= (major, minor) or w > cuda for w in runs)


@pytest.mark.parametrize(
    "driver, version, wheel",
    [
        ((11, 4), "470.86", "cu118"),
        ((12, 8), "570.86.10", "cu128"),
        ((12, 4), "550.54.15", "cu124"),
        ((12, 5), "555.42.02", "cu124"),
        ((13, 0), "580.65.06", "cu130"),
        ((11, 0), "450.80.02", "cu118"),
        ((11, 0), "450.66", None),
        ((11, 4), None, None),
        ((10, 2), "440.33.01", None),
    ],
)
def test_best_wheel_for_driver(driver, version, wheel):
    pick = best_for_driver(driver, version)
    assert (tag(pick) if pick else None) == wheel


def test_min_driver_covers_every_wheel_major():
    assert {w[0] for w in WHEEL_CUDA} <= set(MIN_DRIVER)


def test_driver_450_66_is_not_told_cu118(fake_nvml):
    f = facts_for(fake_nvml, "driver_450", torch_facts("2.3.1+cpu"))
    cpu = [x for x in findings(f) if x.id == "cpu-only-build"][0]
    assert "cu118" not in cpu.fix and "450.80.02" in cpu.fix and "450.66" in cpu.fix


NVCC_101_FACTS = {"path": "/usr/local/cuda-10.1/bin/nvcc", "release": "10.1", "build": "10.1.243"}


def test_three_cuda_versions(fake_nvml):
    f = facts_for(
        fake_nvml,
        "driver_450",
        torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]),
        nvcc=NVCC_101_FACTS,
    )
    assert f["driver"]["cuda_driver_version"] == "11.0"
    found = findings(f)
    assert "toolkit-differs" in ids(found) and "driver-too-old" not in ids(found)
    differs = [x for x in found if x.id == "toolkit-differs"][0]
    assert "10.1" in differs.cause and "10.2" in differs.cause and "extensions" in differs.cause
    assert found[-1].severity == "ok" and found[-1].title == "Verdict: ready"


def test_variant_no_nvcc(fake_nvml):
    missing = NA(
        "not installed; not needed to run PyTorch (only to compile CUDA extensions)",
        "not_installed",
    )
    f = facts_for(
        fake_nvml,
        "driver_450",
        torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]),
        nvcc={"path": missing, "release": missing, "build": missing},
    )
    found = findings(f)
    nv = [x for x in found if x.id == "nvcc-missing"][0]
    assert "not needed to run PyTorch" in nv.cause
    assert found[-1].title == "Verdict: ready"


def test_cpu_wheel_on_gpu_machine(fake_nvml):
    f = facts_for(fake_nvml, "driver_470", torch_facts("2.3.1+cpu"))
    found = findings(f)
    cpu = [x for x in found if x.id == "cpu-only-build"][0]
    assert cpu.severity == "error"
    assert "GPU and driver found, but this PyTorch build has no CUDA support" == cpu.title
    assert "whl/cu118" in cpu.fix  # the newest wheel an 11.4 driver runs
    assert found[-1].severity == "error"
    assert "no GPU" not in " ".join(x.title for x in found)


def test_driver_too_old(fake_nvml):
    f = facts_for(
        fake_nvml, "driver_470", torch_facts("2.1.0+cu121", "12.1", False, 0, ["sm_80", "sm_86"])
    )
    found = findings(f)
    old = [x for x in found if x.id == "driver-too-old"][0]
    assert "11.4" in old.cause and "12.1" in old.cause
    assert "525.60.13" in old.fix and "whl/cu118" in old.fix
    assert "toolkit does not help" in old.fix


def test_interpreter_hint(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    f["python"] = {
        "executable": "/opt/conda/envs/a/bin/python",
        "version": "3.11",
        "prefix": "/opt",
        "shell_python": "/usr/bin/python3",
    }
    found = findings(f)
    hint = [x for x in found if x.id == "interpreter"][0]
    assert "/opt/conda/envs/a/bin/python" in hint.cause and "/usr/bin/python3" in hint.cause


def test_mismatch_is_an_error(fake_nvml):
    f = facts_for(fake_nvml, "version_mismatch", torch_facts("2.4.0+cu121", "12.1"))
    found = findings(f)
    nv = [x for x in found if x.id == "nvml-unavailable"][0]
    assert nv.severity == "error" and "reboot" in nv.fix
    assert "mismatch" in nv.cause


def test_no_kernel_image_finding(fake_nvml):
    f = facts_for(
        fake_nvml,
        "gpu_without_fan",
        torch_facts("2.0.0+cu117", "11.7", True, 2, ["sm_75", "sm_80"]),
        env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    found = findings(f)
    bad = [x for x in found if x.id == "no-kernel-image"]
    assert len(bad) == 1 and "9.0" in bad[0].cause  # the H100; the T4 (7.5) is fine


def test_advice_does_not_trigger_own_driver_warning(fake_nvml):
    """A 12.4 driver gets a wheel of the installed release that it runs.

    Torch 2.3 has cu118 and cu121 wheels and no cu124.
    """
    f = facts_for(fake_nvml, "one_gpu", torch_facts("2.3.1+cpu"))
    cpu = [x for x in findings(f) if x.id == "cpu-only-build"][0]
    assert cpu.fix == (
        "pip install --force-reinstall torch==2.3.1 "
        "--index-url https://download.pytorch.org/whl/cu121"
    )


@pytest.mark.parametrize(
    "setup, expect",
    [("missing", "does not exist"), ("nobin", "has no bin/nvcc"), ("noexec", "is not executable")],
)
def test_bad_cuda_home(tmp_path, setup, expect, fake_nvml):
    home = tmp_path / "cuda"
    if setup != "missing":
        (home / "bin").mkdir(parents=True)
    if setup == "noexec":
        (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    f = facts_for(fake_nvml, "no_driver", env={"CUDA_HOME": str(home), "PATH": os.environ["PATH"]})
    found = [x for x in findings(f) if x.id == "cuda-home"]
    assert found and expect in found[0].cause and "cpp_extension" in found[0].cause


def test_two_venvs_of_one_base_python(tmp_path, fake_nvml):
    """A python on PATH from another venv is flagged, though both venvs share one binary."""
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


def _unknown_nvml_facts(fake_nvml, monkeypatch, in_container, torch):
    import pynvml

    from cudamagic.core import platform

    monkeypatch.setattr(platform, "in_container", lambda: in_container)
    return facts_for(fake_nvml, {"init_error": pynvml.NVML_ERROR_UNKNOWN, "gpus": []}, torch)


@pytest.mark.parametrize(
    "torch", [torch_facts("2.13.0+cpu"), torch_facts("2.8.0+cu128", "12.8", False, 0, ["sm_90"])]
)
def test_container_that_lost_its_gpus_is_an_error_with_the_fix(fake_nvml, monkeypatch, torch):
    found = findings(_unknown_nvml_facts(fake_nvml, monkeypatch, True, torch))
    (nv,) = [x for x in found if x.id == "nvml-unavailable"]
    assert nv.severity == "error" and "container" in nv.cause and "cgroup" in nv.cause
    assert nv.fix.startswith("recreate the container") and "create-dev-char-symlinks" in nv.fix
    assert found[-1].title == "Verdict: action needed" and found[-1].fix == nv.fix


def test_nvml_failing_is_never_an_all_clear_cpu_only_verdict(fake_nvml, monkeypatch):
    found = findings(_unknown_nvml_facts(fake_nvml, monkeypatch, False, torch_facts("2.13.0+cpu")))
    (nv,) = [x for x in found if x.id == "nvml-unavailable"]
    assert "container" not in nv.cause + nv.fix and "nvidia-smi" in nv.fix
    assert found[-1].severity != "ok" and found[-1].title != "Verdict: CPU only"
