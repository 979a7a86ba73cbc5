"""DOT text for an :class:`~cudamagic.graph.model.AutogradGraph`, and running the Graphviz ``dot``
program.

The only module that talks to Graphviz. It writes DOT itself (node styles, the
legend, every label escaped: :func:`to_dot`) and runs the ``dot`` program in a
subprocess with a time limit, killing its whole process group on time-out
(:func:`run_dot`); the Python ``graphviz`` package is not needed.
"""

from __future__ import annotations

import html
import math
import os
import re
import shutil
import subprocess
from collections import defaultdict

from ..core import platform
from ..core.fmt import format_bytes, terminal_safe
from . import model as g

FORMATS = ("svg", "png", "pdf", "dot")
SAVE_EXTENSIONS = {"svg": "svg", "png": "png", "pdf": "pdf", "dot": "dot", "gv": "dot"}
MAX_TIMEOUT_S = 24 * 3600.0
_MAGIC = {"svg": (b"<svg",), "png": (b"\x89PNG\r\n\x1a\n",), "pdf": (b"%PDF",)}

INSTALL_DOT = (
    "The Graphviz `dot` program is not on PATH, so the graph cannot be drawn as a picture "
    "(`pip install graphviz` installs only a Python wrapper, not the program). Install it, then "
    "restart the kernel: Debian/Ubuntu `sudo apt-get install graphviz`; Fedora/RHEL `sudo dnf install "
    "graphviz`; macOS `brew install graphviz`; conda `conda install -c conda-forge graphviz`; Windows "
    "`winget install graphviz` (or `choco install graphviz`) and add `C:\\Program Files\\Graphviz\\bin` "
    "to PATH. Below: a text outline of the graph and its DOT source."
)

_STYLE = {  # kind -> node attributes (torchviz colours; names and values that both Graphviz and CSS know)
    g.BACKWARD: 'fillcolor="lightgray"',
    g.ACCUMULATE: 'fillcolor="lightgray"',
    g.PARAM: 'fillcolor="lightblue"',
    g.LEAF: 'fillcolor="lightcyan"',
    g.OUTPUT: 'fillcolor="#caff70"',  # Graphviz's darkolivegreen1 (torchviz), as a colour CSS knows too
    g.BASE: 'fillcolor="#a2cd5a"',  # darkolivegreen3
    g.SAVED: 'fillcolor="orange"',
    g.MODULE: 'fillcolor="lightyellow", shape="box3d"',
    g.RUN: 'fillcolor="lightgray", peripheries="2"',
}
_LEGEND = {
    g.BACKWARD: "backward op (grad_fn)",
    g.ACCUMULATE: "AccumulateGrad (writes .grad)",
    g.PARAM: "parameter (module path)",
    g.LEAF: "leaf tensor, requires grad",
    g.OUTPUT: "output",
    g.BASE: "base of a view output",
    g.SAVED: "tensor saved for backward",
    g.MODULE: "module call (collapsed)",
    g.RUN: "chain of ops (folded)",
}


def _fill(kind) -> str:
    m = re.search(r'fillcolor="([^"]+)"', _STYLE[kind])
    return m.group(1) if m else "white"


def legend_rows(graph) -> list:
    """``[(fill colour, text)]`` for the node kinds drawn in ``graph``, in legend order (only kinds
    present).

    The fill colours are the nodes' own (names or #hex that Graphviz and CSS both know): a picture
    colour, not a theme colour.
    """
    present = {n.kind for n in graph.nodes}
    rows = [(_fill(k), _LEGEND[k]) for k in _LEGEND if k in present]
    if any(n.kind == g.SAVED and n.freed for n in graph.nodes):
        rows.append(("mistyrose", "saved tensor freed by backward() (dashed)"))
    return rows


def _legend_node(graph) -> list:
    """The legend as ONE node with an HTML-like table, for standalone files (``.dot``, ``--save``);
    a notebook shows the legend in the page instead (:mod:`.result`).
    """
    rows = legend_rows(graph)
    if not rows:
        return []
    cells = "".join(
        f'<TR><TD BGCOLOR="{html.escape(c)}" ALIGN="LEFT">{html.escape(t)}</TD></TR>'
        for c, t in rows
    )
    table = (
        '<TABLE BORDER="1" STYLE="dashed" CELLBORDER="1" CELLSPACING="3" CELLPADDING="2" COLOR="gray40">'
        f'<TR><TD BORDER="0">legend</TD></TR>{cells}</TABLE>'
    )
    return [
        '  subgraph cluster_legend { style="invis";',
        f'    legend [shape="plain", style="", label=<{table}>];',
        "  }",
    ]


class DotMissing(Exception):
    """The ``dot`` program is not on PATH."""


class DotTimeout(Exception):
    """``dot`` ran past its time limit and was killed."""


class DotFailed(Exception):
    """``dot`` exited with an error (its stderr is the message)."""


# ---- DOT ----------------------------------------------------------------------------
def quote(text) -> str:
    """A DOT double-quoted string: backslashes, quotes and newlines escaped (``\\n`` line breaks)."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\r", "")
    text = "".join(ch if ch >= " " or ch == "\n" else " " for ch in text)
    return '"' + text.replace("\n", "\\n") + '"'


def _tensor_text(n) -> str:
    shape = "(" + ", ".join(str(s) for s in n.shape) + ")" if n.shape is not None else "(nested)"
    dev = "" if n.device in ("", "cpu") else f" {n.device}"
    return f"{shape} {n.dtype}{dev}".strip()


def node_text(n) -> str:
    """The multi-line label drawn for node ``n`` (plain text; :func:`quote` escapes it)."""
    lines = []
    if n.kind in (g.PARAM, g.LEAF, g.OUTPUT, g.BASE):
        lines = [n.label, _tensor_text(n)]
        if n.use:
            lines.append(f"use {n.use[0]}/{n.use[1]}")
    elif n.kind == g.SAVED:
        lines = [n.label]
        if n.shape is not None:
            lines.append(_tensor_text(n))
        if n.saved_bytes:
            lines.append(format_bytes(n.saved_bytes))
    elif n.kind == g.MODULE:
        attrs = dict(n.attrs)
        lines = [n.label]
        if n.count > 1 and attrs.get("calls"):
            lines.append(attrs["calls"])
        elif attrs.get("type") and attrs["type"] != n.label and n.count == 1:
            lines.append(attrs["type"])
        lines.append(
            plural(n.ops, "op")
            + (f", saves {format_bytes(n.saved_bytes)}" if n.saved_bytes else "")
        )
        lines.extend(_held_lines(n))
    elif n.kind == g.RUN:
        lines = [f"{n.label} x {n.count}" if len(n.attrs) == 1 else n.label]
        if len(n.attrs) > 1:
            lines += [f"{op} x {c}" for op, c in n.attrs[:6]] + (
                ["..."] if len(n.attrs) > 6 else []
            )
        if n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
        lines.extend(_held_lines(n))
    else:
        lines = [n.label]
        if n.saved_bytes and 0 < n.saved_view_bytes < n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_view_bytes)} of views")
            lines.append(f"(keeps {format_bytes(n.saved_bytes)} of storage alive)")
        elif n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
        if n.freed:
            lines.append("saved tensors freed by backward()")
        lines.extend(_held_lines(n))
        lines.extend(f"{k}: {v}" for k, v in n.attrs)
    return "\n".join(lines)


def _held_lines(n) -> list:
    """Lines for saved tensors behind saved-tensor hooks and of unknown size."""
    lines = [f"{count} saved {how}" for how, count in n.held]
    if n.size_unknown:
        lines.append(f"+ {n.size_unknown} saved of unknown size")
    return lines


def plural(n: int, word: str, many: str = "") -> str:
    """``1 op``, ``3 ops``: ``n`` and ``word``, or ``many`` (default ``word + 's'``) when ``n`` is not 1."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def to_dot(graph, group: bool = False, legend: bool = True, caption: str = "") -> str:
    """DOT source for ``graph``: deterministic (ids from the model), every label escaped.

    Args:
        graph: An :class:`~cudamagic.graph.AutogradGraph`.
        group: Draw each module call as a labelled cluster (nested calls nest).
        legend: Add a small legend of the node kinds present (for standalone files; the notebook
            page has its own).
        caption: A caption drawn below the picture (``''``: none; the notebook page shows it as
            text).

    Returns:
        DOT text (``digraph``), UTF-8 safe.
    """
    clustered = bool(group and graph.calls)
    # ordering="out" keeps an unrolled loop's staircase starting at the top left, where the
    # scroll box opens (without it the first screen of a 30-step LSTM is blank); clusters skip it
    # (dot's cluster ranking and ordering constraints do not mix well)
    ordering = "" if clustered else ', ordering="out"'
    label = f', labelloc="b", label={quote(caption)}' if caption else ""
    # compact spacing (dot's defaults are 0.25 in between nodes and 0.5 in between ranks): a 16-node
    # graph then fits a notebook output at full size
    out = [
        "digraph autograd {",
        f'  graph [rankdir="TB"{ordering}, fontname="monospace", fontsize="10", nodesep="0.2", '
        f'ranksep="0.3", pad="0.1"{label}];',
        '  node [style="filled", shape="box", align="left", fontsize="10", height="0.2", '
        'margin="0.08,0.03", fontname="monospace"];',
        '  edge [fontsize="9"];',
    ]

    def node_line(n, indent="  "):
        extra = (
            ', style="filled,dashed", fillcolor="mistyrose"'
            if n.kind == g.SAVED and n.freed
            else ""
        )
        return f"{indent}{n.id} [label={quote(node_text(n))}, {_STYLE.get(n.kind, '')}{extra}];"

    if clustered:
        by_call = defaultdict(list)
        for n in graph.nodes:
            by_call[n.call].append(n)
        used = set()
        for c in list(by_call):
            while c is not None and c not in used:
                used.add(c)
                c = graph.calls[c].parent
        children = defaultdict(list)
        for c in sorted(used):
            children[graph.calls[c].parent].append(c)
        out.extend(node_line(n) for n in by_call.get(None, []))
        # iterative nested clusters
        stack = [(c, 1) for c in reversed(children[None])]
        closing = []
        while stack:
            c, level = stack.pop()
            while closing and closing[-1] >= level:
                out.append("  " * closing.pop() + "}")
            ind = "  " * level
            call = graph.calls[c]
            out.append(f"{ind}subgraph cluster_c{c} {{")
            out.append(
                f'{ind}  label={quote(call.title)}; style="rounded"; color="gray50"; fontname="monospace";'
            )
            out.extend(node_line(n, ind + "  ") for n in by_call.get(c, []))
            closing.append(level)
            stack.extend((k, level + 1) for k in reversed(children[c]))
        while closing:
            out.append("  " * closing.pop() + "}")
    else:
        out.extend(node_line(n) for n in graph.nodes)
    for e in graph.edges:
        attr = ""
        if e.kind == g.SAVED_EDGE:
            attr = ' [dir="none", color="orange3"]'
        elif e.kind == g.VIEW:
            attr = ' [style="dotted"]'
        out.append(f"  {e.src} -> {e.dst}{attr};")
    if legend:
        out.extend(_legend_node(graph))
    out.append("}")
    return "\n".join(out) + "\n"


# ---- dot ------------------------------------------------------------------------------
def find_dot() -> str | None:
    """Path of the ``dot`` program on PATH, or ``None``."""
    return shutil.which("dot")


def check_timeout(timeout_s, what: str = "--timeout") -> float:
    """``timeout_s`` as a float when it is a usable time limit for ``dot``.

    Raises:
        ValueError: NaN, infinite, zero, negative or over a day (the message says what to type).
    """
    try:
        value = float(timeout_s)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise ValueError(
            f"{what} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} "
            f"(got {timeout_s!r}); for example `%%autograd_graph --timeout 60`."
        )
    return value


def save_format(path: str) -> str:
    """The format ``--save PATH`` writes, from the extension (``.svg .png .pdf .dot .gv``).

    Raises:
        ValueError: no or unknown extension, a directory, or a folder that does not exist.
    """
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in SAVE_EXTENSIONS:
        raise ValueError(
            f"--save {path}: the file name must end in .svg, .png, .pdf or .dot (the format "
            "comes from the extension); for example `--save graph.svg`."
        )
    if os.path.isdir(path):
        raise ValueError(
            f"--save {path}: that is a folder; give a file name, for example "
            f"`--save {os.path.join(path, 'graph.' + ext)}`."
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(
            f"--save {path}: the folder {folder} does not exist; create it first "
            f"(`!mkdir -p {folder}`) or save elsewhere."
        )
    return SAVE_EXTENSIONS[ext]


def clean_text(text: str, limit: int = 2000) -> str:
    """Outside text (``dot``'s messages) made safe to print, lines kept (see :func:`cudamagic.core.fmt.terminal_safe`)."""
    return terminal_safe(text, limit, keep_newlines=True)


def run_dot(source: str, fmt: str = "svg", timeout_s: float = 20.0) -> bytes:
    """Render DOT ``source`` with ``dot -T<fmt>`` in a subprocess.

    ``dot`` runs in its own process group: on time-out the whole group is killed, so a
    wrapper script (conda, a shim) leaves no process behind.

    Args:
        source: DOT text.
        fmt: ``'svg'``, ``'png'`` or ``'pdf'``.
        timeout_s: Seconds before ``dot`` is killed (finite, above 0).

    Returns:
        The rendered bytes (UTF-8 text for SVG).

    Raises:
        DotMissing: No ``dot`` on PATH. DotTimeout: ran past ``timeout_s``. DotFailed: non-zero
            exit,
        or output that is not a picture of the format asked for.
    """
    exe = find_dot()
    if exe is None:
        raise DotMissing(INSTALL_DOT)
    timeout_s = check_timeout(timeout_s, "timeout_s")
    try:
        proc = subprocess.Popen(
            [exe, f"-T{fmt}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **platform.popen_group_kwargs(),
        )
    except OSError as exc:
        raise DotFailed(f"cannot run {exe}: {exc}") from exc
    try:
        out, err = proc.communicate(source.encode("utf-8"), timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        _kill_group(proc)
        raise DotTimeout(f"dot did not finish within {timeout_s:g} s") from exc
    except BaseException:  # KeyboardInterrupt: leave no dot running
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        raise DotFailed(
            clean_text(err.decode("utf-8", "replace").strip()) or f"exit {proc.returncode}"
        )
    head = out[:4096].lstrip()
    if fmt in _MAGIC and not any(
        m in head if fmt == "svg" else head.startswith(m) for m in _MAGIC[fmt]
    ):
        raise DotFailed(
            f"{exe} printed something that is not {fmt.upper()} ({len(out)} bytes starting "
            f"{clean_text(repr(out[:40]))}); is it Graphviz's dot?"
        )
    return out


def _kill_group(proc) -> None:
    platform.kill_tree(proc)  # dot and whatever a wrapper script started, on every platform
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass
