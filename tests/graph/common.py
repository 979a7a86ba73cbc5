"""Helpers shared by the %%autograd_graph tests (fixtures are in conftest.py)."""

from __future__ import annotations

import base64
import functools
import html as html_lib
import os
import re

import pytest

from cudamagic.graph import layout

HAVE_DOT = layout.find_dot() is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz dot not installed")
LSTM_CELL = (
    "h = c = torch.zeros(4, 16)\nfor t in range(30):\n    h, c = cell(xs[t], (h, c))\nh.sum()"
)


def picture(html: str) -> str:
    """The SVG text of the graph picture in an output's HTML (an ``<img>`` data URI), or ``''``."""
    m = re.search(r'alt="autograd graph" src="data:image/svg\+xml;base64,([^"]+)"', html)
    return base64.b64decode(m.group(1)).decode() if m else ""


def visible_text(html: str) -> str:
    """The text of ``html``, whitespace collapsed (what a reader sees, pictures aside)."""
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())


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


@functools.cache
def _opaque_class():
    import torch

    class Opaque(torch.Tensor):
        """A wrapper subclass with no readable storage: every operation on it raises."""

        @staticmethod
        def __new__(cls, size):
            return torch.Tensor._make_wrapper_subclass(cls, size, dtype=torch.float32)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            raise NotImplementedError

    return Opaque


def opaque(size):
    """An ``Opaque`` float32 tensor subclass of ``size`` whose storage cannot be read.

    An ``Opaque`` float32 tensor subclass of ``size`` whose storage cannot be read (no dense guess
    possible).
    """
    return _opaque_class()(size)
