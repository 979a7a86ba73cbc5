"""Which printed lines count as a CUDA error report.

Which lines a %%cuda program prints count as a CUDA error report (and fail the cell even with exit
status 0): report shapes only, not text that mentions an error's name or string.
"""

from __future__ import annotations

import pytest

from cudamagic.cuda.run import printed_cuda_error

REPORTS = [
    "CUDA error: no CUDA-capable device is detected",
    "RuntimeError: CUDA error: device-side assert triggered",
    "CUDA Runtime Error (2): out of memory",
    "CUDA Runtime Error: out of memory",
    'CUDA error at vectorAdd.cu:42 code=35(cudaErrorInsufficientDriver) "cudaMalloc(&d, '
    'n)"',  # NVIDIA's samples
    "Cuda error in file 'x.cu' in line 12 : out of memory.",
    "vec.cu(12): cudaErrorMemoryAllocation",
    "main.cu:42: cudaErrorInvalidValue: invalid argument",
    "cudaMalloc(&d, n): cudaErrorMemoryAllocation",
    "cudaMalloc: cudaErrorMemoryAllocation",
    "error cudaErrorNoDevice at line 12",
    "launch returned cudaErrorInvalidConfiguration",
    "cudaErrorNoDevice (100): no CUDA-capable device is detected",
    "cudaMalloc failed: CUDA driver version is insufficient for CUDA runtime version",
    "kernel launch failed: an illegal memory access was encountered",
    "GPUassert: out of memory vec.cu 12",  # the common gpuErrchk macro
    # the real runtime's text on a machine without a driver, printed as a value (see test_run.py)
    "devices: 0 (CUDA driver version is insufficient for CUDA runtime version)",
]

NOT_REPORTS = [
    "note: cudaErrorMemoryAllocation is what you get when OOM",
    "Errors like cudaErrorInvalidValue come from bad arguments",
    "cudaGetLastError() returns cudaErrorInvalidValue for a bad launch",
    'cudaGetErrorString(cudaErrorMemoryAllocation) is "out of memory"',
    "Common CUDA errors: out of memory, invalid argument, no CUDA-capable device is detected",
    "cudaSuccess",
    "status: cudaSuccess",
    "CUDA status: no error",  # cudaGetErrorString(cudaSuccess)
    "CUDA error checking enabled",
    "tip: check every call; a CUDA error is sticky",
    "out of memory handling: none",
    "skipped: no GPU",
]


@pytest.mark.parametrize("line", REPORTS)
def test_error_reports_are_found(line):
    assert printed_cuda_error(line)


@pytest.mark.parametrize("line", NOT_REPORTS)
def test_text_that_mentions_cuda_errors_is_not_a_report(line):
    assert not printed_cuda_error(line)


@pytest.mark.parametrize(
    "rc,printed,message",
    [
        (
            1,
            "vec.cu(12): CUDA error: out of memory",
            "the program exited with status 1. vec.cu(12): CUDA error: out of memory",
        ),
        (
            1,
            "cudaMalloc failed: out of memory",
            "the program exited with status 1. CUDA error: cudaMalloc failed: out of memory",
        ),
        (
            -11,
            "CUDA Runtime Error (2): out of memory",
            "the program was killed by SIGSEGV. CUDA Runtime Error (2): out of memory",
        ),
    ],
)
def test_failure_message_says_cuda_error_once(rc, printed, message):
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.cuda.run import _check

    with pytest.raises(CudaProgramError, match=r"CUDA") as info:
        _check(rc, False, None, [], [printed], [])
    assert str(info.value) == message
