"""JupyterLab's sanitiser for untrusted HTML outputs, modelled with nh3 (ammonia).

An executed notebook that is not trusted (nbclient, papermill, CI, a colleague's file) shows its
``text/html`` outputs through JupyterLab's ``Sanitizer`` (sanitize-html). ``tests/data/
jupyterlab_sanitizer.json`` holds its allow-lists as JupyterLab 4.6.6 ships them: tags, attributes,
and per CSS property the pattern a value must match whole (so ``var(--jp-...)`` values and every
``<style>`` and ``<svg>`` are dropped; an ``<svg>``'s text stays in the flow, as in the browser).
Regenerate the JSON after a JupyterLab upgrade with ``scripts/jupyterlab_sanitizer.py``.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "jupyterlab_sanitizer.json")


def _load():
    with open(DATA, encoding="utf-8") as f:
        spec = json.load(f)
    styles = {prop: re.compile(rf"^(?:{pat})$", re.I) for prop, pat in spec["styles"].items()}
    return spec, styles


_SPEC, _STYLES = _load()


def _style(value: str) -> str:
    """The declarations of a ``style`` value that JupyterLab keeps."""
    kept = []
    for decl in value.split(";"):
        prop, sep, val = decl.partition(":")
        prop, val = prop.strip().lower(), val.strip()
        if sep and prop in _STYLES and _STYLES[prop].match(val):
            kept.append(f"{prop}:{val}")
    return ";".join(kept)


def _attribute_filter(tag, attr, value):
    return _style(value) or None if attr == "style" else value


def sanitise(html_text: str) -> str:
    """``html_text`` as JupyterLab shows it in an untrusted notebook."""
    import nh3

    attributes = {tag: set(names) for tag, names in _SPEC["attributes"].items()}

    # sanitize-html drops a disallowed tag but keeps its text (not a <style>'s); ammonia drops an
    # SVG with its text
    def svg_text(m):
        inner = re.sub(r"<(style|script)\b.*?</\1>", " ", m.group(0), flags=re.S)
        return re.sub(r"<[^>]+>", " ", inner)

    html_text = re.sub(r"<svg\b.*?</svg>", svg_text, html_text, flags=re.S)
    return nh3.clean(
        html_text,
        tags=set(_SPEC["tags"]),
        clean_content_tags={"script", "style", "noscript"},
        attributes=attributes,
        attribute_filter=_attribute_filter,
        url_schemes={"http", "https", "ftp", "mailto", "tel", "attachment", "data"},
        link_rel=None,
        strip_comments=True,
    )


class _Text(HTMLParser):
    """Text a reader sees: no ``<style>``/``<script>`` content, optionally no ``<svg>`` content."""

    def __init__(self, skip_svg: bool):
        super().__init__(convert_charrefs=True)
        self.skip = {"style", "script"} | ({"svg"} if skip_svg else set())
        self.depth, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.depth += tag in self.skip

    def handle_endtag(self, tag):
        self.depth -= tag in self.skip and self.depth > 0

    def handle_data(self, data):
        if not self.depth:
            self.parts.append(data)


def visible_text(html_text: str, skip_svg: bool = False) -> str:
    """The text of ``html_text``, whitespace collapsed; ``skip_svg``: without SVG text."""
    parser = _Text(skip_svg)
    parser.feed(html_text)
    parser.close()
    return " ".join("".join(parser.parts).split())


def count(html_text: str, tag: str) -> int:
    """How many ``<tag`` elements ``html_text`` has."""
    return len(re.findall(rf"<{tag}\b", html_text, re.I))


#: One cell per magic that runs without a GPU; the errors are on purpose (the explainer's box).
CELLS = [
    "%load_ext cudamagic",
    "%cudamagic",
    "%cudainfo",
    "%%cudamem\nimport torch\nx = torch.ones(1024, 1024)",
    (
        "%%autograd_graph\nfrom torch import nn\ntorch.manual_seed(0)\n"
        "mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "loss = mlp(torch.randn(3, 4)).pow(2).mean()\nloss"
    ),
    "%%torchprof\nfor _ in range(3):\n    mlp(torch.randn(64, 4)).sum().backward()",
    "%cudaexplain --list",
    "torch.zeros(1).cuda()",
    "w = %gpuwatch --replay trace_demo.jsonl --interval 0.05 --count 5\nw",
    "import time\nwhile w.running:\n    time.sleep(0.05)",
    '%%cudafit --gpu "RTX 4090"\nloss = mlp(torch.randn(32, 4)).sum()\nloss.backward()',
    "%cudamem history",
    "%%cuda --save twice.cuh\n__device__ float twice(float x) { return 2 * x; }",
]


def execute(folder: str):
    """:data:`CELLS` executed by nbclient in ``folder`` (errors kept as outputs); not signed."""
    import shutil

    import nbformat
    import run_demo

    shutil.copy(os.path.join(ROOT, "examples", "trace_demo.jsonl"), folder)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    return run_demo.execute_nb(nb, cwd=folder, timeout_s=600, allow_errors=True)
