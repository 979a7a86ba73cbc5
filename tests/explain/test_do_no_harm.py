"""The explainer does no harm.

It never forces a synchronisation, never creates a CUDA context and never resets the user's counters
unless asked.

The calls that would do harm are replaced by recorders on the real ``torch.cuda`` module (``init``,
``_lazy_init``, ``synchronize``, ``current_device``, ``set_device``, ``mem_get_info``,
``empty_cache`` and the ``reset_*`` counters); every failing cell of the explainer's families and
every form of ``%%cudamem`` then runs in a real InteractiveShell, once with CUDA not initialised
(this machine) and once with CUDA "initialised" (the allocator-statistics reads answered by
stand-ins, as on a GPU machine where the user has used CUDA).
"""

from __future__ import annotations

import torch

from cudamagic.core.cuda_runtime_errors import RUNTIME_ERRORS
from cudamagic.explain import cudaerrors

from .autograd_cases import CASES
from .failing import CUDA_SUFFIX, NEW_OOM, fail
from .test_autograd_engine import GAN_STEP_CELL, INVALID_GRADIENT_CELL


def _runtime(name):
    code, name, text = next(r for r in RUNTIME_ERRORS if r[1] == name)
    return f"raise torch.AcceleratorError({cudaerrors.runtime_message(name, text)!r})"


#: One failing cell per context function of the CUDA side, plus the field cases.
NO_KERNEL_IMAGE = (
    "CUDA error: no kernel image is available for execution on the device" + CUDA_SUFFIX
)

CUDA_CELLS = [
    (
        fid,
        next(
            f"import torch.distributed\nraise {k}({m!r})"
            for fam, kind, m, _ in cudaerrors.messages()
            for k in [
                {
                    "AcceleratorError": "torch.AcceleratorError",
                    "RuntimeError": "RuntimeError",
                    "DistBackendError": "torch.distributed.DistBackendError",
                }[kind]
            ]
            if fam == fid
        ),
    )
    for fid in cudaerrors.FAMILIES
] + [
    ("cuda-oom", f"raise torch.OutOfMemoryError({NEW_OOM!r})"),
    (
        "cublas-cudnn-init",
        "raise RuntimeError('CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
        "`cublasCreate(handle)`')",
    ),
    (
        "no-kernel-image",
        f"raise RuntimeError({NO_KERNEL_IMAGE!r})",
    ),
    ("invalid-device-ordinal", _runtime("cudaErrorInvalidDevice")),
    ("device-side-assert", _runtime("cudaErrorAssert")),
    (
        "cuda-async",
        "emb = torch.nn.Embedding(10, 2)\ntokens = torch.tensor([1, 12])\n"
        "raise RuntimeError('CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling "
        "`cublasSgemm(h)`')",
    ),
]
AUTOGRAD_CELLS = [(i, c) for i, c in CASES] + [
    ("invalid-gradient", INVALID_GRADIENT_CELL),
    ("modified-inplace", GAN_STEP_CELL),
]


def _explain_all(ip, cells):
    ip.run_cell("import torch, torch.nn as nn")
    shown = []
    for entry_id, code in cells:
        expl, _ = fail(ip, code)
        shown.append((entry_id, expl.entry.id if expl else None))
        ip.run_line_magic("cudaexplain", "")  # the magic too
    return shown


def test_explainer_makes_no_harmful_cuda_call_without_cuda(ip, recorder):
    assert not torch.cuda.is_initialized()
    shown = _explain_all(ip, CUDA_CELLS + AUTOGRAD_CELLS)
    assert all(got is not None for _, got in shown)
    assert recorder == []
    assert not torch.cuda.is_initialized()


def test_explainer_makes_no_harmful_cuda_call_with_cuda_initialised(ip, recorder, cuda_initialised):
    shown = _explain_all(ip, CUDA_CELLS + AUTOGRAD_CELLS)
    assert all(got is not None for _, got in shown)
    assert recorder == []
    # it did read the allocator counters and device properties, each by explicit ordinal
    names = {name for name, _ in cuda_initialised}
    assert {"memory_allocated", "get_device_capability"} <= names
    assert all(
        args == (0,)
        for name, args in cuda_initialised
        if name in ("memory_allocated", "get_device_capability")
    )


def test_explainer_leaves_user_objects_unchanged(ip):
    """Context is read from the live objects without changing them: versions, values, grads, RNG."""
    ip.run_cell("import torch, torch.nn as nn\ntorch.manual_seed(0)")
    fail(ip, GAN_STEP_CELL)
    ns = ip.user_ns
    before = {
        n: (p._version, p.detach().clone(), None if p.grad is None else p.grad.clone())
        for n, p in ns["netD"].named_parameters()
    }
    rng = torch.get_rng_state()
    ip.run_line_magic("cudaexplain", "")
    for n, p in ns["netD"].named_parameters():
        version, value, grad = before[n]
        assert p._version == version and torch.equal(p, value)
        assert (grad is None and p.grad is None) or torch.equal(grad, p.grad)
    assert torch.equal(rng, torch.get_rng_state())
