"""Matching an exception against the catalogue (:mod:`cudamagic.explain.match`): no match,
a cause chain, an interrupt raised while handling a known error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudamagic.explain.match import explain  # noqa: E402

from .failing import fail  # noqa: E402


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
