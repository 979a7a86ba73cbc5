"""A :class:`~.result.ProfResult` built from a stopped ``torch.profiler`` profile.

Records from the raw Kineto events (or the profiler's ``FunctionEvent`` tree when Python calls
were recorded), the per-device breakdown and the memory curve. torch is only touched through the
profiler object :func:`build_result` is given.
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import attrgetter, methodcaller

from ..core.gcpause import paused_gc
from ..core.na import NA
from .result import GpuBreakdown, KernelRecord, OpRecord, ProfResult, StepRecord

# "path/file.py(12): func" (a Python-function event's name)
_FRAME = re.compile(r"^(.*)\((\d+)\): (.+)$")
_NOT_USER = (
    "torch/",
    "cudamagic/",
    "site-packages/",
    "<built-in",
    "IPython/",
    "ipykernel/",
    "threading.py",
)


def gpu_breakdown(kernels, span: tuple[float, float]) -> list[GpuBreakdown]:
    """Per device, split ``span`` (start_us, end_us) into kernel / memcpy / memset / idle time.

    Args:
        kernels: :class:`KernelRecord` items (any order; parts outside ``span`` are ignored).
        span: the profiled span in microseconds.

    Returns:
        one :class:`GpuBreakdown` per device that has activity, by device ordinal.
    """
    start, end = span
    order = {"kernel": 0, "memcpy": 1, "memset": 2}
    by_dev: dict = {}
    for k in kernels:
        s, e = max(k.start_us, start), min(k.end_us, end)
        if e > s:
            by_dev.setdefault(k.device, []).extend([(s, 1, order[k.kind]), (e, -1, order[k.kind])])
    out = []
    for dev in sorted(by_dev):
        points = sorted(by_dev[dev])
        active = [0, 0, 0]
        spent = [0.0, 0.0, 0.0]
        last = start
        for t, delta, kind in points:
            if t > last:
                for i in range(3):
                    if active[i] > 0:
                        spent[i] += t - last
                        break
                last = t
            active[kind] += delta
        busy = sum(spent)
        out.append(
            GpuBreakdown(
                dev, end - start, spent[0], spent[1], spent[2], max(0.0, (end - start) - busy)
            )
        )
    return out


def frame_is_user(frame: str) -> bool:
    """Whether a Python-function event is from the user's code.

    A Python-function event name (``"file.py(12): func"``) from the user's code rather than torch,
    IPython, cudamagic or a built-in.
    """
    if not _FRAME.match(frame):
        return False
    return not any(part in frame for part in _NOT_USER)


def _kind(name: str) -> str:
    low = name.lower()
    if "memcpy" in low:
        return "memcpy"
    if "memset" in low:
        return "memset"
    return "kernel"


def _python_context(evt, depth_limit: int = 64):
    """Module path and user frames of an operator event.

    (module path, user frames innermost first, top, depth) of an operator event whose ancestors
    include Python-function events (depth: enclosing operators, your ``record_function`` ranges
    included, not counting Python calls or ``ProfilerStep#N``; top: depth 0, as on the Kineto path).
    """
    modules, frames, depth = [], [], 0
    parent, n = evt.cpu_parent, 0
    while parent is not None and n < 10_000:
        if parent.is_python_function:
            name = parent.name
            if name.startswith("nn.Module: "):
                modules.append(name[11:])
            elif len(frames) < depth_limit and frame_is_user(name):
                frames.append(name)
        elif not (parent.is_user_annotation and parent.name.startswith("ProfilerStep")):
            depth += 1
        parent = parent.cpu_parent
        n += 1
    return "/".join(reversed(modules)), tuple(frames), depth == 0, depth


def build_result(
    prof,
    *,
    header: str,
    wall_s: float,
    activities,
    with_stack: bool,
    memory: bool,
    group: str,
    stack_depth: int,
    top: int,
    say=None,
) -> ProfResult:
    """Turn a stopped ``torch.profiler.profile`` into a :class:`ProfResult`.

    Without Python calls the records are read straight from the profiler's raw Kineto events
    (several times faster than ``prof.events()``, which builds a ``FunctionEvent`` tree); self time
    then comes from the nesting of operators per thread, as in ``key_averages()``. With Python calls
    (``module``/``stack`` groupings) ``prof.events()`` is used, for the parent links to the
    Python-function events.

    Args:
        prof: the stopped profiler (read once; the profiler is not kept).
        header: the magic line.
        wall_s: the cell's wall time in seconds.
        activities: names of the recorded activities.
        with_stack: Python calls were recorded (module and stack keys are filled).
        memory: allocations were recorded (``profile_memory=True``).
        group: the table grouping.
        stack_depth: frames per ``stack`` key.
        top: rows per table.
        say: called with ``"analysing N events"`` once the events are read, or None.
    """
    result = ProfResult(
        header=header,
        wall_s=wall_s,
        activities=list(activities),
        group=group,
        stack_depth=stack_depth,
        top=top,
        with_stack=with_stack,
    )
    kin = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    events = None
    with paused_gc():
        if with_stack or kin is None:
            ops, kernels, steps = _records_from_function_events(prof)
        else:
            events = kin.events()
            if say is not None:
                say(f"analysing {len(events):,} events")
            # shapes read on first use (any profile can be regrouped by shape)
            ops, kernels, steps = _records_from_kineto(kin, events, len(activities) > 1)
    lo = min(
        [o.start_us for o in ops] + [k.start_us for k in kernels] + [s.start_us for s in steps],
        default=0.0,
    )
    hi = max(
        [o.end_us for o in ops] + [k.end_us for k in kernels] + [s.end_us for s in steps],
        default=0.0,
    )
    result.ops, result.kernels, result.steps = ops, kernels, sorted(steps, key=lambda s: s.start_us)
    result.span_us = (lo, hi)
    if kernels:
        result.gpu = gpu_breakdown(kernels, result.span_us)
    elif len(activities) > 1:
        result.gpu = NA(
            "no GPU activity in the profiled span (the cell launched no kernel)", "no_activity"
        )
    else:
        result.gpu = NA("GPU activity was not recorded (see the notice above)", "not_recorded")
    if memory:
        _memory_from_profiler(prof, result, events)
    return result


#: utility ranges torch's own tables leave out (``torch.autograd.profiler_util._filter_name``).
_SKIP = {
    "[memory]",
    "[OutOfMemory]",
    "profiler::_record_function_enter",
    "profiler::_record_function_enter_new",
    "profiler::_record_function_exit",
    "aten::is_leaf",
    "aten::output_nr",
    "aten::_version",
}


def _step_number(name: str, fallback: int) -> int:
    m = re.search(r"#(\d+)", name)
    return int(m.group(1)) if m else fallback


def _records_from_kineto(kin, events, device: bool = True):
    """(ops, kernels, steps) from the Kineto events.

    (ops, kernels, steps) from ``events``, the list ``kineto_results.events()`` returned: self time,
    ``top`` and ``depth`` from the nesting of the operators of each thread (a range inside another
    on the same thread is its child). Each accessor runs over all events at once (``map``), the
    device ones only when a device activity was recorded (``device``): at 100,000 events these
    calls are most of the cost. Python-function events
    are left out.
    """
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import StringTable

    cpu_types = {DeviceType.CPU, DeviceType.MKLDNN, DeviceType.IDEEP}
    t0 = kin.trace_start_ns()
    device_events = []
    if device:
        types = list(map(methodcaller("device_type"), events))
        device_events = [e for e, t in zip(events, types, strict=True) if t not in cpu_types]
        events = [e for e, t in zip(events, types, strict=True) if t in cpu_types]

    def col(accessor, needed=True):
        return map(methodcaller(accessor), events) if needed else repeat(0)

    by_thread: dict = {}
    steps, by_corr = [], {}
    skip = _SKIP
    for e, name, start_ns, dur_ns, tid, end_tid, is_async, python, corr, linked in zip(
        events,
        col("name"),
        col("start_ns"),
        col("duration_ns"),
        col("start_thread_id"),
        col("end_thread_id"),
        col("is_async"),
        col("is_python_function"),
        col("correlation_id", device),
        col("linked_correlation_id", device),
        strict=False,  # repeat() fills the columns not read
    ):
        if name in skip or is_async or python or tid != end_tid:
            continue
        start = (start_ns - t0) / 1000.0
        end = start + dur_ns / 1000.0
        if name.startswith("ProfilerStep#") and e.is_user_annotation():
            steps.append(StepRecord(_step_number(name, len(steps)), start, end))
            continue
        rec = OpRecord(name, None, tid, start, end, end - start, event=e)  # shapes: on use
        recs = by_thread.get(tid)
        if recs is None:
            recs = by_thread[tid] = []
        recs.append(rec)
        if corr and not linked:
            by_corr[corr] = rec
    ops = []
    for recs in by_thread.values():
        # by start, an enclosing operator before the ones it encloses (two stable sorts)
        recs.sort(key=attrgetter("end_us"), reverse=True)
        recs.sort(key=attrgetter("start_us"))
        stack: list = []  # the enclosing operators
        parents, redispatch = [], False
        for rec in recs:
            start = rec.start_us
            while stack and stack[-1].end_us <= start:
                stack.pop()
            depth = len(stack)
            parent = stack[-1] if depth else None
            if parent is not None:
                parent.self_us -= rec.self_us
                rec.depth, rec.top = depth, False
                redispatch = redispatch or parent.name == rec.name
            stack.append(rec)
            parents.append(parent)
        ops.extend(_merge_redispatches(recs, parents, by_corr) if redispatch else recs)
    names = StringTable()
    kernels = []
    for e in device_events:
        name = names[e.name()]
        if name in skip:
            continue
        start = (e.start_ns() - t0) / 1000.0
        end = start + e.duration_ns() / 1000.0
        launcher = by_corr.get(e.linked_correlation_id())
        if launcher is not None:
            launcher.device_us += end - start
        kernels.append(
            KernelRecord(
                name,
                _kind(name),
                e.device_index(),
                e.device_resource_id(),
                start,
                end,
                launcher.name if launcher is not None else "",
            )
        )
    for op in ops:  # a child running past its parent's end would leave a negative self time
        if op.self_us < 0:
            op.self_us = 0.0
    if len(by_thread) > 1:
        ops.sort(key=attrgetter("start_us"))
    return ops, kernels, steps


def _merge_redispatches(recs, parents, by_corr):
    """One thread's records without redispatched overloads.

    The records of one thread (in start order, with their parents) less each operator that is the
    only child of an operator of its name (an overload redispatching, ``aten::sum`` inside
    ``aten::sum``): merged into that parent (self time and launched kernels added, its children
    adopted), as torch's ``EventList._remove_dup_nodes`` does for ``key_averages()``. ``by_corr`` is
    updated to the parents; ``depth`` and ``top`` are recomputed.
    """
    children: dict = {}
    for p in parents:
        if p is not None:
            children[id(p)] = children.get(id(p), 0) + 1
    into: dict = {}  # id(merged record) -> the record it was merged into
    kept = []
    for rec, p in zip(recs, parents, strict=True):
        if p is not None:
            p = into.get(id(p), p)
        if p is not None and p.name == rec.name and children[id(p)] == 1:
            into[id(rec)] = p
            children[id(p)] = children.get(id(rec), 0)
            p.self_us += rec.self_us
            continue
        rec.depth = 0 if p is None else p.depth + 1
        rec.top = p is None
        kept.append(rec)
    for corr, rec in by_corr.items():
        if id(rec) in into:
            by_corr[corr] = into[id(rec)]
    return kept


def _records_from_function_events(prof):
    """(ops, kernels, steps) from ``prof.events()``."""
    from torch.autograd import DeviceType

    cpu = DeviceType.CPU
    ops, kernels, steps, device_events = [], [], [], []
    launchers: dict = {}
    for evt in prof.events() or []:
        tr = evt.time_range
        if evt.device_type != cpu:
            device_events.append(evt)
            continue
        if evt.is_python_function or evt.is_async or evt.name in _SKIP:
            continue
        if evt.is_user_annotation and evt.name.startswith("ProfilerStep"):
            steps.append(
                StepRecord(_step_number(evt.trace_name or "", len(steps)), tr.start, tr.end)
            )
            continue
        # without Python calls recorded: no module, no frame; depth and top the same way
        module, frames, is_top, depth = _python_context(evt)
        rec = OpRecord(
            evt.name,
            evt.input_shapes or [],
            evt.thread,
            tr.start,
            tr.end,
            evt.self_cpu_time_total,
            is_top,
            module,
            frames,
            depth=depth,
        )
        ops.append(rec)
        launchers[evt.id] = rec
    for evt in device_events:
        tr = evt.time_range
        launcher = launchers.get(evt.linked_correlation_id)
        if launcher is not None:
            launcher.device_us += tr.end - tr.start
        kernels.append(
            KernelRecord(
                evt.name,
                _kind(evt.name),
                evt.device_index,
                evt.device_resource_id,
                tr.start,
                tr.end,
                launcher.name if launcher is not None else "",
            )
        )
    return ops, kernels, steps


def _memory_from_profiler(prof, result: ProfResult, events=None) -> None:
    """Allocation timeline and peak per device.

    Allocation timeline and peak per device from the profiler's ``[memory]`` events
    (``profile_memory``); ``events``: ``kineto_results.events()`` when already read.
    """
    kin = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kin is None:
        result.peak_memory_bytes = NA("the profiler kept no allocation events", "not_recorded")
        return
    t0 = kin.trace_start_ns()
    series: dict = {}
    for evt in kin.events() if events is None else events:
        if evt.name() != "[memory]":
            continue
        dev = evt.device_type().name.lower()
        key = "cpu" if dev in ("cpu", "mkldnn", "ideep") else f"{dev}:{evt.device_index()}"
        series.setdefault(key, []).append(((evt.start_ns() - t0) / 1000.0, evt.nbytes()))
    peaks, points = {}, {}
    for key, items in series.items():
        items.sort()
        level, peak, pts = 0, 0, [(result.span_us[0], 0)]
        for t, n in items:
            level += n
            peak = max(peak, level)
            pts.append((t, level))
        peaks[key], points[key] = peak, pts
    result.memory_points = points
    result.peak_memory_bytes = (
        peaks if peaks else NA("no allocation happened while profiling", "no_activity")
    )
