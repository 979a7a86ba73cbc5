"""Helpers shared by the %%autograd_graph tests (fixtures are in conftest.py)."""

from __future__ import annotations

import os

import pytest

from cudamagic.graph import dot

HAVE_DOT = dot.find_dot() is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz dot not installed")
LSTM_CELL = "h = c = torch.zeros(4, 16)\nfor t in range(30):\n    h, c = cell(xs[t], (h, c))\nh.sum()"


def magic(ip, line, cell):
    return ip.run_cell_magic("autograd_graph", line, cell)


def fake_dot(tmp_path, monkeypatch, body: str):
    """Put a `dot` shell script first on PATH."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return folder
