"""Context for DataLoader, pinned-memory and worker-process errors: which DataLoader pins
tensors that are already on a device, which uses worker processes, the multiprocessing start
method, the size of ``/dev/shm``.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.model.Context`.
"""

from __future__ import annotations

import os

from ...core import platform
from ...core.fmt import format_bytes
from ..model import Context
from ..scene import _is_tensor, _shape, _source_text, _tensors, _torch
from ..source import _method_calls


def _dataloaders(scene):
    torch = _torch()
    if torch is None:
        return []
    DataLoader = torch.utils.data.DataLoader
    return [(n, v) for n, v in scene.variables() if isinstance(v, DataLoader)]


def _cuda_tensors_in_dataset(dataset):
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, (tuple, list)):
        return [i for i, t in enumerate(tensors) if _is_tensor(t) and t.device.type != "cpu"]
    return []


def ctx_pin_cuda(match, scene):
    notes, facts = [], {"tensor_type": match.group("type")}
    culprits = []
    for name, loader in _dataloaders(scene):
        if getattr(loader, "pin_memory", False):
            idx = _cuda_tensors_in_dataset(loader.dataset)
            if idx:
                culprits.append(name)
                devices = sorted({str(loader.dataset.tensors[i].device) for i in idx})
                notes.append(f"`{name}` is a DataLoader with pin_memory=True whose dataset holds tensors that are "
                             f"not on the CPU (TensorDataset tensors {idx}, on {', '.join(devices)}).")
    for name, t in _tensors(scene):
        if t.device.type != "cpu" and len(culprits) < 3 and name not in culprits:
            notes.append(f"`{name}` is on {t.device} (shape {list(_shape(t))}).")
            culprits.append(name)
    facts["culprits"] = culprits
    return Context(notes=tuple(notes[:4]), facts=facts)


def ctx_no_accelerator(match, scene):
    torch = _torch()
    notes = []
    if torch is not None:
        notes.append(f"torch.cuda.is_available() is {torch.cuda.is_available()} and torch.version.cuda is "
                     f"{torch.version.cuda!r} in this kernel.")
    pins = [f"{n}.pin_memory()" for line in scene.failing_lines for n, _ in _method_calls(line, "pin_memory")]
    if not pins:
        pins = [f"{n}.pin_memory()" for n, _ in _method_calls(_source_text(scene), "pin_memory")]
    if pins:
        notes.append("The failing code pins memory: " + ", ".join(f"`{p}`" for p in pins[:3]) + ".")
    return Context(notes=tuple(notes), facts={"pin_calls": pins})


def ctx_workers(match, scene):
    notes, workers = [], []
    for name, loader in _dataloaders(scene):
        n = getattr(loader, "num_workers", 0)
        if n:
            workers.append(name)
            notes.append(f"`{name}` uses num_workers={n}.")
    notes.append(f"This kernel runs on {platform.SYSTEM}.")
    return Context(notes=tuple(notes), facts={"loaders_with_workers": workers, "platform": platform.SYSTEM})


def ctx_fork(match, scene):
    import multiprocessing

    torch = _torch()
    notes = []
    try:
        method = multiprocessing.get_start_method(allow_none=True) or "default (fork on Linux)"
    except Exception:
        method = "unknown"
    notes.append(f"The multiprocessing start method is {method}.")
    if torch is not None and torch.cuda.is_initialized():
        notes.append("CUDA is already initialised in this kernel, so forked workers inherit a CUDA state they "
                     "cannot use.")
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={"start_method": method, **ctx.facts})


def ctx_shm(match, scene):
    notes, facts = [], {}
    try:
        st = os.statvfs("/dev/shm")
        facts["shm_total_bytes"] = st.f_blocks * st.f_frsize
        facts["shm_free_bytes"] = st.f_bavail * st.f_frsize
        notes.append(f"/dev/shm here is {format_bytes(facts['shm_total_bytes'])} "
                     f"({format_bytes(facts['shm_free_bytes'])} free); Docker's default is 64 MiB.")
    except (OSError, AttributeError):
        pass
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={**facts, **ctx.facts})

