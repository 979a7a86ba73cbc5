"""Running a cell under ``torch.profiler``.

The profiler, the optimizer-step hook of ``--steps``, the CUDA memory history of ``--memory``,
warnings collected, and everything switched off again whatever the cell does.

The cell runs as ``%%time`` runs it (:mod:`cudamagic.core.cell`): transformed by IPython, compiled
under a name registered in IPython's line cache (tracebacks show the real source lines), executed in
``shell.user_ns``. No IPython event is fired here.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field

from ..core.cell import compile_cell, run_code_caught
from ..core.fmt import format_bytes
from ..core.gcpause import paused_gc
from . import stderr
from .steps import StepDriver
from .summary import build_result
from .trace import write_trace

#: file-name parts of warnings that come from the profiler itself (summarised in one line, not
#: printed).
_PROFILER_WARNING_FILES = (
    os.sep.join(("torch", "profiler")),
    os.sep.join(("torch", "autograd", "profiler")),
    os.sep.join(("torch", "cuda", "memory")),
    # the profiler warns with stacklevel=2: a warning about our own call lands on this file
    os.sep.join(("cudamagic", "prof", "run.py")),
    os.sep.join(("cudamagic", "prof", "steps.py")),
)


#: PyTorch's CPU allocator freed a block allocated before profiling (its frees are not recorded).
_UNKNOWN_FREE = "Memory block of unknown size"


@dataclass
class ProfRun:
    """What :func:`run_profiled` did.

    Attributes:
        result: the :class:`~.result.ProfResult`, or None when the cell ran unprofiled (see
            ``skipped``) or did not compile.
        exception: the cell's own exception (the caller re-raises it), or None.
        has_value: the cell ended in an expression.
        value: that expression's value.
        skipped: why the cell ran without profiling, or None.
        profiler_warnings: texts of the profiler's Python warnings (others are re-issued) and of
            PyTorch's C++ warnings written to descriptor 2 while the cell ran.
        profiler_log: every line collected from descriptor 2 (Kineto's start and stop lines
            included, which are not shown).
    """

    result: object = None
    exception: BaseException | None = None
    has_value: bool = False
    value: object = None
    skipped: str | None = None
    profiler_warnings: list = field(default_factory=list)
    profiler_log: list = field(default_factory=list)


def active_profiler_reason() -> str | None:
    """Why a new profiler cannot start now (another one is recording in this process), or None."""
    import torch

    try:
        enabled = (
            torch.autograd.profiler._is_profiler_enabled or torch._C._autograd._profiler_enabled()
        )
    except AttributeError:  # pragma: no cover - older torch
        enabled = torch._C._autograd._profiler_enabled()
    if enabled:
        return (
            "a torch profiler is already recording in this kernel (your own `with "
            "torch.profiler.profile()`, "
            "PyTorch Lightning's profiler, or an outer %%torchprof); only one can record at a "
            "time, so this "
            "cell ran unprofiled. Stop the other profiler, then run the cell again with "
            "%%torchprof."
        )
    return None


def _execute(code, ns, run: ProfRun) -> None:
    __tracebackhide__ = True
    outcome = run_code_caught(code, ns)
    run.has_value, run.value, run.exception = outcome.has_value, outcome.value, outcome.exception


def activities_and_notice():
    """Activities to record, their names and a notice.

    (activities to record, their names, a one-line notice or None) from ``supported_activities()``.

    CUDA (or XPU, MTIA, a PrivateUse1 backend) is added only when both this build supports its
    activity and a device of that kind is available; otherwise the notice says which and why.
    """
    import torch
    from torch.profiler import ProfilerActivity

    supported = torch.profiler.supported_activities()
    acts, names, missing = [ProfilerActivity.CPU], ["CPU"], []
    for act_name, mod_name in (("CUDA", "cuda"), ("XPU", "xpu"), ("MTIA", "mtia"), ("HPU", "hpu")):
        act = getattr(ProfilerActivity, act_name, None)
        mod = getattr(torch, mod_name, None)
        if act is None or mod is None:
            continue
        available = bool(getattr(mod, "is_available", lambda: False)())
        if act in supported and available:
            acts.append(act)
            names.append(act_name)
        elif act_name == "CUDA":
            why = (
                "this PyTorch build has no CUDA profiling (a CPU-only build)"
                if act not in supported
                else "no CUDA device is available"
            )
            missing.append(why)
    notice = None
    if len(acts) == 1:
        notice = (
            "Only CPU activity recorded: "
            f"{missing[0] if missing else 'no accelerator is available'} "
            f"(torch.profiler.supported_activities() = {sorted(a.name for a in supported)}). GPU "
            "kernels, the "
            "GPU breakdown and device memory are not shown."
        )
    return acts, names, notice


def cuda_history_enabled(torch) -> bool | None:
    """Whether a CUDA memory history is being recorded.

    Whether a CUDA memory history is being recorded in this process
    (``torch._C._cuda_isHistoryEnabled``, which CUDA builds of PyTorch have), or None when this
    build cannot tell.
    """
    probe = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    if probe is None:
        return None
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001 - an unknown state is treated as "not recording"
        return None


class _CudaMemoryHistory:
    """Record the CUDA memory history around the cell.

    ``torch.cuda.memory._record_memory_history`` with Python stacks around the cell (``--memory`` on
    CUDA).

    A history the user already records (``torch._C._cuda_isHistoryEnabled()``) is left as it is: not
    re-enabled with our settings and not switched off afterwards (PyTorch has no call that reads the
    user's ``context``/``stacks``/``max_entries`` back, so they could not be restored). The snapshot
    then holds the user's earlier entries too; :meth:`snapshot` keeps only those recorded since
    :meth:`start` (``time_us``, Unix microseconds).
    """

    def __init__(self, torch):
        self.torch = torch
        self.started = False
        self.users_history = False
        self.start_allocated = {}
        self.start_time_us = 0

    def start(self):
        cuda = self.torch.cuda
        if cuda.is_initialized():
            self.start_allocated = {d: cuda.memory_allocated(d) for d in range(cuda.device_count())}
        self.users_history = bool(cuda_history_enabled(self.torch))
        self.start_time_us = time.time_ns() // 1000
        if not self.users_history:
            cuda.memory._record_memory_history(
                enabled="all", context="all", stacks="python", max_entries=1_000_000
            )
            self.started = True

    def stop(self):
        if self.started:
            self.started = False
            self.torch.cuda.memory._record_memory_history(enabled=None)

    def snapshot(self):
        snap = self.torch.cuda.memory._snapshot()
        if self.users_history:
            snap = since(snap, self.start_time_us)
        return snap


def since(snapshot: dict, start_time_us: int) -> dict:
    """``snapshot`` cut to the entries recorded from ``start_time_us``.

    ``snapshot`` with each device trace cut to the entries recorded at or after ``start_time_us``
    (Unix microseconds, the allocator's ``time_us``); entries without a time are kept. Segments are
    kept whole.
    """
    out = dict(snapshot)
    out["device_traces"] = [
        [e for e in trace if e.get("time_us", start_time_us) >= start_time_us]
        for trace in snapshot.get("device_traces", [])
    ]
    return out


def cuda_snapshot_peak(snapshot, start_allocated: dict) -> dict:
    """Peak allocated bytes per device from a memory snapshot.

    Peak allocated bytes per device (``"cuda:N"``) from a memory snapshot's ``device_traces``: the
    bytes allocated when recording started plus the highest running total of ``alloc`` minus
    ``free_completed``.
    """
    peaks = {}
    for dev, trace in enumerate(snapshot.get("device_traces", [])):
        level, peak = 0, 0
        for entry in trace:
            action = entry.get("action")
            if action == "alloc":
                level += entry.get("size", 0)
            elif action == "free_completed":
                level -= entry.get("size", 0)
            peak = max(peak, level)
        if trace:
            peaks[f"cuda:{dev}"] = start_allocated.get(dev, 0) + peak
    return peaks


def run_profiled(shell, cell: str, opts, header: str, say=None) -> ProfRun:
    """Run ``cell`` in ``shell.user_ns`` under ``torch.profiler.profile`` and summarise it.

    Args:
        shell: the ``InteractiveShell``.
        cell: the cell body (without the magic line).
        opts: :class:`~.options.ProfOptions`.
        header: the magic line (line 1 of the cached source).
        say: called with the step once the cell has run (``"analysing 36,504 events"``), or None.

    Returns:
        :class:`ProfRun`. The cell's exception is returned, never raised; a cell that does not parse
        is not run (``exception`` is the ``SyntaxError``, ``result`` None). When another profiler is
        active the cell runs unprofiled and ``skipped`` says why.
    """
    __tracebackhide__ = True
    run = ProfRun()
    try:
        code = compile_cell(shell, cell, header)
    except SyntaxError as exc:
        run.exception = exc.with_traceback(None)
        return run
    import torch
    from torch.profiler import profile, schedule

    run.skipped = active_profiler_reason()
    if run.skipped:
        _execute(code, shell.user_ns, run)
        return run
    acts, act_names, notice = activities_and_notice()
    sched = schedule(wait=0, warmup=1, active=opts.steps, repeat=1) if opts.steps else None
    prof = profile(
        activities=acts,
        record_shapes=True,
        with_stack=opts.with_stack,
        profile_memory=opts.memory,
        schedule=sched,
    )
    history = _CudaMemoryHistory(torch) if opts.memory and "CUDA" in act_names else None
    session = _Session(torch, prof, scheduled=sched is not None)
    driver = StepDriver(session.step) if opts.steps else None
    collector = stderr.Fd2Collector()
    with warnings.catch_warnings(record=True) as caught, collector:
        warnings.simplefilter("always")
        try:
            if history is not None:
                history.start()
            session.start()
        except Exception as exc:  # noqa: BLE001 - the cell still runs, unprofiled
            if history is not None:
                history.stop()
            run.skipped = (
                f"torch.profiler could not start ({type(exc).__name__}: {exc}); the cell ran "
                "unprofiled."
            )
            prof = None
        if prof is not None and driver is not None:
            driver.install()
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            _execute(code, shell.user_ns, run)
        finally:
            wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            if say is not None:
                say("analysing the profile")
            if driver is not None:
                driver.remove()
            snapshot, snapshot_s = None, None
            try:
                if history is not None:
                    try:
                        s0 = time.perf_counter()
                        snapshot = history.snapshot()
                        snapshot_s = time.perf_counter() - s0
                    finally:
                        history.stop()
            finally:
                if prof is not None:
                    session.stop()
        if prof is not None:
            try:
                run.result = build_result(
                    prof,
                    header=header,
                    wall_s=wall_s,
                    activities=act_names,
                    with_stack=opts.with_stack,
                    memory=opts.memory,
                    group=opts.group,
                    stack_depth=opts.stack_depth,
                    top=opts.top,
                    say=say,
                )
            except Exception as exc:  # noqa: BLE001 - never break the cell over the summary
                run.skipped = (
                    f"the cell ran, but its profile could not be summarised ({type(exc).__name__}: "
                    f"{exc}); please report this with the cell."
                )
            if run.result is not None and session.lost is None:
                _attach_verdict(run.result, prof)
    run.profiler_log = collector.lines
    run.profiler_warnings = _sort_warnings(caught) + [
        line for line in collector.lines if not stderr.is_log(line)
    ]
    unknown_frees = sum(_UNKNOWN_FREE in line for line in run.profiler_warnings)
    if run.result is None:
        return run
    res = run.result
    res.cpu_s = cpu_s
    if session.lost is not None:
        res.lost = session.lost
        res.notices.insert(0, _lost_notice(session.lost))
    if notice:
        res.notices.append(notice)
    if opts.steps and session.lost is None:
        _steps_notices(res, opts.steps, driver)
    if opts.memory:
        _cpu_peak_bound(res, unknown_frees)
    if run.profiler_warnings:
        distinct = list(dict.fromkeys(run.profiler_warnings))
        res.warnings = distinct
        res.notices.append(
            f"{len(run.profiler_warnings)} PyTorch warning(s) collected ({len(distinct)} "
            f"distinct; all in .warnings), first: {distinct[0][:200]}"
        )
    if run.exception is not None:
        res.error = f"{type(run.exception).__name__}: {run.exception}"
    if snapshot is not None:
        res.memory_snapshot_s = snapshot_s
        _cuda_memory(res, snapshot, history.start_allocated, opts)
        if history.users_history:
            res.notices.append(
                "your CUDA memory history (torch.cuda.memory._record_memory_history) was already "
                "recording: it was left on with your settings, and the snapshot keeps the entries "
                "of this cell."
            )
    if opts.trace:
        try:
            res.trace_path, res.trace_notes = write_trace(
                prof, opts.trace, max_bytes=int(opts.max_trace_mb * 2**20)
            )
        except (OSError, RuntimeError) as exc:
            res.notices.append(
                f"the trace could not be written to {opts.trace} ({type(exc).__name__}: {exc})"
            )
    return run


class _Session:
    """``%%torchprof``'s profiler, started, stepped and stopped; and whether the cell took it over.

    PyTorch records one profiling session at a time: a profiler the cell starts replaces this one
    without an error. ``lost`` says what happened: ``"stopped"`` (the session was no longer
    recording when it should have been: the cell's profiler ended it) or ``"replaced"`` (the
    session stopped at the end began after this one started: it was the cell's), else None.
    """

    def __init__(self, torch, prof, scheduled: bool):
        self.torch, self.prof, self.scheduled = torch, prof, scheduled
        self.started_ns = None  # wall clock (ns) just after this session began recording
        self.lost = None

    def _recording(self) -> bool:
        return bool(self.torch._C._autograd._profiler_enabled())

    def _should_record(self) -> bool:
        if not self.scheduled:
            return True
        from torch.profiler import ProfilerAction

        return self.prof.current_action in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)

    def _check(self) -> None:
        if (
            self.lost is None
            and self.started_ns is not None
            and self._should_record()
            and not self._recording()
        ):
            self.lost = "stopped"

    def _began(self) -> None:
        if self.started_ns is None and self._recording():
            self.started_ns = time.time_ns()

    def start(self) -> None:
        """``prof.start()``."""
        self.prof.start()
        self._began()

    def step(self) -> None:
        """``prof.step()`` (the end of a ``--steps`` step)."""
        self._check()
        self.prof.step()
        self._began()

    def stop(self) -> None:
        """``prof.stop()``, then the check that the stopped session was this one."""
        self._check()
        self.prof.stop()
        kin = getattr(getattr(self.prof, "profiler", None), "kineto_results", None)
        if self.lost is None and kin is not None and self.started_ns is not None:
            # this session's trace starts before `started_ns` (read after it began)
            if kin.trace_start_ns() > self.started_ns:
                self.lost = "replaced"


def _lost_notice(how: str) -> str:
    """The notice of a session the cell's own profiler took over."""
    fix = (
        "Keep one of the two: remove the profiler from the cell, or run the cell without "
        "%%torchprof and read your profiler's results (`p.key_averages().table()`)."
    )
    if how == "stopped":
        return (
            "Profile lost: the cell started its own profiler (a `torch.profiler.profile` or "
            "`torch.autograd.profiler.profile` inside the cell), which replaced %%torchprof's "
            "session, since PyTorch records one profiling session at a time. The operators the "
            "cell ran went to your profiler: the empty tables below do not mean the cell did "
            "nothing. " + fix
        )
    return (
        "Profile lost: the cell started its own profiler and left it running; it replaced "
        "%%torchprof's session (PyTorch records one profiling session at a time), so the tables "
        "below hold only what ran after your profiler started, and stopping them stopped your "
        "profiler too. " + fix
    )


def _steps_notices(res, steps: int, driver: StepDriver) -> None:
    """What a ``--steps`` step was in this cell, and why none was recorded when so."""
    opts_seen = driver.optimizers
    if len(opts_seen) > 1:
        first, calls = opts_seen[0]
        others = ", ".join(f"{name} {n}x" for name, n in opts_seen[1:])
        res.notices.append(
            f"{len(opts_seen)} optimizers stepped in this cell ({first} {calls}x first, then "
            f"{others}): a step is one iteration, from one {first}.step() of the first optimizer "
            "to its next (per iteration, several optimizers count once), ended outside your "
            "record_function ranges."
        )
    if not res.steps:
        res.notices.append(
            f"--steps {steps}: no step was recorded. A step ends once per iteration, after the "
            f"step() of the first optimizer that steps in the cell; the first step is a warm-up, "
            f"then {steps} are recorded, so the cell needs {steps + 1} iterations with an "
            "optimizer.step(). The events of the part that ran are shown."
        )


def _cpu_peak_bound(res, unknown_frees: int) -> None:
    """Label the CPU peak an upper bound: frees of earlier blocks are not recorded.

    PyTorch's CPU allocator records no free of a block allocated before profiling started: such
    frees lower the real level unseen, so the peak from the recorded events is an upper bound. It
    warns on descriptor 2 (``unknown_frees``: warnings collected in this cell) for the first of
    every 1000 such frees in the process only, so no warning does not prove there was none.
    """
    peaks = res.peak_memory_bytes
    if not isinstance(peaks, dict) or "cpu" not in peaks:
        return
    if unknown_frees:
        why = (
            "the cell freed memory allocated before profiling started, and PyTorch's CPU "
            "allocator does not record those frees"
        )
    else:
        why = (
            "PyTorch's CPU allocator does not record frees of memory allocated before profiling "
            "started (and warns about only 1 in 1000 of them), so frees of tensors created before "
            "the cell may be missing"
        )
    res.peak_memory_bounds = {**res.peak_memory_bounds, "cpu": "upper bound"}
    peak = format_bytes(peaks["cpu"])
    res.notices.append(
        f"cpu peak {peak} above the start is an upper bound: {why}; the real peak lies between "
        f"0 B and {peak}."
    )


def _cuda_memory(res, snapshot, start_allocated, opts) -> None:
    """Peak from the CUDA snapshot, and PyTorch's memory viewer.

    Peak from the CUDA snapshot and the memory viewer HTML that ships with PyTorch, saved next to
    the trace (or in the working directory).
    """
    peaks = cuda_snapshot_peak(snapshot, start_allocated)
    if peaks:
        base = dict(res.peak_memory_bytes) if isinstance(res.peak_memory_bytes, dict) else {}
        base.update(peaks)
        res.peak_memory_bytes = base
    try:
        from torch.cuda import _memory_viz

        html = _memory_viz.trace_plot(snapshot)
        stem = (
            (opts.trace[:-8] if opts.trace.endswith(".json.gz") else opts.trace[:-5])
            if opts.trace
            else (opts.out or "torchprof")
        )
        path = f"{stem}_memory.html"
        with open(path, "w", encoding="utf-8") as f:
            f.write(html)
        res.memory_html_path = path
    except Exception as exc:  # noqa: BLE001 - the summary still shows the peak
        res.notices.append(
            f"the CUDA memory viewer could not be written ({type(exc).__name__}: {exc})"
        )


def _attach_verdict(res, prof) -> None:
    """``res.verdict`` (:mod:`.verdict`); a failure is a notice, never an error of the cell."""
    from .verdict import verdict_of

    try:
        with paused_gc():
            res.verdict = verdict_of(res, prof)
    except Exception as exc:  # noqa: BLE001 - the summary is still shown without the verdict
        res.notices.append(f"no verdict for this profile ({type(exc).__name__}: {exc})")


def _sort_warnings(caught) -> list:
    """Profiler warnings as texts; other warnings are issued again."""
    mine = []
    for w in caught:
        filename = w.filename or ""
        if any(part in filename for part in _PROFILER_WARNING_FILES):
            mine.append(str(w.message).strip())
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return mine
