"""Flags and CudaMagics.graph_* settings checked before the cell runs."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from traitlets import TraitError

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


def test_bad_config_values_are_refused_when_set(w):
    settings = w.find_cell_magic("autograd_graph").__self__.settings
    for name, bad, match in (
        ("graph_dot_timeout_s", float("nan"), "CudaMagics.graph_dot_timeout_s must be"),
        ("graph_dot_timeout_s", 0.0, "graph_dot_timeout_s = 60"),
        ("graph_node_budget", 0, "should not be less than 1"),
        ("graph_format", "jpg", r"any of \['svg', 'png', 'pdf', 'dot'\]"),
    ):
        before = getattr(settings, name)
        with pytest.raises(TraitError, match=match):
            setattr(settings, name, bad)
        assert getattr(settings, name) == before
    magic(w, "", "(w * 2).sum()")  # the settings kept are usable
