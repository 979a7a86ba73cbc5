"""The result of a profiled cell, and its tables.

Plain records built from ``torch.profiler`` events, tables computed from them.

Times are microseconds (``_us``) from the start of the profiler's trace unless a name says
otherwise; byte counts are bytes. torch is only touched by
:func:`build_result` (through the profiler object it is given) and pandas only by
:meth:`ProfResult.to_pandas`.
"""

from __future__ import annotations

import contextlib
import gc
import re
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter, methodcaller

from ..core.display import Displayed
from ..core.na import NA
from . import render

#: The operator table groupings (``--group``).
GROUPS = ("op", "shape", "module", "stack")
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


@contextlib.contextmanager
def gc_paused():
    """Pause Python's cyclic garbage collector inside the block (restored as it was after).

    A profile of 100,000 events keeps about a million objects; building or rendering it allocates
    enough to start full collections that walk them all again and again (a third of the time,
    measured by ``benchmarks/bench_torchprof.py``). A pause only delays collection: cycles made
    meanwhile (torch's ``FunctionEvent`` parent/child links) are collected once the collector is
    back on.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@dataclass(slots=True)
class OpRecord:
    """One call of a CPU operator.

    One call of a CPU operator (an ``aten::`` op, a runtime call such as ``cudaLaunchKernel``, or
    your own ``record_function`` range).

    Attributes:
        name: full operator name (``aten::addmm``).
        shapes: input shapes (``[[128], [128, 64]]``), as the profiler gives them: a list, or its
            text; turned into text only when a table is grouped by shape.
        thread: OS thread id.
        start_us: start, from the trace start.
        end_us: end, from the trace start.
        self_us: time not spent in child operators.
        top: no other operator encloses it.
        module: innermost ``nn.Module`` path (``Sequential_0/Linear_1``) when Python calls were
            recorded, else ``""``.
        stack: innermost-first frames of your code (``"cell.py(5): train"``) when Python calls were
            recorded.
        device_us: device time of the kernels it launched.
        depth: how many operators enclose it (0 for a top one; the timeline draws depths 0, 1, 2
            in their own rows).
    """

    name: str
    shapes: object
    thread: int
    start_us: float
    end_us: float
    self_us: float
    top: bool = True
    module: str = ""
    stack: tuple = ()
    device_us: float = 0.0
    depth: int = 0

    @property
    def total_us(self) -> float:
        """Inclusive CPU time in microseconds."""
        return self.end_us - self.start_us


@dataclass(slots=True)
class KernelRecord:
    """One device activity (GPU kernel, memcpy, memset).

    Attributes:
        name: full kernel name.
        kind: ``"kernel"``, ``"memcpy"`` or ``"memset"``.
        device: CUDA ordinal.
        stream: CUDA stream id.
        start_us: start, from the trace start.
        end_us: end, from the trace start.
        launcher: the CPU operator that launched it (by correlation id), or ``""``.
    """

    name: str
    kind: str
    device: int
    stream: int
    start_us: float
    end_us: float
    launcher: str = ""

    @property
    def dur_us(self) -> float:
        """Duration in microseconds."""
        return self.end_us - self.start_us


@dataclass(slots=True)
class StepRecord:
    """One ``ProfilerStep#N`` range of a ``--steps`` run (N: the profiler's 0-based step number)."""

    step: int
    start_us: float
    end_us: float

    @property
    def dur_us(self) -> float:
        """Duration in microseconds."""
        return self.end_us - self.start_us


@dataclass
class TableRow:
    """One row of an operator or kernel table (aggregated calls).

    Attributes:
        name: operator or kernel name.
        detail: the grouping's extra key (shapes, module, stack) or ``""``.
        calls: number of calls.
        self_us: summed self time (kernels: device time).
        total_us: summed inclusive time.
        self_pct: share of all operators' self time (kernels: of all device time), in percent.
        launcher: kernels only, the launching operator(s).
    """

    name: str
    detail: str
    calls: int
    self_us: float
    total_us: float
    self_pct: float
    launcher: str = ""


@dataclass
class GpuBreakdown:
    """How one device spent the profiled span: microseconds per category, which sum to ``span_us``.

    Overlapping activities count once, in the order kernel > memcpy > memset (a memcpy during a
    kernel counts as kernel time). ``idle_us``: nothing ran on the device.
    """

    device: int
    span_us: float
    kernel_us: float
    memcpy_us: float
    memset_us: float
    idle_us: float

    def pct(self) -> dict:
        """Category -> percent of the span (sums to 100 up to rounding)."""
        span = self.span_us or 1.0
        return {
            k: 100.0 * getattr(self, f"{k}_us") / span
            for k in ("kernel", "memcpy", "memset", "idle")
        }


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


def aggregate(ops, group: str = "op", stack_depth: int = 3) -> list[TableRow]:
    """Operator calls -> one :class:`TableRow` per group key, sorted by self time (largest first).

    Args:
        ops: :class:`OpRecord` items.
        group: ``op``, ``shape``, ``module`` or ``stack``.
        stack_depth: frames kept in the ``stack`` key.

    Returns:
        rows whose ``self_pct`` sum to 100 (when any operator has self time).
    """
    acc: dict = {}
    for op in ops:
        if group == "shape":
            detail = str(op.shapes)
        elif group == "module":
            detail = op.module or "(outside any nn.Module)"
        elif group == "stack":
            detail = " <- ".join(op.stack[:stack_depth]) or "(no frame of your code)"
        else:
            detail = ""
        entry = acc.get((op.name, detail))
        if entry is None:
            acc[(op.name, detail)] = [1, op.self_us, op.end_us - op.start_us]
        else:
            entry[0] += 1
            entry[1] += op.self_us
            entry[2] += op.end_us - op.start_us
    total_self = sum(v[1] for v in acc.values()) or 1.0
    rows = [
        TableRow(name, detail, c, s, t, 100.0 * s / total_self)
        for (name, detail), (c, s, t) in acc.items()
    ]
    rows.sort(key=lambda r: (-r.self_us, r.name, r.detail))
    return rows


def aggregate_kernels(kernels) -> list[TableRow]:
    """One :class:`TableRow` per kernel name, largest first.

    Device activities -> one :class:`TableRow` per kernel name (``self_us`` = ``total_us`` = device
    time), largest first; ``launcher`` lists the launching operators, most frequent first.
    """
    acc: dict = {}
    for k in kernels:
        entry = acc.setdefault(k.name, [0, 0.0, {}])
        entry[0] += 1
        entry[1] += k.end_us - k.start_us
        if k.launcher:
            entry[2][k.launcher] = entry[2].get(k.launcher, 0) + 1
    total = sum(v[1] for v in acc.values()) or 1.0
    rows = []
    for name, (calls, dev, launchers) in acc.items():
        names = sorted(launchers, key=lambda n: -launchers[n])
        rows.append(TableRow(name, "", calls, dev, dev, 100.0 * dev / total, ", ".join(names)))
    rows.sort(key=lambda r: (-r.self_us, r.name))
    return rows


@dataclass(repr=False)
class ProfResult(Displayed):
    """What ``%%torchprof`` measured for one cell (the object ``-o NAME`` stores).

    Attributes:
        header: the magic line.
        wall_s: the cell's wall time in seconds, under the profiler.
        cpu_s: this process's CPU time during the cell in seconds (all threads).
        activities: the recorded activities (``["CPU"]``, ``["CPU", "CUDA"]``).
        ops: the :class:`OpRecord` s.
        kernels: the :class:`KernelRecord` s.
        steps: the :class:`StepRecord` s.
        span_us: (start, end) of the profiled span in microseconds.
        group: the table grouping.
        stack_depth: frames per ``stack`` key.
        top: rows per table.
        with_stack: Python calls were recorded.
        with_shapes: the operators' input shapes were read (with ``--group shape`` or ``stack``
            or ``module``; reading them for every operator costs a tenth of the summary).
        gpu: one :class:`GpuBreakdown` per device, or NA with the reason.
        peak_memory_bytes: peak allocated bytes above the span's start (``--memory``), per device
            name (``"cpu"``, ``"cuda:0"``), or NA.
        peak_memory_bounds: device name -> ``"upper bound"`` for a peak computed from incomplete
            events (on the CPU, frees of blocks allocated before profiling are not recorded);
            a device not listed is exact.
        memory_points: device name -> [(t_us, allocated bytes above start)].
        memory_html_path: the PyTorch memory viewer written for a CUDA snapshot, or None.
        memory_snapshot_s: seconds taken to dump the CUDA memory snapshot, or None.
        trace_path: the written trace, or None.
        trace_notes: what the size cap dropped.
        notices: one-line notes (activities not recorded, warnings summary).
        warnings: the profiler's warnings.
        error: the cell's exception as text, or None (a profile of the part that ran).
        lost: how a profiler the cell started took over this profile (``"stopped"``: nothing
            recorded here; ``"replaced"``: only what ran after it started), or None.
        verdict: why the steps are slow, the fix, FLOPs and MFU (:class:`~.verdict.Verdict`), or
            None when it could not be built.
    """

    header: str = "%%torchprof"
    wall_s: float = 0.0
    cpu_s: float = 0.0
    activities: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    span_us: tuple = (0.0, 0.0)
    group: str = "op"
    stack_depth: int = 3
    top: int = 15
    with_stack: bool = False
    with_shapes: bool = True
    gpu: object = NA("no GPU activity recorded", "not_recorded")
    peak_memory_bytes: object = NA("run with --memory", "not_recorded")
    peak_memory_bounds: dict = field(default_factory=dict)
    memory_points: dict = field(default_factory=dict)
    memory_html_path: str | None = None
    memory_snapshot_s: float | None = None
    trace_path: str | None = None
    trace_notes: list = field(default_factory=list)
    notices: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    error: str | None = None
    lost: str | None = None
    verdict: object = None
    _rows_cache: dict = field(default_factory=dict, repr=False, compare=False)

    # ---- tables
    # -------------------------------------------------------------------------------------------
    def rows(self, group: str | None = None, stack_depth: int | None = None) -> list[TableRow]:
        """Every operator row for ``group``, largest self time first.

        Every operator row for ``group`` (default: the cell's ``--group``), largest self time first.

        Raises:
            ValueError: ``module``/``stack`` grouping of a result recorded without Python calls,
                ``shape`` grouping of one whose shapes were not read (``with_shapes``), or an
                unknown grouping.
        """
        group = group or self.group
        if group not in GROUPS:
            raise ValueError(f"unknown grouping {group!r}: use one of {', '.join(GROUPS)}")
        if not {"op": True, "shape": self.with_shapes}.get(group, self.with_stack):
            what = "the input shapes" if group == "shape" else "the Python calls"
            raise ValueError(
                f"grouping by {group} needs {what}, which this profile did not record: "
                f"profile the cell again with `%%torchprof --group {group}`"
            )
        key = (group, stack_depth or self.stack_depth, len(self.ops))
        if key not in self._rows_cache:
            with gc_paused():
                self._rows_cache[key] = aggregate(self.ops, group, key[1])
        return list(self._rows_cache[key])

    def kernel_rows(self) -> list[TableRow]:
        """Every kernel row (device time, largest first)."""
        return aggregate_kernels(self.kernels)

    def table(
        self,
        group: str | None = None,
        top: int | None = None,
        kind: str = "ops",
        stack_depth: int | None = None,
    ):
        """The top rows as a table object (HTML in a notebook, text in a terminal).

        Args:
            group: ``op``, ``shape``, ``module`` or ``stack`` (operators only).
            top: rows shown (default the cell's ``--top``); the rest are summed in one "other" row.
            kind: ``"ops"`` or ``"kernels"``.
            stack_depth: frames per ``stack`` key.
        """
        top = top or self.top
        if kind == "kernels":
            return render.Table("kernels", self.kernel_rows(), top)
        if kind != "ops":
            raise ValueError(f"kind must be 'ops' or 'kernels', not {kind!r}")
        group = group or self.group
        return render.Table(group, self.rows(group, stack_depth), top)

    def to_pandas(self, group: str | None = None):
        """One row per operator (grouped by ``group``) and per kernel, as a ``pandas.DataFrame``.

        Columns: ``kind`` (``"operator"``/``"kernel"``), ``name``, ``detail``, ``calls``,
        ``self_time_us``, ``total_time_us``, ``self_time_pct`` (share of all operators' self
        time, or of all device time for kernels), ``launcher``.

        Raises:
            UsageError: pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError as exc:
            # here, not at the top: the engine also runs where IPython is not installed
            from IPython.core.error import UsageError

            raise UsageError("ProfResult.to_pandas() needs pandas: `pip install pandas`.") from exc
        records = [
            (kind, r.name, r.detail, r.calls, r.self_us, r.total_us, r.self_pct, r.launcher)
            for kind, rows in (("operator", self.rows(group)), ("kernel", self.kernel_rows()))
            for r in rows
        ]
        columns = [
            "kind",
            "name",
            "detail",
            "calls",
            "self_time_us",
            "total_time_us",
            "self_time_pct",
            "launcher",
        ]
        return pd.DataFrame.from_records(records, columns=columns)

    def slowest(self, group: str | None = None) -> TableRow | None:
        """The operator row with the most self time, or None when nothing was recorded."""
        rows = self.rows(group)
        return rows[0] if rows else None

    @property
    def span_s(self) -> float:
        """Length of the profiled span in seconds."""
        return (self.span_us[1] - self.span_us[0]) / 1e6

    # ---- output
    # -------------------------------------------------------------------------------------------
    def to_html(self) -> str:
        """The summary as an HTML fragment (inline SVG and styles, no external URL)."""
        with gc_paused():
            return render.result_html(self)

    def save_html(self, path: str) -> str:
        """Write the summary as a standalone HTML page at ``path`` (UTF-8); returns ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(render.page(self.to_html(), title=self.header))
        return path

    def to_text(self) -> str:
        """The text form (terminal, ``text/plain``)."""
        with gc_paused():
            return render.result_text(self)


# ---- building a result from torch.profiler
# --------------------------------------------------------------


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
    with gc_paused():
        if with_stack or kin is None:
            ops, kernels, steps = _records_from_function_events(prof)
        else:
            events = kin.events()
            if say is not None:
                say(f"analysing {len(events):,} events")
            result.with_shapes = group == "shape"
            ops, kernels, steps = _records_from_kineto(
                kin, events, len(activities) > 1, group == "shape"
            )
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


def _records_from_kineto(kin, events, device: bool = True, shapes: bool = True):
    """(ops, kernels, steps) from the Kineto events.

    (ops, kernels, steps) from ``events``, the list ``kineto_results.events()`` returned: self time,
    ``top`` and ``depth`` from the nesting of the operators of each thread (a range inside another
    on the same thread is its child). Each accessor runs over all events at once (``map``), the
    device ones only when a device activity was recorded (``device``), the input shapes only when
    asked (``shapes``): at 100,000 events these calls are most of the cost. Python-function events
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
    for e, name, start_ns, dur_ns, tid, end_tid, is_async, python, shape, corr, linked in zip(
        events,
        col("name"),
        col("start_ns"),
        col("duration_ns"),
        col("start_thread_id"),
        col("end_thread_id"),
        col("is_async"),
        col("is_python_function"),
        col("shapes") if shapes else repeat(""),
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
        rec = OpRecord(name, shape, tid, start, end, end - start)
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
