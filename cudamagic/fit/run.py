"""One fake run of a cell.

One fake run of a cell: the shadow namespace (:mod:`.shadow`), ``FakeTensorMode`` and the storage
tracker (:mod:`.tracker`) together, with the phase hooks (module forward, autograd's saved tensors,
optimizer step) installed only for the run and removed after it.

:func:`fake_run` never touches the user's objects or RNG and never creates a CUDA context: every
tensor it makes is a fake CPU tensor; ``Tensor.to``/``Tensor.cuda`` and factory functions asked
for a cuda device get the CPU instead (a differentiable op on a fake cuda tensor aborts the
process on CPU-only PyTorch builds), and ``torch.cuda._lazy_init`` is a no-op meanwhile.

No IPython import.
"""

from __future__ import annotations

import ast
import contextlib
import re
import time
from dataclasses import dataclass

import torch

from ..core.cell import run_code
from . import shadow as shadow_mod
from .result import CannotFollow
from .tracker import StorageTracker

#: exceptions of fake-tensor tracing that mean "this cell cannot be followed", by class name
#: (torch._subclasses.fake_tensor), with what to say about them.
UNFOLLOWABLE = {
    "DataDependentOutputException": "reads a tensor's value (`.item()`, `bool(tensor)`, `if` or "
    "`while` on a tensor, `print` of a value), which a run without data cannot know",
    "DynamicOutputShapeException": "makes a tensor whose shape depends on values (`nonzero`, "
    "boolean-mask indexing, `unique`, `masked_select`), which a run without data cannot know",
    "UnsupportedOperatorException": "calls an operator with no fake-tensor implementation (a "
    "custom C++/CUDA extension)",
    "UnsupportedFakeTensorException": "uses a tensor kind fake tensors do not support",
}


@dataclass
class FakeRun:
    """A finished (or stopped) fake run.

    Attributes:
        tracker: the :class:`~.tracker.StorageTracker` with every storage. shadow: the
            :class:`~.shadow.Shadow`. stopped: the :class:`~.result.CannotFollow` that stopped the
            run, or None. wall_s: seconds.
    """

    tracker: StorageTracker
    shadow: shadow_mod.Shadow
    stopped: CannotFollow | None
    wall_s: float


@contextlib.contextmanager
def _cuda_as_cpu(tracker):
    """``.to``/``.cuda`` of tensors and modules keep fakes on the CPU; no CUDA initialisation.

    The twins are all on the CPU already: a module's ``.cuda()`` or ``.to("cuda")`` is the module
    itself (a dtype given to ``.to`` is applied), a tensor's goes to the CPU; the ``torch.cuda``
    calls of :data:`NO_OPS` do nothing.
    """
    from .tracker import is_cuda, map_cuda_args

    orig_to, orig_cuda, orig_init = torch.Tensor.to, torch.Tensor.cuda, torch.cuda._lazy_init

    def to(self, *args, **kwargs):
        new_args, new_kwargs = map_cuda_args(args, kwargs)
        tracker.saw_cuda = tracker.saw_cuda or any(map(is_cuda, [*args, *kwargs.values()]))
        return orig_to(self, *new_args, **new_kwargs)

    def cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        tracker.saw_cuda = True
        return orig_to(self, "cpu", non_blocking=non_blocking, memory_format=memory_format)

    module_to, module_cuda = torch.nn.Module.to, torch.nn.Module.cuda

    def mod_to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        tracker.saw_cuda = tracker.saw_cuda or (device is not None and device.type == "cuda")
        return self if dtype is None else module_to(self, dtype=dtype)

    def mod_cuda(self, device=None):
        tracker.saw_cuda = True
        return self

    torch.Tensor.to, torch.Tensor.cuda, torch.cuda._lazy_init = to, cuda, lambda: None
    torch.nn.Module.to, torch.nn.Module.cuda = mod_to, mod_cuda
    saved = {name: getattr(torch.cuda, name) for name in NO_OPS}
    for name in NO_OPS:
        setattr(torch.cuda, name, _no_op)
    try:
        yield
    finally:
        torch.Tensor.to, torch.Tensor.cuda, torch.cuda._lazy_init = orig_to, orig_cuda, orig_init
        torch.nn.Module.to, torch.nn.Module.cuda = module_to, module_cuda
        for name, func in saved.items():
            setattr(torch.cuda, name, func)


#: ``torch.cuda`` calls a training step may make that do nothing useful on fake tensors and would
#: create a CUDA context (or fail on a CPU-only build): no-ops during the fake run.
NO_OPS = ("synchronize", "empty_cache", "reset_peak_memory_stats", "set_device")


def _no_op(*args, **kwargs):
    return None


@contextlib.contextmanager
def _compile_as_eager(tracker):
    """``torch.compile(model)`` in the cell gives the model itself (noted with the cell's line)."""
    from .shadow import EAGER

    orig = torch.compile

    def compile_(model=None, **kwargs):
        line = tracker.cell_line()
        where = f" at line {line}" if line else ""
        tracker.notes.append(f"torch.compile{where}: {EAGER}")
        return model if model is not None else (lambda fn: fn)

    torch.compile = compile_
    try:
        yield
    finally:
        torch.compile = orig


@contextlib.contextmanager
def _scaler_steps():
    """``GradScaler.step`` steps the optimizer without reading ``found_inf`` (no value to read).

    The step the memory is estimated for is the one without infs (the one that steps).
    """
    from torch.amp.grad_scaler import GradScaler

    orig = GradScaler._maybe_opt_step

    def maybe_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)

    GradScaler._maybe_opt_step = maybe_step
    try:
        yield
    finally:
        GradScaler._maybe_opt_step = orig


@contextlib.contextmanager
def _autocast_cuda_as_cpu():
    """``torch.autocast("cuda", ...)`` in the cell autocasts the fake CPU tensors instead."""
    orig = torch.autocast.__init__

    def init(self, device_type, *args, **kwargs):
        if device_type == "cuda":
            device_type = "cpu"
            if "dtype" not in kwargs and not args:
                kwargs["dtype"] = torch.float16  # CUDA autocast's default
        orig(self, device_type, *args, **kwargs)

    torch.autocast.__init__ = init
    try:
        yield
    finally:
        torch.autocast.__init__ = orig


@contextlib.contextmanager
def _hooks(tracker: StorageTracker, shadow: shadow_mod.Shadow):
    """Phase and category hooks for the run; removed afterwards."""
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer as optim_mod

    def pre_fw(mod, _args):
        tracker.push_module(mod)

    def post_fw(mod, _args, _out):
        tracker.pop_module()

    def pre_step(opt, _args, _kwargs):
        tracker.phase = "optimizer step"
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    tracker.mark(p.grad, "gradients")

    def post_step(opt, _args, _kwargs):
        # every optimizer stepping here is a twin or made by the cell (on the twins' parameters)
        for state in opt.state.values():
            for v in state.values():
                if isinstance(v, torch.Tensor):
                    tracker.mark(v, "optimizer state")
        tracker.phase = "forward"

    def pack(t):
        tracker.mark(t, "activations")
        return t

    handles = [
        nn_module.register_module_forward_pre_hook(pre_fw),
        nn_module.register_module_forward_hook(post_fw, always_call=True),
        optim_mod.register_optimizer_step_pre_hook(pre_step),
        optim_mod.register_optimizer_step_post_hook(post_step),
    ]
    params = {id(p): p for m in shadow.modules.values() for p in m.parameters()}
    handles += [
        p.register_post_accumulate_grad_hook(lambda q: _mark_grad(tracker, q))
        for p in params.values()
        if p.requires_grad
    ]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
    finally:
        for h in handles:
            h.remove()


def _mark_grad(tracker, param):
    if param.grad is not None:
        tracker.mark(param.grad, "gradients")


def fake_run(
    code, tree: ast.AST, user_ns: dict, dtype=None, scale: dict | None = None, prepare=None
) -> FakeRun:
    """Run a compiled cell once on fakes (see the module docstring).

    Args:
        code: the cell's :class:`~cudamagic.core.cell.CellCode`.
        tree: the cell body's AST (for the names it reads).
        user_ns: the user's namespace (read only).
        dtype: ``torch.bfloat16``/``torch.float16`` to run the cell under autocast, or None.
        scale: ``{name: batch}``: give these tensors (by name) this leading dimension.
        prepare: called with the :class:`~.shadow.Shadow` before the run (a suggestion's change).

    Returns:
        :class:`FakeRun`; ``stopped`` says why a run ended early (the part before is counted).

    Raises:
        CannotFollow: a named object cannot be copied (a ``torch.compile``'d module).
        BaseException: an error of the user's code that is not about fake tensors, untouched.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    t0 = time.perf_counter()
    rng = torch.get_rng_state()
    mode = FakeTensorMode()
    sh = shadow_mod.build(user_ns, tree, mode)
    if scale:
        _scale_inputs(sh, scale, mode)
    if prepare is not None:
        prepare(sh)
    tracker = StorageTracker(sh.module_names, code.filename)
    for fake, category, module in sh.existing:
        tracker.record_existing(fake, category, module)
    for name in sh.inputs:
        tracker.record_existing(sh.namespace[name], "inputs")
    stopped = None
    ac = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
    try:
        with (
            _cuda_as_cpu(tracker),
            _autocast_cuda_as_cpu(),
            _compile_as_eager(tracker),
            _scaler_steps(),
            mode,
            tracker,
            _hooks(tracker, sh),
            ac,
        ):
            run_code(code, sh.namespace)
    except Exception as exc:  # noqa: BLE001 - sorted below: ours to explain, or the user's to see
        stopped = _unfollowable(exc, code.filename)
        if stopped is None:
            raise
    finally:
        torch.set_rng_state(rng)
    tracker.detach()
    return FakeRun(tracker, sh, stopped, time.perf_counter() - t0)


def _scale_inputs(sh, scale: dict, mode) -> None:
    """Replace the named input twins by fakes with the given leading dimension."""
    for name, batch in scale.items():
        old = sh.namespace[name]
        with mode:
            new = torch.empty((batch, *old.shape[1:]), dtype=old.dtype, device="cpu")
        new.requires_grad_(old.requires_grad)
        sh.namespace[name] = new
        sh.existing = [e for e in sh.existing if e[0] is not old]
        if name not in sh.inputs:
            sh.inputs.append(name)


REAL_TENSOR = (
    "reaches a tensor that was not copied (an object %%cudafit does not know, or a global read "
    "inside a class's method); name that object in the cell or pass it as an argument"
)


def _unfollowable(exc: BaseException, filename: str) -> CannotFollow | None:
    """A :class:`CannotFollow` for an exception of fake tracing (op, cell line), else None."""
    for kind in type(exc).__mro__:
        if kind.__name__ in UNFOLLOWABLE:
            reason = UNFOLLOWABLE[kind.__name__]
            break
    else:
        text = str(exc)
        if isinstance(exc, AssertionError) and "convert all Tensors to FakeTensors" in text:
            reason = REAL_TENSOR
        elif isinstance(exc, RuntimeError) and "no fake impl registered" in text:
            reason = UNFOLLOWABLE["UnsupportedOperatorException"]
            m = re.search(r"CustomOpDef\((.+?)\)", text)
            exc.func = m.group(1) if m else ""
        else:
            return None
    op = str(getattr(exc, "func", "") or "")
    line = 0
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    exc.__traceback__ = None  # frees the frames (and their fakes)
    return CannotFollow(reason, op=op, line=line)
