"""``%gpuwatch`` options: checked here, beside the monitor, before anything starts.

:func:`resolve` turns the parsed flags and the ``CudaMagics`` settings into a :class:`WatchOptions`
or a one-paragraph ``UsageError``; :func:`open_source` and :func:`open_writer` turn the options into
the sample source (live NVML or a replayed trace) and the ``--log`` writer. No thread is started
here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from IPython.core.error import UsageError

from ..core.fmt import plural
from ..core.na import is_na
from .cluster import ClusterReplay, PrometheusSource, parse_hosts
from .prometheus import SourceURLError, parse_source
from .sampler import MAX_INTERVAL_S
from .sources import LiveSource, ReplaySource
from .trace import TraceError, TraceWriter

MIN_LIVE_INTERVAL_S = 0.1
MIN_REPLAY_INTERVAL_S = 0.05
HISTORY_RANGE = (2, 1_000_000)


@dataclass(frozen=True)
class WatchOptions:
    """What one ``%gpuwatch`` line asks for.

    Attributes:
        interval_s: seconds between samples. history: samples kept (ring buffer). count: stop after
            N (None: never).
        devices_text: the ``--devices`` text (or the setting), 0-based NVML indices,
            comma-separated; "" = all.
        devices: the parsed indices, or None for all GPUs.
        replay: trace path to play, or None. log: trace path to append to, or None.
        source: a Prometheus base URL (``--source``), or None for this machine's NVML.
        job: ``--job`` (None: not given, "": this kernel's job, else the value to match). hosts:
            ``--hosts``.
        text: plain-text table requested. loop: terminal refresh loop requested.
        changing: True when any flag other than a bare re-display was given.
        show_cmdlines: show (and ``--log``) other users' command lines (``--cmdline`` or the
            setting).
    """

    interval_s: float
    history: int
    count: int | None
    devices_text: str
    devices: list | None
    replay: str | None
    log: str | None
    text: bool
    loop: bool
    changing: bool
    source: str | None = None
    job: str | None = None
    hosts: tuple = ()
    show_cmdlines: bool = False

    def as_dict(self) -> dict:
        """The settings a running monitor remembers (shown in its status line)."""
        return {
            "replay": self.replay,
            "log": self.log,
            "devices": self.devices_text,
            "interval_s": self.interval_s,
            "source": self.source,
            "job": self.job,
            "hosts": ",".join(self.hosts),
        }


def interval_problem(
    interval: float, given: str, replay: bool, fix: str = "%gpuwatch --interval"
) -> str:
    """What is wrong with ``interval`` as a sampling interval.

    What is wrong with ``interval`` (seconds) as a sampling interval, one paragraph naming ``given``
    and ending with the command ``fix VALUE`` to type; ``""`` when it is usable (0.1 s live, 0.05 s
    for a replay, to 3600 s). Shared by :func:`check_interval` and the
    ``CudaMagics.watch_interval_s`` validator.
    """
    minimum = MIN_REPLAY_INTERVAL_S if replay else MIN_LIVE_INTERVAL_S
    if math.isnan(interval):
        return f"{given} {interval:g} is not a number of seconds; type for example `{fix} 0.5`."
    if not interval >= minimum:
        return (
            f"{given} {interval:g} is below the minimum of {minimum:g} s "
            f"{'for a replay' if replay else 'for a live watch'}; type for example "
            f"`{fix} {max(minimum, 0.5):g}`."
        )
    if interval > MAX_INTERVAL_S:
        return (
            f"{given} {interval:g} is too long: the interval is at most {MAX_INTERVAL_S:g} s; "
            "type for "
            f"example `{fix} 60`."
        )
    return ""


def check_interval(interval: float, given: str, replay: bool) -> float:
    """``interval`` in seconds if it is a usable sampling interval.

    Else ``UsageError`` naming ``given``.
    """
    problem = interval_problem(interval, given, replay)
    if problem:
        raise UsageError(problem)
    return interval


def parse_devices(text: str) -> list | None:
    """``"0, 2"`` -> ``[0, 2]`` (0-based NVML indices).

    ``""`` -> None (all GPUs). ``UsageError`` otherwise.
    """
    if not text.strip():
        return None
    try:
        devices = [int(d) for d in text.replace(" ", "").split(",") if d != ""]
    except ValueError as exc:
        raise UsageError(
            f"--devices {text!r} is not a list of GPU indices; type for "
            "example `%gpuwatch --devices 0,1`."
        ) from exc
    if not devices:
        raise UsageError(
            f"--devices {text!r} names no GPU; give 0-based NVML indices, e.g. "
            "`%gpuwatch --devices 0,1`, or leave --devices out to show every GPU."
        )
    return devices


def resolve(args, settings) -> WatchOptions:
    """Check the parsed ``%gpuwatch`` flags against each other and the ``CudaMagics`` settings.

    Args:
        args: the ``argparse.Namespace`` of ``%gpuwatch``.
        settings: the ``CudaMagics`` configurable.

    Raises:
        UsageError: an interval outside 0.1 s (0.05 s for a replay) to 3600 s or not a number, a
            history outside 2 to 1,000,000 samples, a count below 1, ``--replay`` with ``--log``, or
            a malformed device list.
    """
    interval = settings.watch_interval_s if args.interval is None else args.interval
    given = "--interval" if args.interval is not None else "CudaMagics.watch_interval_s ="
    check_interval(interval, given, bool(args.replay))
    history = settings.watch_history_samples if args.history is None else args.history
    if not HISTORY_RANGE[0] <= history <= HISTORY_RANGE[1]:
        raise UsageError(
            f"--history {history} is out of range; give between 2 and 1000000 samples, "
            "e.g. `%gpuwatch --history 600`."
        )
    if args.count is not None and args.count < 1:
        raise UsageError(f"--count {args.count} must be at least 1, e.g. `%gpuwatch --count 10`.")
    if args.replay and args.log:
        raise UsageError(
            "--replay and --log cannot be combined: a replay re-plays a log. "
            "Type `%gpuwatch --replay FILE.jsonl`."
        )
    source, job, hosts = cluster_options(args)
    devices_text = settings.watch_devices if args.devices is None else args.devices
    devices = None if args.replay or source else parse_devices(devices_text)
    changing = any(
        x not in (None, False)
        for x in (
            args.replay,
            args.log,
            args.devices,
            args.interval,
            args.history,
            args.count,
            args.loop,
            args.text,
            args.source,
            args.job,
            args.hosts,
            args.cmdline,
        )
    )
    show_cmdlines = args.cmdline or settings.watch_show_cmdlines
    return WatchOptions(
        interval_s=interval,
        history=history,
        count=args.count,
        devices_text=devices_text,
        devices=devices,
        replay=args.replay,
        log=args.log,
        text=bool(args.text),
        loop=bool(args.loop),
        changing=changing,
        source=source,
        job=job,
        hosts=hosts,
        show_cmdlines=show_cmdlines,
    )


def cluster_options(args) -> tuple:
    """The checked ``--source``, ``--job`` and ``--hosts``.

    ``(base URL or None, job, hosts)`` from ``--source``, ``--job``, ``--hosts``; ``UsageError``
    when they are malformed or combined with ``--replay`` / ``--devices``.
    """
    text, job, hosts = args.source, args.job, args.hosts
    if not text:
        if job is not None or hosts:
            flag = "--job" if job is not None else "--hosts"
            example = "--job" if job is not None else f"--hosts {hosts}"
            raise UsageError(
                f"{flag} needs a cluster source; type e.g. "
                f"`%gpuwatch --source prometheus://localhost:9090 {example}`."
            )
        return None, None, ()
    if args.replay:
        raise UsageError(
            "--source and --replay cannot be combined: a replay plays a file. Type "
            "`%gpuwatch --source prometheus://HOST:9090` or `%gpuwatch --replay FILE.jsonl`."
        )
    if args.devices is not None:
        raise UsageError(
            "--devices selects GPUs of this machine; with --source choose hosts instead, e.g. "
            "`%gpuwatch --source prometheus://HOST:9090 --hosts node07,node08`."
        )
    try:
        url = parse_source(text)
    except SourceURLError as exc:
        raise UsageError(f"{exc}.") from exc
    host_list = parse_hosts(hosts or "")
    if hosts is not None and not host_list:
        raise UsageError(
            f"--hosts {hosts!r} names no host; type e.g. `%gpuwatch --source {text} "
            "--hosts node07,node08`."
        )
    return url, job, tuple(host_list)


def open_source(opts: WatchOptions):
    """The sample source ``opts`` ask for.

    The sample source for ``opts``: a :class:`~.sources.ReplaySource` or a
    :class:`~.sources.LiveSource`.

    Raises:
        UsageError: the replay file is not a readable trace, or ``--devices`` names a GPU NVML does
            not see.
    """
    if opts.source:
        return open_cluster(opts)
    if opts.replay:
        try:
            return ClusterReplay.wrap(ReplaySource(opts.replay))
        except TraceError as exc:
            raise UsageError(
                f"Cannot replay: {exc}; replay a file written by `%gpuwatch --log FILE.jsonl`."
            ) from exc
    source = LiveSource(devices=None, show_cmdlines=opts.show_cmdlines)
    if opts.devices is not None and source.status is None:
        bad = [d for d in opts.devices if not 0 <= d < source.device_count]
        if bad:
            n = source.device_count
            seen = (
                "no GPU"
                if n == 0
                else plural(n, "GPU") + (", index 0" if n == 1 else f", indices 0 to {n - 1}")
            )
            raise UsageError(
                f"--devices: GPU {bad[0]} does not exist; NVML sees {seen} (nvidia-smi order). "
                "Type for example `%gpuwatch --devices 0`, or leave --devices out."
            )
        source.devices = list(dict.fromkeys(opts.devices))
    return source


def open_cluster(opts: WatchOptions):
    """The :class:`~.cluster.PrometheusSource` of ``--source``.

    With ``--job`` or ``--hosts`` one probe request checks that something matches (an unreachable
    server is not an error: the monitor shows it as stale).

    Raises:
        UsageError: the server answers but no GPU matches ``--job`` / ``--hosts``.
    """
    source = PrometheusSource(
        opts.source, hosts=opts.hosts, job=opts.job, interval_s=opts.interval_s
    )
    if opts.job is not None or opts.hosts:
        probe = source.read(0, time.time())
        if not probe.gpus and is_na(probe.nvml_status) and probe.nvml_status.code == "no_gpus":
            source.close()
            if opts.job is not None:
                fix = f"`%gpuwatch --source {opts.source} --job 12345` (a job id, pod or host)"
            else:
                fix = f"`%gpuwatch --source {opts.source} --hosts node07,node08`"
            raise UsageError(f"{probe.nvml_status.reason}; type for example {fix}.")
    return source


def open_writer(opts: WatchOptions):
    """The ``--log`` :class:`~.trace.TraceWriter`, or None.

    ``UsageError`` when the file cannot be written.
    """
    if not opts.log:
        return None
    try:
        what = (
            f"recording of {opts.source} by %gpuwatch --source --log"
            if opts.source
            else "live recording by %gpuwatch --log"
        )
        return TraceWriter(opts.log, source=what, interval_s=opts.interval_s)
    except TraceError as exc:
        raise UsageError(
            f"Cannot log: {exc}. Give a new file name, e.g. `%gpuwatch --log gpuwatch_run2.jsonl`."
        ) from exc
