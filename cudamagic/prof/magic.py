"""``%%torchprof`` / ``%torchprof --compare``: the IPython front."""

from __future__ import annotations

import math

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from traitlets import Float, HasTraits, Int, TraitError, validate

from ..core.cell import show_value
from ..core.magic import AreaMagics
from ..core.manual import manual
from ..core.progress import ProgressLine
from . import options
from .compare import compare
from .result import ProfResult
from .run import run_profiled
from .trace import load_trace

USAGE = (
    "%%torchprof [--group op|shape|module|stack] [--top N] [--steps N] [--memory] [--trace "
    "FILE.json[.gz]] "
    "[--max-trace-mb MB] [-o NAME]  or  %torchprof [--compare A B]"
)


class ProfSettings(HasTraits):
    """``%%torchprof`` settings, reachable as ``%config CudaMagics.<name>``."""

    torchprof_top_rows = Int(
        15, min=1, help="`%%torchprof`: rows in the operator and kernel tables."
    ).tag(config=True)
    torchprof_max_trace_mb = Float(
        100.0,
        help="`%%torchprof --trace`: size cap of the written trace file in MiB (stacks, then "
        "steps, then the "
        "latest events are dropped to stay under it).",
    ).tag(config=True)
    torchprof_stack_depth = Int(
        3, min=1, help="`%%torchprof --group stack`: frames of your code per row."
    ).tag(config=True)

    @validate("torchprof_max_trace_mb")
    def _positive_cap(self, proposal):
        value = proposal["value"]
        if not (math.isfinite(value) and value > 0):
            raise TraitError(
                "CudaMagics.torchprof_max_trace_mb must be a number of MiB above 0, not "
                f"{value!r}; "
                "for example `%config CudaMagics.torchprof_max_trace_mb = 100`."
            )
        return value


@magics_class
class ProfMagics(AreaMagics):
    """``%%torchprof`` and ``%torchprof --compare``."""

    def on_load(self) -> None:
        """Start the session with no profiled cell."""
        self.last = None

    @manual(ProfSettings, "%% %", line_only={"--compare"})
    @magic_arguments()
    @argument(
        "--group",
        default=None,
        metavar="op|shape|module|stack",
        help="Operator table rows: op, shape (operator + input shapes), module (operator "
        "+ "
        "innermost nn.Module) or stack (operator + your code's Python frames) (default: op).",
    )
    @argument(
        "--stack-depth",
        type=int,
        default=None,
        metavar="N",
        help="Python frames per row with --group stack (default: "
        "CudaMagics.torchprof_stack_depth).",
    )
    @argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="Rows per table (default: CudaMagics.torchprof_top_rows).",
    )
    @argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="Profile N steps with a profiler schedule: a step is one iteration, ended after each "
        "step() of the first optimizer that steps (others count once per iteration) and outside "
        "your record_function ranges; the first is a warm-up, the next N are recorded.",
    )
    @argument(
        "--memory",
        action="store_true",
        help="Record allocations: peak bytes and the allocation timeline; on CUDA also a memory "
        "snapshot "
        "with Python stacks and PyTorch's memory viewer (NAME_memory.html).",
    )
    @argument(
        "--trace",
        default=None,
        metavar="FILE.json[.gz]",
        help="Write the Chrome/Perfetto trace to this file (.json or .json.gz).",
    )
    @argument(
        "--max-trace-mb",
        type=float,
        default=None,
        metavar="MIB",
        help="Size cap of the --trace file in MiB (default: CudaMagics.torchprof_max_trace_mb).",
    )
    @argument(
        "-o", "--out", default=None, metavar="NAME", help="Store the result in variable NAME."
    )
    @argument(
        "--compare",
        nargs=2,
        default=None,
        metavar=("A", "B"),
        help="Line mode: rank per-operator and per-kernel differences between two results stored "
        "with -o "
        "(or two saved trace files).",
    )
    @line_cell_magic
    def torchprof(self, line="", cell=None):
        """Profile a cell with torch.profiler and show where the time (and memory) went.

        ``%%torchprof`` runs the cell like a normal cell (variables stay; your own exception
        propagates with its source lines, after a profile of the part that ran is shown) under
        ``torch.profiler.profile`` with the CPU activity, plus CUDA when this build and machine
        support it (``torch.profiler.supported_activities()``; a notice says when not). The summary:
        wall time; the top operators by self and total time with full names, call counts, grouped by
        ``--group``; the top GPU kernels with their launching operator; the GPU time breakdown of
        the profiled span (kernel, memcpy, memset, idle); the steps of ``--steps N`` runs; a
        timeline picture (operators by thread, kernels by stream). HTML in a notebook, text in a
        terminal; the returned object (``-o NAME`` also stores it) has ``.table(group=...,
        top=...)``, ``.to_pandas()`` (units in column names), ``.save_html(path)``, ``.trace_path``,
        ``.slowest()``. In a notebook, a cell that runs over a second shows a line updated in place
        ("profiling... 12.0 s", then "analysing 36,504 events..."), emptied when the summary comes.
        The timeline is a picture (an image, so an untrusted notebook shows it too): each operator
        keeps its colour from run to run, and runs of events too short to draw are merged.

        After the summary comes the verdict (also ``prof.verdict``): where the time of the steps
        went, in rows that add up to 100 % (a step is a ``--steps`` step, else the whole cell).
        Each instant goes to the first row that applies. On a CPU-only run: *data wait* (inside
        the DataLoader's ``__next__``), *optimizer* (``optimizer.step()``/``zero_grad()``), *host
        copies* (``.clone()``, ``.to(dtype)``, ``.contiguous()`` called by your code), *compute*
        (any other operator) and *Python overhead* (no operator running). With a GPU: *GPU
        computing* (a kernel running; what the CPU does meanwhile is hidden), *host-device
        copies*, then the GPU is idle: *data wait*, *optimizer*, copies the CPU waits for, *sync
        stalls* (after ``.item()``, ``.cpu()``, ``print(loss)``, ``torch.cuda.synchronize()``),
        *launch gaps* (the CPU is launching) and *Python overhead*. Then the findings, biggest
        avoidable cost first, each with the exact fix and its expected effect (only fixes that
        apply here: no GPU advice without a GPU, no ``pin_memory`` for batches already on the
        GPU or in pinned memory), and the FLOPs of the matmuls,
        convolutions and attention (every SDPA backend, train and eval), the achieved TFLOP/s
        and the MFU against the GPU's dense datasheet peak for the dtype (N/A with the reason
        on a GPU outside the table, never a guess). ``%torchprof --compare A B`` also says which
        breakdown row changed (``data wait 62.0 % -> 8.0 %``, ``step 2.90x faster``).

        ``--trace FILE`` writes the Chrome/Perfetto trace (``.json`` or ``.json.gz``) under
        ``--max-trace-mb`` (default 100): past the cap it drops Python stacks, then whole steps,
        then the latest events, and says so. ``--memory``: peak allocated bytes and the allocation
        timeline (on a GPU machine this also records a CUDA memory snapshot, which initialises CUDA,
        and writes PyTorch's memory viewer next to the trace).

        A profiler already recording in the kernel (yours, Lightning's) gets an explanation and the
        cell runs unprofiled; a profiler the cell starts itself replaces this one's session, which
        the summary says ("profile lost") instead of showing empty tables. The profiler's
        warnings and PyTorch's C++ warnings written while the cell runs are summarised in one
        line; nothing stays enabled afterwards. On the CPU the ``--memory`` peak is an upper
        bound (frees of memory allocated before the cell are not recorded).

        ``%torchprof`` on a line shows the last result again. ``%torchprof --compare A B`` ranks
        per-operator (self time) and per-kernel (device time) differences between two stored results
        or saved trace files, biggest change first.

        Examples:
        --------
        ::

            %%torchprof
            loss = loss_fn(model(xb), yb); loss.backward()

            %%torchprof --group shape --top 10 -o prof_a
            train_steps(model, 20)

            %%torchprof --memory --trace run1.json.gz --steps 3 -o prof
            train_steps(model, 10)

            prof.verdict.first          # the biggest avoidable cost, with .fix
            prof.verdict.breakdown.pct()
            prof.to_pandas()
            prof.table(group="op", top=5)
            %torchprof --compare prof_a prof
            %torchprof                  # the last result again
            %torchprof --compare run1.json.gz run2.json.gz
            %config CudaMagics.torchprof_top_rows = 25
        """
        __tracebackhide__ = True
        args = self.parse(
            self.torchprof, line, usage=USAGE, prefix="%%" if cell is not None else "%"
        )
        if cell is None:
            pair = options.check_line_args(args)
            if pair is None:
                last = self.last
                if last is None:
                    print(
                        "[torchprof] no cell profiled yet in this session: start a cell with "
                        "%%torchprof"
                    )
                return last
            return self._compare(*pair)
        opts = options.check_cell_options(
            args,
            self.settings.torchprof_top_rows,
            self.settings.torchprof_max_trace_mb,
            self.settings.torchprof_stack_depth,
        )
        return self._profile(line, cell, opts)

    def _profile(self, line, cell, opts):
        """``%%torchprof``: run the cell profiled and show the summary."""
        __tracebackhide__ = True
        with ProgressLine("%%torchprof", "prof", every_s=1.0) as status:
            status.say("profiling")
            run = run_profiled(
                self.shell, cell, opts, header=f"%%torchprof {line}".rstrip(), say=status.say
            )
        if run.result is None and run.skipped is None:  # SyntaxError: the cell did not run
            raise run.exception
        if run.skipped:
            print(f"[torchprof] {run.skipped}")
        if run.result is not None:
            self.last = run.result
        if run.result is not None and opts.out:
            self.shell.user_ns[opts.out] = run.result
        if run.exception is not None:
            if run.result is not None:
                display(run.result)
            raise run.exception
        show_value(cell, run.has_value, run.value)
        return run.result

    def _compare(self, a, b):
        """``%torchprof --compare A B``."""
        return compare(self._load(a), self._load(b), a, b)

    def _load(self, name):
        value = self.shell.user_ns.get(name)
        if isinstance(value, ProfResult):
            return value
        if name.lower().endswith((".json", ".json.gz")):
            try:
                return load_trace(name)
            except (OSError, ValueError) as exc:
                raise UsageError(
                    f"%torchprof --compare: cannot read the trace {name!r} ({exc}). Give a trace "
                    "written by `%%torchprof --trace FILE`, or a result stored with -o."
                ) from exc
        what = f"a {type(value).__name__}" if value is not None else "not defined"
        raise UsageError(
            f"%torchprof --compare: {name!r} is {what}, not a profile. Store one with "
            f"`%%torchprof -o {name if name.isidentifier() else 'prof_a'}` or give a "
            ".json/.json.gz "
            "trace file written by --trace."
        )
