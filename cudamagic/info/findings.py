"""Findings of ``%cudainfo``: diagnostics (severity, cause, exact fix) computed from the facts of
:func:`cudamagic.info.facts.collect_facts`, and the compatibility tables they rest on. No I/O here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..core import wheels
from ..core.na import is_na
from . import health
from .versions import parse_version_tuple

SEVERITIES = ("error", "warning", "info", "ok")


@dataclass(frozen=True)
class Finding:
    """One diagnostic: ``severity`` (error|warning|info|ok), ``id``, ``title``, ``cause`` (one sentence), ``fix``."""

    severity: str
    id: str
    title: str
    cause: str
    fix: str = ""

    def to_dict(self):
        return {
            "severity": self.severity,
            "id": self.id,
            "title": self.title,
            "cause": self.cause,
            "fix": self.fix,
        }


def _oldest_min_driver():
    """The minimum driver of the oldest CUDA major that has a published wheel (``'450.80.02'``)."""
    return wheels.MIN_DRIVER[min(w[0] for w in wheels.WHEEL_CUDA)]


def arch_supported(cc: str, arch_list) -> bool:
    """True if a build with ``arch_list`` (``torch.cuda.get_arch_list()``) has kernels for compute
    capability ``cc``.

    A cubin ``sm_XY`` runs on the same major with minor >= Y; PTX ``compute_XY`` JIT-compiles for
    any cc >= X.Y.
    """
    v = parse_version_tuple(cc)
    if v is None:
        return True
    for arch in arch_list or ():
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", arch)
        if not m:
            continue
        a = (int(m.group(2)), int(m.group(3)))
        if m.group(1) == "sm" and a[0] == v[0] and a[1] <= v[1]:
            return True
        if m.group(1) == "compute" and a <= v:
            return True
    return False


def _env_root(python_path):
    """The environment a Python executable belongs to: its venv folder (with pyvenv.cfg) or its real path."""
    bindir = os.path.dirname(os.path.abspath(python_path))
    root = os.path.dirname(bindir)
    if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        return os.path.realpath(root)
    real = os.path.realpath(python_path)
    return os.path.realpath(os.path.dirname(os.path.dirname(real)))


def findings(facts: dict) -> list:
    """Diagnostics computed from :func:`~cudamagic.info.facts.collect_facts`'s dict, rule by rule.

    Returns:
        list of :class:`Finding`, in the order the rules run; the last one is the overall verdict.
    """
    b = _Basis.of(facts)
    out = []
    if not b.t["installed"]:
        out.append(
            Finding(
                "error",
                "torch-missing",
                "PyTorch is not installed in this kernel",
                b.t["error"].reason,
                "pip install torch  (in the kernel's interpreter: %pip install torch)",
            )
        )
    for rule in (
        _nvml_rules,
        _cpu_build_rules,
        _driver_rules,
        _toolkit_rules,
        _arch_rules,
        _cvd_rules,
        _ordinal_rules,
        _mig_rules,
        _health_rules,
        _windows_tool_rules,
    ):
        out.extend(rule(b))
    out.extend(_cuda_unavailable_rules(b, out))
    out.extend(_interpreter_rules(b))
    # "CPU only" is a verdict only where NVML says there is no GPU, not where NVML failed
    no_gpu_here = b.nvml_ok or b.drv["status"].code in ("no_driver", "no_binding")
    out.append(_verdict(out, b.t, b.n_gpus, b.cpu_only and no_gpu_here))
    return out


@dataclass(frozen=True)
class _Basis:
    """What several rules read: the facts' sections and what is derived from them once."""

    facts: dict
    t: dict  # facts["torch"]
    drv: dict  # facts["driver"]
    tk: dict  # facts["toolkit"]
    gpus: list  # facts["gpus"]
    cvd: dict  # facts["cuda_visible_devices"]
    nvml_ok: bool
    n_gpus: int
    driver_cuda: tuple | None  # (major, minor) the driver supports, when NVML answers
    build: tuple | None  # (major, minor) of torch.version.cuda; None: no CUDA build (or no PyTorch)
    cpu_only: bool  # PyTorch installed, neither a CUDA nor a ROCm build

    @classmethod
    def of(cls, facts: dict) -> _Basis:
        t, drv = facts["torch"], facts["driver"]
        nvml_ok = drv["status"] == "ok"
        build = parse_version_tuple(t.get("cuda_build")) if t["installed"] else None
        return cls(
            facts=facts,
            t=t,
            drv=drv,
            tk=facts["toolkit"],
            gpus=facts["gpus"],
            cvd=facts["cuda_visible_devices"],
            nvml_ok=nvml_ok,
            n_gpus=len(facts["gpus"]),
            driver_cuda=parse_version_tuple(drv["cuda_driver_version"]) if nvml_ok else None,
            build=build,
            cpu_only=t["installed"] and build is None and is_na(t.get("hip_build")),
        )


def _nvml_rules(b: _Basis) -> list:
    """NVML not available (F01 no driver, F02 driver/library mismatch)."""
    out = []
    drv, nvml_ok, build = b.drv, b.nvml_ok, b.build
    if not nvml_ok:
        st = drv["status"]
        blocking = st.code in ("version_mismatch", "container_gpu_lost")
        sev = "error" if blocking else ("warning" if build else "info")
        fix = getattr(st, "fix", "") or {
            "no_driver": "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore this on a "
            "machine without an NVIDIA GPU",
            "version_mismatch": "sudo reboot  (or: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
            "sudo modprobe nvidia)",
            "no_binding": "pip install nvidia-ml-py",
        }.get(st.code, "check that `nvidia-smi` works")
        out.append(
            Finding(sev, "nvml-unavailable", "NVML not available: no GPU data", st.reason, fix)
        )
    return out


def _cpu_build_rules(b: _Basis) -> list:
    """F17: a CPU-only PyTorch build on a machine with a GPU."""
    out = []
    t, drv, n_gpus, driver_cuda, cpu_only = b.t, b.drv, b.n_gpus, b.driver_cuda, b.cpu_only
    if cpu_only and n_gpus:
        pick = wheels.pick_for_driver(t["version"], driver_cuda, drv["driver_version"])
        fix = (
            wheels.pip_command(*pick)
            if pick
            else (
                f"update the NVIDIA driver to {_oldest_min_driver()} or newer (no PyTorch wheel runs on driver "
                f"{drv['driver_version']}), then install a CUDA build of PyTorch"
            )
        )
        out.append(
            Finding(
                "error",
                "cpu-only-build",
                "GPU and driver found, but this PyTorch build has no CUDA support",
                f"torch {t['version']} is a CPU-only build (torch.version.cuda is None) while NVML sees {n_gpus} GPU(s) "
                f"and the driver supports CUDA {drv['cuda_driver_version']}.",
                fix,
            )
        )
    return out


def _driver_rules(b: _Basis) -> list:
    """F19: the driver's CUDA older than PyTorch's (other major: error; same major: warning)."""
    out = []
    t, drv, driver_cuda, build = b.t, b.drv, b.driver_cuda, b.build
    if build and driver_cuda:
        if build[0] > driver_cuda[0]:
            pick = wheels.pick_for_driver(t["version"], driver_cuda, drv["driver_version"])
            alt = (
                f"; or install a wheel built for CUDA {pick[1][0]}.x: {wheels.pip_command(*pick)}"
                if pick
                else ""
            )
            out.append(
                Finding(
                    "error",
                    "driver-too-old",
                    "The NVIDIA driver is too old for this PyTorch build",
                    f"PyTorch was built with CUDA {t['cuda_build']} but driver {drv['driver_version']} supports CUDA up to "
                    f"{drv['cuda_driver_version']} (nvmlSystemGetCudaDriverVersion).",
                    f"update the NVIDIA driver to {wheels.MIN_DRIVER.get(build[0], 'a newer release')} or newer{alt}. "
                    "Installing a CUDA toolkit does not help: PyTorch ships its own CUDA runtime.",
                )
            )
        elif build > driver_cuda:
            out.append(
                Finding(
                    "warning",
                    "driver-minor-older",
                    "The driver's CUDA is older than the build's, within the same major",
                    f"PyTorch was built with CUDA {t['cuda_build']}; the driver supports {drv['cuda_driver_version']}. "
                    "Minor version compatibility usually makes this work, but PTX JIT and some newer features may fail.",
                    "update the NVIDIA driver if you see 'PTX was compiled with an unsupported toolchain' errors",
                )
            )
    return out


def _toolkit_rules(b: _Basis) -> list:
    """F16: nvcc missing or unreadable, a broken CUDA_HOME, a toolkit that differs from PyTorch's CUDA."""
    out = []
    t, tk, build = b.t, b.tk, b.build
    nv = parse_version_tuple(tk["release"])
    if is_na(tk["path"]):
        out.append(
            Finding(
                "info",
                "nvcc-missing",
                "No CUDA toolkit (nvcc) found",
                "nvcc is not installed; it is not needed to run PyTorch, only to compile CUDA extensions.",
                "",
            )
        )
    elif is_na(tk["release"]):
        out.append(
            Finding(
                "warning",
                "nvcc-unreadable",
                "nvcc did not report its version",
                tk["release"].reason,
                f"run `{tk['path']} -V` in a terminal to see what is wrong",
            )
        )
    if tk.get("cuda_home_problem"):
        var, what = tk["cuda_home_problem"]
        out.append(
            Finding(
                "warning",
                "cuda-home",
                f"{var} points to no usable CUDA toolkit",
                f"{what}; torch.utils.cpp_extension compiles with {var}, so building CUDA extensions "
                "will fail (running PyTorch is not affected).",
                f"unset {var}, or point it to a toolkit folder that contains bin/nvcc "
                "(e.g. /usr/local/cuda)",
            )
        )
    if nv and build and nv[:2] != build[:2]:
        out.append(
            Finding(
                "info",
                "toolkit-differs",
                "The CUDA toolkit on PATH differs from PyTorch's CUDA",
                f"nvcc {tk['release']} at {tk['path']} vs PyTorch's CUDA {t['cuda_build']}: this only matters when "
                "compiling CUDA extensions (torch.utils.cpp_extension), which may then fail.",
                f"to build extensions, install CUDA toolkit {t['cuda_build']} and set CUDA_HOME to it",
            )
        )
    return out


def _arch_rules(b: _Basis) -> list:
    """GPUs whose compute capability this build has no kernels for."""
    out = []
    t, gpus, build = b.t, b.gpus, b.build
    arch = t.get("arch_list") if t["installed"] else None
    if build and isinstance(arch, list) and arch:
        for g in gpus:
            cc = g.get("compute_cap")
            if not is_na(cc) and not arch_supported(cc, arch):
                out.append(
                    Finding(
                        "error",
                        "no-kernel-image",
                        f"GPU {g['index']} ({g['name']}) is not supported by this build",
                        f"its compute capability {cc} has no kernels in this build's architectures ({', '.join(arch)}): "
                        "'no kernel image is available for execution on the device'.",
                        _arch_fix(cc, b),
                    )
                )
    return out


def _arch_fix(cc: str, b: _Basis) -> str:
    """The install command for a wheel with kernels for compute capability ``cc`` ('12.0')."""
    sm = "sm_" + cc.replace(".", "")
    pick = wheels.pick_for_arch(
        parse_version_tuple(cc), b.t["version"], b.driver_cuda, b.drv["driver_version"]
    )
    if pick is None:
        return (
            f"no published PyTorch wheel has kernels for {sm}: build PyTorch from source with "
            f"TORCH_CUDA_ARCH_LIST={cc}"
        )
    return f"{wheels.pip_command(*pick)}  (its wheels have kernels for {sm})"


def _cvd_rules(b: _Basis) -> list:
    """CUDA_VISIBLE_DEVICES hiding every GPU or naming GPUs that do not exist."""
    out = []
    gpus, nvml_ok, n_gpus, cvd = b.gpus, b.nvml_ok, b.n_gpus, b.cvd
    if cvd["set"] and cvd["hides_all"]:
        out.append(
            Finding(
                "warning",
                "cvd-hides-all",
                "CUDA_VISIBLE_DEVICES hides every GPU",
                f"CUDA_VISIBLE_DEVICES={cvd['raw']!r} leaves no device visible to CUDA"
                + (
                    f": it repeats {cvd['repeated']}, and PyTorch reads a repeated entry as no GPU at all."
                    if cvd.get("repeated") is not None
                    else "."
                ),
                "unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then restart "
                "the kernel) or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0",
            )
        )
    elif cvd["set"] and not nvml_ok and cvd["invalid"]:
        out.append(
            Finding(
                "warning",
                "cvd-unknown",
                "CUDA_VISIBLE_DEVICES has an entry CUDA cannot parse",
                f"{cvd['invalid']!r} in CUDA_VISIBLE_DEVICES={cvd['raw']!r} is neither an index, a GPU- "
                "nor a MIG- UUID; CUDA ignores it and every entry after it.",
                "use indices or UUIDs from `nvidia-smi -L`, separated by commas",
            )
        )
    elif cvd["set"] and nvml_ok:
        bad = [
            str(e["value"])
            for e in cvd["entries"]
            if (e["kind"] == "index" and e["value"] >= n_gpus)
            or (
                e["kind"] == "uuid"
                and not any(
                    str(g.get("uuid", "")).lower().startswith(e["value"].lower()) for g in gpus
                )
            )
            or (e["kind"] == "mig" and not any(g.get("cuda_mig_uuid") == e["value"] for g in gpus))
        ]
        if bad or cvd["invalid"]:
            named = ", ".join(bad + ([cvd["invalid"]] if cvd["invalid"] else []))
            out.append(
                Finding(
                    "warning",
                    "cvd-unknown",
                    "CUDA_VISIBLE_DEVICES names GPUs that do not exist",
                    f"{named} in CUDA_VISIBLE_DEVICES={cvd['raw']!r} match no GPU NVML sees ({n_gpus} GPU(s)); "
                    "CUDA ignores that entry and every one after it.",
                    f"use indices 0..{max(n_gpus - 1, 0)} or UUIDs from `nvidia-smi -L`",
                )
            )
    return out


def _ordinal_rules(b: _Basis) -> list:
    """nvidia-smi indices and CUDA ordinals: uncertain order, or a different numbering."""
    out = []
    facts, gpus, n_gpus = b.facts, b.gpus, b.n_gpus
    mapping = facts["mapping"]
    if n_gpus > 1 and not mapping["certain"]:
        out.append(
            Finding(
                "warning",
                "index-order",
                "nvidia-smi indices and PyTorch ordinals may differ",
                mapping["note"] + ".",
                "export CUDA_DEVICE_ORDER=PCI_BUS_ID before starting Python (or set it in os.environ "
                "before importing torch)",
            )
        )
    elif any(
        isinstance(g.get("cuda_ordinal"), int) and g["cuda_ordinal"] != g["index"] for g in gpus
    ):
        pairs = ", ".join(
            f"nvidia-smi {g['index']} = cuda:{g['cuda_ordinal']}"
            for g in gpus
            if isinstance(g.get("cuda_ordinal"), int)
        )
        out.append(
            Finding(
                "info",
                "index-map",
                "PyTorch numbers the GPUs differently from nvidia-smi",
                f"{pairs} (CUDA_VISIBLE_DEVICES renumbers the GPUs it shows from 0).",
                "",
            )
        )
    return out


def _windows_tool_rules(b: _Basis) -> list:
    """Windows: several ``nvidia-smi.exe`` / ``nvml.dll`` copies (left by driver updates) where the
    one a terminal runs, or the one NVML loaded, belongs to another driver than the running one; WDDM GPUs.
    """
    win = b.facts.get("windows")
    if not win:
        return []
    out = []
    running = b.drv["driver_version"] if b.nvml_ok and not is_na(b.drv["driver_version"]) else None
    smi = win.get("nvidia-smi") or []
    current = [c for c in smi if running and c["driver_version"] == running]
    on_path = win.get("nvidia-smi on PATH")
    if running and len(smi) > 1 and not is_na(on_path):
        mine = next(
            (c for c in smi if os.path.normcase(c["path"]) == os.path.normcase(on_path)), None
        )
        if mine is not None and mine["driver_version"] and mine["driver_version"] != running:
            listing = "; ".join(
                f"{c['path']} (driver {c['driver_version'] or 'unknown'})" for c in smi
            )
            fix = (
                f'run "{current[0]["path"]}" instead (it belongs to the running driver), or put its folder first '
                "on PATH"
                if current
                else "reinstall the NVIDIA driver (a clean install) so that System32 holds "
                "the current nvidia-smi.exe"
            )
            out.append(
                Finding(
                    "warning",
                    "nvidia-smi-stale",
                    f"The nvidia-smi.exe on PATH belongs to driver {mine['driver_version']}, not the running {running}",
                    f"{len(smi)} copies of nvidia-smi.exe are on this disk, left by driver updates: {listing}. An "
                    'nvidia-smi from another driver can fail ("Failed to initialize NVML: Driver/library version '
                    'mismatch") or report wrong figures.',
                    fix,
                )
            )
    elif running and is_na(on_path) and smi:
        pick = current[0] if current else smi[0]
        out.append(
            Finding(
                "info",
                "nvidia-smi-not-on-path",
                "nvidia-smi.exe is not on PATH",
                f"{len(smi)} copies exist on this disk but no folder on PATH holds one.",
                f'run "{pick["path"]}"',
            )
        )
    lib = b.drv.get("nvml_library")
    nvml_copies = win.get("nvml") or []
    loaded = next(
        (
            c
            for c in nvml_copies
            if not is_na(lib) and lib and os.path.normcase(c["path"]) == os.path.normcase(str(lib))
        ),
        None,
    )
    if (
        running
        and loaded is not None
        and loaded["driver_version"]
        and loaded["driver_version"] != running
    ):
        good = [c["path"] for c in nvml_copies if c["driver_version"] == running]
        out.append(
            Finding(
                "warning",
                "nvml-stale",
                f"NVML was loaded from {loaded['path']}, a copy of driver "
                f"{loaded['driver_version']} (the running driver is {running})",
                f"{len(nvml_copies)} copies of nvml.dll are on this disk; the one loaded belongs to another driver.",
                (f"the current one is {good[0]}; " if good else "")
                + "reinstall the NVIDIA driver (clean install) "
                "and restart the kernel",
            )
        )
    wddm = [g["index"] for g in b.gpus if g.get("driver_model.current") == "WDDM"]
    if wddm:
        out.append(
            Finding(
                "info",
                "wddm",
                f"GPU {', '.join(map(str, wddm))} run(s) the WDDM driver model (Windows display driver)",
                "Under WDDM Windows manages GPU memory: NVML and nvidia-smi show N/A for each process's GPU memory; "
                "%gpuwatch reads it from Windows' GPU Process Memory counters instead (Task Manager's figures).",
                "nothing to fix; a workstation GPU without a display can switch to TCC with "
                "`nvidia-smi -g 0 -dm 1` (as administrator, then reboot)",
            )
        )
    return out


def _mig_rules(b: _Basis) -> list:
    """GPUs in MIG mode."""
    out = []
    gpus = b.gpus
    for g in gpus:
        if g.get("mig.mode.current") == "Enabled":
            migs = g.get("mig_devices") or []
            n = 0 if is_na(migs) else len(migs)
            out.append(
                Finding(
                    "info",
                    "mig",
                    f"GPU {g['index']} is in MIG mode ({n} instance(s))",
                    "In MIG mode CUDA sees MIG instances, not the whole GPU, and utilization is not reported.",
                    "select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (see `nvidia-smi -L`)",
                )
            )
    return out


def _health_rules(b: _Basis) -> list:
    """A lost GPU, uncorrectable ECC errors, pending or failed memory repairs (see :mod:`.health`)."""
    return health.health_findings(b.gpus, Finding)


def _cuda_unavailable_rules(b: _Basis, earlier: list) -> list:
    """A CUDA build and a GPU, but torch.cuda.is_available() is False (only when nothing earlier explains it)."""
    out = []
    t, n_gpus, build, cvd = b.t, b.n_gpus, b.build, b.cvd
    if (
        build
        and n_gpus
        and t.get("cuda_available") is False
        and not any(f.severity == "error" for f in earlier)
        and not (cvd["set"] and cvd["hides_all"])
    ):
        out.append(
            Finding(
                "error",
                "cuda-unavailable",
                "torch.cuda.is_available() is False although a GPU is present",
                "CUDA could not initialise in this process (driver problem, container without GPU access, "
                "or CUDA failed earlier in this kernel).",
                "restart the kernel; if it persists run `python -c 'import torch; torch.zeros(1).cuda()'` in a "
                "terminal to see the CUDA error",
            )
        )
    return out


def _interpreter_rules(b: _Basis) -> list:
    """F18: the kernel's Python differs from the `python` on PATH."""
    out = []
    facts = b.facts
    py = facts["python"]
    shell_py = py.get("shell_python")
    if not is_na(shell_py) and _env_root(shell_py) != _env_root(py["executable"]):
        out.append(
            Finding(
                "info",
                "interpreter",
                "This kernel runs a different Python from the one on PATH",
                f"kernel: {py['executable']}; `python` on PATH: {shell_py}. Packages installed with "
                "`pip` in a terminal may not be visible here.",
                "install from the notebook with %pip install ..., or register the right interpreter as a "
                "kernel: python -m ipykernel install --user --name myenv",
            )
        )
    return out


def _verdict(found, t, n_gpus, cpu_only):
    errors = [f for f in found if f.severity == "error"]
    if errors:
        return Finding(
            "error",
            "verdict",
            "Verdict: action needed",
            (
                "1 problem, listed in the findings, stops"
                if len(errors) == 1
                else f"{len(errors)} problems, listed in the findings, stop"
            )
            + " PyTorch from using the GPU as expected.",
            errors[0].fix,
        )
    if t["installed"] and t.get("cuda_available") is True:
        return Finding(
            "ok",
            "verdict",
            "Verdict: ready",
            f"PyTorch can use {t.get('device_count')} CUDA device(s).",
            "",
        )
    if cpu_only and not n_gpus:
        return Finding(
            "ok",
            "verdict",
            "Verdict: CPU only",
            "No NVIDIA GPU is visible here and this PyTorch build is CPU-only; code runs on the CPU.",
            "",
        )
    return Finding(
        "warning",
        "verdict",
        "Verdict: PyTorch will run on the CPU",
        "No usable CUDA device for PyTorch in this kernel (see the findings).",
        "",
    )
