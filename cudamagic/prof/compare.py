"""``%torchprof --compare A B``: what changed between two profiles.

``%torchprof --compare A B``: per-operator and per-kernel differences between two profiles, biggest
first.

A and B are :class:`~.result.ProfResult` objects (``-o NAME``) or saved Chrome traces (``--trace
FILE``). Operators are compared by self time (for a trace: the event's duration minus its directly
nested events on the same thread), kernels by device time; all times in microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import style
from ..core.display import Displayed
from ..core.fmt import esc, html_table, terminal_safe, text_table
from .breakdown import of_result, of_trace
from .render import ms, name_html
from .result import ProfResult
from .verdict import breakdown_change

_KERNEL_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@dataclass
class DiffRow:
    """One operator or kernel in both runs.

    Attributes:
        kind: ``"operator"`` or ``"kernel"``.
        name: full name.
        a_us: self (kernels: device) time summed over calls in A, 0.0 when absent.
        b_us: the same in B.
        a_calls: calls in A.
        b_calls: calls in B.
    """

    kind: str
    name: str
    a_us: float
    b_us: float
    a_calls: int
    b_calls: int

    @property
    def delta_us(self) -> float:
        """B minus A, in microseconds."""
        return self.b_us - self.a_us

    @property
    def ratio(self) -> float:
        """``b_us / a_us`` (inf when absent from A)."""
        return self.b_us / self.a_us if self.a_us else float("inf")


def totals_from_result(res) -> dict:
    """(kind, name) -> [calls, microseconds] of a :class:`~.result.ProfResult`."""
    out = {}
    for r in res.rows("op"):
        out[("operator", r.name)] = [r.calls, r.self_us]
    for r in res.kernel_rows():
        out[("kernel", r.name)] = [r.calls, r.self_us]
    return out


def totals_from_trace(data: dict) -> dict:
    """(kind, name) -> [calls, microseconds] from a Chrome trace dict.

    CPU operators (``cat`` ``cpu_op``) by self time computed from nesting per thread,
    kernels/memcpy/memset by duration.
    """
    out: dict = {}
    by_thread: dict = {}
    for e in data.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        cat = e.get("cat", "")
        name = str(e.get("name", ""))
        if cat in _KERNEL_CATS:
            entry = out.setdefault(("kernel", name), [0, 0.0])
            entry[0] += 1
            entry[1] += float(e["dur"])
        elif cat in ("cpu_op", "user_annotation") and not name.startswith("ProfilerStep#"):
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(
                (float(e["ts"]), float(e["dur"]), name, cat == "cpu_op")
            )
    for events in by_thread.values():
        events.sort(key=lambda t: (t[0], -t[1]))
        stack = []  # [end, name, self, is_op]

        def close(item):
            if item[3]:
                entry = out.setdefault(("operator", item[1]), [0, 0.0])
                entry[0] += 1
                entry[1] += max(0.0, item[2])

        for ts, dur, name, is_op in events:
            while stack and stack[-1][0] <= ts:
                close(stack.pop())
            if stack:
                stack[-1][2] -= dur
            stack.append([ts + dur, name, dur, is_op])
        while stack:
            close(stack.pop())
    return out


def compare(a, b, label_a: str = "A", label_b: str = "B") -> Comparison:
    """Rank the differences between profiles ``a`` and ``b``."""
    ta = totals_from_result(a) if isinstance(a, ProfResult) else totals_from_trace(a)
    tb = totals_from_result(b) if isinstance(b, ProfResult) else totals_from_trace(b)
    rows = []
    for key in set(ta) | set(tb):
        ca, ua = ta.get(key, (0, 0.0))
        cb, ub = tb.get(key, (0, 0.0))
        rows.append(DiffRow(key[0], key[1], ua, ub, ca, cb))
    rows.sort(key=lambda r: (-abs(r.delta_us), r.kind, r.name))
    total_a = sum(v[1] for k, v in ta.items() if k[0] == "operator")
    total_b = sum(v[1] for k, v in tb.items() if k[0] == "operator")
    out = Comparison(label_a, label_b, rows, total_a, total_b)
    out.changes = breakdown_change(_breakdown(a), _breakdown(b))
    return out


def _breakdown(profile):
    """The step-time breakdown of a result (its verdict's) or of a trace dict."""
    if isinstance(profile, ProfResult):
        return profile.verdict.breakdown if profile.verdict is not None else of_result(profile)
    return of_trace(profile)


class Comparison(Displayed):
    """Ranked differences between two profiles.

    Ranked differences (``rows``: :class:`DiffRow`, largest absolute change first) between two
    profiles.

    Attributes:
        label_a: what A is.
        label_b: what B is.
        rows: the :class:`DiffRow` s.
        total_a_us: all operators' self time in A.
        total_b_us: all operators' self time in B.
        changes: the step-time breakdown rows that changed (``"data wait 62.0 % -> 8.0 %"``)
            and the step-time ratio (``"step 2.90x faster"``), biggest change first.
        top: rows shown (all are in ``rows``).
    """

    def __init__(self, label_a, label_b, rows, total_a_us, total_b_us, top: int = 15):
        self.label_a, self.label_b, self.rows = label_a, label_b, rows
        self.total_a_us, self.total_b_us, self.top = total_a_us, total_b_us, top
        self.changes = []  # see the class docstring

    def headers(self):
        """The column headers."""
        return [
            "#",
            f"{self.label_a} ms",
            f"{self.label_b} ms",
            "change ms",
            "ratio",
            "calls A/B",
            "name",
        ]

    def _cells(self, i, r):
        ratio = "new" if r.a_us == 0 else ("gone" if r.b_us == 0 else f"{r.ratio:.3g}x")
        return [
            str(i),
            ms(r.a_us),
            ms(r.b_us),
            f"{r.delta_us / 1000:+.3f}",
            ratio,
            f"{r.a_calls}/{r.b_calls}",
            r.name if r.kind == "operator" else f"{r.kind}: {r.name}",
        ]

    def _title(self):
        return (
            f"{self.label_a} -> {self.label_b}: operators' self time {ms(self.total_a_us)} ms -> "
            f"{ms(self.total_b_us)} ms; biggest changes first"
        )

    def to_text(self):
        """The text form (terminal, ``text/plain``)."""
        rows = [
            [terminal_safe(c) for c in self._cells(i, r)]
            for i, r in enumerate(self.rows[: self.top], 1)
        ]
        out = [terminal_safe(self._title()), text_table(self.headers(), rows)]
        if self.changes:
            out += ["", "Step-time breakdown, biggest change first:"]
            out += [f"  {terminal_safe(c)}" for c in self.changes]
        return "\n".join(out)

    def to_html(self):
        """The HTML form (notebook)."""
        # the name second, not last: in a narrow output the numbers scroll, the name stays in view
        rows = [
            [esc(cells[0]), name_html(cells[-1])] + [esc(c) for c in cells[1:-1]]
            for cells in (self._cells(i, r) for i, r in enumerate(self.rows[: self.top], 1))
        ]
        head = self.headers()
        table = html_table(
            [head[0], head[-1], *head[1:-1]],
            rows,
            num=(0, 2, 3, 4, 5, 6),
            prose=(1,),
            col_cls={1: "cm-mono"},
        )
        changes = "".join(f"<li>{esc(c)}</li>" for c in self.changes)
        changes = (
            f"<div>Step-time breakdown, biggest change first:<ul>{changes}</ul></div>"
            if changes
            else ""
        )
        return style.page(
            f"<div class='cm-title'>{esc(self._title())}</div>" + style.scroll(table) + changes,
            "prof",
        )
