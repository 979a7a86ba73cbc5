"""Running a cell under ``torch.profiler``.

The profiler, the optimizer-step hook of ``--steps``, the CUDA memory history of ``--memory``,
warnings collected, and everything switched off again whatever the cell does.

The cell runs as ``%%time`` runs it (:mod:`cudamagic.core.cell`): transformed by IPython, compiled
under a name registered in IPython's line cache (tracebacks show the real source lines), executed in
``shell.user_ns``. No IPython event is fired here.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field

from ..core.cell import compile_cell, run_code_caught
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
)


#: lines that Kineto writes straight to file descriptor 2 at each start and stop (``USDT:``,
#: ``STAGE:``).
_KINETO_LOG = re.compile(r"^(USDT|STAGE):\S* ")
_PROFILER_LINE = re.compile(r"profil|kineto|cupti|roctracer", re.IGNORECASE)


@contextlib.contextmanager
def quiet_fd2(lines: list):
    """Capture what C++ code writes to file descriptor 2.

    Capture what C++ code writes to file descriptor 2 inside the block (Kineto's
    ``USDT:``/``STAGE:`` lines at profiler start and stop, which a notebook would show as red stderr
    text). Kineto log lines and profiler warnings go to ``lines``; any other captured line is
    written back to descriptor 2 afterwards. Used only around the profiler's own start/stop calls,
    never around the user's code.
    """
    try:
        fd = sys.__stderr__.fileno() if sys.__stderr__ is not None else 2
        sys.stderr.flush()
        saved = os.dup(fd)
    except (AttributeError, OSError, ValueError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            other = []
            for line in tmp.read().decode("utf-8", errors="replace").splitlines():
                (lines if _KINETO_LOG.match(line) or _PROFILER_LINE.search(line) else other).append(
                    line
                )
            if other:
                os.write(fd, ("\n".join(other) + "\n").encode("utf-8", errors="replace"))


@dataclass
class ProfRun:
    """What :func:`run_profiled` did.

    Attributes:
        result: the :class:`~.summary.ProfResult`, or None when the cell ran unprofiled (see
            ``skipped``) or did not compile.
        exception: the cell's own exception (the caller re-raises it), or None.
        has_value: the cell ended in an expression.
        value: that expression's value.
        skipped: why the cell ran without profiling, or None.
        profiler_warnings: texts of the profiler's warnings (others are re-issued).
        profiler_log: Kineto's log lines caught at profiler start and stop (not shown).
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


def run_profiled(shell, cell: str, opts, header: str) -> ProfRun:
    """Run ``cell`` in ``shell.user_ns`` under ``torch.profiler.profile`` and summarise it.

    Args:
        shell: the ``InteractiveShell``.
        cell: the cell body (without the magic line).
        opts: :class:`~.options.ProfOptions`.
        header: the magic line (line 1 of the cached source).

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
    hook = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if history is not None:
                history.start()
            with quiet_fd2(run.profiler_log):
                prof.start()
        except Exception as exc:  # noqa: BLE001 - the cell still runs, unprofiled
            if history is not None:
                history.stop()
            run.skipped = (
                f"torch.profiler could not start ({type(exc).__name__}: {exc}); the cell ran "
                "unprofiled."
            )
            prof = None
        if prof is not None and opts.steps:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            def step(*_):
                with quiet_fd2(run.profiler_log):
                    prof.step()

            hook = register_optimizer_step_post_hook(step)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            _execute(code, shell.user_ns, run)
        finally:
            wall_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
            if hook is not None:
                hook.remove()
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
                    with quiet_fd2(run.profiler_log):
                        prof.stop()
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
                )
            except Exception as exc:  # noqa: BLE001 - never break the cell over the summary
                run.skipped = (
                    f"the cell ran, but its profile could not be summarised ({type(exc).__name__}: "
                    f"{exc}); please report this with the cell."
                )
            if run.result is not None:
                _attach_verdict(run.result, prof)
    run.profiler_warnings = _sort_warnings(caught) + [
        line for line in run.profiler_log if not _KINETO_LOG.match(line)
    ]
    if run.result is None:
        return run
    res = run.result
    res.cpu_s = cpu_s
    if notice:
        res.notices.append(notice)
    if opts.steps and not res.steps:
        res.notices.append(
            f"--steps {opts.steps}: no step was recorded. A step ends at each optimizer.step(); "
            f"the first is a warm-up, then {opts.steps} are recorded, so the cell needs "
            f"{opts.steps + 1} optimizer steps. The events of the part that ran are shown."
        )
    if run.profiler_warnings:
        distinct = list(dict.fromkeys(run.profiler_warnings))
        res.warnings = distinct
        res.notices.append(
            f"{len(run.profiler_warnings)} profiler warning(s) collected ({len(distinct)} "
            "distinct), "
            f"first: {distinct[0][:200]}"
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
