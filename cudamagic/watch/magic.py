"""``%gpuwatch``: the IPython front of the live GPU monitor.

Options are checked in :mod:`.options`, the monitor is in :mod:`.monitor`; the other modules are
listed in :mod:`cudamagic.watch`.
"""

from __future__ import annotations

import atexit
import sys
import time

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, Float, HasTraits, Int, TraitError, Unicode, validate

from ..core.magic import AreaMagics
from ..core.manual import manual
from . import monitor, options


class WatchSettings(HasTraits):
    """``%gpuwatch`` settings, reachable as ``%config CudaMagics.<name>``."""

    watch_interval_s = Float(
        1.0,
        help="Seconds between %gpuwatch samples (--interval), 0.1 to 3600. Minimum 0.1 s (NVML's "
        "utilization counters average over 1/6 s to 1 s, so faster sampling repeats values while "
        "costing NVML "
        "calls and widget traffic); a --replay alone may go down to 0.05 s with --interval 0.05 "
        "(no NVML cost; "
        "about 20 updates/s is what a front end renders smoothly).",
    ).tag(config=True)

    @validate("watch_interval_s")
    def _usable_interval(self, proposal):
        # the bound every live %gpuwatch checks, so a value %config accepts is one %gpuwatch accepts
        value = proposal["value"]
        problem = options.interval_problem(
            value,
            "CudaMagics.watch_interval_s =",
            replay=False,
            fix="%config CudaMagics.watch_interval_s =",
        )
        if problem:
            raise TraitError(problem[:-1] + " (the setting keeps its previous value).")
        return value

    watch_history_samples = Int(
        600,
        min=2,
        max=1_000_000,
        help="Samples %gpuwatch keeps in memory (a ring buffer: constant memory "
        "however long it runs); watch.history returns them (--history).",
    ).tag(config=True)
    watch_devices = Unicode(
        "",
        help="Comma-separated 0-based NVML indices (nvidia-smi order) that %gpuwatch shows; empty "
        "= all "
        "(--devices).",
    ).tag(config=True)

    @validate("watch_devices")
    def _device_list(self, proposal):
        try:
            options.parse_devices(proposal["value"])
        except UsageError:
            raise TraitError(
                f"CudaMagics.watch_devices = {proposal['value']!r} is not a list of 0-based GPU "
                "indices; type for example `%config CudaMagics.watch_devices = '0,1'` ('' for "
                "every GPU)."
            ) from None
        return proposal["value"]

    watch_text = Bool(
        False, help="Always use the plain-text table instead of widgets (--text)."
    ).tag(config=True)
    watch_show_cmdlines = Bool(
        False,
        help="Show, and record with --log, the command lines of other users' GPU processes "
        "(--cmdline). "
        "Off by default for privacy on shared machines: their process names are shown, and this "
        "user's "
        "processes always keep their command lines.",
    ).tag(config=True)


@magics_class
class WatchMagics(AreaMagics):
    """``%gpuwatch``."""

    def on_load(self) -> None:
        """Keep the one monitor of this process; stop it on unload, kernel shutdown and exit."""
        self.monitors = monitor.Monitors()
        atexit.register(self.monitors.stop)
        self.add_cleanup(lambda: atexit.unregister(self.monitors.stop))
        self.add_cleanup(self.monitors.stop)
        self.add_cleanup(self.monitors.hook_kernel_shutdown(self.shell))

    def _in_kernel(self) -> bool:
        """True in a Jupyter kernel (a notebook front end), False in terminal IPython."""
        return type(self.shell).__name__ == "ZMQInteractiveShell"

    def _widgets_ok(self) -> bool:
        """True in a Jupyter kernel (else the text table is used)."""
        return not self.settings.watch_text and self._in_kernel()

    @manual(WatchSettings)
    @magic_arguments()
    @argument(
        "-i",
        "--interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Seconds between samples (default: CudaMagics.watch_interval_s); at least 0.1 live, "
        "0.05 with --replay, at most 3600.",
    )
    @argument(
        "-d",
        "--devices",
        default=None,
        metavar="LIST",
        help="Comma-separated 0-based NVML indices (nvidia-smi order), e.g. 0,2; empty: every GPU "
        "(default: CudaMagics.watch_devices).",
    )
    @argument(
        "--history",
        type=int,
        default=None,
        metavar="N",
        help="Samples kept in memory, a count (default: CudaMagics.watch_history_samples).",
    )
    @argument(
        "-n",
        "--count",
        type=int,
        default=None,
        metavar="N",
        help="Stop after N samples (default: run until stopped).",
    )
    @argument("--stop", action="store_true", help="Stop the running monitor.")
    @argument(
        "--text",
        action="store_true",
        help="Plain-text table instead of widgets (default: CudaMagics.watch_text).",
    )
    @argument(
        "--loop",
        action="store_true",
        help="Terminal: reprint the table every interval until Ctrl-C (like nvidia-smi -l).",
    )
    @argument(
        "--log",
        default=None,
        metavar="FILE.jsonl",
        help="Append every sample to this JSON-lines file (nvidia-smi key names, raw units).",
    )
    @argument(
        "--replay",
        default=None,
        metavar="FILE.jsonl",
        help="Play a file written by --log through the same display, labelled as a replay.",
    )
    @argument(
        "--source",
        default=None,
        metavar="URL",
        help="Watch a cluster through its Prometheus (DCGM or nvitop exporter metrics): "
        "prometheus://HOST:9090 or https://HOST. Credentials: CUDAMAGIC_PROMETHEUS_TOKEN, or "
        "CUDAMAGIC_PROMETHEUS_USER/PASSWORD, or ~/.netrc.",
    )
    @argument(
        "--job",
        nargs="?",
        const="",
        default=None,
        metavar="JOB",
        help="With --source: only this kernel's job (SLURM_JOB_ID, pod name, or host name), or "
        "the GPUs "
        "whose job label or host is JOB.",
    )
    @argument(
        "--hosts",
        default=None,
        metavar="LIST",
        help="With --source: comma-separated host names to show, e.g. node07,node08.",
    )
    @argument(
        "--cmdline",
        action="store_true",
        help="Also show (and --log) other users' command lines; by default only their process "
        "names "
        "(default: CudaMagics.watch_show_cmdlines).",
    )
    @line_magic
    def gpuwatch(self, line=""):
        """Live GPU monitor that keeps updating while other cells run.

        It shows utilization, memory, power, clocks, processes, the PyTorch allocator and the host.

        In a notebook it shows a widget updated by one background thread per kernel (running
        ``%gpuwatch`` again re-displays the same monitor); in terminal IPython, or with ``--text``,
        it prints a text table (``--loop`` refreshes it until Ctrl-C). NVML faults never stop it:
        unreadable fields, and numbers NVML returned that cannot be true, show N/A with the reason.
        ``memory.used`` is what nvidia-smi shows (the driver's reserve is ``memory.reserved``,
        apart). ``--source`` reads a whole cluster from its Prometheus server instead (one request
        per refresh; one tile per GPU grouped by host; network faults show as "stale since HH:MM:SS"
        and it recovers by itself). When the monitor stops, the widget is replaced by a static
        snapshot of the last sample, which is what a saved notebook keeps. Returns the monitor:
        ``watch.history`` (records with nvidia-smi key names, raw units: bytes, mW, MHz, %),
        ``watch.running``, ``watch.wait()``, ``watch.stop()``.

        Privacy on shared machines: other users' processes are listed with their process name and
        memory, but their command lines are neither shown nor written by ``--log`` unless you pass
        ``--cmdline`` (or ``%config CudaMagics.watch_show_cmdlines = True``); your own processes
        keep theirs.

        Examples:
        --------
        ::

            %gpuwatch
            watch = %gpuwatch --interval 0.5 --devices 0,1 --log run1.jsonl
            watch
            import pandas as pd; pd.DataFrame(watch.history)
            %gpuwatch --stop
            %gpuwatch --replay examples/trace_demo.jsonl --interval 0.05
            %gpuwatch --text --loop --interval 2
            %gpuwatch --cmdline
            %gpuwatch --source prometheus://prom.example:9090
            %gpuwatch --source https://prom.example --job
            %gpuwatch --source prometheus://prom.example:9090 --hosts node07 --log c.jsonl
            %config CudaMagics.watch_interval_s = 2.0
        """
        args = self.parse(self.gpuwatch, line)
        if args.stop:
            print(self.monitors.stop_message())
            return None
        opts = options.resolve(args, self.settings)
        widget = not (opts.text or opts.loop) and self._widgets_ok()
        running = self.monitors.current
        if (
            running is not None
            and running.running
            and not opts.changing
            and (running.view is not None) == widget
        ):
            return running  # re-display the one monitor of this kernel
        background = widget or bool(opts.log)
        source = options.open_source(opts)
        writer = options.open_writer(opts)
        if not widget and (opts.loop or (opts.count or 1) > 1 and not opts.log):
            return monitor.run_foreground(
                source,
                interval_s=opts.interval_s,
                history_len=opts.history,
                count=opts.count,
                writer=writer,
                clear_screen=sys.stdout.isatty(),
                in_place=self._in_kernel(),
            )
        kept = dict(
            interval_s=opts.interval_s,
            history_len=opts.history,
            count=opts.count,
            writer=writer,
            widget=widget,
            background=background,
            options={**opts.as_dict(), "line": line.strip()},
        )
        if not background:  # a one-off table: the running monitor goes on
            if not opts.replay:
                time.sleep(0.1)  # CPU % needs two readings (the source primed the first)
            return monitor.start_watch(source, **kept)
        if running is not None and running.running:
            again = " ".join(("%gpuwatch", running.options.get("line", ""))).strip()
            print(
                f"%gpuwatch: stopped the monitor that was running in this kernel "
                f"({running.label}) to start this one; `{again}` starts it again."
            )
        return self.monitors.start(source, **kept)
