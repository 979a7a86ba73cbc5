"""Context functions.

Each ``ctx_*(match, scene)`` looks at the live scene and returns a
:class:`~cudamagic.explain.result.Context` naming the user's own variables, shapes and modules.

- :mod:`.cuda`: the CUDA install and devices (CPU-only build, old driver, architecture, ordinal).
- :mod:`.memory`: out of GPU memory (the message's numbers, the biggest tensors), cuBLAS / cuDNN
    start.
- :mod:`.dataloader`: DataLoader pinning, worker processes, fork, shared memory.
- :mod:`.autograd`: backward twice, no grad, non-scalar backward, in-place changes.
- :mod:`.tensors`: the tensors an operation got (devices, shapes, dtypes, labels and indices).
"""
