"""Where a ``--steps`` step ends: once per iteration, outside the user's ranges.

The reference is PyTorch's documented loop, ``prof.step()`` at the end of the loop body. The cell
does not call it, so :class:`StepDriver` calls it for the cell:

- once per iteration: after each ``step()`` of the first optimizer that steps in the cell. Other
  optimizers (a GAN's second one, any number of them) never end a step;
- outside the ranges of the iteration: when ``record_function`` ranges opened since the previous
  step (yours, ``Optimizer.step#...``, the DataLoader's) are still open at that moment, the step
  ends when the outermost of them closes. A range open across several iterations (one around the
  whole loop) is left alone.

Ranges are followed by wrapping ``record_function.__enter__``/``__exit__`` for the cell's duration;
:meth:`StepDriver.remove` puts the originals back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class StepDriver:
    """Call ``advance`` (``prof.step()``) at each iteration's end while the cell runs.

    Args:
        advance: called with no argument where a step ends.

    Attributes:
        optimizers: ``(class name, step() calls)`` of each optimizer that stepped, first one first.
    """

    def __init__(self, advance: Callable[[], None]):
        self.advance = advance
        self._first = None  # the optimizer whose step() ends a step (kept only during the cell)
        self._counts: dict = {}  # id(optimizer) -> [class name, step() calls]
        self._mark = 0  # step ends asked for so far
        self._open: dict = {}  # thread id -> {id(range): mark when it opened}
        self._pending: tuple | None = None  # (thread id, mark) whose ranges must close first
        self._lock = threading.RLock()
        self._handle = None
        self._cls = None
        self._orig = None

    @property
    def optimizers(self) -> list:
        """``(class name, step() calls)`` per optimizer, in the order they first stepped."""
        return [tuple(v) for v in self._counts.values()]

    def install(self) -> None:
        """Register the optimizer hook and follow ``record_function`` ranges."""
        from torch.autograd.profiler import record_function
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._cls = record_function
        self._orig = (record_function.__enter__, record_function.__exit__)
        enter, exit_ = self._orig
        driver = self

        def __enter__(rf):  # noqa: N807 - the wrapped method's own name
            out = enter(rf)
            driver._opened(rf)
            return out

        def __exit__(rf, *exc):  # noqa: N807 - the wrapped method's own name
            try:
                return exit_(rf, *exc)
            finally:
                driver._closed(rf)

        record_function.__enter__, record_function.__exit__ = __enter__, __exit__
        self._handle = register_optimizer_step_post_hook(self._optimizer_stepped)

    def remove(self) -> None:
        """Remove the hook and the wrappers (safe to call twice)."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        if self._orig is not None:
            self._cls.__enter__, self._cls.__exit__ = self._orig
            self._orig = None
        self._first = None
        self._pending = None

    # ---- events
    def _opened(self, rf) -> None:
        if str(getattr(rf, "name", "")).startswith("ProfilerStep#"):
            return
        with self._lock:
            self._open.setdefault(threading.get_ident(), {})[id(rf)] = self._mark

    def _closed(self, rf) -> None:
        tid = threading.get_ident()
        with self._lock:
            opened = self._open.get(tid, {})
            if opened.pop(id(rf), None) is None or self._pending is None:
                return
            ptid, mark = self._pending
            if ptid != tid or mark in opened.values():
                return
            self._pending = None
        self.advance()

    def _optimizer_stepped(self, optimizer, *_args) -> None:
        tid = threading.get_ident()
        with self._lock:
            entry = self._counts.setdefault(id(optimizer), [type(optimizer).__name__, 0])
            entry[1] += 1
            if self._first is None:
                self._first = optimizer
            if optimizer is not self._first:
                return
            # ranges opened since the previous step end enclose this iteration's end; an
            # earlier one spans iterations (a range around the loop) and is not waited for
            since = self._mark
            self._mark += 1
            if since in self._open.get(tid, {}).values():
                self._pending = (tid, since)  # replaces one still waiting: that range spans
                return
            self._pending = None
        self.advance()
