"""Fixtures of the %%autograd_graph tests.

Shells (the `ip` fixture of tests/conftest.py) with a model loaded.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def mlp(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, "
        "2))\n"
        "x = torch.randn(3, 4)"
    )
    return ip


@pytest.fixture
def w(ip):
    ip.run_cell("import torch\nw = torch.randn(3, requires_grad=True)")
    return ip


@pytest.fixture
def lstm(ip):
    ip.run_cell(
        "import torch\ntorch.manual_seed(0)\ncell = torch.nn.LSTMCell(8, 16)\nxs = torch.randn(30, "
        "4, 8)"
    )
    return ip
