"""``%%autograd_graph`` options, checked before the cell runs."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from IPython.core.error import UsageError

from .result import SAVE_EXTENSIONS

FORMATS = ("svg", "png", "pdf", "dot")
MAX_TIMEOUT_S = 24 * 3600.0


@dataclass(frozen=True)
class GraphOptions:
    """What one ``%%autograd_graph`` line asks for.

    Attributes:
        fmt: picture format (``svg``, ``png``, ``pdf`` or ``dot`` for the DOT source only).
        output_names: variables to draw instead of the last expression (empty: the last expression).
        show_saved: draw the tensors each op saves (``--show-saved``).
        show_attrs: show non-tensor saved attributes (``--show-attrs``).
        group: draw module calls as clusters (``--group``).
        depth: collapse module calls deeper than this (None: automatic).
        fold: fold repeated blocks (no ``--no-fold``).
        shared_params: one node per leaf tensor always (``--shared-params``).
        node_budget: most nodes drawn in full (count).
        timeout_s: seconds ``dot`` may run.
        save_path: also write the picture here, or None.
        engine: ``'cudamagic'`` (our walker, the default) or ``'torchviz'`` (torchviz's
            ``make_dot``).
    """

    fmt: str
    output_names: tuple
    show_saved: bool
    show_attrs: bool
    group: bool
    depth: int | None
    fold: bool
    shared_params: bool
    node_budget: int
    timeout_s: float
    save_path: str | None
    engine: str = "cudamagic"


def resolve(args, settings) -> GraphOptions:
    """Check the parsed flags and the ``CudaMagics.graph_*`` settings.

    Raises:
        UsageError: an unknown format, a negative depth, a node budget below 1, a time limit that is
            not a number of seconds in (0, 1 day], or a ``--save`` path without a known extension or
            in a missing folder.
    """
    fmt = args.format or settings.graph_format
    if fmt not in FORMATS:
        raise UsageError(
            f"Unknown graph format {fmt!r}: use one of svg, png, pdf, dot, for example "
            "`%config CudaMagics.graph_format = 'svg'`."
        )
    if args.depth is not None and args.depth < 0:
        raise UsageError("--depth must be 0 or more, for example `%%autograd_graph --depth 1`.")
    budget = settings.graph_node_budget if args.max_nodes is None else args.max_nodes
    if budget < 1:
        what = "--max-nodes" if args.max_nodes is not None else "CudaMagics.graph_node_budget"
        raise UsageError(
            f"{what} must be 1 or more (got {budget}); for example "
            "`%%autograd_graph --max-nodes 5000`."
        )
    timeout_s = check_timeout(
        settings.graph_dot_timeout_s if args.timeout is None else args.timeout,
        "--timeout" if args.timeout is not None else "CudaMagics.graph_dot_timeout_s",
    )
    if args.save is not None:
        save_format(args.save)
    if args.engine == "torchviz":
        only_ours = [
            flag
            for flag, on in (
                ("--group", args.group),
                ("--depth", args.depth is not None),
                ("--no-fold", args.no_fold),
                ("--shared-params", args.shared_params),
            )
            if on
        ]
        if only_ours:
            raise UsageError(
                f"{only_ours[0]} works only with the default engine: leave out --engine torchviz, "
                "or drop the option (torchviz draws the whole graph as it is)."
            )
    names = tuple(n.strip() for n in (args.output or "").split(",") if n.strip())
    return GraphOptions(
        fmt=fmt,
        output_names=names,
        show_saved=args.show_saved,
        show_attrs=args.show_attrs,
        group=args.group,
        depth=args.depth,
        fold=not args.no_fold,
        shared_params=args.shared_params,
        node_budget=budget,
        timeout_s=timeout_s,
        save_path=args.save,
        engine=args.engine,
    )


def check_timeout(timeout_s, what: str = "--timeout") -> float:
    """``timeout_s`` as a float when it is a usable time limit for ``dot``.

    Raises:
        UsageError: NaN, infinite, zero, negative or over a day (the message says what to type).
    """
    try:
        value = float(timeout_s)
    except (TypeError, UsageError):
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise UsageError(
            f"{what} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} "
            f"(got {timeout_s!r}); for example `%%autograd_graph --timeout 60`."
        )
    return value


def save_format(path: str) -> str:
    """The format ``--save PATH`` writes, from the extension (``.svg .png .pdf .dot .gv``).

    Raises:
        UsageError: no or unknown extension, a directory, or a folder that does not exist.
    """
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in SAVE_EXTENSIONS:
        raise UsageError(
            f"--save {path}: the file name must end in .svg, .png, .pdf, .dot or .gv (the format "
            "comes from the extension); for example `--save graph.svg`."
        )
    if os.path.isdir(path):
        raise UsageError(
            f"--save {path}: that is a folder; give a file name, for example "
            f"`--save {os.path.join(path, 'graph.' + ext)}`."
        )
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(
            f"--save {path}: the folder {folder} does not exist; create it first "
            f"(`!mkdir -p {folder}`) or save elsewhere."
        )
    return SAVE_EXTENSIONS[ext]
