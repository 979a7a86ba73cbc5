"""``%%autograd_graph --engine torchviz``.

Torchviz's own make_dot, its limits handled (issue 12).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from IPython.core.error import UsageError

from .common import fake_dot, magic, needs_dot

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@needs_dot
def test_torchviz_draws_make_dot_with_our_names(mlp):
    r = magic(mlp, "--engine torchviz", "model(x).sum()")
    assert r.image is not None and b"<svg" in r.image
    assert "AddmmBackward0" in r.dot and 'label="model.0.weight' in r.dot
    assert "fillcolor=orange" not in r.dot  # saved tensors only with --show-saved, as in torchviz
    assert "Drawn by torchviz's make_dot." in r.notes
    assert "torchviz make_dot view" in r.caption()


def test_show_saved_and_show_attrs_are_mapped(mlp):
    r = magic(mlp, "--engine torchviz --show-saved --show-attrs --format dot", "model(x).sum()")
    assert 'label="mat1' in r.dot and "fillcolor=orange" in r.dot
    assert "alpha" in r.dot  # AddmmBackward0's non-tensor attributes


def test_deep_graph_is_a_usage_error_not_a_recursion_error(w):
    with pytest.raises(
        UsageError, match=r"recurses once per autograd node and this graph has \d+ of them"
    ):
        magic(
            w,
            "--engine torchviz --format dot",
            "y = w\nfor _ in range(3000):\n    y = y * 1.0001\ny.sum()",
        )


def test_options_of_the_default_engine_refused_before_the_cell_runs(w):
    w.run_cell("ran = []")
    with pytest.raises(UsageError, match=r"--group works only with the default engine"):
        magic(w, "--engine torchviz --group", "ran.append(1)\n(w * 2).sum()")
    assert w.user_ns["ran"] == []


def test_checkpoint_falls_back_to_our_engine_without_unpacking(ip):
    ip.run_cell(
        "import torch\nfrom torch.utils.checkpoint import checkpoint\nn = [0]\n"
        "lin = torch.nn.Linear(4, 4)\nx = torch.randn(2, 4)\n"
        "def block(a):\n    n[0] += 1\n    return torch.tanh(lin(a))"
    )
    r = magic(
        ip,
        "--engine torchviz --show-saved --format dot",
        "checkpoint(block, x, use_reentrant=False).sum()",
    )
    assert ip.user_ns["n"] == [1]
    assert any("drawn with the default engine instead" in note for note in r.notes)


def test_dot_time_limit_applies(mlp, tmp_path, monkeypatch):
    fake_dot(tmp_path, monkeypatch, "sleep 30\n")
    r = magic(mlp, "--engine torchviz --timeout 0.5", "model(x).sum()")
    assert r.problem == "dot timeout" and r.image is None
    assert "AddmmBackward0" in r.dot


@needs_dot
def test_odd_names_are_escaped(ip):
    ip.run_cell(
        "import torch\nlayers = {'a\"b\\\\\\n<i>': torch.nn.Linear(2, 2)}\nx = torch.randn(1, 2)"
    )
    r = magic(ip, "--engine torchviz", "layers['a\"b\\\\\\n<i>'](x).sum()")
    assert r.image is not None and r.problem == ""


def test_works_without_distutils_and_leaves_sys_modules_alone():
    """Torchviz 0.0.3 imports distutils (gone in Python 3.12): imported through a temporary shim."""
    code = (
        "import sys\nsys.modules['distutils'] = None\nsys.modules['distutils.version'] = None\n"
        "from cudamagic.graph import torchviz_engine\nmake_dot = "
        "torchviz_engine.import_make_dot()\n"
        "print(make_dot.__module__, sys.modules['distutils'], sys.modules['distutils.version'])\n"
        "import torch\nx = torch.randn(2, requires_grad=True)\n"
        "print('MulBackward0' in make_dot((x * 2).sum()).source)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["torchviz.dot", "None", "None", "True"]
