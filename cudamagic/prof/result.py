"""What ``%%torchprof`` returns: the records of a profiled cell and the tables of them.

Times are microseconds (``_us``) from the start of the profiler's trace unless a name says
otherwise; byte counts are bytes. pandas is only touched by :meth:`ProfResult.to_pandas`; the text
and HTML forms are in :mod:`.render`, the building from ``torch.profiler`` in :mod:`.summary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..core.display import Displayed
from ..core.gcpause import paused_gc
from ..core.na import NA
from . import render

#: The operator table groupings (``--group``).
GROUPS = ("op", "shape", "module", "stack")


@dataclass(slots=True)
class OpRecord:
    """One call of a CPU operator.

    One call of a CPU operator (an ``aten::`` op, a runtime call such as ``cudaLaunchKernel``, or
    your own ``record_function`` range).

    Attributes:
        name: full operator name (``aten::addmm``).
        shapes: input shapes (``[[128], [128, 64]]``), as the profiler gives them: a list, or its
            text; turned into text only when a table is grouped by shape. ``None`` while
            ``event`` holds them: read them with :meth:`input_shapes`.
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
        event: the profiler's Kineto event whose shapes are not read yet, or ``None``: reading
            them is most of the cost of a summary at 100,000 events, and only a table grouped by
            shape needs them.
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
    event: object = None

    def input_shapes(self):
        """The input shapes, read from the Kineto event on first use."""
        if self.event is not None:
            self.shapes, self.event = self.event.shapes(), None
        return self.shapes

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
            detail = str(op.input_shapes())
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
                or an unknown grouping.
        """
        group = group or self.group
        if group not in GROUPS:
            raise ValueError(f"unknown grouping {group!r}: use one of {', '.join(GROUPS)}")
        if group in ("module", "stack") and not self.with_stack:
            raise ValueError(
                f"grouping by {group} needs the Python calls, which this profile did not record: "
                f"profile the cell again with `%%torchprof --group {group}`"
            )
        key = (group, stack_depth or self.stack_depth, len(self.ops))
        if key not in self._rows_cache:
            with paused_gc():
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
        with paused_gc():
            return render.result_html(self)

    def save_html(self, path: str) -> str:
        """Write the summary as a standalone HTML page at ``path`` (UTF-8); returns ``path``."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(render.page(self.to_html(), title=self.header))
        return path

    def to_text(self) -> str:
        """The text form (terminal, ``text/plain``)."""
        with paused_gc():
            return render.result_text(self)
