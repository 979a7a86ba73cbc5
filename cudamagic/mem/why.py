"""``%cudamem why``: what holds the memory that keeps growing, and the growth watch of ``on``.

:class:`WhyReport` is what ``%cudamem why`` returns; :class:`CellGrowth` gives ``%cudamem on`` its
one-line notice and takes the baseline when growth begins.

No IPython import: the shell is passed in. The holder search is :mod:`.holders`, the detector
:mod:`cudamagic.core.growth`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..core import platform, style
from ..core.display import Displayed
from ..core.fmt import TEXT_WIDTH, esc, format_bytes, html_table, md_code, plural
from ..core.growth import Growth, GrowthDetector
from ..core.na import is_na, jsonable, plain_data
from . import sites
from .holders import Baseline, find_holders
from .stats import take_snapshot


class CellGrowth:
    """Steady growth across cells, for ``%cudamem on`` (one :class:`GrowthDetector` per metric).

    Fed each cell's report (:meth:`observe`): PyTorch's ``allocated``/``reserved`` summed over
    devices when CUDA is in use, else the C heap's bytes in use
    (:func:`cudamagic.core.platform.malloc_in_use_bytes`: where CPU tensors live, and unlike RSS
    not hidden by reused free memory), else the process RSS. When a run of rises begins it takes a
    holder baseline (:func:`cudamagic.mem.holders.find_holders` on the namespace), so ``%cudamem
    why`` can tell what grew since.

    Args:
        shell: the ``InteractiveShell`` (its ``user_ns``).
        min_step_bytes: smallest rise per cell that counts, in bytes (1 MiB).
        steps: rises in a row before the notice (3).
    """

    def __init__(self, shell, min_step_bytes: int = 1 << 20, steps: int = 3):
        self.shell = shell
        self.detector = GrowthDetector(min_step_bytes, steps, unit="cell", metric="")
        self.growth = None  # the last Growth seen (kept after the run ends, for `why`)
        self.growth_cell = None  # In[n] of the last cell that grew in that run
        self.baseline = None  # the holders when the last run began, or from the last `why`
        self.baseline_cell = None
        self.recording = False  # %cudamem on turned on PyTorch's allocation history
        self.sites = {}  # allocation sites' bytes at the baseline (GPU)

    def observe(self, report) -> str | None:
        """Feed one cell's :class:`~.result.CellMemReport`; the notice when growth is confirmed."""
        before = None
        if report.gpus:
            metric = "allocated"
            used = sum(g.allocated_after_bytes for g in report.gpus)
            reserved = sum(g.reserved_after_bytes for g in report.gpus)
            before = (
                sum(g.allocated_before_bytes for g in report.gpus),
                sum(g.reserved_before_bytes for g in report.gpus),
            )
        else:
            metric, used, reserved = "CPU memory in use", platform.malloc_in_use_bytes(), None
            if used is None:
                metric, used = "CPU RSS", report.rss_after_bytes
            if used is None or is_na(used):
                return None
        if metric != self.detector.metric:  # CUDA started in this cell: a new series
            self.detector.reset()
            self.detector.metric = metric
            if before is not None:  # from the cell's start (0 when the cell initialised CUDA)
                self.detector.add(*before)
        growth = self.detector.add(used, reserved)
        if self.detector.started:
            self.take_baseline(report.cell, cuda=bool(report.gpus))
        if growth is None:
            return None
        self.growth, self.growth_cell = growth, report.cell
        return f"[cudamem] {growth.line()}" if growth.new else None

    def take_baseline(self, cell=None, cuda: bool = False) -> None:
        """Record what holds memory now (the next ``%cudamem why`` compares with it).

        On a GPU (``cuda``) this also turns on PyTorch's allocation history with Python stacks
        (:func:`cudamagic.mem.sites.start_recording`), once, and keeps the sites' bytes.
        """
        ns = self.shell.user_ns
        self.baseline = find_holders(ns, self.shell.user_ns_hidden).baseline
        self.baseline_cell = cell
        if cuda and not self.recording:
            self.recording = sites.start_recording()
        self.sites = sites.read_sites() if self.recording else {}

    def stop(self) -> None:
        """Turn off the allocation history if :meth:`take_baseline` turned it on."""
        if self.recording:
            sites.stop_recording()
            self.recording, self.sites = False, {}


@dataclass(repr=False)
class WhyReport(Displayed):
    """What ``%cudamem why`` found.

    Attributes:
        holders: :class:`~.holders.Holder` rows, growing ones first.
        growth: the last :class:`~cudamagic.core.growth.Growth` ``%cudamem on`` saw, or None.
        growth_cell: ``In[n]`` of the last cell of that growth (None without growth).
        growing: whether that growth still lasted at the last measured cell.
        baseline_cell: ``In[n]`` after which the compared baseline was taken, or None.
        baseline_age_s: seconds since that baseline, or None: no baseline (rows by size).
        live_tensor_bytes: ``{device: bytes}`` of live tensor objects.
        unnamed_bytes: bytes of live tensor objects no holder reached.
        rss_bytes: process RSS in bytes (or NA). gpus: ``[{"device", "allocated_bytes",
            "reserved_bytes"}]`` when CUDA is initialised.
        elapsed_s: seconds the search took. visits: objects visited. truncated: the search hit
            its visit limit.
        sites: ``[(site, grown bytes, bytes)]``: where the CUDA memory that grew was allocated
            (``train.py:42 in step``), from PyTorch's memory snapshot; empty without it.
    """

    holders: list
    growth: Growth | None
    growth_cell: int | None
    growing: bool
    baseline_cell: int | None
    baseline_age_s: float | None
    live_tensor_bytes: dict
    unnamed_bytes: int
    rss_bytes: object
    gpus: list
    elapsed_s: float
    visits: int
    truncated: bool = False
    sites: list = field(default_factory=list)

    def holder(self, name: str):
        """The row of holder ``name``; ``KeyError`` if it is not listed."""
        for h in self.holders:
            if h.name == name:
                return h
        raise KeyError(name)

    def to_dict(self) -> dict:
        """Plain data."""
        return jsonable(plain_data(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """The report as text."""
        return why_text(self)

    def to_html(self) -> str:
        """The report as HTML."""
        return why_html(self)


def explain(shell, watch: CellGrowth) -> WhyReport:
    """Search what holds memory against ``watch``'s baseline; this search is the next baseline.

    Args:
        shell: the ``InteractiveShell``.
        watch: the session's :class:`CellGrowth` (its ``baseline`` and last ``growth``).

    Returns:
        :class:`WhyReport`.
    """
    base: Baseline | None = watch.baseline
    search = find_holders(shell.user_ns, shell.user_ns_hidden, base)
    snap = take_snapshot()
    report = WhyReport(
        holders=search.holders,
        growth=watch.growth,
        growth_cell=watch.growth_cell,
        growing=watch.growth is not None and watch.detector.growing,
        baseline_cell=watch.baseline_cell if base is not None else None,
        baseline_age_s=None if base is None else time.time() - base.time_s,
        live_tensor_bytes=search.live_tensor_bytes,
        unnamed_bytes=search.unnamed_bytes,
        rss_bytes=snap.rss_bytes,
        gpus=[
            {
                "device": f"cuda:{d}",
                "allocated_bytes": g.allocated_bytes,
                "reserved_bytes": g.reserved_bytes,
            }
            for d, g in sorted(snap.gpus.items())
        ],
        elapsed_s=search.elapsed_s,
        visits=search.visits,
        truncated=search.truncated,
    )
    if watch.recording:
        now = sites.read_sites()
        report.sites = sites.grown_sites(now, watch.sites)
        watch.sites = now
    watch.baseline, watch.baseline_cell = search.baseline, None
    return report


# ---- text and HTML ------------------------------------------------------------------------


SITES_TITLE = "where the CUDA memory that grew was allocated (PyTorch memory snapshot)"


def graph_text(h) -> str:
    """``holds 400 AddBackward0 nodes of the autograd graph (2,000 in all) that keep ...``."""
    if not h.graph_nodes:
        return ""
    first, count = h.node_types[0]
    others = ", ".join(f"{n} {name}" for name, n in h.node_types[1:])
    return (
        f"holds {count} {first} nodes of the autograd graph ({h.graph_nodes} in all"
        + (f": {others}" if others else "")
        + f") that keep {format_bytes(h.graph_bytes)} of saved tensors alive"
    )


def _headline(r: WhyReport) -> str:
    if r.growth is not None:
        line = r.growth.line().split(": `%cudamem why`")[0]
        if r.growing:
            return f"[cudamem why] {line}"
        return f"[cudamem why] no growth now; the last run ended at In[{r.growth_cell}]: {line}"
    return "[cudamem why] no steady growth seen by `%cudamem on` (yet)"


def _scope(r: WhyReport) -> str:
    n = plural(len(r.holders), "holder")
    if r.baseline_age_s is None:
        return (
            f"no baseline yet: {n} by size (parameters and optimizer state last); this search "
            "is the baseline now: run a few steps, then `%cudamem why` again"
        )
    since = f"In[{r.baseline_cell}]" if r.baseline_cell is not None else "the last `%cudamem why`"
    return f"{n} that grew since {since} ({r.baseline_age_s:.0f} s ago)"


def _footer(r: WhyReport) -> str:
    live = ", ".join(f"{d} {format_bytes(b)}" for d, b in sorted(r.live_tensor_bytes.items()))
    parts = [f"live tensors: {live or 'none'}"] + [
        f"{g['device']} allocated {format_bytes(g['allocated_bytes'])}, "
        f"reserved {format_bytes(g['reserved_bytes'])}"
        for g in r.gpus
    ]
    parts.append(f"RSS {format_bytes(r.rss_bytes)}")
    if r.unnamed_bytes:
        parts.append(f"held by nothing named: {format_bytes(r.unnamed_bytes)}")
    parts.append(f"search {r.elapsed_s:.2f} s, {r.visits} objects")
    if r.truncated:
        parts.append("search stopped at its object limit")
    return "; ".join(parts)


def _grew(h, r) -> str:
    if r.baseline_age_s is None:
        return f"holds {format_bytes(h.bytes)}"
    return f"+{format_bytes(h.grown_bytes)}, holds {format_bytes(h.bytes)}"


def why_text(r: WhyReport) -> str:
    """The report as text: the growth, then one block per holder with its fix."""
    from .render import wrap

    lines = [wrap(_headline(r)), wrap(_scope(r), 2)]
    for i, h in enumerate(r.holders, 1):
        lines.append(f"{i}. {h.name} ({h.kind}): {_grew(h, r)} in {plural(h.tensors, 'tensor')}")
        for extra in (graph_text(h), ", ".join(h.entries), f"fix: {h.fix}"):
            if extra:
                lines.append("   " + wrap(extra, 2, TEXT_WIDTH - 3).replace("\n", "\n   "))
    if not r.holders:
        lines.append("nothing holds a growing amount of tensor memory")
    if r.sites:
        lines.append(SITES_TITLE + ":")
        lines += [f"   +{format_bytes(g)} (now {format_bytes(b)}) {s}" for s, g, b in r.sites]
    lines.append(wrap(_footer(r), 2))
    return "\n".join(lines)


def why_html(r: WhyReport) -> str:
    """The report as HTML (every name escaped)."""
    rows = [
        [
            f"<code>{esc(h.name)}</code>",
            esc(h.kind),
            esc(_grew(h, r)),
            esc("; ".join(x for x in (graph_text(h), ", ".join(h.entries)) if x)),
            md_code(h.fix),
        ]
        for h in r.holders
    ]
    table = style.scroll(html_table(["holder", "kind", "memory", "how", "fix"], rows, prose=(3, 4)))
    body = (
        f"<div><b>{esc(_headline(r))}</b></div><div>{esc(_scope(r))}</div>"
        + (table if rows else "<div>nothing holds a growing amount of tensor memory</div>")
        + (
            f"<div>{esc(SITES_TITLE)}</div>"
            + style.scroll(
                html_table(
                    ["grew", "now", "allocated at"],
                    [
                        [esc(f"+{format_bytes(g)}"), esc(format_bytes(b)), esc(s)]
                        for s, g, b in r.sites
                    ],
                    num=(0, 1),
                )
            )
            if r.sites
            else ""
        )
        + f"<div>{esc(_footer(r))}</div>"
    )
    return style.page(body, "mem")
