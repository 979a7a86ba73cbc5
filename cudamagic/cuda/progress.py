"""The progress line of a long build, shown once it has taken more than a second.

In a notebook it is a display updated in place (``display(..., display_id=True)`` then ``update``:
unlike an ipywidget, a saved notebook and a front end without the widget manager show the final
state); in a terminal a line on stderr. Updated only from the thread that runs the cell.
"""

from __future__ import annotations

import sys
import time

from IPython import get_ipython
from IPython.display import display

from . import render

SHOW_AFTER_S = 1.0


def _in_notebook() -> bool:
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class Line:
    """One line of progress text: ``text/plain`` and ``text/html`` (escaped, theme colours)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        return render.progress_html(self.text)


class Progress:
    """``with Progress("nvcc") as p: ... p.tick("compiling")``: silent for the first second.

    Args:
        what: the build's name in the final line (``"nvcc build"``).
        clock: monotonic seconds as a float (default ``time.monotonic``).
        stream: where the terminal line goes (default ``sys.stderr`` at each write).

    Attributes:
        shown: True once the line became visible (after :data:`SHOW_AFTER_S`).
        start_s: ``clock()`` at construction.
    """

    def __init__(self, what: str, clock=None, stream=None):
        self.what = what
        self._clock = clock or time.monotonic
        self._stream = stream
        self.start_s = self._clock()
        self.shown = False
        self.step = ""
        self._widget = None
        self._tty = False

    def elapsed_s(self) -> float:
        """Seconds since the build started."""
        return self._clock() - self.start_s

    def _err(self):
        return self._stream if self._stream is not None else sys.stderr

    def _text(self, step: str, done: str = "") -> str:
        if done:
            return f"%%cuda: {self.what} {done} after {self.elapsed_s():.1f} s"
        return f"%%cuda: {step}... {self.elapsed_s():.1f} s"

    def tick(self, step: str) -> None:
        """Record the current step; show or refresh the line once a second has passed."""
        self.step = step
        if self.elapsed_s() < SHOW_AFTER_S:
            return
        text = self._text(step)
        err = self._err()
        if not self.shown:
            self.shown = True
            if _in_notebook():
                self._widget = display(Line(text), display_id=True)
                return
            self._tty = err.isatty()
            # a log or a pipe: one line when it starts, one when it ends
            print(text, end="" if self._tty else "\n", file=err, flush=True)
            return
        if self._widget is not None:
            self._widget.update(Line(text))
        elif self._tty:
            print("\r" + text, end="", file=err, flush=True)

    def finish(self, outcome: str) -> None:
        """Show the final state (``"done"``, ``"failed"``, ...), if the line was ever shown."""
        if not self.shown:
            return
        text = self._text(self.step, outcome)
        if self._widget is not None:
            self._widget.update(Line(text))
        else:
            print(("\r" if self._tty else "") + text, file=self._err(), flush=True)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish("done")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted, stopped cleanly")
        else:
            self.finish("failed")
        return False
