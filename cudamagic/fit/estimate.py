"""From a cell to a :class:`~.result.FitEstimate`.

A fake run (:mod:`.run`), the caching-allocator
model (:mod:`.allocator`), the verdict against the target GPU, re-estimated suggestions, and the
largest batch by bisection on fake runs.

No IPython import.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, replace

import torch

from ..core.na import NA, is_na
from . import allocator
from .result import FitEstimate, MaxBatch, Overhead, Stopped, Suggestion
from .run import fake_run
from .tracker import CATEGORIES, cuda_block_bytes

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast"}
MAX_BATCH_RUNS = 14


@dataclass
class Request:
    """What to estimate.

    Attributes:
        code / tree: the compiled cell and its AST. user_ns: the user's namespace (read only).
        target: a :class:`~.result.Target` or NA. cuda_initialized: CUDA is initialised in this
            process (its context exists already). dtype: autocast dtype or None. top: module rows.
        source: the cell's first line.
    """

    code: object
    tree: object
    user_ns: dict
    target: object
    cuda_initialized: bool = False
    dtype: torch.dtype | None = None
    top: int = 5
    source: str = ""


def _capability(target):
    return None if is_na(target) else target.capability_major


def measure(req: Request, scale: dict | None = None, prepare=None) -> FitEstimate:
    """One fake run of the cell and its figures (no suggestions, no largest batch).

    Args:
        req: the :class:`Request`.
        scale: ``{input name: leading dimension}``.
        prepare: called with the shadow before the run (a suggestion's change).

    Raises:
        CannotFollow: a named object cannot be copied. BaseException: the user's own error.
    """
    t0 = time.perf_counter()
    run = fake_run(req.code, req.tree, req.user_ns, dtype=req.dtype, scale=scale, prepare=prepare)
    tr = run.tracker
    major = _capability(req.target)
    ws = allocator.cublas_workspace_bytes(major)
    threads = int(bool(tr.blas_phases - {"backward"})) + int("backward" in tr.blas_phases)
    model = allocator.replay(tr.events, extra=[ws] * threads)
    context = 0 if req.cuda_initialized else allocator.context_bytes(major)
    overheads = []
    if threads:
        overheads.append(
            Overhead(f"cuBLAS workspace x {threads}", ws * threads, True, allocator.CUBLAS_SOURCE)
        )
    if tr.conv_ran:
        overheads.append(
            Overhead(
                "cuDNN workspace",
                NA("chosen by cuDNN at run time per convolution algorithm", "not_modelled"),
                True,
                "not modelled: cuDNN picks the algorithm (and its workspace) on the GPU",
            )
        )
    overheads.append(
        Overhead(
            "CUDA context",
            context,
            False,
            "already created in this process (in NVML's used memory)"
            if req.cuda_initialized
            else allocator.CONTEXT_SOURCE,
        )
    )
    live = tr.live_at_peak()
    cats = {}
    mods = {}
    for rec in live:
        cats[rec.category] = cats.get(rec.category, 0) + cuda_block_bytes(rec.nbytes)
        if rec.module:
            mods[rec.module] = mods.get(rec.module, 0) + cuda_block_bytes(rec.nbytes)
    candidates = _checkpoint_candidates(run.shadow.modules, live)
    phase = tr.records_by_seq(tr.peak_block_seq).phase if tr.peak_block_seq >= 0 else "forward"
    reserved = model.reserved_bytes
    total = reserved + context
    fits, spare = None, None
    if not is_na(req.target):
        spare = req.target.memory_free_bytes - total
        fits = spare >= 0
    notes = list(run.shadow.notes) + list(dict.fromkeys(tr.notes))
    if tr.saw_cuda:
        notes.append("the cell's cuda devices were mapped to fake CPU tensors for the estimate")
    if req.dtype is not None:
        notes.append(f"the cell ran under torch.autocast with {req.dtype} (--dtype)")
    stopped = None
    if run.stopped is not None:
        s = run.stopped
        stopped = Stopped(s.reason, s.op, s.line)
        fits, spare = None, None  # a partial run gives a lower bound, not a verdict
    return FitEstimate(
        source=req.source,
        dtype=DTYPE_NAMES.get(req.dtype, "as written"),
        tensor_peak_bytes=tr.peak_bytes,
        peak_allocated_bytes=model.peak_allocated_bytes,
        peak_reserved_bytes=reserved,
        process_total_bytes=total,
        peak_phase=phase,
        categories=tuple(
            (c, cats[c]) for c in sorted(cats, key=lambda c: (-cats[c], CATEGORIES.index(c)))
        ),
        modules=tuple(sorted(mods.items(), key=lambda kv: -kv[1])[: req.top]),
        overheads=tuple(overheads),
        target=req.target,
        fits=fits,
        spare_bytes=spare,
        stopped=stopped,
        checkpoint_candidates=tuple(candidates),
        notes=tuple(notes),
        estimate_s=time.perf_counter() - t0,
    )


def estimate(req: Request, max_batch_names: tuple = (), suggest: bool | None = None) -> FitEstimate:
    """The full ``%%cudafit`` answer.

    :func:`measure`, the largest batch of ``max_batch_names``, and the suggestions (``suggest``
    None: only when the step does not fit).
    """
    t0 = time.perf_counter()
    est = measure(req)
    if est.stopped is not None:
        return est
    if max_batch_names:
        est = replace(est, max_batch=largest_batch(req, max_batch_names, est))
    if suggest or (suggest is None and est.fits is False):
        est = replace(est, suggestions=tuple(suggestions(req, est)))
    return replace(est, estimate_s=time.perf_counter() - t0)


# ---- the largest batch ------------------------------------------------------------------------


def batch_inputs(user_ns: dict, names) -> int:
    """The common leading dimension of the tensors ``names`` (checked by the options)."""
    return int(user_ns[names[0]].shape[0])


def largest_batch(req: Request, names: tuple, est: FitEstimate) -> MaxBatch:
    """The largest batch that fits, by bisection on fake runs.

    Bisection on the leading dimension of ``names``: the largest batch whose predicted process
    total fits the target's free memory, to 2 % (at most :data:`MAX_BATCH_RUNS` runs). The batch
    is the first name's leading dimension; the others scale in proportion (a target of
    ``batch * seq`` rows grows with it).
    """
    now = batch_inputs(req.user_ns, names)
    free = req.target.memory_free_bytes
    cache = {now: est}

    def run(b):
        if b not in cache:
            scale = {n: max(1, int(req.user_ns[n].shape[0]) * b // now) for n in names}
            cache[b] = measure(req, scale=scale)
        return cache[b]

    def fits(b):
        return run(b).process_total_bytes <= free

    # a line through two sizes gives the first guess; then a bracket around it, then bisection
    b2 = now * 8
    slope = (run(b2).process_total_bytes - est.process_total_bytes) / (b2 - now)
    if slope <= 0:
        slope = max(1.0, run(b2).tensor_peak_bytes / b2)
    guess = max(1, int(now + (free - est.process_total_bytes) / slope))
    lo, hi = 0, None
    b = guess
    while len(cache) < MAX_BATCH_RUNS:
        if fits(b):
            lo = b
            if hi is not None:
                break
            b = int(b * 1.25) + 1
        else:
            hi = b
            if lo or b == 1:
                break
            b = max(1, int(b * 0.8))
    while hi is not None and hi - lo > max(1, lo // 50) and len(cache) < MAX_BATCH_RUNS:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    reserved = cache[lo].peak_reserved_bytes if lo in cache else 0
    return MaxBatch(tuple(names), lo, now, reserved, len(cache) - 1)


# ---- suggestions --------------------------------------------------------------------------------


def _suggestion(est, new, change, how) -> Suggestion:
    fits = (
        None if est.spare_bytes is None else new.process_total_bytes <= est.target.memory_free_bytes
    )
    return Suggestion(
        change,
        how,
        new.peak_reserved_bytes,
        est.peak_reserved_bytes - new.peak_reserved_bytes,
        fits,
    )


def suggestions(req: Request, est: FitEstimate) -> list:
    """Changes that lower the peak, each re-estimated by its own fake run."""
    out = []
    if req.dtype is None:
        new = measure(replace(req, dtype=torch.bfloat16))
        out.append(
            _suggestion(
                est,
                new,
                "mixed precision (bf16 autocast)",
                "with torch.autocast('cuda', dtype=torch.bfloat16): loss = ...   or --dtype bf16",
            )
        )
    biggest = list(est.checkpoint_candidates)
    if biggest:
        new = measure(req, prepare=lambda sh: _checkpoint(sh, biggest))
        out.append(
            _suggestion(
                est,
                new,
                f"activation checkpointing of {_names_text(biggest)}",
                "torch.utils.checkpoint.checkpoint(module, x, use_reentrant=False)",
            )
        )
    inputs = [n for n, v in req.user_ns.items() if n in _names(req) and _is_batch(v)]
    if inputs and min(int(req.user_ns[n].shape[0]) for n in inputs) >= 2:
        half = {n: int(req.user_ns[n].shape[0]) // 2 for n in inputs}
        new = measure(req, scale=half)
        out.append(
            _suggestion(
                est,
                new,
                f"half the batch ({', '.join(f'{n}: {b}' for n, b in half.items())})",
                "a smaller batch, with gradient accumulation to keep the effective batch",
            )
        )
    if any(_stateful(req.user_ns.get(n)) for n in _names(req)):
        new = measure(req, prepare=_use_sgd)
        out.append(
            _suggestion(
                est,
                new,
                "an optimizer with less state (SGD with momentum: 1 buffer per parameter, "
                "Adam/AdamW: 2)",
                "torch.optim.SGD(model.parameters(), lr=..., momentum=0.9)",
            )
        )
    expandable = allocator.expandable_reserved(est.peak_allocated_bytes)
    if est.peak_reserved_bytes - expandable > est.peak_reserved_bytes // 100:
        out.append(
            Suggestion(
                "expandable segments (less fragmentation)",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before CUDA starts)",
                expandable,
                est.peak_reserved_bytes - expandable,
                None
                if est.spare_bytes is None
                else est.process_total_bytes - est.peak_reserved_bytes + expandable
                <= est.target.memory_free_bytes,
            )
        )
    return sorted(out, key=lambda s: -s.saving_bytes)


def _names_text(names) -> str:
    if len(names) > 3:
        return f"{names[0]} ... {names[-1]} ({len(names)} modules)"
    return ", ".join(names)


def _names(req) -> set:
    from .shadow import names_used

    return set(names_used(req.tree))


def _is_batch(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and not value.requires_grad


def _stateful(value) -> bool:
    return isinstance(value, (torch.optim.Adam, torch.optim.AdamW))


def _checkpoint_candidates(modules: dict, live: list, n: int = 2) -> list:
    """The modules worth checkpointing.

    Among modules with children (blocks, stages), not the root, whose subtree holds under half of
    the activations live at the peak: the one holding most and all its siblings of the same class
    (every block of a stack), or else up to ``n`` of the biggest.
    """
    acts = [r for r in live if r.category == "activations" and r.module]
    total = sum(r.nbytes for r in acts)
    sizes = {}
    for name, mod in modules.items():
        if "." in name and any(True for _ in mod.children()):
            sizes[name] = sum(r.nbytes for r in acts if (r.module + ".").startswith(name + "."))
    ranked = sorted((k for k in sizes if 0 < sizes[k] < total / 2), key=lambda k: -sizes[k])
    if ranked:  # repeated blocks (model.blocks.0, .1, ...): checkpoint every one of them
        parent, _, _ = ranked[0].rpartition(".")
        kind = type(modules[ranked[0]])
        same = [k for k in sizes if k.rpartition(".")[0] == parent and type(modules[k]) is kind]
        if len(same) > 1:
            return same
    picked = []
    for name in ranked:
        if not any(name.startswith(p + ".") or p.startswith(name + ".") for p in picked):
            picked.append(name)
        if len(picked) == n:
            break
    return picked


def _checkpoint(sh, names) -> None:
    """Wrap the forward of the twin modules ``names`` in non-reentrant checkpointing."""
    from torch.utils.checkpoint import checkpoint

    for name in names:
        mod = sh.modules.get(name)
        if mod is not None:
            mod.forward = functools.partial(checkpoint, mod.forward, use_reentrant=False)


def _use_sgd(sh) -> None:
    """Replace each Adam/AdamW twin by SGD with momentum over the same parameters."""
    for key, value in list(sh.namespace.items()):
        if _stateful(value) and value in sh.optimizers:
            params = [p for g in value.param_groups for p in g["params"]]
            sgd = torch.optim.SGD(params, lr=value.param_groups[0]["lr"], momentum=0.9)
            sh.namespace[key] = sgd
            sh.optimizers[sh.optimizers.index(value)] = sgd
    sh.existing = [e for e in sh.existing if e[1] != "optimizer state"]
