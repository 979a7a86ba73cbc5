"""The progress line of a long step, the same in every magic.

``%%cuda: compiling with nvcc... 3.2 s``: silent for the first second. In a notebook it is a
display updated in place by its ``display_id`` (unlike an ipywidget, a saved notebook and a front
end without the widget manager show its last state). In a terminal, where outputs cannot be
updated, it is a line on stderr rewritten with a carriage return (two lines in a log or a pipe),
for the magics that ask for it.
"""

from __future__ import annotations

import sys
import threading
import time

from IPython import get_ipython
from IPython.core.displaypub import DisplayPublisher
from IPython.display import display

from . import style
from .fmt import esc

#: Seconds a step runs before its line is shown.
SHOW_AFTER_S = 1.0


def _in_notebook() -> bool:
    """True where outputs can be updated in place: a kernel's display publisher."""
    shell = get_ipython()
    return shell is not None and type(shell.display_pub) is not DisplayPublisher


def _bundle(text: str, kind: str) -> dict:
    html = style.page(f'<div class="cm-note cm-mono">{esc(text)}</div>', kind)
    return {"text/plain": text, "text/html": html}


class ProgressLine:
    """``with ProgressLine("%%cuda", ...) as p: ... p.say("compiling")``: one line, in place.

    Args:
        magic: the magic's name as typed (``"%%cuda"``), the line's first word.
        kind: the output's kind for :func:`.style.page` (``"cuda"``, ``"graph"``, ``"prof"``).
        keep: the work's name (``"nvcc build"``): the line ends as ``"%%cuda: nvcc build done after
            2.7 s"`` (or ``failed``, ``interrupted, stopped cleanly``). None: the line is emptied at
            the end, so nothing of it stays in the output or a saved notebook.
        terminal: also show it on stderr in a terminal (otherwise only in a notebook).
        every_s: refresh the line from a thread every ``every_s`` seconds, for work that runs in
            the caller's thread without calling :meth:`say` (a profiled cell). None: refreshed only
            by :meth:`say`.
        clock: monotonic seconds as a float (default ``time.monotonic``).
        stream: where the terminal line goes (default ``sys.stderr`` at each write).

    Attributes:
        shown: True once the line became visible (after :data:`SHOW_AFTER_S`).
        step: the text of the current step.
    """

    def __init__(
        self,
        magic: str,
        kind: str,
        keep: str | None = None,
        *,
        terminal: bool = False,
        every_s: float | None = None,
        clock=None,
        stream=None,
    ):
        self.magic, self.kind, self.keep, self.every_s = magic, kind, keep, every_s
        self._clock = clock or time.monotonic
        self._stream = stream
        self._start_s = self._clock()
        self.shown, self.step = False, ""
        self._notebook = _in_notebook()
        self._on = self._notebook or terminal
        self._handle = None
        self._tty = False
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = None

    def elapsed_s(self) -> float:
        """Seconds since the line was created."""
        return self._clock() - self._start_s

    def _err(self):
        return self._stream if self._stream is not None else sys.stderr

    def say(self, step: str) -> None:
        """Record the current step; show or refresh the line once a second has passed."""
        self.step = step
        if self._on and self.elapsed_s() >= SHOW_AFTER_S:
            self._write(f"{self.magic}: {step}... {self.elapsed_s():.1f} s")

    def _write(self, text: str, last: bool = False) -> None:
        with self._lock:
            if self._notebook:
                if self._handle is None:
                    self._handle = display(_bundle(text, self.kind), raw=True, display_id=True)
                else:
                    self._handle.update(
                        _bundle(text, self.kind) if text else {"text/plain": ""}, raw=True
                    )
            elif not self.shown:
                self._tty = self._err().isatty()
                # a log or a pipe: one line when it starts, one when it ends
                print(
                    text, end="" if self._tty and not last else "\n", file=self._err(), flush=True
                )
            elif self._tty or last:
                cr = "\r" if self._tty else ""
                print(cr + text, end="\n" if last else "", file=self._err(), flush=True)
            self.shown = True

    def finish(self, outcome: str) -> None:
        """End the line: its final state (``"done"``, ``"failed"``), or emptied (``keep=None``)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if not self.shown:
            return
        if self.keep is not None:
            self._write(f"{self.magic}: {self.keep} {outcome} after {self.elapsed_s():.1f} s", True)
        elif self._notebook:
            self._write("")
        elif self._tty:  # a terminal line that should not stay: wiped
            print("\r\033[K", end="", file=self._err(), flush=True)

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            try:
                self.say(self.step)
            except Exception:  # noqa: BLE001 - a closed front end: the work goes on
                return

    def __enter__(self):
        if self.every_s is not None and self._on:
            self._thread = threading.Thread(
                target=self._run, name="cudamagic-progress", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.finish("done")
        elif issubclass(exc_type, KeyboardInterrupt):
            self.finish("interrupted, stopped cleanly")
        else:
            self.finish("failed")
        return False
