"""Tier 1.

%cudainfo findings that rest on the kernel's environment (no PyTorch, a ROCm build, the `python` on
PATH vs the kernel's interpreter) and the small readers under the compatibility rules (driver
version strings, architecture names), with the whole finding the user reads.
"""

from __future__ import annotations

import os

import pytest

from cudamagic.core.na import NA
from cudamagic.core.wheels import _driver_tuple, wheel_runs_on_driver
from cudamagic.info.findings import (
    Finding,
    _env_root,
    _interpreter_rules,
    arch_supported,
    findings,
)
from tests.info.factsets import facts_for, ids, torch_facts


def test_no_pytorch_is_an_error_with_the_import_failure_and_the_install_command(fake_nvml):
    missing = NA("PyTorch is not importable (ModuleNotFoundError)", "not_installed")
    f = facts_for(fake_nvml, "one_gpu", {"installed": False, "error": missing})
    found = findings(f)
    assert found[0] == Finding(
        "error",
        "torch-missing",
        "PyTorch is not installed in this kernel",
        "PyTorch is not importable (ModuleNotFoundError)",
        "pip install torch  (in the kernel's interpreter: %pip install torch)",
    )
    assert "cpu-only-build" not in ids(found) and "no-kernel-image" not in ids(found)
    assert found[-1] == Finding(
        "error",
        "verdict",
        "Verdict: action needed",
        "1 problem, listed in the findings, stops PyTorch from using the GPU as expected.",
        "pip install torch  (in the kernel's interpreter: %pip install torch)",
    )


def test_rocm_build_is_not_called_cpu_only(fake_nvml):
    rocm = dict(torch_facts("2.4.0+rocm6.1"), hip_build="6.1.40091")
    found = findings(facts_for(fake_nvml, "one_gpu", rocm))
    assert "cpu-only-build" not in ids(found)
    assert found[-1].title == "Verdict: PyTorch will run on the CPU"
    cpu = findings(facts_for(fake_nvml, "one_gpu", torch_facts("2.4.0+cpu")))
    assert "cpu-only-build" in ids(cpu)


def test_cpu_build_without_a_gpu_is_ready_for_the_cpu(fake_nvml):
    found = findings(facts_for(fake_nvml, "no_driver", torch_facts("2.13.0+cpu")))
    assert found[-1] == Finding(
        "ok",
        "verdict",
        "Verdict: CPU only",
        "No NVIDIA GPU is visible here and this PyTorch build is CPU-only; code runs on the CPU.",
        "",
    )
    assert [f.severity for f in found if f.id == "nvml-unavailable"] == ["info"]


def test_findings_run_rule_by_rule_and_end_with_the_verdict(fake_nvml):
    f = facts_for(
        fake_nvml,
        "gpu_without_fan",
        torch_facts("2.0.0+cu117", "11.7", False, 2, ["sm_75", "sm_80"]),
        env={"CUDA_VISIBLE_DEVICES": "0,5"},
    )
    f["python"] = dict(f["python"], executable="/opt/a/bin/python", shell_python="/usr/bin/python3")
    got = ids(findings(f))
    assert got[-1] == "verdict" and got.count("verdict") == 1
    order = [
        i
        for i in got
        if i in ("no-kernel-image", "cvd-unknown", "index-order", "interpreter", "verdict")
    ]
    assert order == ["no-kernel-image", "cvd-unknown", "index-order", "interpreter", "verdict"]


# ---- the kernel's Python vs the `python` on PATH
# ---------------------------------------------------------------


def _python(tmp_path, name, venv):
    root = tmp_path / name
    (root / "bin").mkdir(parents=True)
    if venv:
        (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    exe = root / "bin" / "python3"
    exe.write_text("")
    return root, str(exe)


def _basis(executable, shell_python):
    from cudamagic.info.findings import _Basis

    return _Basis(
        facts={"python": {"executable": executable, "shell_python": shell_python}},
        t={},
        drv={},
        tk={},
        gpus=[],
        cvd={},
        nvml_ok=False,
        n_gpus=0,
        driver_cuda=None,
        build=None,
        cpu_only=False,
    )


def test_interpreter_finding_names_both_pythons(tmp_path):
    _, kernel = _python(tmp_path, "kernel", venv=True)
    _, other = _python(tmp_path, "other", venv=True)
    assert list(_interpreter_rules(_basis(kernel, other))) == [
        Finding(
            "info",
            "interpreter",
            "This kernel runs a different Python from the one on PATH",
            f"kernel: {kernel}; `python` on PATH: {other}. Packages installed with `pip` in a "
            f"terminal may not be "
            "visible here.",
            "install from the notebook with %pip install ..., or register the right interpreter as "
            "a kernel: "
            "python -m ipykernel install --user --name myenv",
        )
    ]
    assert (
        list(
            _interpreter_rules(_basis(kernel, NA("no python or python3 on PATH", "not_installed")))
        )
        == []
    )


def test_same_venv_through_a_symlink_is_one_environment(tmp_path):
    root, kernel = _python(tmp_path, "venv", venv=True)
    (tmp_path / "link").symlink_to(root)
    via_link = str(tmp_path / "link" / "bin" / "python")
    assert _env_root(via_link) == _env_root(kernel) == os.path.realpath(root)
    assert list(_interpreter_rules(_basis(kernel, via_link))) == []


def test_plain_install_is_found_through_the_interpreter_symlink(tmp_path, monkeypatch):
    base, real = _python(tmp_path, "base", venv=False)
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    link = tmp_path / "usr" / "bin" / "python3"
    link.symlink_to(real)
    assert _env_root(str(link)) == os.path.realpath(
        base
    )  # not .../usr: the binary's own installation
    assert list(_interpreter_rules(_basis(real, str(link)))) == []
    monkeypatch.chdir(tmp_path / "usr")
    assert _env_root(os.path.join("bin", "python3")) == os.path.realpath(base)
    venv, _ = _python(tmp_path, "venv", venv=True)
    monkeypatch.chdir(venv)
    assert _env_root(os.path.join("bin", "python3")) == os.path.realpath(
        venv
    )  # relative path: from the cwd


# ---- small readers
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, parts",
    [
        ("450.80.02", (450, 80, 2)),
        ("  525.60.13\n", (525, 60, 13)),
        ("470", (470,)),
        ("470.x", None),
        ("v470.86", None),
        ("", None),
        (None, None),
        (NA("not supported", "not_supported"), None),
        (470.86, None),
    ],
)
def test_driver_version_parts(text, parts):
    assert _driver_tuple(text) == parts


def test_minor_compatibility_needs_a_known_major_and_a_readable_driver():
    assert wheel_runs_on_driver((12, 8), None, "570.86.10") is False  # no driver CUDA: nothing runs
    assert wheel_runs_on_driver((14, 1), (14, 0), "999.0") is False  # no MIN_DRIVER for CUDA 14 yet
    assert wheel_runs_on_driver((14, 0), (14, 0), None) is True  # natively: no table needed
    assert wheel_runs_on_driver((12, 8), (12, 4), "garbage") is False
    assert wheel_runs_on_driver((12, 8), (12, 4), "525.60.13") is True  # exactly the minimum
    assert wheel_runs_on_driver((12, 8), (12, 4), "525.60.12") is False


@pytest.mark.parametrize(
    "cc, arch, ok",
    [
        ("9.0", ["sm_90a"], True),  # arch-specific cubin
        ("8.0", ["sm_86"], False),  # a cubin does not run on an older minor
        ("8.6", ["compute_86"], True),  # PTX of the same cc
        ("8.0", ["compute_86"], False),  # PTX for a newer cc does not JIT down
        ("7.5", ["compute_70"], True),
        ("8.0", ["sm_70", "sm_75"], False),  # a cubin never crosses majors
        ("8.0", ["compute_7"], False),  # unreadable names are skipped
        ("8.0", ["lto_80", "sm_80x1"], False),
        ("8.0", ["garbage", "sm_80"], True),  # ... and the names after them still count
        ("8.0", None, False),
        ("8.0", [], False),
        ("unknown", ["sm_50"], True),  # an unreadable cc is not blamed
        ("10.0", ["sm_100"], True),
        ("10.0", ["sm_90", "compute_90"], True),
        ("10.0", ["sm_90"], False),
    ],
)
def test_arch_supported_edges(cc, arch, ok):
    assert arch_supported(cc, arch) is ok
