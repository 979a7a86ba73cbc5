"""Tier 2: running the cell.

Tier 2: running the cell (names, nested outputs, -o, nothing to draw, the user's own errors, cell
events) in a real InteractiveShell.
"""

from __future__ import annotations

import re
import traceback

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from cudamagic.graph import model as M

from .common import magic


def test_outputs_nested_structures(ip):
    ip.run_cell(
        "import torch, dataclasses, collections\nx = torch.randn(3, requires_grad=True)\n"
        "@dataclasses.dataclass\nclass Out:\n    logits: object\n    loss: object\n    tag: str\n"
        "Pair = collections.namedtuple('Pair', 'a b')"
    )
    r = magic(ip, "--format dot", "[x * 2, (x ** 2).sum()]")
    assert r.graph.labels(M.OUTPUT) == ["[0]", "[1]"]
    r = magic(ip, "--format dot", "{'logits': x * 2, 'loss': (x ** 2).sum()}")
    assert r.graph.labels(M.OUTPUT) == ["['logits']", "['loss']"]
    r = magic(ip, "--format dot", "Out(x * 2, (x ** 2).sum(), 'hello')")
    assert r.graph.labels(M.OUTPUT) == [".logits", ".loss"]
    assert any("`.tag` is a str" in n for n in r.notes)
    r = magic(ip, "--format dot", "(Pair(x.exp(), [x.sin()]), 3)")
    assert r.graph.labels(M.OUTPUT) == ["[0].a", "[0].b[0]"]


def test_output_option_names_variables(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    r = magic(ip, "-o a,b --format dot", "a = w * 2\nb = a.sum()\nprint('done')")
    assert r.graph.labels(M.OUTPUT) == ["a", "b"]
    assert r.graph.labels(M.LEAF) == ["w"]
    with pytest.raises(UsageError, match="named 'nope'"):
        magic(ip, "-o nope", "a = w * 2")


@pytest.mark.parametrize(
    "cell, match",
    [
        ("model", "is an nn.Module"),
        ("with torch.no_grad():\n    y = model(x)\ny", "no_grad"),
        ("with torch.inference_mode():\n    y = model(x)\ny", "inference_mode"),
        ("model(x).detach()", "detach"),
        ("model(x).sum().item()", "item()"),
        ("y = model(x)", "no value to draw"),
        ("torch.randn(3) * 2", "no input requires grad"),
        ("torch.randn(3, requires_grad=True)", "leaf tensor"),
    ],
)
def test_nothing_to_draw_is_a_usage_error_naming_the_cause(mlp, cell, match):
    if "no input" in match:
        mlp.run_cell("del model")
    with pytest.raises(UsageError, match=match):
        magic(mlp, "", cell)


def test_mixed_outputs_skip_no_grad_tensor_with_note(mlp):
    r = magic(
        mlp,
        "--format dot",
        "with torch.no_grad():\n    frozen = model(x)\n(model(x).sum(), frozen)",
    )
    assert r.graph.labels(M.OUTPUT) == ["[0]"]
    assert any("`[1]` has no grad_fn" in n for n in r.notes)


def test_skipped_note_uses_the_right_article(w):
    r = magic(w, "--format dot", "{'loss': (w * 2).sum(), 'n': 3, 'name': 'a'}")
    assert any("`['n']` is an int" in n for n in r.notes)
    assert any("`['name']` is a str" in n for n in r.notes)


def test_user_error_propagates_with_real_source_line(ip):
    cell = "a = 1\nb = undefined_name + 1\nb"
    with pytest.raises(NameError, match="name 'undefined_name' is not defined") as info:
        magic(ip, "", cell)
    text = "".join(traceback.format_exception(info.value))
    assert "b = undefined_name + 1" in text
    assert "line 3" in text  # line 1 is the %%autograd_graph line
    assert ip.user_ns["a"] == 1
    with capture_output() as cap:
        res = ip.run_cell("%%autograd_graph\nq = 2\nraise ValueError('boom from the cell')\n")
    assert isinstance(res.error_in_exec, ValueError)
    assert "raise ValueError('boom from the cell')" in cap.stdout
    assert "graph.py" not in cap.stdout and "magics.py" not in cap.stdout  # our frames are hidden


def test_syntax_error_points_at_the_cell_line_without_our_parser_frames(ip):
    with capture_output() as cap:
        res = ip.run_cell("%%autograd_graph\nx = 1\ny = (2 +\n", store_history=True)
    out = re.sub(r"\x1b\[[0-9;]*m", "", cap.stdout)
    assert isinstance(res.error_in_exec, SyntaxError)
    assert res.error_in_exec.lineno == 3  # line 1 is the %%autograd_graph line
    assert "graph.py" not in out and "compilerop.py" not in out
    assert f"Cell In[{res.execution_count}], line 3" in out
    assert "x" not in ip.user_ns or ip.user_ns["x"] != 1


def test_cell_events_fire_once(ip):
    seen = []

    def cb(*args):
        seen.append(1)

    ip.events.register("pre_run_cell", cb)
    try:
        ip.run_cell(
            "%%autograd_graph --format dot\nimport torch\nv = torch.randn(2, requires_grad=True)\n"
            "(v * 2).sum()"
        )
    finally:
        ip.events.unregister("pre_run_cell", cb)
    assert seen == [1]
    assert "v" in ip.user_ns
