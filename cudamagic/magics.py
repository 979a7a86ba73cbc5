"""The IPython front of cudamagic: one thin method per magic.

``CudaMagics`` parses arguments (``IPython.core.magic_arguments``), calls plain
functions in the modules below, and returns objects that render as HTML in a
notebook and as text in a terminal. Defaults live in ``config=True`` traits, so
``%config CudaMagics.<name> = value`` and ``ipython_config.py`` both work.

Each feature that owns a thread, an event callback or an exception hook
registers a cleanup with :meth:`CudaMagics.add_cleanup`; ``%unload_ext cudamagic``
runs them all and removes the magics.
"""

from __future__ import annotations

import math

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Int, TraitError, Unicode, validate

_ACTIVE = None  # the CudaMagics instance registered on the running shell


@magics_class
class CudaMagics(Magics):
    """Magics for PyTorch + CUDA: ``%cudainfo``, ``%gpuwatch``, ``%%autograd_graph``,
    ``%%cudamem``/``%cudamem`` and ``%cudaexplain``."""

    # ---- configuration traits (units in the names) --------------------------------
    nvcc_timeout_s = Float(
        5.0, min=0.1, max=600.0,
        help="Seconds (0.1 to 600) to wait for `nvcc -V` before reporting it as not available."
    ).tag(config=True)

    @validate("nvcc_timeout_s")
    def _finite_timeout(self, proposal):
        value = proposal["value"]
        if not math.isfinite(value):
            raise TraitError(f"nvcc_timeout_s must be a finite number of seconds, not {value!r}")
        return value

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self._cleanups = []

    def _parse(self, func, line, usage):
        """``parse_argstring`` whose errors say what to type instead.

        Args:
            func: the magic method (its ``magic_arguments`` parser is used).
            line: the argument string.
            usage: one-line usage, e.g. ``"%cudainfo [--json | -q]"``.

        Raises:
            UsageError: unknown flag or bad value, with the usage line and a pointer to ``%magic?``.
        """
        try:
            return parse_argstring(func, line)
        except UsageError as exc:
            name = func.__name__
            raise UsageError(f"%{name}: {exc}. Usage: {usage}. Type %{name}? for every option.") from None

    # ---- lifecycle --------------------------------------------------------------
    def add_cleanup(self, func):
        """Register ``func()`` to run on ``%unload_ext cudamagic`` (in reverse order)."""
        self._cleanups.append(func)
        return func

    def shutdown(self):
        """Run every registered cleanup; errors are collected, not raised one by one."""
        errors = []
        while self._cleanups:
            func = self._cleanups.pop()
            try:
                func()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
        if errors:
            raise errors[0]

    # ==== %cudainfo (issue 2) =======================================================
    @magic_arguments()
    @argument("--json", action="store_true", help="Print the report as JSON (nvidia-smi --query-gpu key names).")
    @argument("-q", "--quiet", action="store_true",
              help="Display nothing; the report is stored as `_cudainfo` in the user namespace.")
    @line_magic
    def cudainfo(self, line=""):
        """Report the whole PyTorch / CUDA / driver / GPU picture, with findings.

        Examples
        --------
        ::

            %cudainfo
            %cudainfo --json
            info = %cudainfo          # the report object; assignment shows nothing
            info.to_dict()["gpus"]    # nvidia-smi --query-gpu key names, raw NVML units
            %cudainfo -q              # collect silently; the report is in `_cudainfo`
            %cudainfo;                # the same

        Never creates a CUDA context, never raises on a machine without a GPU,
        driver, nvcc or NVML: what cannot be read shows as N/A with the reason.
        """
        stripped = line.rstrip()
        quiet = stripped.endswith(";")  # `%cudainfo ;` as in `expr;`: display nothing
        args = self._parse(self.cudainfo, stripped.rstrip(";"), "%cudainfo [--json | -q]")
        if args.json and args.quiet:
            raise UsageError("%cudainfo: --json prints the report and -q displays nothing; use one of them. "
                             "Usage: %cudainfo [--json | -q].")
        from .envinfo import collect

        report = collect(nvcc_timeout_s=self.nvcc_timeout_s)
        if args.json:
            print(report.to_json())
            return None
        if args.quiet or quiet:
            self.shell.user_ns["_cudainfo"] = report
            return None
        return report

    def _cudainfo_quiet(self, line=""):
        """``%cudainfo;``: IPython reads the ``;`` as part of the magic's name, so it is registered too."""
        return self.cudainfo(line.rstrip() + " ;")

    # ==== %gpuwatch (issue 3) =======================================================
    watch_interval_s = Float(
        1.0, min=0.05, help="Seconds between %gpuwatch samples (--interval). Minimum 0.1 s live (NVML's "
        "utilization counters average over 1/6 s to 1 s, so faster sampling repeats values while costing NVML "
        "calls and widget traffic) and 0.05 s for --replay (no NVML cost; about 20 updates/s is what a front "
        "end renders smoothly)."
    ).tag(config=True)
    watch_history_samples = Int(
        600, min=2, max=1_000_000, help="Samples %gpuwatch keeps in memory (a ring buffer: constant memory "
        "however long it runs); watch.history returns them (--history)."
    ).tag(config=True)
    watch_devices = Unicode(
        "", help="Comma-separated 0-based NVML indices (nvidia-smi order) that %gpuwatch shows; empty = all "
        "(--devices)."
    ).tag(config=True)
    watch_text = Bool(
        False, help="Always use the plain-text table instead of widgets (--text)."
    ).tag(config=True)

    def _gpuwatch_widgets_ok(self):
        """True in a Jupyter kernel with ipywidgets importable (else the text table is used)."""
        if self.watch_text or type(self.shell).__name__ != "ZMQInteractiveShell":
            return False
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            return False
        return True

    @magic_arguments()
    @argument("-i", "--interval", type=float, default=None, metavar="SECONDS",
              help="Seconds between samples (default CudaMagics.watch_interval_s = 1.0; at least 0.1 live, "
                   "0.05 with --replay; at most 3600).")
    @argument("-d", "--devices", default=None, metavar="LIST",
              help="Comma-separated 0-based NVML indices (nvidia-smi order), e.g. 0,2. Default: all GPUs.")
    @argument("--history", type=int, default=None, metavar="N",
              help="Samples kept in memory (default CudaMagics.watch_history_samples = 600).")
    @argument("-n", "--count", type=int, default=None, metavar="N", help="Stop after N samples.")
    @argument("--stop", action="store_true", help="Stop the running monitor.")
    @argument("--text", action="store_true", help="Plain-text table instead of widgets.")
    @argument("--loop", action="store_true",
              help="Terminal: reprint the table every interval until Ctrl-C (like nvidia-smi -l).")
    @argument("--log", default=None, metavar="FILE.jsonl",
              help="Append every sample to this JSON-lines file (nvidia-smi key names, raw units).")
    @argument("--replay", default=None, metavar="FILE.jsonl",
              help="Play a file written by --log through the same display, labelled as a replay.")
    @line_magic
    def gpuwatch(self, line=""):
        """Live GPU monitor (utilization, memory, power, clocks, processes, PyTorch allocator, host) that keeps
        updating while other cells run.

        In a notebook it shows a widget updated by one background thread per kernel (running
        ``%gpuwatch`` again re-displays the same monitor); in terminal IPython, or with ``--text``,
        it prints a text table (``--loop`` refreshes it until Ctrl-C). NVML faults never stop it:
        unreadable fields show N/A with the reason. Returns the monitor: ``watch.history`` (records
        with nvidia-smi key names, raw units: bytes, mW, MHz, %), ``watch.running``, ``watch.stop()``.

        Examples
        --------
        ::

            %gpuwatch
            watch = %gpuwatch --interval 0.5 --devices 0,1 --log run1.jsonl
            watch
            import pandas as pd; pd.DataFrame(watch.history)
            %gpuwatch --stop
            %gpuwatch --replay examples/trace_demo.jsonl --interval 0.05
            %gpuwatch --text --loop --interval 2
            %config CudaMagics.watch_interval_s = 2.0
        """
        args = parse_argstring(self.gpuwatch, line)
        from . import telemetry, watch as W

        if not getattr(self, "_gpuwatch_cleanup_added", False):
            self.add_cleanup(W.stop_current)
            self._gpuwatch_cleanup_added = True
        if args.stop:
            w = W.current()
            if w is None or not w.running:
                print("No %gpuwatch is running.")
            else:
                w.stop()
                print(f"%gpuwatch stopped after {w.samples_taken} samples.")
            return None
        interval = self.watch_interval_s if args.interval is None else args.interval
        minimum = 0.05 if args.replay else 0.1
        given = "--interval" if args.interval is not None else "CudaMagics.watch_interval_s ="
        if math.isnan(interval):
            raise UsageError(f"{given} {interval:g} is not a number of seconds; type for example "
                             "`%gpuwatch --interval 0.5`.")
        if not interval >= minimum:
            raise UsageError(f"{given} {interval:g} is below the minimum of {minimum:g} s "
                             f"{'for a replay' if args.replay else 'for a live watch'}; type for example "
                             f"`%gpuwatch --interval {max(minimum, 0.5):g}`.")
        if interval > telemetry.MAX_INTERVAL_S:
            raise UsageError(f"{given} {interval:g} is too long: the interval is at most "
                             f"{telemetry.MAX_INTERVAL_S:g} s; type for example `%gpuwatch --interval 60`.")
        history = self.watch_history_samples if args.history is None else args.history
        if not 2 <= history <= 1_000_000:
            raise UsageError(f"--history {history} is out of range; give between 2 and 1000000 samples, "
                             "e.g. `%gpuwatch --history 600`.")
        if args.count is not None and args.count < 1:
            raise UsageError(f"--count {args.count} must be at least 1, e.g. `%gpuwatch --count 10`.")
        if args.replay and args.log:
            raise UsageError("--replay and --log cannot be combined: a replay re-plays a log. "
                             "Type `%gpuwatch --replay FILE.jsonl`.")
        widget = not (args.text or args.loop) and self._gpuwatch_widgets_ok()
        changing = (args.replay, args.log, args.devices, args.interval, args.history, args.count, args.loop,
                    args.text)
        running = W.current()
        if running is not None and running.running and not any(x not in (None, False) for x in changing) \
                and (running.view is not None) == widget:
            return running  # re-display the one monitor of this kernel

        devices_text = self.watch_devices if args.devices is None else args.devices
        if args.replay:
            try:
                source = telemetry.ReplaySource(args.replay)
            except telemetry.TraceError as exc:
                raise UsageError(f"Cannot replay: {exc}. A replay file is a JSON-lines trace written by "
                                 "`%gpuwatch --log FILE.jsonl`; try `%gpuwatch --replay "
                                 "examples/trace_demo.jsonl`.") from exc
        else:
            devices = None
            if devices_text.strip():
                try:
                    devices = [int(d) for d in devices_text.replace(" ", "").split(",") if d != ""]
                except ValueError as exc:
                    raise UsageError(f"--devices {devices_text!r} is not a list of GPU indices; type for "
                                     "example `%gpuwatch --devices 0,1`.") from exc
                if not devices:
                    raise UsageError(f"--devices {devices_text!r} names no GPU; give 0-based NVML indices, e.g. "
                                     "`%gpuwatch --devices 0,1`, or leave --devices out to show every GPU.")
            source = telemetry.LiveSource(devices=None)
            if devices is not None and source.status is None:
                bad = [d for d in devices if not 0 <= d < source.device_count]
                if bad:
                    raise UsageError(f"--devices: GPU {bad[0]} does not exist; NVML sees {source.device_count} "
                                     f"GPU(s), indices 0 to {source.device_count - 1} (nvidia-smi order). Type "
                                     f"for example `%gpuwatch --devices 0`.")
                source.devices = list(dict.fromkeys(devices))
        writer = None
        if args.log:
            try:
                writer = telemetry.TraceWriter(args.log, source="live recording by %gpuwatch --log",
                                               interval_s=interval)
            except telemetry.TraceError as exc:
                raise UsageError(f"Cannot log: {exc}. Give a new file name, e.g. "
                                 "`%gpuwatch --log gpuwatch_run2.jsonl`.") from exc
        options = {"replay": args.replay, "log": args.log, "devices": devices_text, "interval_s": interval}
        if widget:
            return W.start_watch(source, interval_s=interval, history_len=history, count=args.count,
                                 writer=writer, widget=True, options=options)
        if args.loop or (args.count or 1) > 1 and not args.log:
            return self._gpuwatch_foreground(W, source, interval, history, args.count, writer)
        if not args.log and not args.replay:
            import time
            time.sleep(0.1)  # one snapshot: CPU % needs two readings (the source primed the first)
        return W.start_watch(source, interval_s=interval, history_len=history, count=args.count, writer=writer,
                             widget=False, background=bool(args.log), options=options)

    def _gpuwatch_foreground(self, W, source, interval, history, count, writer):
        """Terminal loop: print the table every interval until Ctrl-C or --count (main thread, no widget)."""
        import sys

        from .telemetry import Sampler
        from .widgets import sample_text

        W.stop_current()
        sampler = Sampler(source, interval_s=interval, history_len=history, count=count, writer=writer)
        watch = W.GpuWatch(sampler, label=source.label, widget=False)

        def show(sample):
            if sys.stdout.isatty():
                print("\x1b[2J\x1b[H", end="")
            else:
                print()
            print(sample_text(sample, source.label, f"refreshing every {interval:g} s; Ctrl-C stops",
                              sampler.error), flush=True)

        sampler.on_sample = show
        try:
            sampler.run_loop()
        except KeyboardInterrupt:
            sampler.finished = "stopped by Ctrl-C"
        return watch

    # ==== %%autograd_graph (issue 4) ================================================
    graph_dot_timeout_s = Float(
        20.0, help="Seconds the Graphviz `dot` program may run for one %%autograd_graph picture before it is "
        "killed and a collapsed view (or a summary) is shown instead."
    ).tag(config=True)
    graph_node_budget = Int(
        2500, help="Most nodes (count) %%autograd_graph draws in full; bigger graphs are drawn as the "
        "collapsed module view."
    ).tag(config=True)
    graph_format = Unicode(
        "svg", help="Default picture format of %%autograd_graph: svg, png, pdf or dot (DOT source only)."
    ).tag(config=True)

    @magic_arguments()
    @argument("-o", "--output", default=None, metavar="NAME[,NAME...]",
              help="Draw these variables instead of the cell's last expression.")
    @argument("--show-saved", action="store_true", help="Draw the tensors each op saves for backward.")
    @argument("--show-attrs", action="store_true", help="Show non-tensor saved attributes (alpha, dim, sizes).")
    @argument("--group", action="store_true", help="Draw each nn.Module call as a labelled cluster.")
    @argument("--depth", type=int, default=None, metavar="D",
              help="Collapse module calls deeper than D into single boxes (0: one box per top-level call).")
    @argument("--no-fold", action="store_true",
              help="With --depth, keep repeated identical blocks separate instead of one box 'x N'.")
    @argument("--shared-params", action="store_true",
              help="One node per parameter even when many ops use it (default: one node per use, faster).")
    @argument("--format", default=None, choices=["svg", "png", "pdf", "dot"],
              help="Picture format (default: CudaMagics.graph_format).")
    @argument("--save", default=None, metavar="PATH",
              help="Also write the picture to PATH (format from the extension: .svg .png .pdf .dot).")
    @argument("--timeout", type=float, default=None, metavar="S",
              help="Seconds dot may run (default: CudaMagics.graph_dot_timeout_s).")
    @argument("--max-nodes", type=int, default=None, metavar="N",
              help="Node budget before collapsing (default: CudaMagics.graph_node_budget).")
    @cell_magic
    def autograd_graph(self, line, cell):
        """Run the cell and draw the autograd graph (grad_fn DAG) of its result.

        The cell runs like a normal cell (its variables stay; your own errors show
        your source). The last expression, or the ``-o`` variables, may be a
        tensor or a tuple/list/dict/namedtuple/dataclass of tensors. Parameters are
        named by their module path, ops show the bytes they save for backward, and
        big graphs collapse into module boxes. Returns a ``GraphResult`` with
        ``.nodes``, ``.edges``, ``.dot`` and ``.save(path)``.

        Examples
        --------
        ::

            %%autograd_graph
            loss = loss_fn(model(x), y)
            loss

            %%autograd_graph -o logits,loss --show-saved
            logits = model(x); loss = logits.sum()

            %%autograd_graph --group --depth 1 --save encoder.svg
            encoder(src)

            g = _          # the GraphResult: g.nodes, g.edges, g.dot, g.save("graph.pdf")
            %config CudaMagics.graph_dot_timeout_s = 60
        """
        args = parse_argstring(self.autograd_graph, line)
        fmt = args.format or self.graph_format
        if fmt not in ("svg", "png", "pdf", "dot"):
            raise UsageError(f"Unknown graph format {fmt!r}: use one of svg, png, pdf, dot, for example "
                             "`%config CudaMagics.graph_format = 'svg'`.")
        if args.depth is not None and args.depth < 0:
            raise UsageError("--depth must be 0 or more, for example `%%autograd_graph --depth 1`.")
        budget = self.graph_node_budget if args.max_nodes is None else args.max_nodes
        if budget < 1:
            what = "--max-nodes" if args.max_nodes is not None else "CudaMagics.graph_node_budget"
            raise UsageError(f"{what} must be 1 or more (got {budget}); for example "
                             "`%%autograd_graph --max-nodes 5000`.")
        from . import graphviz_render

        try:
            timeout_s = graphviz_render.check_timeout(
                self.graph_dot_timeout_s if args.timeout is None else args.timeout,
                "--timeout" if args.timeout is not None else "CudaMagics.graph_dot_timeout_s")
            if args.save is not None:
                graphviz_render.save_format(args.save)  # checked before the cell runs
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        names = [n.strip() for n in (args.output or "").split(",") if n.strip()]
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise UsageError("%%autograd_graph needs PyTorch: `pip install torch`.") from exc
        from . import graph

        __tracebackhide__ = True  # noqa: F841 - the user's error shows their cell, not this frame
        try:
            gr = graph.capture(self.shell, cell, line, names, show_saved=args.show_saved,
                               show_attrs=args.show_attrs, shared_params=args.shared_params)
        except graph.NothingToDraw as exc:
            raise UsageError(str(exc)) from exc
        except SyntaxError as exc:  # the cell did not run: shown without our parser frames
            raise exc.with_traceback(None) from None
        return graphviz_render.draw(
            gr, fmt=fmt, group=args.group, depth=args.depth, fold=not args.no_fold,
            node_budget=budget, timeout_s=timeout_s, save_path=args.save)

    # ==== %%cudamem / %cudamem (issue 5) ============================================
    cudamem_threshold_bytes = Int(
        16 * 1024 * 1024, min=0,
        help="`%cudamem on` prints a summary line only for cells that change GPU memory (allocated, "
             "peak over start or reserved; CPU RSS when no CUDA is in use) by more than this many bytes.",
    ).tag(config=True)
    cudamem_top_tensors = Int(
        10, min=0, help="`%%cudamem`: number of rows (tensor storages, largest first) in the tensors-left table."
    ).tag(config=True)
    cudamem_history_cells = Int(
        1000, min=1,
        help="`%cudamem history` keeps the last this many measured cells (older ones are dropped and counted).",
    ).tag(config=True)

    def _cudamem_state(self):
        """The session's history and `on` monitor (created on first use; cleanup registered once)."""
        state = getattr(self, "_cudamem", None)
        if state is None:
            from .cellmem import CellMemMonitor, MemHistory

            history = MemHistory(max_records=lambda: self.cudamem_history_cells)
            monitor = CellMemMonitor(self.shell, history, lambda: self.cudamem_threshold_bytes)
            state = self._cudamem = {"history": history, "monitor": monitor}
            self.add_cleanup(monitor.stop)
        return state

    @magic_arguments()
    @argument("action", nargs="?", default=None,
              help="Line mode only: `on`, `off`, `history` or `free`. Cell mode takes none.")
    @argument("--reset-peak", action="store_true",
              help="%%%%cudamem: reset torch.cuda peak counters before the cell for an exact in-cell peak "
                   "(this resets your own max_memory_allocated).")
    @argument("--top", type=int, default=None,
              help="%%%%cudamem: rows in the tensors-left table (default CudaMagics.cudamem_top_tensors).")
    @argument("--threshold", default=None,
              help="on: summary threshold, e.g. 64MiB or a number of bytes (sets CudaMagics.cudamem_threshold_bytes).")
    @argument("--json", action="store_true", help="history: print the records as JSON.")
    @argument("--clear", action="store_true", help="history: forget the records.")
    @argument("--out", nargs="*", type=int, default=None,
              help="free: also release output-cache entries Out[N] (all holding tensors when no N given) "
                   "and _, __, ___.")
    @argument("--var", action="append", default=[], metavar="NAME",
              help="free: also delete variable NAME from the namespace (repeatable).")
    @line_cell_magic
    def cudamem(self, line="", cell=None):
        """Show what a cell did to GPU/CPU memory, measure every cell, or get memory back.

        ``%%cudamem`` runs the cell like a normal cell (variables persist, errors propagate with
        their source lines) and returns a report: wall time; per CUDA device allocated
        before/after/delta, peak during the cell, reserved before/after, allocator retries and OOMs
        (from ``torch.cuda.memory_stats``, read only when CUDA is initialised: measuring never creates
        a CUDA context); this process's GPU memory as NVML sees it; CPU RSS before/after; and the
        largest tensors left reachable from the namespace (``x``, ``model.fc.weight``, ``Out[7]``).
        The value of a final expression is displayed, not stored in ``Out`` (the report is).

        Peak: computed from the allocator's counters without resetting them, so your own
        ``torch.cuda.max_memory_allocated()`` is left intact; when the cell stays below an earlier
        peak the figure is an upper bound (marked). ``--reset-peak`` gives an exact peak by calling
        ``torch.cuda.reset_peak_memory_stats()`` first, which resets your peak readings too.

        ``%cudamem on`` measures every cell through IPython's ``pre_run_cell``/``post_run_cell``
        events (no thread, no ``empty_cache()``) and prints one line for cells that changed memory by
        more than ``CudaMagics.cudamem_threshold_bytes``. ``%cudamem off`` (and ``%unload_ext
        cudamagic``) removes the callbacks. ``%cudamem history`` shows the measured cells (the last
        ``CudaMagics.cudamem_history_cells``, default 1000; it says how many older ones were dropped).

        ``%cudamem free`` (after an out-of-memory error) clears the saved traceback and its frames'
        locals (``%debug`` can no longer inspect that error), runs ``gc.collect()`` and, when CUDA is
        initialised, ``torch.cuda.empty_cache()``; it reports the bytes freed and lists what else holds
        tensors (``Out[n]``, ``_``, large variables), which it releases only when you name them.

        Examples
        --------
        ::

            %%cudamem
            model = Net().cuda()
            loss = train_one_epoch(model)

            %%cudamem --reset-peak --top 5
            y = model(x)

            r = _                      # the last report: r.gpu("cuda:0").peak_allocated_bytes, r.tensors
            %cudamem on
            %config CudaMagics.cudamem_threshold_bytes = 256 * 2**20
            %cudamem on --threshold 1GiB
            %cudamem history
            %cudamem history --json
            %cudamem off
            %cudamem free
            %cudamem free --out        # also drop Out[n] entries and _, __, ___ holding tensors
            %cudamem free --out 7 --var activations
        """
        __tracebackhide__ = True
        args = parse_argstring(self.cudamem, line)
        from . import cellmem

        state = self._cudamem_state()
        action = args.action
        used = {"--reset-peak": args.reset_peak, "--top": args.top is not None,
                "--threshold": args.threshold is not None, "--json": args.json, "--clear": args.clear,
                "--out": args.out is not None, "--var": bool(args.var)}
        allowed = {None: {"--reset-peak", "--top"}, "on": {"--threshold"}, "off": set(),
                   "history": {"--json", "--clear"}, "free": {"--out", "--var"}}

        if cell is not None:
            if action is not None:
                raise UsageError(f"%%cudamem takes no action word (got {action!r}). Put `%cudamem {action}` on a "
                                 "line of its own, or start the cell with just `%%cudamem`.")
        elif action is None:
            raise UsageError("%cudamem needs an action: `%cudamem on`, `%cudamem off`, `%cudamem history`, "
                             "`%cudamem free`; or use `%%cudamem` as the first line of a cell to measure it.")
        elif action not in allowed:
            raise UsageError(f"unknown %cudamem action {action!r}: use `%cudamem on`, `%cudamem off`, "
                             "`%cudamem history` or `%cudamem free`.")
        bad = [flag for flag, on in used.items() if on and flag not in allowed[action]]
        if bad:
            where = "%%cudamem" if action is None else f"%cudamem {action}"
            ok = ", ".join(sorted(allowed[action])) or "no flags"
            raise UsageError(f"{bad[0]} does not apply to {where} (it takes {ok}); see `%cudamem?`.")

        if cell is not None:
            top = self.cudamem_top_tensors if args.top is None else args.top
            if top < 0:
                raise UsageError(f"--top must be 0 or more (got {top}); for example `%%cudamem --top 5`.")
            state["monitor"].skip_current_cell()
            run = cellmem.run_measured(self.shell, cell, header=f"%%cudamem {line}".rstrip(), top=top,
                                       reset_peak=args.reset_peak)
            if run.report is None:  # SyntaxError: the cell did not run (raised without our parser frames)
                raise run.exception
            state["history"].append(run.report)
            from IPython.display import display

            if run.exception is not None:
                display(run.report)
                raise run.exception
            if run.has_value and run.value is not None:
                from IPython.core.displayhook import DisplayHook

                if not DisplayHook.semicolon_at_end_of_expression(cell):
                    display(run.value)
            return run.report

        if action == "on":
            if args.threshold is not None:
                try:
                    self.cudamem_threshold_bytes = cellmem.parse_bytes(args.threshold)
                except ValueError as exc:
                    raise UsageError(f"--threshold: {exc}; for example `%cudamem on --threshold 64MiB`.") from exc
            state["monitor"].start()
            from .render import format_bytes

            print(f"[cudamem] on: a line after cells that change memory by more than "
                  f"{format_bytes(self.cudamem_threshold_bytes)} (`%cudamem off` stops)")
            return None
        if action == "off":
            was = state["monitor"].active
            state["monitor"].stop()
            print("[cudamem] off" if was else "[cudamem] was not on")
            return None
        if action == "history":
            history = state["history"]
            snap = history.snapshot()
            if args.clear:
                history.clear()
            if args.json:
                print(snap.to_json())
                return None
            return snap
        # free
        try:
            return cellmem.free_memory(self.shell, out=args.out, variables=args.var)
        except cellmem.FreeUsageError as exc:
            raise UsageError(f"%cudamem free: {exc}. Check the name with `%who` or the cache with `Out.keys()`, "
                             "then run `%cudamem free` again.") from exc


    # ==== %cudaexplain and the error explainer (issue 6) ============================
    explain_errors = Bool(
        True, help="Show a box below the traceback of a failing cell when the error is a known CUDA / "
                   "autograd case (what happened, why, the fix). The traceback itself is never changed.",
    ).tag(config=True)

    #: The :class:`cudamagic.explain.Explanation` shown after the last failing cell, or None.
    #: Holds strings and numbers only (no exception, traceback or frame).
    last_explanation = None

    def _install_explainer(self):
        """Register the ``post_run_cell`` callback that shows the box; removed on ``%unload_ext``.

        ``post_run_cell`` rather than ``set_custom_exc``: it runs after IPython has shown the
        traceback (so the box lands below it, in the same cell output), it leaves IPython's
        exception display alone, it does not take the shell's single custom-exception slot
        (another extension's handler keeps working, and ours runs after it), and it works the
        same in the terminal and in ipykernel.
        """
        callback = self._explain_after_cell
        self.shell.events.register("post_run_cell", callback)

        def remove():
            try:
                self.shell.events.unregister("post_run_cell", callback)
            except ValueError:
                pass

        self.add_cleanup(remove)

    def _explain_after_cell(self, result):
        """``post_run_cell`` callback: display the explanation of ``result.error_in_exec``, if any."""
        self.last_explanation = None
        exc = getattr(result, "error_in_exec", None)
        if exc is None or not self.explain_errors or isinstance(exc, UsageError):
            return
        try:
            from .explain import explain, scene_from_shell

            explanation = explain(exc, scene_from_shell(self.shell, exc))
        except Exception:  # the explainer must never add an error of its own to a failing cell
            return
        finally:
            exc = None
        if explanation is None:
            return
        self.last_explanation = explanation
        from IPython.display import display

        display(explanation)

    @magic_arguments()
    @argument("entry", nargs="?", default=None,
              help="A catalogue id (see --list) to show that entry without an error.")
    @argument("--list", action="store_true", dest="list_", help="Show the catalogue of known errors.")
    @line_magic
    def cudaexplain(self, line=""):
        """Explain the last error in plain words: what happened, why, and the fix.

        After ``%load_ext cudamagic`` a known CUDA / autograd error already gets its box below
        the traceback; ``%cudaexplain`` shows it again (or explains the last error when
        ``CudaMagics.explain_errors`` is False). The last error is IPython's ``sys.last_value``.

        Examples
        --------
        ::

            %cudaexplain
            %cudaexplain --list
            %cudaexplain cuda-oom
            %config CudaMagics.explain_errors = False
        """
        args = self._parse(self.cudaexplain, line, "%cudaexplain [--list] [ENTRY]")
        from .explain import CATALOGUE, Explanation, entry_by_id, explain, scene_from_shell
        from .explain_render import CatalogueView, NoMatch

        if args.list_:
            return CatalogueView(CATALOGUE)
        if args.entry:
            entry = entry_by_id(args.entry)
            if entry is None:
                raise UsageError(f"There is no catalogue entry {args.entry!r}. Type `%cudaexplain --list` to see "
                                 "the ids, or `%cudaexplain` alone to explain the last error.")
            return Explanation(entry=entry, exc_type="(catalogue entry)", message=entry.title)
        import sys

        exc = getattr(sys, "last_value", None)
        if exc is None:
            raise UsageError("No error to explain yet: run the failing cell first, then `%cudaexplain`. "
                             "`%cudaexplain --list` shows the known errors.")
        if isinstance(exc, UsageError):  # a magic's own usage message: it already says what to type
            raise UsageError("The last error was a mistake in a magic's arguments (UsageError), not a CUDA or "
                             "autograd error: its message says what to type instead. `%cudaexplain` explains the "
                             "last error of your own code; `%cudaexplain --list` shows the known errors.")
        explanation = explain(exc, scene_from_shell(self.shell, exc))
        if explanation is None:
            message = (str(exc).strip().splitlines() or [""])[0][:300]
            return NoMatch(type(exc).__name__, message)
        return explanation


def _construct(ipython):
    """Build CudaMagics; a config value its trait rejects (``%config`` or ipython_config.py) is dropped
    with a one-paragraph warning instead of making ``%load_ext`` fail."""
    from traitlets import TraitError

    try:
        return CudaMagics(shell=ipython)
    except TraitError:
        pass
    section = ipython.config.CudaMagics
    saved = dict(section)
    for key in saved:
        del section[key]
    magics = CudaMagics(shell=ipython)
    for key, value in saved.items():
        try:
            setattr(magics, key, value)
            section[key] = value
        except TraitError as exc:
            trait = magics.traits().get(key)
            helptext = f" ({trait.help})" if trait is not None and trait.help else ""
            print(f"cudamagic: ignoring CudaMagics.{key} = {value!r}: {exc}. Using the default "
                  f"{getattr(magics, key)!r}{helptext}. Fix it with %config CudaMagics.{key} = <value>.")
        except AttributeError:
            section[key] = value
    return magics


def load(ipython):
    """Register the magics on ``ipython`` (idempotent: a second load replaces the first)."""
    global _ACTIVE
    if _ACTIVE is not None:
        unload(_ACTIVE.shell)
    magics = _construct(ipython)
    ipython.register_magics(magics)
    ipython.magics_manager.register_function(magics._cudainfo_quiet, "line", "cudainfo;")
    from . import nvml

    magics.add_cleanup(nvml.reset)  # a later load re-reads NVML (e.g. after `%pip install nvidia-ml-py`)
    magics._install_explainer()  # issue 6: the error-explainer box (post_run_cell; removed on unload)
    _ACTIVE = magics
    return magics


def unload(ipython):
    """Stop threads, remove callbacks and unregister every magic of ours."""
    global _ACTIVE
    magics, _ACTIVE = _ACTIVE, None
    if magics is None:
        return
    try:
        magics.shutdown()
    finally:
        registry = ipython.magics_manager.magics
        for kind in ("line", "cell"):
            for name, func in list(registry[kind].items()):
                if getattr(func, "__self__", None) is magics:
                    del registry[kind][name]
        ipython.magics_manager.registry.pop(type(magics).__name__, None)
