"""``%%cudamem`` / ``%cudamem``: the IPython front of memory measurement."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from traitlets import HasTraits, Int

from ..core.cell import show_value
from ..core.fmt import format_bytes
from ..core.magic import AreaMagics
from ..core.manual import manual
from . import options
from .free import FreeUsageError, free_memory
from .history import MemHistory
from .measure import CellMemMonitor, run_measured
from .why import CellGrowth, explain


class MemSettings(HasTraits):
    """``%cudamem`` settings, reachable as ``%config CudaMagics.<name>``."""

    cudamem_threshold_bytes = Int(
        16 * 1024 * 1024,
        min=0,
        help="`%cudamem on` prints a summary line only for cells that change GPU memory "
        "(allocated, "
        "peak over start or reserved; CPU RSS when no CUDA is in use) by more than this many "
        "bytes.",
    ).tag(config=True)
    cudamem_top_tensors = Int(
        10,
        min=0,
        help="`%%cudamem`: number of rows (tensor storages, largest first) in the tensors-left "
        "table.",
    ).tag(config=True)
    cudamem_history_cells = Int(
        1000,
        min=1,
        help="`%cudamem history` keeps the last this many measured cells (older ones are dropped "
        "and counted).",
    ).tag(config=True)


@magics_class
class MemMagics(AreaMagics):
    """``%%cudamem`` and ``%cudamem on|off|history|free|why``."""

    def on_load(self) -> None:
        """Create the session's history and ``%cudamem on`` monitor."""
        self.history = MemHistory(max_records=lambda: self.settings.cudamem_history_cells)
        self.monitor = CellMemMonitor(
            self.shell, self.history, lambda: self.settings.cudamem_threshold_bytes
        )
        self.add_cleanup(self.monitor.stop)
        self.growth = CellGrowth(self.shell)  # the growth notice and `%cudamem why`'s baseline
        self.add_cleanup(self.growth.stop)

    @manual(MemSettings, "%% %", line_only=options.LINE_ONLY)
    @magic_arguments()
    @argument(
        "action",
        nargs="?",
        default=None,
        metavar="on|off|history|free|why",
        help="Line mode only: `on`, `off`, `history`, `free` or `why`. Cell mode takes none.",
    )
    @argument(
        "--reset-peak",
        action="store_true",
        help="%%%%cudamem: reset torch.cuda peak counters before the cell for an exact in-cell "
        "peak "
        "(this resets your own max_memory_allocated).",
    )
    @argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="%%%%cudamem: rows in the tensors-left table (default: "
        "CudaMagics.cudamem_top_tensors).",
    )
    @argument(
        "--threshold",
        default=None,
        metavar="SIZE",
        help="on: summary threshold, e.g. 64MiB or a number of bytes; it also sets the setting "
        "(default: CudaMagics.cudamem_threshold_bytes).",
    )
    @argument("--json", action="store_true", help="history: print the records as JSON.")
    @argument("--clear", action="store_true", help="history: forget the records.")
    @argument(
        "--out",
        nargs="*",
        type=int,
        default=None,
        metavar="N",
        help="free: also release output-cache entries Out[N] (N: output history indices; all "
        "holding tensors when no N given) and _, __, ___.",
    )
    @argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME",
        help="free: also delete variable NAME from the namespace (repeatable).",
    )
    @line_cell_magic
    def cudamem(self, line="", cell=None):
        """Show what a cell did to GPU/CPU memory, measure every cell, or get memory back.

        ``%%cudamem`` runs the cell like a normal cell (variables persist, errors propagate with
        their source lines) and returns a report: wall time; per CUDA device allocated
        before/after/delta, peak during the cell, reserved before/after, allocator retries and OOMs
        (from ``torch.cuda.memory_stats``, read only when CUDA is initialised: measuring never
        creates a CUDA context); this process's GPU memory as NVML sees it; CPU RSS before/after;
        and the largest tensors left reachable from the namespace (``x``, ``model.fc.weight``,
        ``Out[7]``). Under an allocator that keeps no statistics
        (``torch.cuda.memory.change_current_allocator``, e.g. RAPIDS RMM's) the GPU figures are N/A
        with that reason; the cell runs as usual. The value of a final expression is displayed, not
        stored in ``Out`` (the report is).

        Peak: computed from the allocator's counters without resetting them, so your own
        ``torch.cuda.max_memory_allocated()`` is left intact; when the cell stays below an earlier
        peak the figure is an upper bound (marked). ``--reset-peak`` gives an exact peak by calling
        ``torch.cuda.reset_peak_memory_stats()`` first, which resets your peak readings too.

        ``%cudamem on`` measures every cell through IPython's ``pre_run_cell``/``post_run_cell``
        events (no thread, no ``empty_cache()``) and prints one line for cells that changed memory
        by more than ``CudaMagics.cudamem_threshold_bytes``. ``%cudamem off`` (and ``%unload_ext
        cudamagic``) removes the callbacks. ``%cudamem history`` shows the measured cells (the last
        ``CudaMagics.cudamem_history_cells``, default 1000; it says how many older ones were
        dropped).

        ``%cudamem on`` also watches for memory that keeps growing: when allocated memory (without
        CUDA, the C heap's bytes in use) rises by at least 1 MiB in each of 3 cells in a row it
        prints one line with the rate (once per run of growth; a one-time rise such as the first
        step's optimizer state never makes 3 in a row). Reserved memory that grows while allocated
        stays flat is told apart as fragmentation, with its fix.

        ``%cudamem why`` names what holds the memory that grew since the growth began (or since
        the previous ``%cudamem why``): a variable, an attribute path (``model.cache``), a list or
        dict, a closure, a hook, a generator, ``sys.last_traceback``, the output history
        (``Out[12]``) or a library's module-level list; when the memory is held through autograd
        it counts the ``grad_fn`` nodes (``running_loss`` holds 400 ``AddBackward0`` nodes) and the
        saved tensors they keep. Each holder comes with its fix and the bytes it would return. It
        frees, moves and keeps alive nothing.

        ``%cudamem free`` (after an out-of-memory error) clears the saved traceback and its frames'
        locals (``%debug`` can no longer inspect that error), runs ``gc.collect()`` and, when CUDA
        is initialised, ``torch.cuda.empty_cache()``; it reports the bytes freed and lists what else
        holds tensors (``Out[n]``, ``_``, large variables), which it releases only when you name
        them.

        Examples:
        --------
        ::

            %%cudamem
            model = Net().cuda()
            loss = train_one_epoch(model)

            %%cudamem --reset-peak --top 5
            y = model(x)

            r = _                      # the last report
            r.gpu("cuda:0").peak_allocated_bytes, r.tensors

            %cudamem on
            %config CudaMagics.cudamem_threshold_bytes = 256 * 2**20
            %cudamem on --threshold 1GiB
            %cudamem history
            %cudamem history --json
            %cudamem off
            %cudamem free
            %cudamem free --out        # also drop Out[n] entries and _, __, ___ holding tensors
            %cudamem free --out 7 --var activations
            %cudamem why               # what holds the memory that keeps growing
        """
        __tracebackhide__ = True
        args = self.parse(self.cudamem, line)
        action = options.check_action(args, is_cell=cell is not None)
        if cell is not None:
            top = options.check_top(
                self.settings.cudamem_top_tensors if args.top is None else args.top
            )
            return self._measure_cell(line, cell, top, args.reset_peak)
        if action == "on":
            return self._on(args.threshold)
        if action == "off":
            was = self.monitor.active
            self.monitor.stop()
            self.growth.stop()
            print("[cudamem] off" if was else "[cudamem] was not on")
            return None
        if action == "history":
            return self._history(args.json, args.clear)
        if action == "why":
            return explain(self.shell, self.growth)
        return self._free(args.out, args.var)

    def _measure_cell(self, line, cell, top, reset_peak):
        """``%%cudamem``: run the cell measured and keep its report."""
        __tracebackhide__ = True
        self.monitor.skip_current_cell()
        run = run_measured(
            self.shell, cell, header=f"%%cudamem {line}".rstrip(), top=top, reset_peak=reset_peak
        )
        if run.report is None:  # a SyntaxError: the cell did not run
            raise run.exception
        self.history.append(run.report)
        if run.exception is not None:
            display(run.report)
            raise run.exception
        show_value(cell, run.has_value, run.value)
        return run.report

    def _on(self, threshold):
        """``%cudamem on [--threshold N]``: measure every cell from now on."""
        if threshold is not None:
            self.settings.cudamem_threshold_bytes = options.threshold_bytes(threshold)
        self.monitor.growth = self.growth
        self.monitor.start()
        print(
            f"[cudamem] on: a line after cells that change memory by more than "
            f"{format_bytes(self.settings.cudamem_threshold_bytes)} (`%cudamem off` stops)"
        )

    def _history(self, as_json: bool, clear: bool):
        """``%cudamem history [--json] [--clear]``."""
        snap = self.history.snapshot()
        if clear:
            self.history.clear()
        if as_json:
            print(snap.to_json())
            return None
        return snap

    def _free(self, out, variables):
        """``%cudamem free [--out [N ...]] [--var NAME]``."""
        try:
            return free_memory(self.shell, out=out, variables=variables)
        except FreeUsageError as exc:
            raise UsageError(
                f"%cudamem free: {exc}. Check the name with `%who` or the cache with `Out.keys()`, "
                "then run `%cudamem free` again."
            ) from exc
