"""CUDA errors by family (:mod:`cudamagic.explain.cudaerrors`), and the cuBLAS field case.

Every message PyTorch can raise for a CUDA runtime error (every ``enum cudaError`` code of the CUDA
13.0 toolkit, text from ``cudaGetErrorString``) and for a status of cuBLAS, cuSPARSE, cuDNN, cuFFT
and NCCL is raised in a real ``InteractiveShell`` with PyTorch's exact wording and exception type;
the box shown must be its family's.
"""

from __future__ import annotations

import ctypes
import glob

import pytest

from cudamagic.core.cuda_runtime_errors import RUNTIME_ERRORS
from cudamagic.explain import cudaerrors

from .failing import fail, notes

_RAISE = {
    "AcceleratorError": "torch.AcceleratorError",
    "RuntimeError": "RuntimeError",
    "DistBackendError": "torch.distributed.DistBackendError",
}
MESSAGES = list(cudaerrors.messages())


def test_every_runtime_error_and_library_status_has_a_family_with_all_its_parts():
    assert len(RUNTIME_ERRORS) >= 130
    assert {name for _, name, _ in RUNTIME_ERRORS} == set(cudaerrors.RUNTIME_FAMILY)
    used = {f for f, *_ in MESSAGES}
    assert used == set(cudaerrors.FAMILIES)  # no empty family, no family outside the list
    for f in cudaerrors.FAMILIES.values():
        assert f.what and f.why and f.fix and f.localise, f.id
    libraries = {s.library for s in cudaerrors.LIBRARY_STATUSES}
    assert libraries == {"cuBLAS", "cuSPARSE", "cuDNN", "cuFFT", "NCCL"}
    assert all(not s.surfaced for s in cudaerrors.CURAND_STATUSES)
    for s in cudaerrors.CURAND_STATUSES:
        assert s.family in cudaerrors.FAMILIES


def test_localising_advice_names_launch_blocking_cpu_and_sanitizer():
    for fid in ("cuda-async", "cuda-illegal-access", "cuda-launch"):
        text = cudaerrors.FAMILIES[fid].localise
        assert (
            "CUDA_LAUNCH_BLOCKING=1" in text
            and "on the CPU" in text
            and "compute-sanitizer" in text
        ), fid


def _cudart():
    libs = sorted(glob.glob("/usr/local/cuda*/lib*/libcudart.so.*"))
    return libs[0] if libs else None


@pytest.mark.skipif(_cudart() is None, reason="no CUDA toolkit (libcudart) on this machine")
def test_runtime_texts_are_what_libcudart_returns():
    lib = ctypes.CDLL(_cudart())
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    version = ctypes.c_int()
    lib.cudaRuntimeGetVersion(ctypes.byref(version))
    if f"{version.value // 1000}.{version.value % 1000 // 10}" != cudaerrors.CUDA_VERSION:
        pytest.skip("another CUDA version than the data was generated from")
    for code, name, text in RUNTIME_ERRORS:
        assert lib.cudaGetErrorName(code).decode() == name
        assert lib.cudaGetErrorString(code).decode() == text


def test_every_message_gets_its_family_box(ip):
    """One shell for all ~200 messages (a shell each costs minutes); every mismatch is listed."""
    wrong = []
    for family, kind, message, source in MESSAGES:
        expl, _ = fail(ip, f"import torch.distributed\nraise {_RAISE[kind]}({message!r})")
        got = (expl.entry.family, bool(expl.entry.localise)) if expl is not None else (None, False)
        if got != (family, True):
            wrong.append((source, family, expl and expl.entry.id))
    assert wrong == []
    assert len(MESSAGES) >= 200


def test_old_style_runtime_message_and_cudnn9_subcode(ip):
    expl, _ = fail(
        ip,
        "raise RuntimeError('cuda runtime error (700) : an illegal memory access was encountered "
        "at "
        "/pytorch/aten/src/THC/generic/THCTensorCopy.cpp:70')",
    )
    assert expl.entry.id == "cuda-illegal-access"
    assert expl.context.facts["code"] == 700
    expl, _ = fail(ip, "raise RuntimeError('cuDNN error: CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH')")
    assert expl.entry.id == "cuda-invalid-call"
    assert expl.context.facts["status"] == "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH"


E07_MSG = (
    "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, opa, opb, m, n, "
    "k, &alpha, "
    "a, lda, b, ldb, &beta, c, ldc)`"
)


def test_cublas_execution_failed_from_the_first_linear(ip, monkeypatch):
    """The exact TORCH_CUDABLAS_CHECK text from nn.Linear (field case turn2/e07_cublas_exec.ipy)."""
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    ip.run_cell(
        "import torch, torch.nn as nn\nemb = nn.Embedding(100, 32); fc = nn.Linear(32, 10)\n"
        f"def gpu_linear(x):\n    raise RuntimeError({E07_MSG!r})\nfc.forward = gpu_linear"
    )
    expl, _ = fail(ip, "tokens = torch.randint(0, 100, (4, 7))\nlogits = fc(emb(tokens))")
    assert expl.entry.id == "cuda-async" and expl.entry.family == "cuda-async"
    facts = expl.context.facts
    assert facts["library"] == "cuBLAS" and facts["status"] == "CUBLAS_STATUS_EXECUTION_FAILED"
    assert (
        facts["call"] == "cublasSgemm"
        and facts["launch_blocking"] is False
        and facts["restart"] is True
    )
    lo, hi = facts["int_tensors"]["tokens"]
    assert (
        0 <= lo <= hi <= 99 and facts["embeddings"] == {"emb": 100} and facts["out_of_range"] == []
    )
    text = expl.to_text()
    assert "surfaced here" in text and "Localise:" in text
    assert "index out of range" in expl.entry.why and "Restart the kernel" in expl.entry.fix
    assert "CUDA_LAUNCH_BLOCKING=1" in expl.entry.localise and "on the CPU" in expl.entry.localise
    assert "matrix multiply" in notes(expl) and "`cublasSgemm`" in notes(expl)
    # %cudaexplain shows the same box again
    assert ip.run_line_magic("cudaexplain", "").entry.id == "cuda-async"


def test_async_family_names_the_index_that_does_not_fit(ip, monkeypatch):
    monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    ip.run_cell(
        "import torch, torch.nn as nn\nemb = nn.Embedding(100, 32)\ntokens = torch.tensor([[3, "
        "150]])"
    )
    expl, _ = fail(ip, f"raise RuntimeError({E07_MSG!r})")
    assert expl.context.facts["out_of_range"] == [("tokens", "emb")]
    assert "`tokens` (integers 3..150) does not fit `emb` (indices 0..99)" in notes(expl)
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    expl, _ = fail(ip, f"raise RuntimeError({E07_MSG!r})")
    assert expl.context.facts["launch_blocking"] is True
    assert "is the operation that failed" in notes(expl)


def _runtime(name):
    code, name, text = next(r for r in RUNTIME_ERRORS if r[1] == name)
    return f"raise torch.AcceleratorError({cudaerrors.runtime_message(name, text)!r})"


def test_one_box_per_family_with_its_own_words(ip):
    expl, _ = fail(ip, _runtime("cudaErrorIllegalAddress"))
    assert expl.entry.id == "cuda-illegal-access" and "compute-sanitizer" in expl.to_text()
    expl, _ = fail(ip, _runtime("cudaErrorLaunchTimeout"))
    assert expl.entry.id == "cuda-launch" and "watchdog" in expl.entry.why
    expl, _ = fail(ip, _runtime("cudaErrorECCUncorrectable"))
    assert expl.entry.id == "cuda-hardware" and "Xid" in expl.entry.localise
    expl, _ = fail(ip, _runtime("cudaErrorLaunchOutOfResources"))
    assert expl.entry.id == "cuda-resources" and "registers" in expl.entry.why
    expl, _ = fail(ip, _runtime("cudaErrorSystemDriverMismatch"))
    assert expl.entry.id == "cuda-driver" and expl.context.facts["code"] == 803
    expl, _ = fail(ip, _runtime("cudaErrorInvalidPtx"))
    assert expl.entry.id == "cuda-arch" and "TORCH_CUDA_ARCH_LIST" in expl.entry.fix
    expl, _ = fail(ip, _runtime("cudaErrorPeerAccessUnsupported"))
    assert expl.entry.id == "cuda-peer" and "NCCL_P2P_DISABLE=1" in expl.entry.fix
    expl, _ = fail(ip, _runtime("cudaErrorStreamCaptureUnsupported"))
    assert expl.entry.id == "cuda-invalid-call" and "capture" in expl.entry.fix
    expl, _ = fail(ip, _runtime("cudaErrorMpsConnectionFailed"))
    assert expl.entry.id == "cuda-system" and "MPS" in expl.entry.fix
    expl, _ = fail(ip, _runtime("cudaErrorPriorLaunchFailure"))
    assert (
        expl.entry.id == "cuda-async"
        and expl.context.facts["name"] == "cudaErrorPriorLaunchFailure"
    )
    expl, _ = fail(ip, "raise RuntimeError('cuFFT error: CUFFT_ALLOC_FAILED')")
    assert expl.entry.id == "cuda-oom" and expl.entry.family == "cuda-oom"
