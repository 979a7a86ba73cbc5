"""Flags and CudaMagics.graph_* settings checked before the cell runs."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from .common import magic


@pytest.mark.parametrize(
    "flags, match",
    [
        ("--timeout nan", "--timeout must be"),
        ("--timeout inf", "--timeout must be"),
        ("--timeout 1e300", "--timeout must be"),
        ("--timeout 0", "--timeout must be"),
        ("--timeout -1", "--timeout must be"),
        ("--max-nodes 0", "--max-nodes must be"),
        ("--max-nodes -4", "--max-nodes must be"),
        ("--save {tmp}/no/such/folder/g.svg", "does not exist"),
        ("--save {tmp}/g.txt", "must end in"),
        ("--save {tmp}/g", "must end in"),
        ("--save {tmp}/adir.svg", "is a folder"),
    ],
)
def test_bad_flags_are_usage_errors_before_the_cell_runs(w, tmp_path, flags, match):
    (tmp_path / "adir.svg").mkdir()
    w.user_ns.pop("ran", None)
    with pytest.raises(UsageError, match=match):
        magic(w, flags.format(tmp=tmp_path), "ran = True\n(w * 2).sum()")
    assert "ran" not in w.user_ns
    assert not (tmp_path / "g.txt").exists() and not (tmp_path / "g").exists()


def test_bad_config_values_are_usage_errors(w):
    magics = w.find_cell_magic("autograd_graph").__self__.settings
    old = magics.graph_dot_timeout_s, magics.graph_node_budget
    try:
        magics.graph_dot_timeout_s = float("nan")
        with pytest.raises(UsageError, match="CudaMagics.graph_dot_timeout_s must be"):
            magic(w, "", "(w * 2).sum()")
        magics.graph_dot_timeout_s, magics.graph_node_budget = 20.0, 0
        with pytest.raises(UsageError, match="CudaMagics.graph_node_budget must be"):
            magic(w, "", "(w * 2).sum()")
    finally:
        magics.graph_dot_timeout_s, magics.graph_node_budget = old
