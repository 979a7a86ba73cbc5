"""Context for errors of the CUDA install and devices: a CPU-only PyTorch build, a driver too
old for the build, no kernel for the GPU's architecture, a device ordinal that does not exist.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.model.Context`. No CUDA
context is created here: the GPU's own properties are read only when CUDA is already initialised.
"""

from __future__ import annotations

import os
import re

from ...core import platform
from ...core.na import is_na
from ...core.nvml import decode_cuda_driver_version
from ..model import Context
from ..scene import _source_text, _torch


def ctx_not_compiled(match, scene):
    torch = _torch()
    facts, notes = {}, []
    if torch is not None:
        facts["torch_version"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        notes.append(f"This PyTorch is {torch.__version__}; torch.version.cuda is {torch.version.cuda!r} "
                     "(None means a CPU-only build).")
    driver = platform.nvidia_driver_present()
    facts["nvidia_driver_found"] = driver
    if driver:
        notes.append("An NVIDIA driver is installed on this machine, so the GPU is there: only the PyTorch "
                     "build lacks CUDA support.")
    else:
        notes.append("No NVIDIA driver was found on this machine (no NVIDIA kernel module, no nvidia-smi, no nvml.dll): "
                     "if you expected a GPU here, the kernel may run on another machine or container.")
    return Context(notes=tuple(notes), facts=facts)


def ctx_program_driver(match, scene):
    driver = platform.nvidia_driver_present()
    notes = (("No NVIDIA driver was found on this machine (no NVIDIA kernel module, no nvidia-smi): host code "
              "runs here, kernels cannot.",) if not driver else
             ("An NVIDIA driver is installed: it supports an older CUDA than the nvcc that built the program "
              "(`%cudainfo` shows both).",))
    return Context(notes=notes, facts={"nvidia_driver_found": driver})


def ctx_driver_old(match, scene):
    torch = _torch()
    facts, notes = {}, []
    found = match.groupdict().get("found") if match.re.groupindex else None
    driver_cuda = decode_cuda_driver_version(int(found)) if found else None
    if is_na(driver_cuda):  # "found version 0": nothing to decode
        found = None
    built = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    facts["torch_cuda"] = built
    if found:
        facts["driver_cuda"] = driver_cuda
        notes.append(f"The driver reports version {found}, which means it supports CUDA up to {driver_cuda}.")
    if built:
        notes.append(f"This PyTorch was built for CUDA {built}.")
    fix = ""
    if found and built:
        fix = (f"Either install an NVIDIA driver that supports CUDA {built} or newer, or install a PyTorch wheel "
               f"built for CUDA {facts['driver_cuda']} or older (pick the matching index URL on "
               "https://pytorch.org/get-started/previous-versions/).")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_arch(match, scene):
    torch = _torch()
    notes, facts = [], {}
    if torch is not None:
        try:
            arches = torch.cuda.get_arch_list()
        except Exception:
            arches = []
        facts["arch_list"] = arches
        notes.append(f"This PyTorch {torch.__version__} contains kernels for: {', '.join(arches) or 'none'}.")
        if torch.cuda.is_initialized():
            try:
                major, minor = torch.cuda.get_device_capability()
                facts["device_capability"] = f"sm_{major}{minor}"
                notes.append(f"Your GPU is sm_{major}{minor} ({torch.cuda.get_device_name()}).")
            except Exception:
                pass
    return Context(notes=tuple(notes), facts=facts)


def ctx_ordinal(match, scene):
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
        notes.append(f"CUDA_VISIBLE_DEVICES={visible!r}: the listed GPUs are renumbered from 0 in this process.")
    asked = re.findall(r"cuda:(\d+)|set_device\((\d+)\)|device=(\d+)", _source_text(scene))
    asked = sorted({int(a or b or c) for a, b, c in asked})
    if asked:
        facts["asked"] = asked
        notes.append("The failing code asks for ordinal(s) " + ", ".join(map(str, asked)) + ".")
    return Context(notes=tuple(notes), facts=facts)

