"""``%%cudafit --verify``: one real step on the GPU beside the estimate, with everything put back.

The cell runs for real once, in a copy of the namespace (its assignments stay there), with the
inputs of ``--max-batch`` grown to the batch found. Before it, the state the step changes is saved
to host memory: every parameter and its ``.grad``, every buffer (BatchNorm statistics), the
optimizers' state, the named tensors, the CPU and CUDA RNG states; after it (also when it fails)
all of it is written back into the same tensor objects, and the cached blocks the step left are
released (``torch.cuda.empty_cache()``), so the reserved memory is not above its value before.
The peak counters are reset for the measurement (like ``%%cudamem --reset-peak``).

No IPython import.
"""

from __future__ import annotations

import contextlib
import copy
import gc
from dataclasses import dataclass

import torch

from ..core.cell import run_code_caught
from .shadow import names_used, reachable_names


@dataclass(frozen=True)
class Verified:
    """The real step.

    Attributes:
        batch: the leading dimension of the scaled inputs (0: not scaled).
        peak_allocated_bytes / peak_reserved_bytes: ``torch.cuda.max_memory_allocated()`` /
            ``max_memory_reserved()`` of the step.
        reserved_before_bytes / reserved_after_bytes: ``torch.cuda.memory_reserved()`` before the
            step and after everything was put back.
        error: ``"TypeName: message"`` when the step failed (an out-of-memory error...), else "".
    """

    batch: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    reserved_before_bytes: int
    reserved_after_bytes: int
    error: str = ""


def _objects(user_ns: dict, names) -> list:
    return [user_ns[n] for n in names if n in user_ns]


@contextlib.contextmanager
def restored(objects):
    """Put back what a training step changes in ``objects`` and the RNG states, on exit.

    The values are saved to host memory first and written back into the same tensor objects on
    exit, also after an error.

    Args:
        objects: modules, optimizers and tensors (others are ignored).
    """
    tensors, optimizers = {}, []
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for t in list(obj.parameters()) + list(obj.buffers()):
                tensors[id(t)] = t
        elif isinstance(obj, torch.optim.Optimizer):
            optimizers.append(obj)
            for group in obj.param_groups:
                for p in group["params"]:
                    tensors[id(p)] = p
        elif isinstance(obj, torch.Tensor):
            tensors[id(obj)] = obj
    saved = {
        key: (
            t.detach().to("cpu", copy=True),
            None if not t.is_leaf or t.grad is None else t.grad.detach().to("cpu", copy=True),
        )
        for key, t in tensors.items()
    }
    states = [copy.deepcopy(_to_cpu(opt.state_dict())) for opt in optimizers]
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for key, t in tensors.items():
                value, grad = saved[key]
                t.copy_(value)
                if t.is_leaf:
                    t.grad = None if grad is None else grad.to(t.device)
        for opt, state in zip(optimizers, states, strict=True):
            opt.load_state_dict(state)
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)


def _to_cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


def grown(t, batch: int):
    """Tensor ``t`` with leading dimension ``batch`` (its rows repeated), on its device."""
    reps = -(-batch // t.shape[0])
    return t.repeat((reps,) + (1,) * (t.dim() - 1))[:batch]


def verify(code, tree, user_ns: dict, ordinal: int, scale: dict | None = None) -> Verified:
    """Run the cell for real on ``cuda:ordinal`` and measure it (see the module docstring).

    Args:
        code: the compiled cell.
        tree: its AST (for the names it reads).
        user_ns: the user's namespace.
        ordinal: the CUDA ordinal the peak counters are read for.
        scale: ``{input name: leading dimension}`` of the inputs to grow, or None.

    Returns:
        :class:`Verified`.
    """
    device = torch.device("cuda", ordinal)
    names = reachable_names(names_used(tree), user_ns)
    ns = dict(user_ns)
    batch = 0
    for name, size in (scale or {}).items():
        ns[name] = grown(user_ns[name], size)
        batch = batch or size
    before = torch.cuda.memory_reserved(device)
    with restored(_objects(user_ns, names)):
        torch.cuda.reset_peak_memory_stats(device)
        outcome = run_code_caught(code, ns)
        torch.cuda.synchronize(device)
        peak_alloc = torch.cuda.max_memory_allocated(device)
        peak_res = torch.cuda.max_memory_reserved(device)
    error = "" if outcome.exception is None else _error_text(outcome.exception)
    del ns, outcome
    gc.collect()
    torch.cuda.empty_cache()
    return Verified(batch, peak_alloc, peak_res, before, torch.cuda.memory_reserved(device), error)


def _error_text(exc) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:200]
