"""``%torchprof`` options, checked before the cell runs."""

from __future__ import annotations

import keyword
import os
from dataclasses import dataclass

from IPython.core.error import UsageError

#: grouping -> what a row of the operator table is.
GROUPS = {
    "op": "one row per operator name",
    "shape": "one row per operator name and input shapes",
    "module": "one row per operator name and innermost nn.Module (records Python calls)",
    "stack": (
        "one row per operator name and the innermost N Python frames of your code "
        "(records Python calls)"
    ),
}
TRACE_SUFFIXES = (".json", ".json.gz")


@dataclass
class ProfOptions:
    """Checked ``%%torchprof`` options.

    Attributes:
        group: ``"op"``, ``"shape"``, ``"module"`` or ``"stack"`` (see :data:`GROUPS`).
        stack_depth: Python frames kept per row when ``group == "stack"`` (1 or more).
        top: rows in each table (1 or more).
        steps: profile this many steps with a profiler schedule (one warm-up step first; a step ends
            at each ``optimizer.step()``), or None: the whole cell.
        memory: record allocations (``profile_memory``; a CUDA memory snapshot when CUDA is
            available).
        trace: path of the Chrome/Perfetto trace to write (``.json`` or ``.json.gz``), or None.
        max_trace_mb: size cap of the written trace in MiB (greater than 0).
        out: variable name to store the result in, or None.
    """

    group: str = "op"
    stack_depth: int = 3
    top: int = 15
    steps: int | None = None
    memory: bool = False
    trace: str | None = None
    max_trace_mb: float = 100.0
    out: str | None = None

    @property
    def with_stack(self) -> bool:
        """Record Python calls (needed for the ``module`` and ``stack`` groupings)."""
        return self.group in ("module", "stack")


def check_cell_options(
    args, top_default: int, max_trace_mb_default: float, stack_depth_default: int
) -> ProfOptions:
    """``%%torchprof`` flags -> :class:`ProfOptions`.

    Raises:
        UsageError: ``--compare`` in cell mode, unknown grouping, a count below 1, a trace name
            without ``.json``/``.json.gz``, a cap of 0 or less, or ``-o`` that is not a Python
            identifier.
    """
    if args.compare:
        raise UsageError(
            "--compare is a line magic: put `%torchprof --compare A B` on a line of its own "
            "(A and B: results stored with -o, or saved trace files)."
        )
    group = args.group or "op"
    if group not in GROUPS:
        raise UsageError(
            f"--group {group!r} is not a grouping: use one of {', '.join(GROUPS)}, "
            "for example `%%torchprof --group shape`."
        )
    opts = ProfOptions(group=group, memory=bool(args.memory))
    opts.top = _at_least_one(
        "--top", top_default if args.top is None else args.top, "%%torchprof --top 20"
    )
    opts.stack_depth = _at_least_one(
        "--stack-depth",
        stack_depth_default if args.stack_depth is None else args.stack_depth,
        "%%torchprof --group stack --stack-depth 2",
    )
    if args.steps is not None:
        opts.steps = _at_least_one("--steps", args.steps, "%%torchprof --steps 3")
    cap = max_trace_mb_default if args.max_trace_mb is None else args.max_trace_mb
    if not cap > 0:
        raise UsageError(
            f"--max-trace-mb must be more than 0 (got {cap}); for example "
            "`%%torchprof --trace run.json.gz --max-trace-mb 20`."
        )
    opts.max_trace_mb = float(cap)
    if args.trace is not None:
        opts.trace = check_trace_path(args.trace)
    elif args.max_trace_mb is not None:
        raise UsageError(
            "--max-trace-mb caps the file that --trace writes: add --trace, for example "
            "`%%torchprof --trace run.json.gz --max-trace-mb 20`."
        )
    if args.out is not None:
        opts.out = check_name(args.out)
    return opts


def check_trace_path(path: str) -> str:
    """``--trace`` path (must end in ``.json`` or ``.json.gz``), else ``UsageError``."""
    if not path.lower().endswith(TRACE_SUFFIXES):
        raise UsageError(
            f"--trace {path!r}: the trace file name must end in .json or .json.gz (gzip), "
            "for example `%%torchprof --trace run1.json.gz`."
        )
    folder = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
    if not os.path.isdir(folder):
        raise UsageError(
            f"--trace {path!r}: the folder {folder!r} does not exist. Create it first "
            f"(`import os; os.makedirs({os.path.dirname(path)!r}, exist_ok=True)`) or write the "
            "trace "
            "in the working directory, e.g. `%%torchprof --trace run1.json.gz`."
        )
    return os.path.expanduser(path)


def check_name(name: str) -> str:
    """``-o`` variable name (a Python identifier that is not a keyword), else ``UsageError``."""
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(
            f"-o {name!r} is not a Python variable name; for example `%%torchprof -o prof`."
        )
    return name


def check_line_args(args) -> tuple[str, str]:
    """The two names or paths of ``--compare``, or None.

    ``%torchprof`` (line mode): the two names or paths of ``--compare``, or None (show the last
    result).

    Raises:
        UsageError: a flag that applies only to a profiled cell.
    """
    cell_only = [
        flag
        for flag, used in (
            ("--memory", args.memory),
            ("--trace", args.trace is not None),
            ("--steps", args.steps is not None),
            ("--group", args.group is not None),
            ("-o", args.out is not None),
            ("--top", args.top is not None),
            ("--max-trace-mb", args.max_trace_mb is not None),
            ("--stack-depth", args.stack_depth is not None),
        )
        if used
    ]
    if cell_only:
        raise UsageError(
            f"{cell_only[0]} applies to a profiled cell (`%%torchprof {cell_only[0]} ...`); on a "
            "line "
            "`%torchprof` shows the last result and `%torchprof --compare A B` compares two."
        )
    if not args.compare:
        return None
    return args.compare[0], args.compare[1]


def _at_least_one(flag: str, value: int, example: str) -> int:
    if value < 1:
        raise UsageError(f"{flag} must be 1 or more (got {value}); for example `{example}`.")
    return value
