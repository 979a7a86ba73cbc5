"""Measuring one cell, or every cell.

Measuring cells: ``%%cudamem`` runs one cell as ``%%time`` does, between two snapshots
(:func:`run_measured`); ``%cudamem on`` measures every cell through IPython's
``pre_run_cell``/``post_run_cell`` events (:class:`CellMemMonitor`).

No IPython import: the shell is passed in. The allocator-statistics source is read from
:data:`cudamagic.mem.stats.SOURCE` at each call, so a test that replaces it there is seen
here.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..core.cell import compile_cell, run_code_caught, running_cell_number
from . import stats
from .census import scan_tensors, storage_keys
from .history import MemHistory
from .result import CellMemReport, build_report, error_text
from .stats import nvml_process_memory, take_snapshot

# ---- running a cell like %%time, measured ------------------------------------------


@dataclass
class CellRun:
    """Outcome of :func:`run_measured`.

    Outcome of :func:`run_measured`: the report (``None`` when the cell did not parse), the cell's
    exception (or ``None``), whether the cell ended in an expression, and that expression's value
    (``None`` otherwise).
    """

    report: CellMemReport | None
    exception: BaseException | None
    has_value: bool
    value: Any


def run_measured(
    shell,
    cell: str,
    *,
    header: str = "%%cudamem",
    cell_number: int | None = None,
    top: int = 10,
    reset_peak: bool = False,
    source=None,
) -> CellRun:
    """Run ``cell`` in ``shell.user_ns`` as ``%%time`` does, measuring memory around it.

    The cell is transformed (``shell.transform_cell``), its AST transformed
    (``shell.transform_ast``) and compiled under a name registered in IPython's line cache with the
    ``%%cudamem`` line as line 1, so tracebacks show ``Cell In[n]`` and the real source lines with
    the notebook's numbering. No IPython events are fired (the surrounding ``run_cell`` fires them
    once). A final expression is evaluated and returned in :attr:`CellRun.value`, not stored
    anywhere by us (a stored value would keep tensors alive).

    Args:
        shell: the ``InteractiveShell``.
        cell: cell body (without the ``%%cudamem`` line).
        header: the magic line, shown as line 1 of the cached source.
        cell_number: ``In[n]`` for the report; default :func:`running_cell_number`.
        top: how many tensor rows to keep in the report.
        reset_peak: reset torch.cuda peak counters before the cell for an exact peak (this
            resets the user's ``max_memory_allocated`` on those devices).
        source: allocator-statistics source (tests); default the module's.

    Returns:
        :class:`CellRun`. The cell's exception is returned, not raised: the caller re-raises it.
        A cell that does not parse is not run: ``report`` is ``None`` and ``exception`` the
        ``SyntaxError`` (with the cell's line numbers, ``%%cudamem`` being line 1).
    """
    __tracebackhide__ = True
    source = source or stats.SOURCE
    number = running_cell_number(shell) if cell_number is None else cell_number
    try:
        code = compile_cell(shell, cell, header, number)
    except SyntaxError as exc:
        # IPython prints every frame of a SyntaxError raised while running code (the hidden-frame
        # marker does not apply to it): hand it back without our parser frames; the cell did not
        # run.
        return CellRun(None, exc.with_traceback(None), False, None)

    hidden = getattr(shell, "user_ns_hidden", None)
    before_keys = storage_keys(shell.user_ns, hidden)
    before = take_snapshot(source)
    nvml_before = nvml_process_memory() if before.cuda_initialized else None
    if reset_peak and before.cuda_initialized:
        for d in before.gpus:
            source.reset_peak(d)
        before.peak_reset = True
    before.time_s = time.perf_counter()
    outcome = run_code_caught(code, shell.user_ns)
    exc = outcome.exception
    after = take_snapshot(source)
    nvml_after = nvml_process_memory() if after.cuda_initialized else None
    rows = scan_tensors(shell.user_ns, hidden, before_keys)
    report = build_report(
        before,
        after,
        cell=number,
        source=cell,
        error=error_text(exc) if exc is not None else None,
        kind="cell",
        nvml_before=nvml_before,
        nvml_after=nvml_after,
        tensors=rows[: max(0, top)],
        tensors_total=len(rows),
    )
    return CellRun(report, exc, outcome.has_value, outcome.value)


# ---- %cudamem on: every cell, through IPython's events
# ------------------------------------------------


class CellMemMonitor:
    """``pre_run_cell``/``post_run_cell`` callbacks that measure every cell (``%cudamem on``).

    Per cell it reads the allocator counters (only when CUDA is initialised) and RSS before and
    after; no tensor scan, no NVML, no thread. A record goes to ``history``; a one-line summary is
    printed when :meth:`CellMemReport.exceeds` ``threshold_bytes()``. A callback never raises into
    the kernel: a failure is kept in ``last_error`` and reported once on stderr.

    Args:
        shell: the ``InteractiveShell`` (its ``events`` are used).
        history: the :class:`MemHistory` to append to.
        threshold_bytes: callable returning the current threshold in bytes (read per cell, so
            ``%config CudaMagics.cudamem_threshold_bytes`` applies at once).
        source: allocator-statistics source; default the module's current one (read per cell).
        out: callable used to print the summary line (default ``print``).
    """

    def __init__(self, shell, history: MemHistory, threshold_bytes, source=None, out=print):
        self.shell = shell
        self.history = history
        self.threshold_bytes = threshold_bytes
        self._source = source
        self._out = out
        self._before = None
        self._raw = ""
        self._skip = False
        self.active = False
        self.last_error = None
        self.growth = None  # a why.CellGrowth: the steady-growth notice, set by `%cudamem on`

    def start(self) -> None:
        """Register both callbacks (idempotent)."""
        if not self.active:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
            self.active = True

    def stop(self) -> None:
        """Remove both callbacks (idempotent)."""
        for name, cb in (
            ("pre_run_cell", self.pre_run_cell),
            ("post_run_cell", self.post_run_cell),
        ):
            with contextlib.suppress(ValueError):
                self.shell.events.unregister(name, cb)
        self.active = False
        self._before = None

    def skip_current_cell(self) -> None:
        """The running cell is measured by ``%%cudamem`` itself: do not record it twice."""
        self._skip = True

    def pre_run_cell(self, info=None) -> None:
        """IPython ``pre_run_cell`` callback: snapshot before the cell."""
        try:
            self._skip = False
            self._raw = getattr(info, "raw_cell", "") or ""
            self._before = take_snapshot(self._source or stats.SOURCE)
        except Exception as exc:  # never into the kernel
            self._fail(exc)

    def post_run_cell(self, result=None) -> None:
        """IPython ``post_run_cell`` callback: snapshot after, record, maybe print one line."""
        before, self._before = self._before, None
        if before is None or self._skip:
            self._skip = False
            return
        try:
            after = take_snapshot(self._source or stats.SOURCE)
            count = getattr(result, "execution_count", None)
            err = getattr(result, "error_in_exec", None) or getattr(
                result, "error_before_exec", None
            )
            report = build_report(
                before,
                after,
                cell=count if count is not None else -1,
                source=self._raw,
                error=error_text(err) if err is not None else None,
                kind="auto",
            )
            self.history.append(report)
            if report.exceeds(int(self.threshold_bytes())):
                self._out(report.summary_line())
            notice = self.growth.observe(report) if self.growth is not None else None
            if notice:
                self._out(notice)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc) -> None:
        first = self.last_error is None
        self.last_error = exc
        if first:
            print(
                f"[cudamem] measurement failed and was skipped: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
