"""Matching an exception against the catalogue (:mod:`cudamagic.explain.match`): no match,
a cause chain, an interrupt raised while handling a known error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudamagic.explain.match import explain  # noqa: E402

from .failing import CUDA_SUFFIX, NEW_OOM, OLD_OOM, fail  # noqa: E402


def test_unmatched_exception_gives_none():
    assert explain(ZeroDivisionError("division by zero")) is None
    assert explain(RuntimeError("something unrelated")) is None


def test_chained_exception_is_explained():
    try:
        try:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        except RuntimeError as inner:
            raise ValueError("training step failed") from inner
    except ValueError as outer:
        assert explain(outer).entry.id == "grad-not-scalar"


def test_interrupt_while_handling_a_known_error_gets_no_box(ip):
    expl, result = fail(ip, "try:\n    torch.randn(2, 3) @ torch.randn(4, 5)\nexcept RuntimeError:\n"
                            "    raise KeyboardInterrupt")
    assert isinstance(result.error_in_exec, KeyboardInterrupt) and expl is None
    try:
        try:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        except RuntimeError:
            raise SystemExit(1)
    except SystemExit as exc:
        assert explain(exc) is None


@pytest.mark.parametrize("make", [
    # what torch >= 2.1 raises for a caching-allocator OOM
    lambda: torch.OutOfMemoryError(NEW_OOM),
    # torch < 2.1 raised a plain RuntimeError with the older message
    lambda: RuntimeError(OLD_OOM),
    # a cudaMalloc outside the caching allocator (cuBLAS workspace, NCCL, a custom op): CUDA's own error text
    lambda: RuntimeError("CUDA error: out of memory" + CUDA_SUFFIX),
    lambda: torch.AcceleratorError("CUDA error: out of memory" + CUDA_SUFFIX) if hasattr(torch, "AcceleratorError")
    else RuntimeError("CUDA error: out of memory" + CUDA_SUFFIX),
])
def test_every_oom_form_is_explained_as_oom(make):
    """Each OOM message PyTorch has raised maps to the cuda-oom entry (a regex edit that dropped one survived)."""
    expl = explain(make())
    assert expl is not None and expl.entry.id == "cuda-oom", expl


def test_oom_words_elsewhere_are_not_oom():
    assert explain(RuntimeError("host out of memory while reading file")) is None
