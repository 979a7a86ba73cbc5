"""Tier 1.

The Windows rules of %cudainfo (stale nvidia-smi.exe / nvml.dll copies left by driver updates, WDDM
GPUs), each branch with the whole finding the user reads, on hand-built facts (no NVML, no Windows
needed).
"""

from __future__ import annotations

import ntpath
import os

import pytest

from cudamagic.core.na import NA
from cudamagic.info.findings import Finding, _Basis, _windows_tool_rules

RUNNING, OLD = "546.33", "537.13"
STORE = "C:\\Windows\\System32\\DriverStore\\FileRepository"
OLD_SMI, NEW_SMI, TMP_SMI = (
    f"{STORE}\\nv_{x}\\nvidia-smi.exe" for x in ("old", "new", "LastGood.Tmp")
)
OLD_DLL, NEW_DLL = f"{STORE}\\nv_old\\nvml.dll", f"{STORE}\\nv_new\\nvml.dll"
NOT_ON_PATH = NA("no nvidia-smi.exe on PATH", "not_installed")
NOT_LOADED = NA("not loaded", "not_available")


def basis(
    smi=(),
    on_path=NOT_ON_PATH,
    nvml=(),
    lib=NOT_LOADED,
    running=RUNNING,
    nvml_ok=True,
    gpus=(),
    windows=True,
):
    win = {
        "nvidia-smi": [dict(c) for c in smi],
        "nvidia-smi on PATH": on_path,
        "nvml": [dict(c) for c in nvml],
    }
    facts = {"windows": win} if windows else {}
    see = NA(
        "NVML not available: see NVML status", "no_driver"
    )  # what nvml.system_info gives without NVML
    drv = {
        "status": "ok" if nvml_ok else NA("no driver", "no_driver"),
        "driver_version": running if nvml_ok else see,
        "nvml_library": lib,
    }
    return _Basis(
        facts=facts,
        t={},
        drv=drv,
        tk={},
        gpus=list(gpus),
        cvd={},
        nvml_ok=nvml_ok,
        n_gpus=len(gpus),
        driver_cuda=None,
        build=None,
        cpu_only=False,
    )


def copy(path, version):
    return {"path": path, "driver_version": version}


THREE = [copy(TMP_SMI, OLD), copy(NEW_SMI, RUNNING), copy(OLD_SMI, OLD)]
LISTING = f"{TMP_SMI} (driver {OLD}); {NEW_SMI} (driver {RUNNING}); {OLD_SMI} (driver {OLD})"


def stale(listing, n, fix, version=OLD):
    return Finding(
        "warning",
        "nvidia-smi-stale",
        f"The nvidia-smi.exe on PATH belongs to driver {version}, not the running {RUNNING}",
        f"{n} copies of nvidia-smi.exe are on this disk, left by driver updates: {listing}. An "
        f"nvidia-smi from "
        'another driver can fail ("Failed to initialize NVML: Driver/library version mismatch") or '
        "report wrong "
        "figures.",
        fix,
    )


def test_stale_nvidia_smi_on_path_names_the_copy_of_the_running_driver():
    assert list(_windows_tool_rules(basis(THREE, on_path=OLD_SMI))) == [
        stale(
            LISTING,
            3,
            f'run "{NEW_SMI}" instead (it belongs to the running driver), or put its folder first '
            f"on PATH",
        )
    ]


def test_stale_nvidia_smi_without_a_current_copy_says_reinstall():
    copies = [copy(OLD_SMI, OLD), copy(TMP_SMI, None)]
    assert list(_windows_tool_rules(basis(copies, on_path=OLD_SMI))) == [
        stale(
            f"{OLD_SMI} (driver {OLD}); {TMP_SMI} (driver unknown)",
            2,
            "reinstall the NVIDIA driver (a clean install) so that System32 holds the current "
            "nvidia-smi.exe",
        )
    ]


@pytest.mark.parametrize(
    "case",
    [
        "current on PATH",
        "one copy",
        "unknown version",
        "not listed",
        "no NVML",
        "driver N/A",
        "not windows",
    ],
)
def test_nvidia_smi_on_path_that_is_no_finding(case):
    kw = {"smi": THREE, "on_path": OLD_SMI}
    if case == "current on PATH":
        kw["on_path"] = NEW_SMI
    elif (
        case == "one copy"
    ):  # a single copy cannot be told apart from "the" nvidia-smi: nothing to choose
        kw["smi"] = [copy(OLD_SMI, OLD)]
    elif case == "unknown version":
        kw["smi"] = [copy(TMP_SMI, OLD), copy(NEW_SMI, RUNNING), copy(OLD_SMI, None)]
    elif case == "not listed":
        kw["on_path"] = "C:\\tools\\nvidia-smi.exe"
    elif case == "no NVML":
        kw["nvml_ok"] = False
    elif case == "driver N/A":
        kw["running"] = NA("not supported", "not_supported")
    elif case == "not windows":
        kw["windows"] = False
    assert list(_windows_tool_rules(basis(**kw))) == []


def test_path_comparison_ignores_case_as_windows_does(monkeypatch):
    monkeypatch.setattr(os.path, "normcase", ntpath.normcase)
    assert [f.id for f in list(_windows_tool_rules(basis(THREE, on_path=OLD_SMI.upper())))] == [
        "nvidia-smi-stale"
    ]
    three_upper = [dict(c, path=c["path"].upper()) for c in THREE]
    assert [f.id for f in list(_windows_tool_rules(basis(three_upper, on_path=OLD_SMI)))] == [
        "nvidia-smi-stale"
    ]
    (f,) = list(
        _windows_tool_rules(
            basis(nvml=[copy(OLD_DLL.upper(), OLD), copy(NEW_DLL, RUNNING)], lib=OLD_DLL)
        )
    )
    assert f.id == "nvml-stale"
    (f,) = list(
        _windows_tool_rules(
            basis(nvml=[copy(OLD_DLL, OLD), copy(NEW_DLL, RUNNING)], lib=OLD_DLL.upper())
        )
    )
    assert f.id == "nvml-stale"


@pytest.mark.parametrize(
    "copies, pick", [(THREE, NEW_SMI), ([copy(OLD_SMI, OLD), copy(TMP_SMI, OLD)], OLD_SMI)]
)
def test_nvidia_smi_not_on_path_says_which_copy_to_run(copies, pick):
    assert list(_windows_tool_rules(basis(copies))) == [
        Finding(
            "info",
            "nvidia-smi-not-on-path",
            "nvidia-smi.exe is not on PATH",
            f"{len(copies)} copies exist on this disk but no folder on PATH holds one.",
            f'run "{pick}"',
        )
    ]
    assert list(_windows_tool_rules(basis([]))) == []  # no copy at all: nothing to point to
    assert list(_windows_tool_rules(basis(copies, nvml_ok=False))) == []  # no running driver known


def nvml_stale(fix):
    return Finding(
        "warning",
        "nvml-stale",
        f"NVML was loaded from {OLD_DLL}, a copy of driver {OLD} (the running driver is {RUNNING})",
        "2 copies of nvml.dll are on this disk; the one loaded belongs to another driver.",
        fix,
    )


def test_stale_nvml_dll_loaded():
    both = [copy(OLD_DLL, OLD), copy(NEW_DLL, RUNNING)]
    assert list(_windows_tool_rules(basis(nvml=both, lib=OLD_DLL))) == [
        nvml_stale(
            f"the current one is {NEW_DLL}; reinstall the NVIDIA driver (clean install) and "
            f"restart the kernel"
        )
    ]
    old_only = [copy(OLD_DLL, OLD), copy(f"{STORE}\\nv_tmp\\nvml.dll", None)]
    assert list(_windows_tool_rules(basis(nvml=old_only, lib=OLD_DLL))) == [
        nvml_stale("reinstall the NVIDIA driver (clean install) and restart the kernel")
    ]


@pytest.mark.parametrize(
    "lib, copies, running",
    [
        (
            NEW_DLL,
            [copy(OLD_DLL, OLD), copy(NEW_DLL, RUNNING)],
            RUNNING,
        ),  # the current copy is loaded
        (
            OLD_DLL,
            [copy(OLD_DLL, None), copy(NEW_DLL, RUNNING)],
            RUNNING,
        ),  # its driver is unknown: no claim
        (NA("not loaded", "not_available"), [copy(OLD_DLL, OLD)], RUNNING),
        (None, [copy(OLD_DLL, OLD)], RUNNING),
        ("", [copy("", OLD)], RUNNING),  # an empty path names no file
        (
            "C:\\elsewhere\\nvml.dll",
            [copy(OLD_DLL, OLD)],
            RUNNING,
        ),  # loaded from outside the listing
        (
            OLD_DLL,
            [copy(OLD_DLL, OLD)],
            NA("not supported", "not_supported"),
        ),  # running driver unknown
    ],
)
def test_nvml_dll_that_is_no_finding(lib, copies, running):
    assert list(_windows_tool_rules(basis(nvml=copies, lib=lib, running=running))) == []


def test_wddm_gpus_are_named_together():
    gpus = [
        {"index": 0, "driver_model.current": "WDDM"},
        {"index": 1, "driver_model.current": "TCC"},
        {"index": 2, "driver_model.current": "WDDM"},
        {"index": 3},
    ]
    assert list(_windows_tool_rules(basis(gpus=gpus))) == [
        Finding(
            "info",
            "wddm",
            "GPU 0, 2 run(s) the WDDM driver model (Windows display driver)",
            "Under WDDM Windows manages GPU memory: NVML and nvidia-smi show N/A for each "
            "process's GPU memory; "
            "%gpuwatch reads it from Windows' GPU Process Memory counters instead (Task Manager's "
            "figures).",
            "nothing to fix; a workstation GPU without a display can switch to TCC with "
            "`nvidia-smi -g 0 -dm 1` "
            "(as administrator, then reboot)",
        )
    ]
    assert list(_windows_tool_rules(basis(gpus=gpus[1:2]))) == []
    assert (
        list(_windows_tool_rules(basis(gpus=gpus, windows=False))) == []
    )  # Linux: no Windows facts, no WDDM claim


def test_every_windows_problem_at_once_in_rule_order():
    found = list(
        _windows_tool_rules(
            basis(
                THREE,
                on_path=OLD_SMI,
                nvml=[copy(OLD_DLL, OLD), copy(NEW_DLL, RUNNING)],
                lib=OLD_DLL,
                gpus=[{"index": 0, "driver_model.current": "WDDM"}],
            )
        )
    )
    assert [f.id for f in found] == ["nvidia-smi-stale", "nvml-stale", "wddm"]
