"""Helpers shared by the explainer's shell tests.

Run a cell that must fail in a real ``InteractiveShell`` and return the explanation the box showed.
"""

from __future__ import annotations

SETUP = "import torch, torch.nn as nn, torch.nn.functional as F"
CUDA_SUFFIX = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace "
    "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile "
    "with "
    "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

#: PyTorch's out-of-memory messages: the current one and the pre-2.1 one.
NEW_OOM = (
    "CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 14.57 GiB of "
    "which "
    "1.58 GiB is free. Process 2493055 has 12.02 GiB memory in use. Including non-PyTorch memory, "
    "this "
    "process has 966.00 MiB memory in use. Of the allocated memory 734.07 MiB is allocated by "
    "PyTorch, and "
    "33.93 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
OLD_OOM = (
    "CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB "
    "already "
    "allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch) If reserved memory is >> "
    "allocated "
    "memory try setting max_split_size_mb to avoid fragmentation."
)


def magics():
    from cudamagic import extension as m

    return m.current().magics["explain"]


def fail(ip, code):
    """Run ``code`` as a failing cell; return the explanation shown (or None) and the result."""
    ip.run_cell(SETUP, store_history=True)
    result = ip.run_cell(code, store_history=True)
    assert result.error_in_exec is not None, "the cell was expected to fail"
    return magics().last_explanation, result


def notes(expl) -> str:
    return "\n".join(expl.context.notes)
