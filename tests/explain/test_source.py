"""Tier 1: reading the user's source (:mod:`cudamagic.explain.source`)."""

from __future__ import annotations

from cudamagic.explain.source import (
    _line_names,
    backward_calls,
    call_arguments,
    carried_names,
    inplace_uses,
)


def test_source_analysis_helpers():
    src = "for x in xs:\n    out, h = rnn(x, h)\n    total += out.sum()\n    h.sum().backward()\n"
    assert carried_names(src) == ["h", "total"] or set(carried_names(src)) == {"h", "total"}
    assert ("h.sum()", "h") in backward_calls(src)
    uses = inplace_uses("w.add_(1)\nx += 2\ny[0] = 3\nnn.init.normal_(v)\nz = z + 1\n")
    assert {u[0] for u in uses} == {"w", "x", "y", "v"}
    assert backward_calls("%time loss.backward()\n") == []  # a magic line is not Python; no crash


def test_failing_line_helpers():
    assert _line_names("for xb, yb in loader:") == ["xb", "yb", "loader"]
    assert _line_names("loss = crit(model(x),") == ["loss", "crit", "model", "x"]
    assert call_arguments("loss = crit(model(x), y)")[0] == ("crit", ["model(x)", "y"], {})
