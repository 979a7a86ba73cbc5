"""``%%autograd_graph --engine torchviz``: drawing with torchviz's own ``make_dot``.

For users who want exactly the picture the torchviz docs show. torchviz builds a
``graphviz.Digraph`` (the Python ``graphviz`` package); its DOT source is rendered
by :func:`~cudamagic.graph.layout.run_dot` (the same time limit and process-group kill
as the default engine; ``graphviz``'s own ``pipe`` has no time limit). Its known
limits are handled here: torchviz 0.0.3 imports ``distutils`` (gone in Python
3.12), recurses once per node (``RecursionError`` on deep graphs), and reads saved
tensors through their unpack hooks (which would re-run checkpointed forwards).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
import warnings

from IPython.core.error import UsageError
from packaging.version import Version

from ..core.fmt import terminal_safe
from . import capture, draw
from .result import GraphResult

# frames of torchviz's recursive add_nodes per autograd node, with a margin
_FRAMES_PER_NODE = 2
_FRAME_MARGIN = 200


@contextlib.contextmanager
def _distutils_shim():
    """Provide ``distutils.version.LooseVersion`` while torchviz is imported.

    torchviz only compares ``torch.__version__`` with ``"1.9"``; ``packaging``'s ``Version`` (with
    the local part dropped) does that. Nothing is left in ``sys.modules`` afterwards.
    """
    try:
        importlib.import_module("distutils.version")  # Python < 3.12, or setuptools' shim
    except ImportError:
        pass
    else:
        yield
        return
    ver = types.ModuleType("distutils.version")
    ver.LooseVersion = lambda text: Version(str(text).split("+")[0])
    pkg = types.ModuleType("distutils")
    pkg.version = ver
    missing = object()
    saved = {k: sys.modules.get(k, missing) for k in ("distutils", "distutils.version")}
    sys.modules.update({"distutils": pkg, "distutils.version": ver})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is missing:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def import_make_dot():
    """Torchviz's ``make_dot``, imported under the ``distutils`` shim."""
    with _distutils_shim():
        from torchviz import make_dot
    return make_dot


def draw_cell(shell, cell: str, line: str, opts, progress=None) -> GraphResult:
    """Run ``cell`` and draw its graph with torchviz's ``make_dot``.

    Falls back to the default engine when torchviz would re-run hooks or read freed tensors.
    """
    __tracebackhide__ = True
    make_dot = import_make_dot()  # before the cell runs: a broken install costs no cell run
    source = note = ""

    def with_tensors(outputs, names, graph):
        nonlocal source, note
        note = check(graph)
        if not note:
            source = make_source(make_dot, outputs, names, opts.show_saved, opts.show_attrs)

    graph = capture.capture(
        shell,
        cell,
        line,
        list(opts.output_names),
        show_saved=opts.show_saved,
        show_attrs=opts.show_attrs,
        shared_params=True,
        with_tensors=with_tensors,
    )
    if source:
        return draw.draw_source(
            graph,
            source,
            fmt=opts.fmt,
            timeout_s=opts.timeout_s,
            save_path=opts.save_path,
            notes=["Drawn by torchviz's make_dot."],
            progress=progress,
        )
    graph.notes.append(note)
    return draw.draw_with(graph, opts, progress)


def _clean_name(name: str) -> str:
    return terminal_safe(name, 200).replace("\\", "/")


def check(graph) -> str:
    """Why torchviz must not draw ``graph`` (walked by our engine), or ``''``.

    Raises:
        UsageError: the graph is deeper than torchviz's recursion can go.
    """
    n_ops = sum(1 for n in graph.nodes if n.kind in ("backward", "accumulate"))
    limit = sys.getrecursionlimit()
    if n_ops * _FRAMES_PER_NODE + _FRAME_MARGIN > limit:
        raise UsageError(
            "--engine torchviz cannot draw this graph: torchviz's make_dot recurses once per "
            "autograd node and "
            f"this graph has {n_ops} of them (Python's recursion limit is {limit}). Leave out "
            "--engine to "
            "draw it with the default engine, which walks any depth and collapses big graphs."
        )
    if any(n.held for n in graph.nodes):
        return (
            "torchviz's make_dot reads saved tensors through their saved-tensor hooks, which would "
            "run "
            "the checkpointed forward again (or the hook's unpack): drawn with the default engine "
            "instead."
        )
    if any(n.freed for n in graph.nodes):
        return (
            "backward() already freed some saved tensors and torchviz's make_dot would fail "
            "reading them: "
            "drawn with the default engine instead."
        )
    return ""


def make_source(make_dot, outputs, tensor_names: dict, show_saved: bool, show_attrs: bool) -> str:
    """DOT source from torchviz's ``make_dot`` for the ``(path, tensor)`` outputs.

    Parameters and named leaves are labelled with the names the default engine uses.
    """
    import torch

    tensors = tuple(t for _, t in outputs)
    params = {}
    seen = set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:  # the leaves behind the outputs, iteratively (names only; no tensor is read)
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor) and id(var) in tensor_names:
            params[_clean_name(tensor_names[id(var)])] = var
        stack.extend(u for u, _ in getattr(fn, "next_functions", ()) if u is not None)
    seen.clear()
    try:
        with warnings.catch_warnings():  # torchviz's LooseVersion use warns on every call
            warnings.simplefilter("ignore", DeprecationWarning)
            d = make_dot(
                tensors if len(tensors) > 1 else tensors[0],
                params=params,
                show_attrs=show_attrs,
                show_saved=show_saved,
            )
    except RecursionError as exc:
        raise UsageError(
            "--engine torchviz ran out of recursion on this graph (torchviz recurses once per "
            "autograd node): leave out --engine to use the default engine."
        ) from exc
    finally:
        params.clear()
    return d.source
