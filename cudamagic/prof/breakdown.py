"""Where the time of a profiled cell's steps went: one row per cause, adding up to 100 %.

A step is a ``ProfilerStep#N`` range of a ``--steps`` run; without ``--steps`` the whole profiled
span is one step. Each instant of a step goes to exactly one row, the first that applies:

CPU-only run (:data:`CPU_ROWS`): ``data wait`` (inside the DataLoader's ``__next__``, the
``enumerate(DataLoader)#...`` range torch records), ``optimizer`` (inside ``Optimizer.step#...`` or
``Optimizer.zero_grad#...``), ``host copies`` (inside a copy operator that no other operator
called: ``.clone()``, ``.to(dtype)``, ``.contiguous()``, ``.copy_()``), ``compute`` (inside any
other operator, on any thread) and ``Python overhead`` (no operator running: the interpreter).

With GPU activity (:data:`GPU_ROWS`): ``GPU computing`` (a kernel or memset running: whatever the
CPU does meanwhile is hidden), ``host-device copies`` (a memcpy on the device), then the GPU is
idle: ``data wait``, ``optimizer``, ``host-device copies`` (the CPU inside a copy operator),
``sync stalls`` (an idle gap during which the CPU sat in a
synchronising call: ``.item()``, ``.cpu()``, ``print(loss)``, ``torch.cuda.synchronize()``, a
blocking ``cudaMemcpy``), ``launch gaps`` (the CPU is inside operators, launching), ``Python
overhead`` (the CPU is in the interpreter).

Times are microseconds on the profiler's clock. Nothing here imports torch or IPython.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from dataclasses import dataclass, field

from .result import KernelRecord, OpRecord, StepRecord

CPU_ROWS = ("compute", "data wait", "host copies", "optimizer", "Python overhead")
GPU_ROWS = (
    "GPU computing",
    "data wait",
    "host-device copies",
    "launch gaps",
    "sync stalls",
    "optimizer",
    "Python overhead",
)
#: copy operators (counted when no other operator called them).
COPY_OPS = frozenset(
    {
        "aten::copy_",
        "aten::_to_copy",
        "aten::to",
        "aten::clone",
        "aten::contiguous",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
    }
)
#: calls that make the CPU wait for the GPU.
SYNC_OPS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
#: a stretch of Python shorter than this between two operators is dispatch overhead, in us.
SHORT_GAP_US = 50.0
_D, _O, _C, _A, _S, _K, _M = range(7)


def _start_then_longest(op) -> tuple:
    """Sort key: by start time, an enclosing operator before the ones it encloses."""
    return (op.start_us, -op.end_us)  # data, optimizer, copy, any op, sync, kernel, memcpy


def is_data_range(name: str) -> bool:
    """A DataLoader ``__next__`` range.

    Torch names it ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``.
    """
    return name.startswith("enumerate(DataLoader)") or ("DataLoader" in name and "__next__" in name)


def is_optimizer_range(name: str) -> bool:
    """An ``Optimizer.step#SGD.step`` or ``Optimizer.zero_grad#SGD.zero_grad`` range."""
    return name.startswith(("Optimizer.step#", "Optimizer.zero_grad#"))


@dataclass(frozen=True)
class Breakdown:
    """Time of the steps per row, and the facts the verdict reads.

    Attributes:
        rows_us: row name -> microseconds summed over the steps (:data:`CPU_ROWS` or
            :data:`GPU_ROWS`, in that order); the values sum to ``total_us``.
        total_us: summed length of the steps in microseconds.
        steps: how many steps (1 for a whole cell without ``--steps``).
        gpu: the GPU rows are used (kernels were recorded).
        facts: counts behind the rows (see :func:`breakdown`).
    """

    rows_us: dict
    total_us: float
    steps: int
    gpu: bool
    facts: dict = field(default_factory=dict)

    def pct(self) -> dict:
        """Row -> percent of the steps' time (sums to 100 up to rounding)."""
        total = self.total_us or 1.0
        return {k: 100.0 * v / total for k, v in self.rows_us.items()}

    @property
    def step_us(self) -> float:
        """Mean step length in microseconds."""
        return self.total_us / max(1, self.steps)


def _merged(intervals) -> list:
    """Sorted, disjoint (start, end) pairs covering the same time as ``intervals``."""
    out: list = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            if hi > out[-1][1]:
                out[-1][1] = hi
        else:
            out.append([lo, hi])
    return out


def _inside(t: float, merged, starts) -> bool:
    """``t`` lies in one of the ``merged`` intervals (``starts``: their start times)."""
    i = bisect_right(starts, t) - 1
    return i >= 0 and t < merged[i][1]


def breakdown(ops, kernels, steps, span) -> Breakdown:
    """Split the steps' time into rows (see the module docstring).

    Args:
        ops: :class:`~.result.OpRecord` items (CPU operators, runtime calls and ranges, all
            threads).
        kernels: :class:`~.result.KernelRecord` items (empty on a CPU-only run).
        steps: :class:`~.result.StepRecord` items; none: ``span`` is the one step.
        span: (start_us, end_us) of the profiled span.

    Returns:
        a :class:`Breakdown`. ``facts``: ``ops`` (outermost ``aten::`` operators per step,
        outside the optimizer and the DataLoader), ``median_op_us`` (their median length),
        ``copy_calls`` (copy operator name -> calls), ``optimizer`` (its class name), ``foreach``
        (the optimizer used ``_foreach_``/``_fused_`` operators), ``optimizer_ops`` (operators
        inside the optimizer per ``Optimizer.step`` call, so a cell of many small steps is not
        mistaken for one step over many parameters), ``data_iter`` (the DataLoader iterator's
        class name),
        ``sync_calls`` (name -> calls), ``htod_copies`` (host-to-device memcpys),
        ``pageable_copies`` (memcpys from pageable memory), ``median_kernel_us``,
        ``gpu_idle_pct`` (idle share of the steps), ``kernels`` (per step), ``short_gaps_pct``
        (share of the steps in Python stretches under :data:`SHORT_GAP_US` between operators).
    """
    windows = [(s.start_us, s.end_us) for s in steps] or [tuple(span)]
    gpu = bool(kernels)
    spans: dict = {c: [] for c in range(7)}
    facts: dict = {
        "copy_calls": {},
        "sync_calls": {},
        "foreach": False,
        "data_iter": "",
        "optimizer": "",
    }
    optimizer_steps = 0
    outer_aten = []
    by_thread: dict = {}
    for op in ops:
        by_thread.setdefault(op.thread, []).append(op)
    for items in by_thread.values():
        items.sort(key=_start_then_longest)
        stack: list = []  # enclosing operators on this thread
        for op in items:
            start, name = op.start_us, op.name
            while stack and stack[-1].end_us <= start:
                stack.pop()
            under_aten = bool(stack) and stack[-1].name.startswith("aten::")
            stack.append(op)
            span_ = (start, op.end_us)
            if name.startswith("aten::"):
                spans[_A].append(span_)
                if not under_aten:
                    outer_aten.append(op)
                    if name in COPY_OPS:
                        spans[_C].append(span_)
                        facts["copy_calls"][name] = facts["copy_calls"].get(name, 0) + 1
                if name in SYNC_OPS:
                    spans[_S].append(span_)
                    _count_sync(facts, name, stack)
                if name.startswith(("aten::_foreach_", "aten::_fused_")):
                    facts["foreach"] = True
            elif is_data_range(name):
                spans[_D].append(span_)
                facts["data_iter"] = name.split("#", 1)[-1].split(".")[0]
            elif is_optimizer_range(name):
                spans[_O].append(span_)
                if name.startswith("Optimizer.step#"):
                    facts["optimizer"] = name.split("#", 1)[1].split(".")[0]
                    optimizer_steps += 1
            else:  # runtime calls (cudaLaunchKernel...), autograd and your own ranges
                spans[_A].append(span_)
                if name in SYNC_OPS:
                    spans[_S].append(span_)
                    _count_sync(facts, name, stack)
    for k in kernels:
        spans[_M if k.kind == "memcpy" else _K].append((k.start_us, k.end_us))
    merged = {c: _merged(v) for c, v in spans.items()}
    marks = [(t, d, c) for c, m in merged.items() for lo, hi in m for t, d in ((lo, 1), (hi, -1))]
    opt, data = merged[_O], merged[_D]
    opt_starts, data_starts = [m[0] for m in opt], [m[0] for m in data]
    win = _merged(windows)
    win_starts = [m[0] for m in win]
    optimizer_ops, in_steps = 0, []
    for op in outer_aten:
        if _inside(op.start_us, opt, opt_starts):
            optimizer_ops += 1
        elif not _inside(op.start_us, data, data_starts) and _inside(op.start_us, win, win_starts):
            in_steps.append(op)
    rows = dict.fromkeys(GPU_ROWS if gpu else CPU_ROWS, 0.0)
    spent, idle, short = _sweep(marks, sorted(windows), gpu)
    for k, v in spent.items():
        rows[k] += v
    total = sum(hi - lo for lo, hi in windows)
    n = len(windows)
    facts["ops"] = len(in_steps) / n
    facts["median_op_us"] = (
        statistics.median(o.end_us - o.start_us for o in in_steps) if in_steps else 0.0
    )
    facts["optimizer_ops"] = optimizer_ops / (optimizer_steps or n)
    facts["htod_copies"] = sum(
        1 for k in kernels if k.kind == "memcpy" and "htod" in k.name.lower()
    )
    facts["pageable_copies"] = sum(
        1 for k in kernels if k.kind == "memcpy" and "pageable" in k.name.lower()
    )
    real = [k.end_us - k.start_us for k in kernels if k.kind == "kernel"]
    facts["median_kernel_us"] = statistics.median(real) if real else 0.0
    facts["kernels"] = len(real) / n
    facts["gpu_idle_pct"] = 100.0 * idle / total if total and gpu else 0.0
    facts["short_gaps_pct"] = 100.0 * short / total if total else 0.0
    return Breakdown(rows, total, n, gpu, facts)


def _count_sync(facts: dict, name: str, stack: list) -> None:
    """Count a synchronising call unless it is inside another one.

    ``.item()`` runs ``_local_scalar_dense``, which runs ``cudaStreamSynchronize``: one sync.
    ``stack`` holds the enclosing operators and ends with the call itself.
    """
    if not any(o.name in SYNC_OPS for o in stack[:-1]):
        facts["sync_calls"][name] = facts["sync_calls"].get(name, 0) + 1


def _sweep(marks, windows, gpu: bool) -> tuple[dict, float, float]:
    """Row -> microseconds in the windows, GPU idle and short-gap Python microseconds.

    One pass over the sorted ``marks``; ``windows`` are sorted and disjoint. A gap is short when
    the interpreter runs less than :data:`SHORT_GAP_US` between two operators (dispatching, not
    running the user's own Python work).
    """
    edges = [(lo, 0, -1) for lo, _ in windows] + [(hi, 0, -1) for _, hi in windows]
    points = sorted(marks + edges)
    active = [0] * 7
    spent: dict = {}
    idle = short = run = 0.0
    sync_in_gap = False
    w, last = 0, points[0][0] if points else 0.0
    for t, delta, cat in points:
        if t > last:
            row, gpu_idle, sync_in_gap = _row(active, gpu, sync_in_gap)
            while w < len(windows) and windows[w][1] <= last:
                w += 1
            i, inside = w, 0.0
            while i < len(windows) and windows[i][0] < t:  # the part of [last, t) in windows
                a, b = max(last, windows[i][0]), min(t, windows[i][1])
                if b > a:
                    spent[row] = spent.get(row, 0.0) + (b - a)
                    idle += (b - a) if gpu_idle else 0.0
                    inside += b - a
                i += 1
            if row == "Python overhead":
                run += inside
                if t - last >= SHORT_GAP_US:
                    run = float("inf")
            else:
                short += run if run < SHORT_GAP_US else 0.0
                run = 0.0
            last = t
        if cat >= 0:
            active[cat] += delta
    return spent, idle, short


def _row(active, gpu: bool, sync_in_gap: bool) -> tuple[str, bool, bool]:
    """(row, the GPU is idle, a sync happened in the current GPU idle gap) for one instant."""
    if not gpu:
        if active[_D] > 0:
            return "data wait", False, False
        if active[_O] > 0:
            return "optimizer", False, False
        if active[_C] > 0:
            return "host copies", False, False
        return ("compute" if active[_A] > 0 else "Python overhead"), False, False
    # with a GPU, time it computes is not lost whatever the CPU does (it is ahead in the queue)
    if active[_K] > 0:
        return "GPU computing", False, False
    if active[_M] > 0:
        return "host-device copies", True, False
    if active[_S] > 0:
        sync_in_gap = True
    if active[_D] > 0:
        return "data wait", True, sync_in_gap
    if active[_O] > 0:
        return "optimizer", True, sync_in_gap
    if active[_C] > 0:
        return "host-device copies", True, sync_in_gap
    if sync_in_gap:
        return "sync stalls", True, sync_in_gap
    return ("launch gaps" if active[_A] > 0 else "Python overhead"), True, sync_in_gap


def of_result(res) -> Breakdown:
    """The :class:`Breakdown` of a :class:`~.result.ProfResult`."""
    return breakdown(res.ops, res.kernels, res.steps, res.span_us)


_KERNEL_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
_CPU_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "gpu_user_annotation")


def records_from_trace(data: dict) -> tuple[list, list, list, tuple]:
    """(ops, kernels, steps, span) from a Chrome trace dict as ``torch.profiler`` exports it.

    CPU events: categories ``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``cuda_driver``;
    device events: ``kernel``, ``gpu_memcpy``, ``gpu_memset``; ``ProfilerStep#N`` ranges are the
    steps. Only complete events (``"ph": "X"``) are read; times are the trace's microseconds.
    """
    ops, kernels, steps = [], [], []
    for e in data.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e or "ts" not in e:
            continue
        cat, name = e.get("cat", ""), str(e.get("name", ""))
        start = float(e["ts"])
        end = start + float(e["dur"])
        if cat in _KERNEL_KINDS:
            args = e.get("args") or {}
            kernels.append(
                KernelRecord(
                    name,
                    _KERNEL_KINDS[cat],
                    int(args.get("device", e.get("pid", 0)) or 0),
                    int(args.get("stream", e.get("tid", 0)) or 0),
                    start,
                    end,
                )
            )
        elif cat == "user_annotation" and name.startswith("ProfilerStep#"):
            steps.append(StepRecord(int(name.split("#", 1)[1] or 0), start, end))
        elif cat in _CPU_CATS and cat != "gpu_user_annotation":
            ops.append(OpRecord(name, "", int(e.get("tid", 0) or 0), start, end, end - start))
    times = [o.start_us for o in ops] + [k.start_us for k in kernels] + [s.start_us for s in steps]
    ends = [o.end_us for o in ops] + [k.end_us for k in kernels] + [s.end_us for s in steps]
    span = (min(times, default=0.0), max(ends, default=0.0))
    return ops, kernels, sorted(steps, key=lambda s: s.start_us), span


def of_trace(data: dict) -> Breakdown:
    """The :class:`Breakdown` of a Chrome trace dict (see :func:`records_from_trace`)."""
    ops, kernels, steps, span = records_from_trace(data)
    return breakdown(ops, kernels, steps, span)
