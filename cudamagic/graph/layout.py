"""Running the Graphviz ``dot`` program on DOT text, with a time limit.

``dot`` runs in its own process group, and on time-out the whole group is killed, so a wrapper
script (conda, a shim) leaves no process behind.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from ..core import platform
from ..core.fmt import terminal_safe

_MAGIC = {"svg": (b"<svg",), "png": (b"\x89PNG\r\n\x1a\n",), "pdf": (b"%PDF",)}

INSTALL_DOT = (
    "The Graphviz `dot` program is not on PATH, so the graph is not drawn: install it "
    "(`sudo apt-get install graphviz`, `brew install graphviz` or "
    "`conda install -c conda-forge graphviz`; `%%autograd_graph?` lists more) and restart the "
    "kernel."
)


class DotMissing(Exception):
    """The ``dot`` program is not on PATH."""


class DotTimeout(Exception):
    """``dot`` ran past its time limit and was killed."""


class DotFailed(Exception):
    """``dot`` exited with an error (its stderr is the message)."""


def find_dot() -> str | None:
    """Path of the ``dot`` program on PATH, or ``None``."""
    return shutil.which("dot")


def clean_text(text: str, limit: int = 2000) -> str:
    """Outside text (``dot``'s messages) made safe to print."""
    return terminal_safe(text, limit, keep_newlines=True)


def run_dot(source: str, fmt: str = "svg", timeout_s: float = 20.0, progress=None) -> bytes:
    """Render DOT ``source`` with ``dot -T<fmt>`` in a subprocess.

    ``dot`` runs in its own process group: on time-out the whole group is killed, so a
    wrapper script (conda, a shim) leaves no process behind.

    Args:
        source: DOT text.
        fmt: ``'svg'``, ``'png'`` or ``'pdf'``.
        timeout_s: Seconds before ``dot`` is killed (finite, above 0).
        progress: Called as ``progress()`` about once a second while ``dot`` runs, in this
            thread; or None.

    Returns:
        The rendered bytes (UTF-8 text for SVG).

    Raises:
        DotMissing: No ``dot`` on PATH. DotTimeout: ran past ``timeout_s``. DotFailed: non-zero
            exit,
        or output that is not a picture of the format asked for.
    """
    exe = find_dot()
    if exe is None:
        raise DotMissing(INSTALL_DOT)
    try:
        proc = platform.popen(
            [exe, f"-T{fmt}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise DotFailed(f"cannot run {exe}: {exc}") from exc
    start = time.monotonic()
    data = source.encode("utf-8")
    try:
        while True:
            elapsed = time.monotonic() - start
            if elapsed >= timeout_s:  # killed below
                raise DotTimeout(f"dot did not finish within {timeout_s:g} s")
            step = timeout_s - elapsed
            if progress is not None:
                progress()
                step = min(step, 1.0)
            try:  # a retry after a time-out loses no output (the input is sent once)
                out, err = proc.communicate(data, timeout=step)
                break
            except subprocess.TimeoutExpired:
                data = None
    except BaseException:  # the time-out, KeyboardInterrupt: leave no dot running
        _kill_group(proc)
        raise
    if proc.returncode != 0:
        raise DotFailed(
            clean_text(err.decode("utf-8", "replace").strip()) or f"exit {proc.returncode}"
        )
    head = out[:4096].lstrip()
    if fmt in _MAGIC and not any(
        m in head if fmt == "svg" else head.startswith(m) for m in _MAGIC[fmt]
    ):
        raise DotFailed(
            f"{exe} printed something that is not {fmt.upper()} ({len(out)} bytes starting "
            f"{clean_text(repr(out[:40]))}); is it Graphviz's dot?"
        )
    return out


def _kill_group(proc) -> None:
    platform.kill_tree(proc)  # dot and whatever a wrapper script started, on every platform
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass
