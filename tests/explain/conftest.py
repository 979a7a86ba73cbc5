"""Fixtures of the explainer tests: the CUDA call recorders of :mod:`tests.cuda_calls`."""

from .. import cuda_calls

recorder = cuda_calls.recorder
cuda_initialised = cuda_calls.cuda_initialised
