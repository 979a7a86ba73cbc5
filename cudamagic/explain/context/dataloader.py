"""Context for DataLoader, pinned-memory and worker-process errors.

Which DataLoader pins tensors that are already on a device, which uses worker processes, the
multiprocessing start method, the size of ``/dev/shm``.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.result.Context`.
"""

from __future__ import annotations

import multiprocessing
import re

from ...core import platform
from ...core.fmt import format_bytes
from ..result import Context
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
    """DataLoaders that pin memory of a dataset holding CUDA tensors."""
    notes, facts = [], {"tensor_type": match.group("type")}
    culprits = []
    for name, loader in _dataloaders(scene):
        if loader.pin_memory:
            idx = _cuda_tensors_in_dataset(loader.dataset)
            if idx:
                culprits.append(name)
                devices = sorted({str(loader.dataset.tensors[i].device) for i in idx})
                notes.append(
                    f"`{name}` is a DataLoader with pin_memory=True whose dataset holds tensors "
                    f"that are "
                    f"not on the CPU (TensorDataset tensors {idx}, on {', '.join(devices)})."
                )
    for name, t in _tensors(scene):
        if t.device.type != "cpu" and len(culprits) < 3 and name not in culprits:
            notes.append(f"`{name}` is on {t.device} (shape {list(_shape(t))}).")
            culprits.append(name)
    facts["culprits"] = culprits
    return Context(notes=tuple(notes[:4]), facts=facts)


def ctx_no_accelerator(match, scene):
    """What this kernel's PyTorch says about CUDA."""
    torch = _torch()
    notes = []
    if torch is not None:
        notes.append(
            f"torch.cuda.is_available() is {torch.cuda.is_available()} and torch.version.cuda is "
            f"{torch.version.cuda!r} in this kernel."
        )
    pins = [
        f"{n}.pin_memory()"
        for line in scene.failing_lines
        for n, _ in _method_calls(line, "pin_memory")
    ]
    if not pins:
        pins = [f"{n}.pin_memory()" for n, _ in _method_calls(_source_text(scene), "pin_memory")]
    if pins:
        notes.append("The failing code pins memory: " + ", ".join(f"`{p}`" for p in pins[:3]) + ".")
    return Context(notes=tuple(notes), facts={"pin_calls": pins})


def _device_tensors_of(dataset) -> list:
    """``(attribute, device)`` of tensors not on the CPU that ``dataset`` holds.

    TensorDataset's ``tensors`` and the attributes of a custom Dataset (``self.x =
    torch.randn(...).cuda()`` in ``__init__``).
    """
    found = [
        (f"tensors[{i}]", str(dataset.tensors[i].device)) for i in _cuda_tensors_in_dataset(dataset)
    ]
    try:
        attrs = vars(dataset)
    except TypeError:
        attrs = {}
    for key, value in attrs.items():
        if key != "tensors" and _is_tensor(value) and value.device.type != "cpu":
            found.append((key, str(value.device)))
    return found


def ctx_workers(match, scene):
    """DataLoaders with worker processes, and datasets holding CUDA tensors."""
    notes, workers, cuda_datasets = [], [], []
    for name, loader in _dataloaders(scene):
        n = loader.num_workers
        if n:
            workers.append(name)
            notes.append(f"`{name}` uses num_workers={n}.")
            held = _device_tensors_of(loader.dataset)
            if held:
                cuda_datasets.append(name)
                where = ", ".join(f"`{a}` on {d}" for a, d in held[:3])
                notes.append(
                    f"The dataset of `{name}` ({type(loader.dataset).__name__}) holds GPU tensors "
                    f"({where}): "
                    "every worker process receives them, and CUDA tensors cannot be sent to worker "
                    "processes "
                    "(on Windows not at all). Create the dataset's tensors on the CPU and move "
                    "each batch "
                    "to the GPU in the training loop."
                )
    notes.append(f"This kernel runs on {platform.SYSTEM}.")
    return Context(
        notes=tuple(notes),
        facts={
            "loaders_with_workers": workers,
            "platform": platform.SYSTEM,
            "loaders_with_gpu_datasets": cuda_datasets,
        },
    )


def _process_start_method() -> str:
    """The start method new worker processes get in this process.

    The one set, else the platform's default (fork on Linux before Python 3.14, spawn on Windows and
    macOS), without fixing it.
    """
    return (
        multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_all_start_methods()[0]
    )


def _loader_start_method(loader, default: str) -> str:
    ctx = loader.multiprocessing_context
    return ctx.get_start_method() if ctx is not None else default


def start_methods(scene) -> list:
    """The start methods of the DataLoaders with workers in ``scene``, sorted.

    A loader's ``multiprocessing_context``, else the process's; the process's own when there are
    none (or ``scene`` is None).
    """
    default = _process_start_method()
    found = {
        _loader_start_method(loader, default)
        for _, loader in (_dataloaders(scene) if scene else [])
        if loader.num_workers
    }
    return sorted(found) or [default]


_PICKLE_FAILURE = re.compile(
    r"Can't get attribute '[^']+' on <module '__(?:mp_)?main__'|"
    r"Can't pickle <(?:class|function) '__main__\."
)


def spawned_workers(match, scene) -> bool:
    """Whether a worker error is the spawn case.

    The message (or a link of its chain) shows the pickling failure, or the workers in use start
    with spawn / forkserver, which import notebook code by name.
    """
    if "exited unexpectedly" not in match.group(0):
        return True  # the pickling messages themselves
    if any(_PICKLE_FAILURE.search(m) for m in (scene.messages if scene else ())):
        return True
    return bool({"spawn", "forkserver"}.intersection(start_methods(scene)))


def forked_workers(match, scene) -> bool:
    """Whether a worker that "exited unexpectedly" was forked (not :func:`spawned_workers`)."""
    return not spawned_workers(match, scene)


def ctx_801(match, scene):
    """Error 801 (operation not supported).

    The loaders with workers and datasets holding GPU tensors (:func:`ctx_workers`); the distributed
    advice only where this kernel has a ``torch.distributed`` group.
    """
    ctx = ctx_workers(match, scene)
    torch = _torch()
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        group = dist is not None and dist.is_available() and dist.is_initialized()
        backend, world = (str(dist.get_backend()), dist.get_world_size()) if group else ("", 0)
    except Exception:  # a half-torn-down group: no distributed advice
        group, backend, world = False, "", 0
    notes = list(ctx.notes)
    if group:
        notes.insert(
            -1,
            f"torch.distributed is initialised here (backend {backend}, world size {world}): if "
            f"the "
            "failing call is a collective or a copy between GPUs, `NCCL_DEBUG=INFO` logs the rank "
            "and "
            "call that failed, `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks the collectives, and "
            "`nvidia-smi topo -m` shows which GPUs can reach each other directly.",
        )
    return Context(notes=tuple(notes), facts={**ctx.facts, "distributed_backend": backend})


def ctx_spawn_main(match, scene):
    """Spawned workers (Windows, macOS) cannot import what the notebook defined."""
    name = (match.groupdict().get("name") or "").split(".")[-1] if match.re.groupindex else ""
    default = multiprocessing.get_all_start_methods()[
        0
    ]  # the platform's default, without fixing it
    method = multiprocessing.get_start_method(allow_none=True) or default
    notes, users = [f"The default start method here is {default}; this kernel's is {method}."], []
    for lname, loader in _dataloaders(scene):
        if not loader.num_workers:
            continue
        lmethod = _loader_start_method(loader, method)
        cls = type(loader.dataset)
        in_main = [f"dataset class `{cls.__name__}`"] if cls.__module__ == "__main__" else []
        if (
            in_main and not name
        ):  # "worker exited unexpectedly" names nothing: the dataset class is the suspect
            name = cls.__name__
        for attr in ("collate_fn", "worker_init_fn"):
            fn = getattr(loader, attr, None)
            if fn is not None and getattr(fn, "__module__", None) == "__main__":
                in_main.append(f"{attr} `{getattr(fn, '__name__', attr)}`")
        if in_main:
            users.append(lname)
            notes.append(
                f"`{lname}` starts {loader.num_workers} worker(s) with {lmethod}, and its "
                f"{' and '.join(in_main)} is defined in the notebook (module __main__), which a "
                f"spawned "
                "worker cannot import."
            )
    if name and name in scene.user_ns:
        notes.append(
            f"`{name}` is defined in this notebook: move it to a .py file next to the notebook "
            f"(e.g. `mydata.py`) and `from mydata import {name}`."
        )
    return Context(
        notes=tuple(notes),
        facts={
            "name": name,
            "start_method": method,
            "default_start_method": default,
            "loaders_with_main_code": users,
            "platform": platform.SYSTEM,
        },
    )


def ctx_fork(match, scene):
    """The multiprocessing start method, and whether CUDA is initialised."""
    torch = _torch()
    notes = []
    try:
        method = multiprocessing.get_start_method(allow_none=True) or "default (fork on Linux)"
    except Exception:
        method = "unknown"
    notes.append(f"The multiprocessing start method is {method}.")
    if torch is not None and torch.cuda.is_initialized():
        notes.append(
            "CUDA is already initialised in this kernel, so forked workers inherit a CUDA state "
            "they "
            "cannot use."
        )
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={"start_method": method, **ctx.facts})


def ctx_shm(match, scene):
    """The size of /dev/shm, and how the workers ended (exit code or signal)."""
    notes, facts = [], {}
    shm = platform.dev_shm_bytes()
    if shm is not None:
        facts["shm_total_bytes"], facts["shm_free_bytes"] = shm
        notes.append(
            f"/dev/shm here is {format_bytes(facts['shm_total_bytes'])} "
            f"({format_bytes(facts['shm_free_bytes'])} free); Docker's default is 64 MiB."
        )
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={**facts, **ctx.facts})


_EXIT_CODE = re.compile(r"exited unexpectedly with exit code (-?\d+)")
_SIGNAL = re.compile(r"is killed by signal: ([^.\n]+)")


def ctx_worker_exited(match, scene):
    """A forked DataLoader worker died.

    The exit code or signal (from the message and its chain), the start method of each loader with
    workers, and the size of ``/dev/shm``.
    """
    texts = [match.string, *scene.messages]
    codes = [int(m.group(1)) for t in texts for m in [_EXIT_CODE.search(t)] if m]
    signals = [m.group(1).strip() for t in texts for m in [_SIGNAL.search(t)] if m]
    code, sig = (codes[0] if codes else None), (signals[0] if signals else "")
    default = _process_start_method()
    notes = []
    for name, loader in _dataloaders(scene):
        n = loader.num_workers
        if n:
            notes.append(
                f"`{name}` starts {n} worker(s) with {_loader_start_method(loader, default)}: "
                f"forked "
                "workers inherit what the notebook defined, so this is not the spawn import "
                "problem."
            )
    if sig == "Killed":
        notes.append(
            "The worker was killed by SIGKILL ('Killed'), what the Linux OOM killer sends when "
            "memory "
            "runs out: `!dmesg | grep -i 'killed process'` confirms it. Each worker holds its own "
            "copy of "
            "what it touches in the dataset; fewer workers or a smaller dataset in memory help."
        )
    elif sig == "Bus error":
        notes.append(
            "The worker was killed by SIGBUS ('Bus error'): shared memory (/dev/shm) ran out while "
            "it "
            "handed a batch over."
        )
    elif sig:
        notes.append(f"The worker was killed by signal {sig}.")
    if code is not None:
        notes.append(
            f"The worker exited with code {code}: an error or a crash in the Dataset / collate_fn "
            f"code; "
            "with `num_workers=0` the real error shows in the cell."
        )
    shm = ctx_shm(match, scene)
    notes += [n for n in shm.notes if n.startswith("/dev/shm")]
    facts = {**shm.facts, "exit_code": code, "signal": sig, "start_methods": start_methods(scene)}
    return Context(notes=tuple(notes), facts=facts)
