"""Matching an exception against the catalogue (:mod:`cudamagic.explain.match`).

No match, a cause chain, an interrupt raised while handling a known error.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cudamagic.explain import catalogue, match
from cudamagic.explain.match import explain
from cudamagic.explain.result import Context

from .failing import CUDA_SUFFIX, NEW_OOM, OLD_OOM, fail


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
    expl, result = fail(
        ip,
        "try:\n    torch.randn(2, 3) @ torch.randn(4, 5)\nexcept RuntimeError:\n"
        "    raise KeyboardInterrupt",
    )
    assert isinstance(result.error_in_exec, KeyboardInterrupt) and expl is None
    try:
        try:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        except RuntimeError as err:
            raise SystemExit(1) from err
    except SystemExit as exc:
        assert explain(exc) is None


@pytest.mark.parametrize(
    "make",
    [
        # what torch >= 2.1 raises for a caching-allocator OOM
        lambda: torch.OutOfMemoryError(NEW_OOM),
        # torch < 2.1 raised a plain RuntimeError with the older message
        lambda: RuntimeError(OLD_OOM),
        # a cudaMalloc outside the caching allocator (cuBLAS workspace, NCCL, a custom op): CUDA's
        # own error text
        lambda: RuntimeError("CUDA error: out of memory" + CUDA_SUFFIX),
        lambda: (
            torch.AcceleratorError("CUDA error: out of memory" + CUDA_SUFFIX)
            if hasattr(torch, "AcceleratorError")
            else RuntimeError("CUDA error: out of memory" + CUDA_SUFFIX)
        ),
    ],
)
def test_every_oom_form_is_explained_as_oom(make):
    """Each OOM message PyTorch has raised maps to the cuda-oom entry."""
    expl = explain(make())
    assert expl is not None and expl.entry.id == "cuda-oom", expl


def test_oom_words_elsewhere_are_not_oom():
    assert explain(RuntimeError("host out of memory while reading file")) is None


# ---- match.py in isolation (kills the mutmut survivors of scripts/mutation.py match) -------------


def linked(n, attr="__cause__"):
    excs = [RuntimeError(f"link {i}") for i in range(n)]
    for a, b in zip(excs, excs[1:], strict=False):
        setattr(a, attr, b)
    return excs


def test_chain_follows_cause_then_context_at_most_five_links():
    excs = linked(7)
    assert list(match.exception_chain(excs[0])) == excs[:5]
    ctx = linked(3, "__context__")
    assert list(match.exception_chain(ctx[0])) == ctx
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, a.__context__ = b, RuntimeError("ignored: cause wins")
    assert list(match.exception_chain(a)) == [a, b]


def test_chain_stops_on_a_cycle():
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert list(match.exception_chain(a)) == [a, b]


def test_chain_depth_boundary_decides_what_is_explained():
    excs = linked(6)
    excs[4].args = ("grad can be implicitly created only for scalar outputs",)
    assert explain(excs[0]).entry.id == "grad-not-scalar"  # the 5th link is still looked at
    excs = linked(6)
    excs[5].args = ("grad can be implicitly created only for scalar outputs",)
    assert explain(excs[0]) is None  # the 6th is not


@pytest.fixture
def fake_entry(monkeypatch):
    """One entry matching RuntimeError('fake: ...'), with a context function the test sets."""
    calls = []
    base = match.entry_by_id("grad-not-scalar")
    entry = dataclasses.replace(
        base, id="fake", types=("RuntimeError",), patterns=(r"fake: (?P<what>\w+)",)
    )

    def use(context):
        e = dataclasses.replace(entry, context=context)
        monkeypatch.setattr(catalogue, "CATALOGUE", [e])
        return e

    return use, calls


def test_explain_passes_match_and_scene_to_context(fake_entry):
    use, calls = fake_entry
    scene = object()
    use(lambda found, sc: calls.append((found.group("what"), sc)) or Context(notes=("hello",)))
    long_line = "fake: thing " + "x" * 400
    expl = explain(RuntimeError(f"  {long_line}\nsecond line"), scene)
    assert calls == [("thing", scene)]
    assert expl.exc_type == "RuntimeError" and expl.message == long_line[:300]
    assert expl.context.notes == ("hello",) and expl.context_error == ""


def test_explain_context_falsy_none_scene_and_failures(fake_entry):
    use, calls = fake_entry
    use(lambda found, sc: None)
    assert explain(RuntimeError("fake: a"), object()).context == Context()
    use(lambda found, sc: calls.append("called"))
    expl = explain(RuntimeError("fake: a"), None)  # no scene: the context function is not called
    assert calls == [] and expl.context == Context() and expl.context_error == ""
    use(None)
    assert explain(RuntimeError("fake: a"), object()).context == Context()

    def broken(found, sc):
        raise ValueError("boom")

    use(broken)
    expl = explain(RuntimeError("fake: a"), object())
    assert expl.context == Context() and expl.context_error == "ValueError: boom"


def test_explain_message_of_an_empty_error_is_empty(monkeypatch):
    base = match.entry_by_id("grad-not-scalar")
    empty = dataclasses.replace(
        base, id="empty", types=("RuntimeError",), patterns=(r"\A\Z",), context=None
    )
    monkeypatch.setattr(catalogue, "CATALOGUE", [empty])
    expl = explain(RuntimeError(""))
    assert expl.entry.id == "empty" and expl.message == "" and expl.context_error == ""


def test_entry_by_id():
    assert match.entry_by_id("cuda-oom").id == "cuda-oom"
    assert match.entry_by_id("no-such-entry") is None


def test_applies_sees_the_match_and_the_scene_and_false_passes_the_error_on(monkeypatch):
    """An entry's ``applies(match, scene)`` decides between entries sharing a message.

    As the DataLoader worker box under spawn and under fork: it gets the real match and the scene
    explain() was given; False hands the error to the next matching entry; no ``applies`` always
    applies; a failing check keeps the entry.
    """
    base = match.entry_by_id("grad-not-scalar")
    calls = []

    def only_under(method):
        def applies(found, scene):
            calls.append((found.group("what"), scene))
            return scene == method

        return applies

    spawn = dataclasses.replace(
        base,
        id="under-spawn",
        types=("RuntimeError",),
        patterns=(r"fake: (?P<what>\w+)",),
        applies=only_under("spawn"),
        context=None,
    )
    other = dataclasses.replace(spawn, id="any-method", applies=None)
    monkeypatch.setattr(catalogue, "CATALOGUE", [spawn, other])
    assert explain(RuntimeError("fake: worker"), "spawn").entry.id == "under-spawn"
    assert calls == [("worker", "spawn")]
    assert explain(RuntimeError("fake: worker"), "fork").entry.id == "any-method"
    assert explain(RuntimeError("fake: worker")).entry.id == "any-method"  # no scene: not "spawn"
    assert calls[1:] == [("worker", "fork"), ("worker", None)]
    assert match.find_entry(RuntimeError("fake: worker"), "spawn")[0].id == "under-spawn"

    def broken(found, scene):
        raise AttributeError("scene without start method")

    monkeypatch.setattr(catalogue, "CATALOGUE", [dataclasses.replace(spawn, applies=broken), other])
    assert explain(RuntimeError("fake: worker"), "fork").entry.id == "under-spawn"
    monkeypatch.setattr(
        catalogue, "CATALOGUE", [dataclasses.replace(spawn, applies=lambda f, s: 0), other]
    )
    assert (
        explain(RuntimeError("fake: worker"), "spawn").entry.id == "any-method"
    )  # a falsy answer is False
