"""Drawing an :class:`~cudamagic.graph.AutogradGraph`: DOT text, the ``dot`` program, fallbacks.

The only module that talks to Graphviz. It writes DOT itself (every label
escaped) and runs the ``dot`` program in a subprocess with a time limit; the
Python ``graphviz`` package is not needed. Fallbacks, in order:

1. the full graph, when it has at most ``node_budget`` nodes;
2. the collapsed module view (deepest ``--depth`` that fits, repeated blocks and
   chains of identical ops folded), said so in a note;
3. a summary table (op counts, saved memory) with the DOT source, when even that
   is too big or ``dot`` runs past its time limit;
4. without ``dot`` on PATH: the install commands, a text outline and the DOT source.

:func:`draw` returns a :class:`GraphResult` that renders as scrollable inline
SVG in a notebook and as a text summary in a terminal.
"""

from __future__ import annotations

import base64
import dataclasses
import math
import os
import re
import shutil
import signal
import html
import subprocess
import textwrap
from collections import Counter, defaultdict, deque

from . import walk as g
from ..core.fmt import esc, format_bytes, html_table, terminal_safe, text_table

FORMATS = ("svg", "png", "pdf", "dot")
SAVE_EXTENSIONS = {"svg": "svg", "png": "png", "pdf": "pdf", "dot": "dot", "gv": "dot"}
TEXT_WIDTH = 100  # columns of the terminal (text) form
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

_STYLE = {  # kind -> node attributes (torchviz colours)
    g.BACKWARD: 'fillcolor="lightgray"',
    g.ACCUMULATE: 'fillcolor="lightgray"',
    g.PARAM: 'fillcolor="lightblue"',
    g.LEAF: 'fillcolor="lightcyan"',
    g.OUTPUT: 'fillcolor="darkolivegreen1"',
    g.BASE: 'fillcolor="darkolivegreen3"',
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


def _legend_node(graph) -> list:
    """The legend as ONE node with an HTML-like table (a cluster of nodes doubled dot's time on small graphs)."""
    kinds = [k for k in _LEGEND if any(n.kind == k for n in graph.nodes)]
    rows = [(_fill(k), _LEGEND[k]) for k in kinds]
    if any(n.kind == g.SAVED and n.freed for n in graph.nodes):
        rows.append(("mistyrose", "saved tensor freed by backward() (dashed)"))
    if not rows:
        return []
    cells = "".join(f'<TR><TD BGCOLOR="{html.escape(c)}" ALIGN="LEFT">{html.escape(t)}</TD></TR>' for c, t in rows)
    table = ('<TABLE BORDER="1" STYLE="dashed" CELLBORDER="1" CELLSPACING="3" CELLPADDING="2" COLOR="gray40">'
             f'<TR><TD BORDER="0">legend</TD></TR>{cells}</TABLE>')
    # a one-node cluster: dot lays it out beside the graph, which keeps an unrolled loop's first nodes at the top
    # left (see ordering="out" in to_dot); one node instead of one per kind keeps dot fast on small graphs
    return ['  subgraph cluster_legend { style="invis";',
            f'    legend [shape="plain", style="", label=<{table}>];', "  }"]


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
        lines.append(_plural(n.ops, "op") + (f", saves {format_bytes(n.saved_bytes)}" if n.saved_bytes else ""))
    elif n.kind == g.RUN:
        lines = [f"{n.label} x {n.count}" if len(n.attrs) == 1 else n.label]
        if len(n.attrs) > 1:
            lines += [f"{op} x {c}" for op, c in n.attrs[:6]] + (["..."] if len(n.attrs) > 6 else [])
        if n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
    else:
        lines = [n.label]
        if n.saved_bytes and 0 < n.saved_view_bytes < n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_view_bytes)} of views")
            lines.append(f"(keeps {format_bytes(n.saved_bytes)} of storage alive)")
        elif n.saved_bytes:
            lines.append(f"saves {format_bytes(n.saved_bytes)}")
        if n.freed:
            lines.append("saved tensors freed by backward()")
        lines.extend(f"{k}: {v}" for k, v in n.attrs)
    return "\n".join(lines)


def _code_spans(escaped: str) -> str:
    """```x``` spans of already-escaped text as ``<code>x</code>`` (notes are written for text and HTML)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def _plural(n: int, word: str, plural: str = "") -> str:
    return f"{n} {word}" if n == 1 else f"{n} {plural or word + 's'}"


def _caption(graph, full=None) -> str:
    ops = sum((full or graph).op_counts().values())
    text = (f"{_plural(ops, 'autograd node')}; autograd holds {format_bytes(graph.saved_bytes_total)} of "
            "saved tensors until backward() (parameters not counted)")
    if graph.view != "full":
        boxes = [n for n in graph.nodes if n.kind == g.MODULE]
        shown = sum(graph.op_counts().values())
        text += f"\nview: {graph.view}"
        if boxes and full is not None:
            text += f"; {shown} drawn one by one, the rest inside {_plural(len(boxes), 'module box', 'module boxes')}"
    return text


def to_dot(graph, group: bool = False, legend: bool = True, full=None) -> str:
    """DOT source for ``graph``: deterministic (ids from the model), every label escaped.

    Args:
        graph: An :class:`~cudamagic.graph.AutogradGraph`.
        group: Draw each module call as a labelled cluster (nested calls nest).
        legend: Add a small legend of the node kinds present.
        full: The full graph when ``graph`` is a collapsed view of it (the caption counts all its nodes).

    Returns:
        DOT text (``digraph``), UTF-8 safe.
    """
    clustered = bool(group and graph.calls)
    # ordering="out" keeps an unrolled loop's staircase starting at the top left, where the
    # scroll box opens (without it the first screen of a 30-step LSTM is blank); clusters skip it
    # (dot's cluster ranking and ordering constraints do not mix well)
    ordering = "" if clustered else ', ordering="out"'
    out = ["digraph autograd {",
           f'  graph [rankdir="TB"{ordering}, fontname="monospace", fontsize="10", labelloc="b", '
           f"label={quote(_caption(graph, full))}];",
           '  node [style="filled", shape="box", align="left", fontsize="10", height="0.2", '
           'fontname="monospace"];',
           '  edge [fontsize="9"];']

    def node_line(n, indent="  "):
        extra = ', style="filled,dashed", fillcolor="mistyrose"' if n.kind == g.SAVED and n.freed else ""
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
            out.append(f'{ind}  label={quote(call.title)}; style="rounded"; color="gray50"; fontname="monospace";')
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
        raise ValueError(f"{what} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} "
                         f"(got {timeout_s!r}); for example `%%autograd_graph --timeout 60`.")
    return value


def save_format(path: str) -> str:
    """The format ``--save PATH`` writes, from the extension (``.svg .png .pdf .dot .gv``).

    Raises:
        ValueError: no or unknown extension, a directory, or a folder that does not exist.
    """
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in SAVE_EXTENSIONS:
        raise ValueError(f"--save {path}: the file name must end in .svg, .png, .pdf or .dot (the format "
                         "comes from the extension); for example `--save graph.svg`.")
    if os.path.isdir(path):
        raise ValueError(f"--save {path}: that is a folder; give a file name, for example "
                         f"`--save {os.path.join(path, 'graph.' + ext)}`.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--save {path}: the folder {folder} does not exist; create it first "
                         f"(`!mkdir -p {folder}`) or save elsewhere.")
    return SAVE_EXTENSIONS[ext]


def clean_text(text: str, limit: int = 2000) -> str:
    """Outside text (``dot``'s messages) made safe to print, lines kept (see ``render.terminal_safe``)."""
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
        DotMissing: No ``dot`` on PATH. DotTimeout: ran past ``timeout_s``. DotFailed: non-zero exit,
        or output that is not a picture of the format asked for.
    """
    exe = find_dot()
    if exe is None:
        raise DotMissing(INSTALL_DOT)
    timeout_s = check_timeout(timeout_s, "timeout_s")
    try:
        proc = subprocess.Popen([exe, f"-T{fmt}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
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
        raise DotFailed(clean_text(err.decode("utf-8", "replace").strip()) or f"exit {proc.returncode}")
    head = out[:4096].lstrip()
    if fmt in _MAGIC and not any(m in head if fmt == "svg" else head.startswith(m) for m in _MAGIC[fmt]):
        raise DotFailed(f"{exe} printed something that is not {fmt.upper()} ({len(out)} bytes starting "
                        f"{clean_text(repr(out[:40]))}); is it Graphviz's dot?")
    return out


def _kill_group(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        proc.kill()
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass


# ---- text forms --------------------------------------------------------------------------
def topo_order(graph) -> list:
    """Node ids from inputs to outputs (Kahn's algorithm, ties in walk order); cycles cannot occur."""
    indeg = Counter()
    succ = defaultdict(list)
    for e in graph.edges:
        indeg[e.dst] += 1
        succ[e.src].append(e.dst)
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    ready = deque(sorted((n.id for n in graph.nodes if indeg[n.id] == 0), key=pos.get))
    order = []
    while ready:
        nid = ready.popleft()
        order.append(nid)
        for d in succ[nid]:
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    return order


def outline(graph, max_lines: int = 300) -> str:
    """A text outline of the DAG, inputs first: ``id  label  <- input ids``, one node a line."""
    preds = defaultdict(list)
    for e in graph.edges:
        preds[e.dst].append(e.src)
    lines = []
    order = topo_order(graph)
    for nid in order[:max_lines]:
        n = graph.node(nid)
        text = node_text(n).replace("\n", " | ")
        src = preds.get(nid)
        lines.append(f"{nid:>6}  {text}" + (f"   <- {', '.join(src)}" if src else ""))
    if len(order) > max_lines:
        lines.append(f"... {len(order) - max_lines} more nodes")
    return "\n".join(lines)


def summary_rows(graph, top: int = 15) -> list:
    """``[(op, count)]`` most frequent first, then kinds of tensor nodes."""
    rows = [(op, str(c)) for op, c in graph.op_counts().most_common(top)]
    kinds = Counter(n.kind for n in graph.nodes if n.kind not in (g.BACKWARD, g.ACCUMULATE))
    rows += [(f"[{k} nodes]", str(c)) for k, c in sorted(kinds.items())]
    return rows


# ---- the result object ---------------------------------------------------------------------
@dataclasses.dataclass
class GraphResult:
    """What ``%%autograd_graph`` returns: the graph data, its DOT source and the picture.

    Attributes:
        graph: The full :class:`~cudamagic.graph.AutogradGraph` (all nodes, before collapsing).
        drawn: The graph that was drawn (``graph`` itself, or a collapsed view of it).
        dot: DOT source of ``drawn``.
        format: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'``.
        image: Rendered bytes, ``None`` when not rendered.
        notes: What happened (collapsing, skipped outputs, timeouts), one sentence each.
        problem: Why there is no picture (``'dot missing'``, ``'dot timeout'``, ``'too big'``...), or ``''``.
        saved_to: Path written by ``--save``, or ``''``.
    """

    graph: object
    drawn: object
    dot: str
    format: str = "svg"
    image: bytes | None = None
    notes: list = dataclasses.field(default_factory=list)
    problem: str = ""
    saved_to: str = ""

    @property
    def nodes(self):
        """Nodes of the full graph."""
        return self.graph.nodes

    @property
    def edges(self):
        """Edges of the full graph."""
        return self.graph.edges

    @property
    def svg(self) -> str | None:
        """The SVG text (``None`` unless rendered as SVG)."""
        if self.format == "svg" and self.image is not None:
            return self.image.decode("utf-8", "replace")
        return None

    def save(self, path: str, timeout_s: float = 60.0) -> str:
        """Write the picture to ``path``; format from the extension (``.svg .png .pdf .dot .gv``).

        Returns:
            ``path``.

        Raises:
            ValueError: no or unknown extension.
            DotMissing, DotTimeout, DotFailed: when a picture has to be rendered and ``dot`` cannot.
        """
        ext = os.path.splitext(path)[1].lower().lstrip(".")
        if ext not in SAVE_EXTENSIONS:
            raise ValueError(f"{path}: the file name must end in .svg, .png, .pdf or .dot")
        fmt = SAVE_EXTENSIONS[ext]
        if fmt == "dot":
            data = self.dot.encode("utf-8")
        elif fmt == self.format and self.image is not None:
            data = self.image
        else:
            data = run_dot(self.dot, fmt, timeout_s)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    # -- text --
    def summary_line(self) -> str:
        gr = self.graph
        kinds = Counter(n.kind for n in gr.nodes)
        parts = [_plural(kinds[g.BACKWARD], "backward op"), _plural(kinds[g.ACCUMULATE], "AccumulateGrad")]
        parts += [_plural(kinds[k], word) for k, word in ((g.PARAM, "parameter node"),
                                                          (g.LEAF, "leaf tensor node"),
                                                          (g.SAVED, "saved tensor node"),
                                                          (g.BASE, "view base"),
                                                          (g.OUTPUT, "output")) if kinds[k]]
        text = (f"autograd graph: {_plural(len(gr.nodes), 'node')} ({', '.join(parts)}), "
                f"{_plural(len(gr.edges), 'edge')}; saved for backward: {format_bytes(gr.saved_bytes_total)}")
        if self.image is not None:
            text += (f"; drawn as {self.format} ({self.drawn.view} view, "
                     f"{_plural(len(self.drawn.nodes), 'node')})")
        elif self.format == "dot":
            text += "; DOT source only"
        return text

    def __repr__(self) -> str:
        """The terminal form: summary, notes, and on problems a table; lines wrapped at 100 columns."""
        def wrap(text, indent=""):
            return textwrap.fill(clean_text(text, 10_000), TEXT_WIDTH, subsequent_indent=indent,
                                 break_on_hyphens=False, break_long_words=True)

        parts = [wrap(self.summary_line(), "  ")]
        parts += [wrap(f"note: {n}", "  ") for n in self.notes]
        if self.problem:
            parts.append(text_table(["op", "count"], summary_rows(self.graph)))
        if self.problem == "dot missing":
            parts.append(wrap(INSTALL_DOT.replace(" and its DOT source", " (the DOT source is in the "
                                                  "result's `.dot`)")))
            parts.append("\n".join(line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
                                   for line in clean_text(outline(self.drawn, 60), 1_000_000).splitlines()))
        elif self.problem:
            parts.append("The DOT source is in the result's `.dot` (for example `print(_.dot)`).")
        if self.problem != "dot missing":  # the terminal's only view of the graph (40 lines at most)
            parts.append("\n".join(line if len(line) <= TEXT_WIDTH else line[: TEXT_WIDTH - 1] + "…"
                                   for line in clean_text(outline(self.drawn, 40), 1_000_000).splitlines()))
        return "\n".join(parts)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    # -- notebook --
    def _picture_html(self) -> str:
        if self.image is None:
            return ""
        if self.format == "svg":
            svg = self.svg
            start = svg.find("<svg")
            if start < 0:
                return ""
            # natural size inside the scrolling box: front ends shrink <svg> to the output width
            # (JupyterLab's and nbconvert's `max-width: 100%`), which makes big graphs illegible
            return svg[start:].replace("<svg", '<svg style="max-width:none;height:auto"', 1)
        if self.format == "png":
            return f'<img src="data:image/png;base64,{base64.b64encode(self.image).decode()}"/>'
        return (f"<p>PDF rendered ({esc(format_bytes(len(self.image)))}): "
                "<code>result.save('graph.pdf')</code> writes it.</p>")

    def _repr_html_(self) -> str:
        parts = ['<div class="cm-autograd-graph">']
        pic = self._picture_html()
        if pic:
            parts.append('<div style="max-height:720px;max-width:100%;overflow:auto;border:1px solid #ddd;'
                         f'resize:vertical">{pic}</div>')
        parts.append(f"<p><small>{esc(self.summary_line())}</small></p>")
        if self.notes:
            parts.append("<ul>" + "".join(f"<li>{_code_spans(esc(n))}</li>" for n in self.notes) + "</ul>")
        if self.problem == "dot missing":
            parts.append(f"<p><b>{esc(INSTALL_DOT)}</b></p>")
            parts.append(f"<pre>{esc(outline(self.drawn))}</pre>")
        if self.problem:
            parts.append(html_table(["op", "count"], [(esc(a), esc(b)) for a, b in summary_rows(self.graph)]))
        if self.problem or self.format == "dot":
            opened = " open" if self.format == "dot" else ""
            parts.append(f"<details{opened}><summary>DOT source</summary><pre>{esc(self.dot)}</pre></details>")
        parts.append("</div>")
        return "".join(parts)


# ---- choosing a view and rendering ------------------------------------------------------------
def choose_view(graph, depth: int | None, fold: bool, node_budget: int) -> tuple:
    """The graph to draw and notes: ``depth`` when given, else the full graph or the view that fits.

    Returns:
        ``(view, notes, fits)``: ``fits`` is False when even the most collapsed view exceeds the budget.
    """
    if depth is not None:
        view = g.collapse(graph, depth, fold)
        return view, [], len(view.nodes) <= node_budget
    if len(graph.nodes) <= node_budget:
        return graph, [], True
    view = graph
    for d in range(g.max_depth(graph) - 1, -1, -1):
        for f in ((False, True) if fold else (False,)):
            view = g.collapse(graph, d, f)
            if len(view.nodes) <= node_budget:
                break
        if len(view.nodes) <= node_budget:
            break
    if len(view.nodes) > node_budget:
        view = g.fold_runs(view)
    fits = len(view.nodes) <= node_budget
    note = (f"The graph has {len(graph.nodes)} nodes, more than the node budget of {node_budget} "
            f"(CudaMagics.graph_node_budget): ")
    if fits:
        note += (f"drawn as the {view.view} view ({len(view.nodes)} nodes). Use --depth D to choose the module "
                 "depth, or raise the budget with %config CudaMagics.graph_node_budget = N.")
    else:
        note += ("even the collapsed view is too big to lay out, so here are a summary and the DOT source. "
                 "Draw a smaller part (fewer steps or layers), or raise the budget with "
                 "%config CudaMagics.graph_node_budget = N.")
    return view, [note], fits


def draw(graph, *, fmt: str = "svg", group: bool = False, depth: int | None = None, fold: bool = True,
         node_budget: int = 2000, timeout_s: float = 20.0, save_path: str | None = None) -> GraphResult:
    """Pick a view of ``graph``, render it with ``dot`` (time-limited) and apply the fallbacks.

    Args:
        graph: The full graph from :func:`cudamagic.graph.capture`.
        fmt: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'`` (DOT source only, no ``dot`` run).
        group: Module calls as clusters.
        depth: Collapse module calls deeper than this (``None``: full graph, collapsed only past the budget).
        fold: Fold repeated identical blocks when collapsing.
        node_budget: Most nodes drawn before collapsing (count).
        timeout_s: Seconds ``dot`` may run per attempt.
        save_path: Also write the picture there (format from the extension when it has one).

    Returns:
        A :class:`GraphResult`; never raises for ``dot`` problems (they become ``problem`` and notes).
    """
    view, notes, fits = choose_view(graph, depth, fold, node_budget)
    notes = list(graph.notes) + notes
    source = to_dot(view, group=group, full=graph)
    result = GraphResult(graph, view, source, fmt, notes=notes)
    if fmt == "dot":
        pass
    elif not fits:
        result.problem = "too big"
    elif find_dot() is None:
        result.problem = "dot missing"
    else:
        try:
            result.image = run_dot(source, fmt, timeout_s)
        except DotTimeout:
            collapsed = None
            if view is graph:
                for d in range(g.max_depth(graph) - 1, -1, -1):
                    collapsed = g.collapse(graph, d, fold)
                    if len(collapsed.nodes) < len(graph.nodes) // 2:
                        break
                collapsed = g.fold_runs(collapsed or graph)
                if len(collapsed.nodes) >= len(graph.nodes):
                    collapsed = None
            if collapsed is not None:
                notes.append(f"dot did not finish the full graph within {timeout_s:g} s "
                             f"(CudaMagics.graph_dot_timeout_s): drawn as the {collapsed.view} view.")
                result.drawn, result.dot = collapsed, to_dot(collapsed, group=group, full=graph)
                try:
                    result.image = run_dot(result.dot, fmt, timeout_s)
                except (DotTimeout, DotFailed) as exc:
                    result.problem = "dot timeout"
                    notes.append(f"The collapsed view failed too ({exc}): summary and DOT source below.")
            else:
                result.problem = "dot timeout"
                notes.append(f"dot did not finish within {timeout_s:g} s (CudaMagics.graph_dot_timeout_s): "
                             "summary and DOT source below; raise the limit or draw a smaller part.")
        except DotFailed as exc:
            result.problem = "dot failed"
            notes.append(f"dot failed: {exc}")
    if save_path:
        _save(result, save_path, timeout_s)
    return result


def _save(result: GraphResult, path: str, timeout_s: float) -> None:
    try:
        fmt = save_format(path)
        if fmt != "dot" and result.problem:
            raise DotFailed(f"{result.problem}; the DOT source can still be saved: `_.save('graph.dot')`")
        result.save(path, timeout_s)
        result.saved_to = path
        result.notes.append(f"Saved to {path}.")
    except (DotMissing, DotTimeout, DotFailed, OSError, ValueError) as exc:
        result.notes.append(f"Not saved to {path}: {exc}")

