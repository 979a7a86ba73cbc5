"""Tier 1.

The NVML, CPU-build, driver, toolkit and architecture rules of %cudainfo, each branch with the whole
finding the user reads (severity, id, title, cause, fix), on hand-built facts (no NVML needed).
"""

from __future__ import annotations

import pytest

from cudamagic.core.na import NA
from cudamagic.core.wheels import parse_version_tuple
from cudamagic.info.findings import (
    Finding,
    _arch_rules,
    _Basis,
    _cpu_build_rules,
    _driver_rules,
    _nvml_rules,
    _toolkit_rules,
)


def basis(
    status="ok",
    driver="550.54.15",
    driver_cuda="12.4",
    cuda_build=None,
    nvcc_path="/usr/local/cuda/bin/nvcc",
    release="12.4",
    home_problem=None,
    gpus=(),
    arch=None,
    cpu_only=False,
    installed=True,
):
    t = {"installed": installed, "version": "2.13.0", "cuda_build": cuda_build, "arch_list": arch}
    drv = {"status": status, "driver_version": driver, "cuda_driver_version": driver_cuda}
    tk = {"path": nvcc_path, "release": release, "cuda_home_problem": home_problem}
    nvml_ok = status == "ok"
    return _Basis(
        facts={},
        t=t,
        drv=drv,
        tk=tk,
        gpus=list(gpus),
        cvd={},
        nvml_ok=nvml_ok,
        n_gpus=len(gpus),
        driver_cuda=parse_version_tuple(driver_cuda) if nvml_ok else None,
        build=parse_version_tuple(cuda_build) if installed else None,
        cpu_only=cpu_only,
    )


@pytest.mark.parametrize(
    "code, build, sev, fix",
    [
        (
            "no_driver",
            None,
            "info",
            "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore this on a "
            "machine without an NVIDIA GPU",
        ),
        (
            "no_driver",
            "12.4",
            "warning",
            "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore this "
            "on a machine without an NVIDIA GPU",
        ),
        (
            "version_mismatch",
            None,
            "error",
            "sudo reboot  (or: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
            "sudo modprobe nvidia)",
        ),
        ("no_binding", "12.4", "warning", "pip install nvidia-ml-py"),
        ("no_permission", None, "info", "check that `nvidia-smi` works"),
    ],
)
def test_nvml_unavailable(code, build, sev, fix):
    st = NA("the reason", code)
    assert list(_nvml_rules(basis(status=st, cuda_build=build))) == [
        Finding(sev, "nvml-unavailable", "NVML not available: no GPU data", "the reason", fix)
    ]
    assert list(_nvml_rules(basis(cuda_build=build))) == []


def test_cpu_build_on_a_gpu_machine():
    found = list(_cpu_build_rules(basis(cpu_only=True, gpus=[{"index": 0}, {"index": 1}])))
    assert len(found) == 1
    f = found[0]
    assert (f.severity, f.id, f.title) == (
        "error",
        "cpu-only-build",
        "GPU and driver found, but this PyTorch build has no CUDA support",
    )
    assert f.cause == (
        "torch 2.13.0 is a CPU-only build (torch.version.cuda is None) while NVML sees 2 GPU(s) "
        "and "
        "the driver supports CUDA 12.4."
    )
    # chosen from torch 2.13's own wheels (cu126, cu130, cu132): cu126 runs on a 12.4 driver
    # 550.54.15 through minor version compatibility; cu124 has no torch 2.13
    assert f.fix == (
        "pip install --force-reinstall torch==2.13.0 "
        "--index-url https://download.pytorch.org/whl/cu126"
    )
    assert list(_cpu_build_rules(basis(cpu_only=True))) == []  # no GPU: a CPU build is right
    assert list(_cpu_build_rules(basis(gpus=[{"index": 0}]))) == []  # not a CPU build


def test_cpu_build_on_a_driver_no_wheel_runs_on():
    f = list(
        _cpu_build_rules(
            basis(cpu_only=True, driver="418.87.00", driver_cuda="10.1", gpus=[{"index": 0}])
        )
    )[0]
    assert f.fix == (
        "update the NVIDIA driver to 450.80.02 or newer (no PyTorch wheel runs on driver "
        "418.87.00), "
        "then install a CUDA build of PyTorch"
    )


def test_driver_too_old_other_major():
    (f,) = list(_driver_rules(basis(driver="470.86", driver_cuda="11.4", cuda_build="12.4")))
    assert (f.severity, f.id, f.title) == (
        "error",
        "driver-too-old",
        "The NVIDIA driver is too old for this PyTorch build",
    )
    assert f.cause == (
        "PyTorch was built with CUDA 12.4 but driver 470.86 supports CUDA up to 11.4 "
        "(nvmlSystemGetCudaDriverVersion)."
    )
    assert f.fix.startswith(
        "update the NVIDIA driver to 525.60.13 or newer; or install a wheel built for CUDA 11.x: "
    )
    assert "cu118" in f.fix
    assert f.fix.endswith(
        ". Installing a CUDA toolkit does not help: PyTorch ships its own CUDA runtime."
    )


def test_driver_too_old_with_no_wheel_for_it():
    (f,) = list(_driver_rules(basis(driver="418.87.00", driver_cuda="10.1", cuda_build="12.4")))
    assert f.fix == (
        "update the NVIDIA driver to 525.60.13 or newer. Installing a CUDA toolkit does not help: "
        "PyTorch ships its own CUDA runtime."
    )
    (f,) = list(_driver_rules(basis(driver="418.87.00", driver_cuda="10.1", cuda_build="14.0")))
    assert f.fix.startswith("update the NVIDIA driver to a newer release or newer")


def test_driver_minor_older_same_major():
    assert list(_driver_rules(basis(driver_cuda="12.4", cuda_build="12.8"))) == [
        Finding(
            "warning",
            "driver-minor-older",
            "The driver's CUDA is older than the build's, within the same major",
            "PyTorch was built with CUDA 12.8; the driver supports 12.4. Minor version "
            "compatibility usually makes this "
            "work, but PTX JIT and some newer features may fail.",
            "update the NVIDIA driver if you see 'PTX was compiled with an unsupported toolchain' "
            "errors",
        )
    ]
    assert list(_driver_rules(basis(driver_cuda="12.4", cuda_build="12.4"))) == []
    assert list(_driver_rules(basis(driver_cuda="13.0", cuda_build="12.8"))) == []
    assert list(_driver_rules(basis(driver_cuda="12.4", cuda_build=None))) == []


def test_toolkit_missing_unreadable_and_differs():
    missing = NA("not installed", "not_installed")
    assert list(_toolkit_rules(basis(nvcc_path=missing, release=missing))) == [
        Finding(
            "info",
            "nvcc-missing",
            "No CUDA toolkit (nvcc) found",
            "nvcc is not installed; it is not needed to run PyTorch, only to compile CUDA "
            "extensions.",
            "",
        )
    ]
    bad = NA("`nvcc -V` failed", "error")
    assert list(_toolkit_rules(basis(release=bad))) == [
        Finding(
            "warning",
            "nvcc-unreadable",
            "nvcc did not report its version",
            "`nvcc -V` failed",
            "run `/usr/local/cuda/bin/nvcc -V` in a terminal to see what is wrong",
        )
    ]
    assert list(_toolkit_rules(basis(release="12.4", cuda_build="12.1"))) == [
        Finding(
            "info",
            "toolkit-differs",
            "The CUDA toolkit on PATH differs from PyTorch's CUDA",
            "nvcc 12.4 at /usr/local/cuda/bin/nvcc vs PyTorch's CUDA 12.1: this only matters when "
            "compiling CUDA "
            "extensions (torch.utils.cpp_extension), which may then fail.",
            "to build extensions, install CUDA toolkit 12.1 and set CUDA_HOME to it",
        )
    ]
    assert list(_toolkit_rules(basis(release="12.4", cuda_build="12.4"))) == []
    assert list(_toolkit_rules(basis(release="12.4.131", cuda_build="12.4"))) == []
    assert list(_toolkit_rules(basis(release="12.4", cuda_build=None))) == []


def test_cuda_home_problem():
    assert list(
        _toolkit_rules(basis(home_problem=("CUDA_HOME", "CUDA_HOME=/opt/cuda has no bin/nvcc")))
    ) == [
        Finding(
            "warning",
            "cuda-home",
            "CUDA_HOME points to no usable CUDA toolkit",
            "CUDA_HOME=/opt/cuda has no bin/nvcc; torch.utils.cpp_extension compiles with "
            "CUDA_HOME, so building CUDA "
            "extensions will fail (running PyTorch is not affected).",
            "unset CUDA_HOME, or point it to a toolkit folder that contains bin/nvcc (e.g. "
            "/usr/local/cuda)",
        )
    ]


def test_gpu_without_kernels_in_the_build():
    gpus = [
        {"index": 0, "name": "Tesla K80", "compute_cap": "3.7"},
        {"index": 1, "name": "A100", "compute_cap": "8.0"},
        {"index": 2, "name": "lost", "compute_cap": NA("GPU lost", "gpu_lost")},
    ]
    arch = ["sm_50", "sm_80", "sm_90"]
    assert list(_arch_rules(basis(cuda_build="12.4", gpus=gpus, arch=arch))) == [
        Finding(
            "error",
            "no-kernel-image",
            "GPU 0 (Tesla K80) is not supported by this build",
            "its compute capability 3.7 has no kernels in this build's architectures (sm_50, "
            "sm_80, sm_90): "
            "'no kernel image is available for execution on the device'.",
            "pip install --force-reinstall torch==2.7.* --index-url "
            "https://download.pytorch.org/whl/cu118  (its wheels have kernels for sm_37)",
        )
    ]
    assert (
        list(_arch_rules(basis(cuda_build=None, gpus=gpus, arch=arch))) == []
    )  # CPU build: no kernels expected
    assert (
        list(_arch_rules(basis(cuda_build="12.4", gpus=gpus, arch=[]))) == []
    )  # arch list unknown
    assert list(_arch_rules(basis(cuda_build="12.4", gpus=gpus, arch=None))) == []
    assert list(_arch_rules(basis(cuda_build="12.4", gpus=gpus, arch=arch, installed=False))) == []


def test_gpu_newer_than_the_build_gets_the_index_with_its_kernels():
    gpus = [{"index": 0, "name": "RTX 5090", "compute_cap": "12.0"}]
    arch = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # a cu126 build
    (f,) = _arch_rules(
        basis(cuda_build="12.6", gpus=gpus, arch=arch, driver="580.65.06", driver_cuda="13.0")
    )
    assert f.fix == (
        "pip install --force-reinstall torch==2.13.0 "
        "--index-url https://download.pytorch.org/whl/cu130  (its wheels have kernels for sm_120)"
    )


# ---- MIG, CUDA unavailable, verdict
# ----------------------------------------------------------------------------

from cudamagic.info.findings import _cuda_unavailable_rules, _mig_rules, _verdict  # noqa: E402


def test_mig_mode():
    gpus = [
        {"index": 0, "mig.mode.current": "Enabled", "mig_devices": [{}, {}, {}]},
        {
            "index": 1,
            "mig.mode.current": "Enabled",
            "mig_devices": NA("not supported", "not_supported"),
        },
        {"index": 2, "mig.mode.current": "Disabled"},
        {"index": 3},
        {"index": 4, "mig.mode.current": "Enabled"},
        {"index": 5, "mig.mode.current": "Enabled", "mig_devices": None},
    ]
    assert list(_mig_rules(basis(gpus=gpus))) == [
        Finding(
            "info",
            "mig",
            f"GPU {i} is in MIG mode ({n} instance(s))",
            "In MIG mode CUDA sees MIG instances, not the whole GPU, and utilization is not "
            "reported.",
            "select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (see `nvidia-smi -L`)",
        )
        for i, n in ((0, 3), (1, 0), (4, 0), (5, 0))
    ]


def _cvd(b, hides_all=False, set_=True):
    object.__setattr__(b, "cvd", {"set": set_, "hides_all": hides_all})
    return b


UNAVAILABLE = Finding(
    "error",
    "cuda-unavailable",
    "torch.cuda.is_available() is False although a GPU is present",
    "CUDA could not initialise in this process (driver problem, container without GPU access, or "
    "CUDA failed "
    "earlier in this kernel).",
    "restart the kernel; if it persists run `python -c 'import torch; torch.zeros(1).cuda()'` in a "
    "terminal to see "
    "the CUDA error",
)


def test_cuda_unavailable_only_when_nothing_else_explains_it():
    def b(**kw):
        out = basis(cuda_build="12.4", gpus=[{"index": 0}], **kw)
        out.t["cuda_available"] = False
        return out

    assert list(_cuda_unavailable_rules(_cvd(b(), set_=False), [])) == [UNAVAILABLE]
    assert list(_cuda_unavailable_rules(_cvd(b()), [Finding("warning", "x", "", "")])) == [
        UNAVAILABLE
    ]
    assert (
        list(_cuda_unavailable_rules(_cvd(b()), [Finding("error", "x", "", "")])) == []
    )  # explained above
    assert list(_cuda_unavailable_rules(_cvd(b(), hides_all=True), [])) == []  # CVD hides every GPU
    assert list(_cuda_unavailable_rules(_cvd(b(), hides_all=True, set_=False), [])) == [UNAVAILABLE]
    ok = b()
    ok.t["cuda_available"] = True
    assert list(_cuda_unavailable_rules(_cvd(ok, set_=False), [])) == []
    assert (
        list(_cuda_unavailable_rules(_cvd(basis(cuda_build="12.4"), set_=False), [])) == []
    )  # no GPU
    nobuild = basis(gpus=[{"index": 0}])
    nobuild.t["cuda_available"] = False
    assert list(_cuda_unavailable_rules(_cvd(nobuild, set_=False), [])) == []


def test_verdicts():
    err = Finding("error", "a", "A", "cause a", "fix a")
    t = {"installed": True, "cuda_available": True, "device_count": 2}
    assert _verdict(
        [Finding("warning", "w", "", "", "fix w"), err, Finding("error", "b", "", "", "fix b")],
        t,
        2,
        False,
    ) == Finding(
        "error",
        "verdict",
        "Verdict: action needed",
        "2 problems, listed in the findings, stop PyTorch from using the GPU as expected.",
        "fix a",
    )
    assert _verdict([err], t, 2, False).cause == (
        "1 problem, listed in the findings, stops PyTorch from using the GPU as expected."
    )
    assert _verdict([], t, 2, False) == Finding(
        "ok", "verdict", "Verdict: ready", "PyTorch can use 2 CUDA device(s).", ""
    )
    cpu = {"installed": True, "cuda_available": False}
    assert _verdict([], cpu, 0, True) == Finding(
        "ok",
        "verdict",
        "Verdict: CPU only",
        "No NVIDIA GPU is visible here and this PyTorch build is CPU-only; code runs on the CPU.",
        "",
    )
    cpu_on_cpu = Finding(
        "warning",
        "verdict",
        "Verdict: PyTorch will run on the CPU",
        "No usable CUDA device for PyTorch in this kernel (see the findings).",
        "",
    )
    assert _verdict([], cpu, 1, True) == cpu_on_cpu
    assert _verdict([], cpu, 0, False) == cpu_on_cpu
    assert _verdict([], {"installed": False, "cuda_available": True}, 0, False) == cpu_on_cpu
