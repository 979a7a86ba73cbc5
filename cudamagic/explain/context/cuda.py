"""Context for errors of the CUDA install and devices.

A CPU-only PyTorch build, a driver too old for the build, no kernel for the GPU's architecture, a
device ordinal that does not exist.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.result.Context`. No CUDA
context is created here: the GPU's own properties are read only when CUDA is already initialised.
"""

from __future__ import annotations

import contextlib
import os
import re

from ...core import nvml, platform, wheels
from ...core.na import is_na
from ...core.nvml import decode_cuda_driver_version
from ..cudaerrors import FAMILIES, family_of_message
from ..result import Context
from ..scene import _failing_modules, _named_modules, _source_text, _torch
from .tensors import ctx_index_tensors


def ctx_not_compiled(match, scene):
    """A CPU-only PyTorch asked for CUDA: no driver here leads; else the install command.

    The command is picked from the installed PyTorch's own wheel indexes
    (:mod:`cudamagic.core.wheels`) and, when NVML answers, from the driver's CUDA version.
    """
    torch = _torch()
    facts, notes, fix = {}, [], ""
    driver = platform.nvidia_driver_present()
    facts["nvidia_driver_found"] = driver
    if not driver:
        notes.append(
            "This machine has no NVIDIA GPU driver (no NVIDIA kernel module, no nvidia-smi, no "
            "nvml.dll), so no PyTorch build can use a GPU here; if you expected one, the kernel "
            "may run on another machine or container."
        )
        fix = (
            "This machine has no NVIDIA GPU: run the notebook on one that has, or keep the "
            "tensors on the CPU (`device = 'cuda' if torch.cuda.is_available() else 'cpu'`). "
            "Reinstalling PyTorch does not help here."
        )
    if torch is not None:
        facts["torch_version"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        notes.append(
            f"This PyTorch is {torch.__version__}; torch.version.cuda is {torch.version.cuda!r} "
            "(None means a CPU-only build)."
        )
    if driver:
        notes.append(
            "An NVIDIA driver is installed on this machine, so the GPU is there: only the PyTorch "
            "build lacks CUDA support."
        )
        if torch is not None:
            fix = _install_fix(torch.__version__, facts)
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def _install_fix(version: str, facts: dict) -> str:
    """The exact reinstall command for torch ``version``, for this driver when NVML answers."""
    info = nvml.system_info()
    driver_cuda = None if is_na(info.cuda_driver_version) else info.cuda_driver_version
    cudas = wheels.wheel_cudas(version)
    if driver_cuda is not None:
        facts["driver_cuda"] = driver_cuda
        major, minor = (int(x) for x in driver_cuda.split(".")[:2])
        pick = wheels.pick_for_driver(version, (major, minor), info.driver_version or None)
        if pick is None:
            return (
                f"This driver supports CUDA {driver_cuda}, older than any PyTorch CUDA wheel: "
                f"update the NVIDIA driver to {wheels.MIN_DRIVER[wheels.WHEEL_CUDA[0][0]]} or "
                "newer, then reinstall PyTorch with CUDA."
            )
        facts["wheel_index"] = wheels.tag(pick[1])
        return (
            "Reinstall PyTorch with CUDA in the kernel's environment: "
            f"`%{wheels.pip_command(*pick)}` (a wheel for CUDA {pick[1][0]}.{pick[1][1]}, which "
            "this driver runs), then restart the kernel."
        )
    if not cudas:
        return ""
    facts["wheel_index"] = wheels.tag(cudas[0])
    names = ", ".join(wheels.tag(c) for c in cudas)
    return (
        "Reinstall PyTorch with CUDA in the kernel's environment: "
        f"`%{wheels.pip_command(wheels.base_version(version), cudas[0])}` (torch "
        f"{wheels.base_version(version)} has {names} wheels: take the newest whose CUDA is not "
        "above the 'CUDA Version' that `nvidia-smi` shows), then restart the kernel."
    )


def ctx_program_driver(match, scene):
    """Whether this machine has an NVIDIA driver at all."""
    driver = platform.nvidia_driver_present()
    notes = (
        (
            "No NVIDIA driver was found on this machine (no NVIDIA kernel module, no nvidia-smi): "
            "host code "
            "runs here, kernels cannot.",
        )
        if not driver
        else (
            "An NVIDIA driver is installed: it supports an older CUDA than the nvcc that built the "
            "program "
            "(`%cudainfo` shows both).",
        )
    )
    return Context(notes=notes, facts={"nvidia_driver_found": driver})


def ctx_driver_old(match, scene):
    """The driver's CUDA version against PyTorch's CUDA."""
    torch = _torch()
    facts, notes = {}, []
    found = match.groupdict().get("found") if match.re.groupindex else None
    driver_cuda = decode_cuda_driver_version(int(found)) if found else None
    if is_na(driver_cuda):  # "found version 0": nothing to decode
        found = None
    built = torch.version.cuda if torch else None
    facts["torch_cuda"] = built
    if found:
        facts["driver_cuda"] = driver_cuda
        notes.append(
            f"The driver reports version {found}, which means it supports CUDA up to {driver_cuda}."
        )
    if built:
        notes.append(f"This PyTorch was built for CUDA {built}.")
    fix = ""
    if found and built:
        major, minor = (int(x) for x in driver_cuda.split(".")[:2])
        # every driver that reports CUDA 11.1 or newer is at least its major's minimum for minor
        # version compatibility (11.0's first driver, 450.36.06, is below 450.80.02)
        least = wheels.MIN_DRIVER.get(major) if (major, minor) >= (11, 1) else None
        pick = wheels.pick_for_driver(torch.__version__, (major, minor), least)
        wheel = (
            f"`%{wheels.pip_command(*pick)}`" if pick else "none is published: update the driver"
        )
        fix = (
            f"Either install an NVIDIA driver that supports CUDA {built} or newer, or install a "
            f"PyTorch wheel built for CUDA {facts['driver_cuda']} or older: {wheel}."
        )
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_arch(match, scene):
    """The GPU's architecture against the build's architecture list."""
    torch = _torch()
    notes, facts = [], {}
    if torch is not None:
        try:
            arches = torch.cuda.get_arch_list()
        except Exception:
            arches = []
        facts["arch_list"] = arches
        notes.append(
            f"This PyTorch {torch.__version__} contains kernels for: {', '.join(arches) or 'none'}."
        )
        if (
            torch.cuda.is_initialized()
        ):  # properties by explicit ordinal: no current_device(), no new context
            with contextlib.suppress(Exception):
                for d in range(torch.cuda.device_count()):
                    major, minor = torch.cuda.get_device_capability(d)
                    facts.setdefault("device_capability", f"sm_{major}{minor}")
                    notes.append(f"GPU {d} is sm_{major}{minor} ({torch.cuda.get_device_name(d)}).")
    return Context(notes=tuple(notes), facts=facts)


def ctx_ordinal(match, scene):
    """The requested CUDA ordinal against the GPUs CUDA sees."""
    torch = _torch()
    notes, facts = [], {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts["CUDA_VISIBLE_DEVICES"] = visible
    if torch is not None:
        try:
            count = torch.cuda.device_count()
        except Exception:
            count = None
        facts["device_count"] = count
        if count is not None:
            valid = f"cuda:0 .. cuda:{count - 1}" if count else "none"
            notes.append(f"This process sees {count} GPU(s); valid devices: {valid}.")
    if visible is not None:
        notes.append(
            f"CUDA_VISIBLE_DEVICES={visible!r}: the listed GPUs are renumbered from 0 in this "
            f"process."
        )
    asked = re.findall(r"cuda:(\d+)|set_device\((\d+)\)|device=(\d+)", _source_text(scene))
    asked = sorted({int(a or b or c) for a, b, c in asked})
    if asked:
        facts["asked"] = asked
        notes.append("The failing code asks for ordinal(s) " + ", ".join(map(str, asked)) + ".")
    return Context(notes=tuple(notes), facts=facts)


_LIBRARY_CALLS = (
    (
        r"^cublas(?:Lt)?\w*gemm|^cublas\w*Gemm",
        "a matrix multiply (nn.Linear, `@`, torch.matmul, bmm, addmm)",
    ),
    (r"^cublas", "a cuBLAS linear-algebra call"),
    (r"^cusparse", "a sparse-matrix operation (torch.sparse.mm, `@` on sparse tensors)"),
    (r"^cudnn", "a convolution, RNN or normalisation (cuDNN)"),
)


def ctx_cuda_family(match, scene):
    """What a CUDA error message identifies, and where to look for the cause.

    The runtime code or library status and the library function PyTorch named, whether
    ``CUDA_LAUNCH_BLOCKING`` was set, and for errors that surface late the integer tensors and
    embeddings to compare (an out-of-range index is the usual cause). Reads no GPU state: nothing
    here starts CUDA or waits for the GPU.
    """
    family, facts = family_of_message(match.string)
    facts = dict(facts, family=family)
    notes = []
    what = facts.get("status") or (
        f"{facts['name']} (code {facts['code']})" if "name" in facts else None
    )
    call = facts.get("call")
    if what:
        line = f"{facts.get('library', 'CUDA')} reported {what}"
        if call:
            kind = next(
                (label for pattern, label in _LIBRARY_CALLS if re.search(pattern, call)), ""
            )
            line += f" from `{call}`" + (f", {kind}" if kind else "")
        notes.append(line + ".")
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING", "") not in ("", "0")
    facts["launch_blocking"] = blocking
    if family in ("cuda-async", "cuda-illegal-access", "cuda-launch"):
        if blocking:
            notes.append(
                "CUDA_LAUNCH_BLOCKING is set in this kernel, so the failing line is the operation "
                "that "
                "failed."
            )
        else:
            notes.append(
                "CUDA_LAUNCH_BLOCKING is not set in this kernel: the failing line is where the "
                "error was "
                "noticed, possibly after the operation that really failed."
            )
        index = ctx_index_tensors(match, scene, wide=True)
        facts["int_tensors"] = index.facts.get("int_tensors", {})
        notes.extend(index.notes)
        torch = _torch()
        limits = {}
        for name, module in _modules(scene):
            if torch is not None and isinstance(module, torch.nn.Embedding):
                limits[name] = int(module.num_embeddings)
        facts["embeddings"] = limits
        out = [
            (t, lo, hi, e, n)
            for t, (lo, hi) in facts["int_tensors"].items()
            for e, n in limits.items()
            if lo < 0 or hi >= n
        ]
        facts["out_of_range"] = [(t, e) for t, _, _, e, _ in out]
        for t, lo, hi, e, n in out[:3]:
            notes.append(
                f"`{t}` (integers {lo}..{hi}) does not fit `{e}` (indices 0..{n - 1}): if it is "
                f"fed to "
                f"`{e}`, that is the failing operation."
            )
    if family and FAMILIES[family].restart:
        facts["restart"] = True
    return Context(notes=tuple(notes), facts=facts)


def _modules(scene):
    return _failing_modules(scene) or list(_named_modules(scene))
