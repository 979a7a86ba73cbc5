"""Findings of ``%cudainfo``.

Diagnostics (severity, cause, exact fix) computed from the facts of
:func:`cudamagic.info.facts.collect_facts`, and the compatibility tables they rest on. No I/O here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ..core import wheels
from ..core.na import is_na
from . import health
from .result import Finding


def _oldest_min_driver():
    """The minimum driver of the oldest CUDA major that has a published wheel (``'450.80.02'``)."""
    return wheels.MIN_DRIVER[min(w[0] for w in wheels.WHEEL_CUDA)]


def arch_supported(cc: str, arch_list) -> bool:
    """True if a build with ``arch_list`` has kernels for compute capability ``cc``.

    ``arch_list`` is ``torch.cuda.get_arch_list()``.
    A cubin ``sm_XY`` runs on the same major with minor >= Y; PTX ``compute_XY`` JIT-compiles for
    any cc >= X.Y.
    """
    v = wheels.parse_version_tuple(cc)
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
    """The environment of a Python executable: its venv folder (with pyvenv.cfg) or real path."""
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
        build = wheels.parse_version_tuple(t.get("cuda_build")) if t["installed"] else None
        return cls(
            facts=facts,
            t=t,
            drv=drv,
            tk=facts["toolkit"],
            gpus=facts["gpus"],
            cvd=facts["cuda_visible_devices"],
            nvml_ok=nvml_ok,
            n_gpus=len(facts["gpus"]),
            driver_cuda=wheels.parse_version_tuple(drv["cuda_driver_version"]) if nvml_ok else None,
            build=build,
            cpu_only=t["installed"] and build is None and is_na(t.get("hip_build")),
        )


def _nvml_rules(b: _Basis) -> Iterator[Finding]:
    """NVML not available: no driver, or a driver/library mismatch."""
    if not b.nvml_ok:
        st = b.drv["status"]
        blocking = st.code in ("version_mismatch", "container_gpu_lost")
        sev = "error" if blocking else ("warning" if b.build else "info")
        fix = st.fix or {
            "no_driver": "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore "
            "this on a "
            "machine without an NVIDIA GPU",
            "version_mismatch": "sudo reboot  (or: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset "
            "nvidia && "
            "sudo modprobe nvidia)",
            "no_binding": "pip install nvidia-ml-py",
        }.get(st.code, "check that `nvidia-smi` works")
        yield Finding(sev, "nvml-unavailable", "NVML not available: no GPU data", st.reason, fix)


def _cpu_build_rules(b: _Basis) -> Iterator[Finding]:
    """A CPU-only PyTorch build on a machine with a GPU."""
    if b.cpu_only and b.n_gpus:
        pick = wheels.pick_for_driver(b.t["version"], b.driver_cuda, b.drv["driver_version"])
        fix = (
            wheels.pip_command(*pick)
            if pick
            else (
                f"update the NVIDIA driver to {_oldest_min_driver()} or newer (no PyTorch wheel "
                f"runs on driver "
                f"{b.drv['driver_version']}), then install a CUDA build of PyTorch"
            )
        )
        yield Finding(
            "error",
            "cpu-only-build",
            "GPU and driver found, but this PyTorch build has no CUDA support",
            f"torch {b.t['version']} is a CPU-only build (torch.version.cuda is None) while NVML "
            f"sees {b.n_gpus} GPU(s) "
            f"and the driver supports CUDA {b.drv['cuda_driver_version']}.",
            fix,
        )


def _driver_rules(b: _Basis) -> Iterator[Finding]:
    """The driver's CUDA older than PyTorch's (other major: error; same major: warning)."""
    if b.build and b.driver_cuda:
        if b.build[0] > b.driver_cuda[0]:
            pick = wheels.pick_for_driver(b.t["version"], b.driver_cuda, b.drv["driver_version"])
            alt = (
                f"; or install a wheel built for CUDA {pick[1][0]}.x: {wheels.pip_command(*pick)}"
                if pick
                else ""
            )
            need = wheels.MIN_DRIVER.get(b.build[0], "a newer release")
            yield Finding(
                "error",
                "driver-too-old",
                "The NVIDIA driver is too old for this PyTorch build",
                f"PyTorch was built with CUDA {b.t['cuda_build']} but driver "
                f"{b.drv['driver_version']} supports CUDA up to "
                f"{b.drv['cuda_driver_version']} (nvmlSystemGetCudaDriverVersion).",
                f"update the NVIDIA driver to {need} or newer{alt}. "
                "Installing a CUDA toolkit does not help: PyTorch ships its own CUDA runtime.",
            )
        elif b.build > b.driver_cuda:
            yield Finding(
                "warning",
                "driver-minor-older",
                "The driver's CUDA is older than the build's, within the same major",
                f"PyTorch was built with CUDA {b.t['cuda_build']}; the driver supports "
                f"{b.drv['cuda_driver_version']}. "
                "Minor version compatibility usually makes this work, but PTX JIT and some "
                "newer features may fail.",
                "update the NVIDIA driver if you see 'PTX was compiled with an unsupported "
                "toolchain' errors",
            )


def _toolkit_rules(b: _Basis) -> Iterator[Finding]:
    """A missing or unreadable nvcc, a broken CUDA_HOME, a toolkit other than PyTorch's CUDA."""
    nv = wheels.parse_version_tuple(b.tk["release"])
    if is_na(b.tk["path"]):
        yield Finding(
            "info",
            "nvcc-missing",
            "No CUDA toolkit (nvcc) found",
            "nvcc is not installed; it is not needed to run PyTorch, only to compile CUDA "
            "extensions.",
            "",
        )
    elif is_na(b.tk["release"]):
        yield Finding(
            "warning",
            "nvcc-unreadable",
            "nvcc did not report its version",
            b.tk["release"].reason,
            f"run `{b.tk['path']} -V` in a terminal to see what is wrong",
        )
    if b.tk.get("cuda_home_problem"):
        var, what = b.tk["cuda_home_problem"]
        yield Finding(
            "warning",
            "cuda-home",
            f"{var} points to no usable CUDA toolkit",
            f"{what}; torch.utils.cpp_extension compiles with {var}, so building CUDA "
            f"extensions "
            "will fail (running PyTorch is not affected).",
            f"unset {var}, or point it to a toolkit folder that contains bin/nvcc "
            "(e.g. /usr/local/cuda)",
        )
    if nv and b.build and nv[:2] != b.build[:2]:
        yield Finding(
            "info",
            "toolkit-differs",
            "The CUDA toolkit on PATH differs from PyTorch's CUDA",
            f"nvcc {b.tk['release']} at {b.tk['path']} vs PyTorch's CUDA {b.t['cuda_build']}: this "
            f"only matters when "
            "compiling CUDA extensions (torch.utils.cpp_extension), which may then fail.",
            f"to build extensions, install CUDA toolkit {b.t['cuda_build']} and set CUDA_HOME to "
            f"it",
        )


def _arch_rules(b: _Basis) -> Iterator[Finding]:
    """GPUs whose compute capability this build has no kernels for."""
    arch = b.t.get("arch_list") if b.t["installed"] else None
    if b.build and isinstance(arch, list) and arch:
        for g in b.gpus:
            cc = g.get("compute_cap")
            if not is_na(cc) and not arch_supported(cc, arch):
                yield Finding(
                    "error",
                    "no-kernel-image",
                    f"GPU {g['index']} ({g['name']}) is not supported by this build",
                    f"its compute capability {cc} has no kernels in this build's architectures "
                    f"({', '.join(arch)}): "
                    "'no kernel image is available for execution on the device'.",
                    _arch_fix(cc, b),
                )


def _arch_fix(cc: str, b: _Basis) -> str:
    """The install command for a wheel with kernels for compute capability ``cc`` ('12.0')."""
    sm = "sm_" + cc.replace(".", "")
    pick = wheels.pick_for_arch(
        wheels.parse_version_tuple(cc), b.t["version"], b.driver_cuda, b.drv["driver_version"]
    )
    if pick is None:
        return (
            f"no published PyTorch wheel has kernels for {sm}: build PyTorch from source with "
            f"TORCH_CUDA_ARCH_LIST={cc}"
        )
    return f"{wheels.pip_command(*pick)}  (its wheels have kernels for {sm})"


def _cvd_rules(b: _Basis) -> Iterator[Finding]:
    """CUDA_VISIBLE_DEVICES hiding every GPU or naming GPUs that do not exist."""
    if b.cvd["set"] and b.cvd["hides_all"]:
        yield Finding(
            "warning",
            "cvd-hides-all",
            "CUDA_VISIBLE_DEVICES hides every GPU",
            f"CUDA_VISIBLE_DEVICES={b.cvd['raw']!r} leaves no device visible to CUDA"
            + (
                f": it repeats {b.cvd['repeated']}, and PyTorch reads a repeated entry as no GPU "
                f"at all."
                if b.cvd.get("repeated") is not None
                else "."
            ),
            "unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then "
            "restart "
            "the kernel) or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0",
        )
    elif b.cvd["set"] and not b.nvml_ok and b.cvd["invalid"]:
        yield Finding(
            "warning",
            "cvd-unknown",
            "CUDA_VISIBLE_DEVICES has an entry CUDA cannot parse",
            f"{b.cvd['invalid']!r} in CUDA_VISIBLE_DEVICES={b.cvd['raw']!r} is neither an index, a "
            f"GPU- "
            "nor a MIG- UUID; CUDA ignores it and every entry after it.",
            "use indices or UUIDs from `nvidia-smi -L`, separated by commas",
        )
    elif b.cvd["set"] and b.nvml_ok:
        bad = [
            str(e["value"])
            for e in b.cvd["entries"]
            if (e["kind"] == "index" and e["value"] >= b.n_gpus)
            or (
                e["kind"] == "uuid"
                and not any(
                    str(g.get("uuid", "")).lower().startswith(e["value"].lower()) for g in b.gpus
                )
            )
            or (
                e["kind"] == "mig" and not any(g.get("cuda_mig_uuid") == e["value"] for g in b.gpus)
            )
        ]
        if bad or b.cvd["invalid"]:
            named = ", ".join(bad + ([b.cvd["invalid"]] if b.cvd["invalid"] else []))
            yield Finding(
                "warning",
                "cvd-unknown",
                "CUDA_VISIBLE_DEVICES names GPUs that do not exist",
                f"{named} in CUDA_VISIBLE_DEVICES={b.cvd['raw']!r} match no GPU NVML sees "
                f"({b.n_gpus} GPU(s)); "
                "CUDA ignores that entry and every one after it.",
                f"use indices 0..{max(b.n_gpus - 1, 0)} or UUIDs from `nvidia-smi -L`",
            )


def _ordinal_rules(b: _Basis) -> Iterator[Finding]:
    """nvidia-smi indices and CUDA ordinals: uncertain order, or a different numbering."""
    mapping = b.facts["mapping"]
    if b.n_gpus > 1 and not mapping["certain"]:
        yield Finding(
            "warning",
            "index-order",
            "nvidia-smi indices and PyTorch ordinals may differ",
            mapping["note"] + ".",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID before starting Python (or set it in "
            "os.environ "
            "before importing torch)",
        )
    elif any(
        isinstance(g.get("cuda_ordinal"), int) and g["cuda_ordinal"] != g["index"] for g in b.gpus
    ):
        pairs = ", ".join(
            f"nvidia-smi {g['index']} = cuda:{g['cuda_ordinal']}"
            for g in b.gpus
            if isinstance(g.get("cuda_ordinal"), int)
        )
        yield Finding(
            "info",
            "index-map",
            "PyTorch numbers the GPUs differently from nvidia-smi",
            f"{pairs} (CUDA_VISIBLE_DEVICES renumbers the GPUs it shows from 0).",
            "",
        )


def _windows_tool_rules(b: _Basis) -> Iterator[Finding]:
    """Windows.

    Several ``nvidia-smi.exe`` / ``nvml.dll`` copies (left by driver updates) where the one a
    terminal runs, or the one NVML loaded, belongs to another driver than the running one; WDDM
    GPUs.
    """
    win = b.facts.get("windows")
    if not win:
        return
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
                f'run "{current[0]["path"]}" instead (it belongs to the running driver), or put '
                f"its folder first "
                "on PATH"
                if current
                else "reinstall the NVIDIA driver (a clean install) so that System32 holds "
                "the current nvidia-smi.exe"
            )
            yield Finding(
                "warning",
                "nvidia-smi-stale",
                f"The nvidia-smi.exe on PATH belongs to driver {mine['driver_version']}, not "
                f"the running {running}",
                f"{len(smi)} copies of nvidia-smi.exe are on this disk, left by driver "
                f"updates: {listing}. An "
                'nvidia-smi from another driver can fail ("Failed to initialize NVML: '
                "Driver/library version "
                'mismatch") or report wrong figures.',
                fix,
            )
    elif running and is_na(on_path) and smi:
        pick = current[0] if current else smi[0]
        yield Finding(
            "info",
            "nvidia-smi-not-on-path",
            "nvidia-smi.exe is not on PATH",
            f"{len(smi)} copies exist on this disk but no folder on PATH holds one.",
            f'run "{pick["path"]}"',
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
        yield Finding(
            "warning",
            "nvml-stale",
            f"NVML was loaded from {loaded['path']}, a copy of driver "
            f"{loaded['driver_version']} (the running driver is {running})",
            f"{len(nvml_copies)} copies of nvml.dll are on this disk; the one loaded belongs "
            f"to another driver.",
            (f"the current one is {good[0]}; " if good else "")
            + "reinstall the NVIDIA driver (clean install) "
            "and restart the kernel",
        )
    wddm = [g["index"] for g in b.gpus if g.get("driver_model.current") == "WDDM"]
    if wddm:
        yield Finding(
            "info",
            "wddm",
            f"GPU {', '.join(map(str, wddm))} run(s) the WDDM driver model (Windows display "
            f"driver)",
            "Under WDDM Windows manages GPU memory: NVML and nvidia-smi show N/A for each "
            "process's GPU memory; "
            "%gpuwatch reads it from Windows' GPU Process Memory counters instead (Task "
            "Manager's figures).",
            "nothing to fix; a workstation GPU without a display can switch to TCC with "
            "`nvidia-smi -g 0 -dm 1` (as administrator, then reboot)",
        )


def _mig_rules(b: _Basis) -> Iterator[Finding]:
    """GPUs in MIG mode."""
    for g in b.gpus:
        if g.get("mig.mode.current") == "Enabled":
            migs = g.get("mig_devices") or []
            n = 0 if is_na(migs) else len(migs)
            yield Finding(
                "info",
                "mig",
                f"GPU {g['index']} is in MIG mode ({n} instance(s))",
                "In MIG mode CUDA sees MIG instances, not the whole GPU, and utilization is "
                "not reported.",
                "select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (see `nvidia-smi -L`)",
            )


def _health_rules(b: _Basis) -> Iterator[Finding]:
    """A lost GPU, uncorrectable ECC errors, pending or failed memory repairs."""
    for g in b.gpus:
        i = g["index"]
        if health.is_lost(g):
            yield Finding(
                "error",
                "gpu-lost",
                f"GPU {i} is lost (fell off the bus)",
                f"NVML answers 'GPU is lost' for GPU {i} ({g['name'].reason}). CUDA cannot use "
                f"it: it has no CUDA "
                "ordinal, the other GPUs are renumbered, and jobs that used it have failed.",
                health.DMESG_FIX.format(index=i),
            )
            continue
        vol, agg = (
            g.get("ecc.errors.uncorrected.volatile.total"),
            g.get("ecc.errors.uncorrected.aggregate.total"),
        )
        if isinstance(vol, int) and vol > 0:
            yield Finding(
                "error",
                "ecc-uncorrected",
                f"GPU {i} had {vol} uncorrectable ECC error(s) since boot",
                "Uncorrectable memory errors (nvidia-smi "
                "ecc.errors.uncorrected.volatile.total) corrupt results and "
                "kill the CUDA contexts that touched the memory.",
                "save your work, then reset the GPU (`sudo nvidia-smi -r -i "
                f"{i}`) or reboot so the bad memory is retired/remapped; if errors come back, "
                f"report the GPU",
            )
        elif isinstance(agg, int) and agg > 0:
            yield Finding(
                "warning",
                "ecc-uncorrected-lifetime",
                f"GPU {i} had {agg} uncorrectable ECC error(s) in its lifetime",
                "nvidia-smi ecc.errors.uncorrected.aggregate.total is non-zero: this GPU's "
                "memory has failed before.",
                "watch it; if the count grows, report the GPU to the administrator or provider",
            )
        pend_pages, pend_rows = g.get("retired_pages.pending"), g.get("remapped_rows.pending")
        if pend_pages == 1 or pend_rows == 1:
            what = "retired pages" if pend_pages == 1 else "remapped rows"
            yield Finding(
                "warning",
                "memory-repair-pending",
                f"GPU {i} has {what} waiting for a reset",
                f"The driver marked bad memory ({what} pending) but the repair only takes "
                f"effect after the GPU is "
                "reset; until then the bad memory may still be used.",
                f"when no job runs on it: `sudo nvidia-smi -r -i {i}` or reboot",
            )
        if g.get("remapped_rows.failure") == 1:
            yield Finding(
                "error",
                "row-remap-failed",
                f"GPU {i} ran out of spare memory rows (row remapping failed)",
                "The GPU ran out of spare memory rows (nvidia-smi remapped_rows.failure): its "
                "memory can no longer "
                "be repaired.",
                "report the GPU for replacement (RMA) to the administrator or cloud provider",
            )


def _cuda_unavailable_rules(b: _Basis, earlier: list) -> Iterator[Finding]:
    """A CUDA build and a GPU, but no CUDA, and nothing found earlier explains it."""
    if (
        b.build
        and b.n_gpus
        and b.t.get("cuda_available") is False
        and not any(f.severity == "error" for f in earlier)
        and not (b.cvd["set"] and b.cvd["hides_all"])
    ):
        yield Finding(
            "error",
            "cuda-unavailable",
            "torch.cuda.is_available() is False although a GPU is present",
            "CUDA could not initialise in this process (driver problem, container without GPU "
            "access, "
            "or CUDA failed earlier in this kernel).",
            "restart the kernel; if it persists run `python -c 'import torch; "
            "torch.zeros(1).cuda()'` in a "
            "terminal to see the CUDA error",
        )


def _interpreter_rules(b: _Basis) -> Iterator[Finding]:
    """The kernel's Python differs from the `python` on PATH."""
    py = b.facts["python"]
    shell_py = py.get("shell_python")
    if not is_na(shell_py) and _env_root(shell_py) != _env_root(py["executable"]):
        yield Finding(
            "info",
            "interpreter",
            "This kernel runs a different Python from the one on PATH",
            f"kernel: {py['executable']}; `python` on PATH: {shell_py}. Packages installed "
            f"with "
            "`pip` in a terminal may not be visible here.",
            "install from the notebook with %pip install ..., or register the right "
            "interpreter as a "
            "kernel: python -m ipykernel install --user --name myenv",
        )


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
            "No NVIDIA GPU is visible here and this PyTorch build is CPU-only; code runs on the "
            "CPU.",
            "",
        )
    return Finding(
        "warning",
        "verdict",
        "Verdict: PyTorch will run on the CPU",
        "No usable CUDA device for PyTorch in this kernel (see the findings).",
        "",
    )
