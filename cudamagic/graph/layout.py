"""Running the Graphviz ``dot`` program on DOT text, with a time limit.

``dot`` runs in its own process group, and on time-out the whole group is killed, so a wrapper
script (conda, a shim) leaves no process behind.

An SVG of plain-text labels in one monospace font can be laid out without Graphviz's text-layout
plugin (pango, which loads fontconfig and shapes every line of every label: about 60% of ``dot``'s
CPU on a 200-node graph): :func:`plain_text_dir`.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
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


#: What :func:`run_dot` swaps when ``dot`` measures text itself: the font the DOT source names, the
#: font ``dot`` then measures (its built-in metrics of Courier: 0.6 em a character, as every
#: monospace font), and what the SVG then names, back to what the source named.
MONOSPACE = 'fontname="monospace"'
MEASURED_AS = 'fontname="Courier"'
SVG_FONT = (b'font-family="Courier,monospace"', b'font-family="monospace"')

#: ``dot`` executable -> :func:`plain_text_dir`'s answer for it, found once per process.
_PLAIN_DIRS: dict = {}


def plain_text_dir(exe: str) -> str | None:
    """A ``GVBINDIR`` without Graphviz's text-layout plugin, or None.

    In it ``dot`` lays out and writes SVG without pango: a private folder holding a copy of
    ``dot``'s plugin list (``<prefix>/lib/graphviz/config*`` beside ``<prefix>/bin/dot``) with
    only its core (SVG) and dot-layout plugins, by absolute path. ``dot`` then sizes labels with
    its built-in font metrics, which for Courier are those of any monospace font. None where that
    cannot be set up (Windows, no plugin list found, or a ``dot`` that failed with it before):
    ``dot`` then runs as installed. Found once per process and ``exe``, without running ``dot``.
    """
    if exe not in _PLAIN_DIRS:
        try:
            _PLAIN_DIRS[exe] = _make_plain_text_dir(exe)
        except (OSError, ValueError, UnicodeDecodeError):
            _PLAIN_DIRS[exe] = None
    return _PLAIN_DIRS[exe]


def _make_plain_text_dir(exe: str) -> str | None:
    if platform.is_windows():
        return None
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(exe)))
    configs = {
        os.path.realpath(c)
        for pattern in ("lib*/graphviz/config*", "lib/*/graphviz/config*")
        for c in glob.glob(os.path.join(glob.escape(prefix), pattern))
    }
    if len(configs) != 1:
        return None
    config = configs.pop()
    libdir = os.path.dirname(config)
    kept, block = [], None
    with open(config, encoding="utf-8") as fh:
        for line in fh.read().splitlines():
            if line.strip() == "}" and not line[:1].isspace():  # the end of a library's block
                if block is not None:
                    block.append(line)
                block = None
            elif line and not line[0].isspace():  # "libgvplugin_core.so.6 core {"
                lib, _, rest = line.partition(" ")
                lib = os.path.join(libdir, lib)
                wanted = any(k in os.path.basename(lib) for k in ("gvplugin_core", "gvplugin_dot"))
                block = [f"{lib} {rest}"] if wanted and os.path.exists(lib) else None
                if block is not None:
                    kept.append(block)
            elif block is not None:
                block.append(line)
    if len(kept) != 2:
        return None
    folder = tempfile.mkdtemp(prefix="cudamagic-dot-")
    atexit.register(shutil.rmtree, folder, True)
    with open(os.path.join(folder, os.path.basename(config)), "w", encoding="utf-8") as fh:
        fh.write("\n".join(line for block in kept for line in block) + "\n")
    return folder


def run_dot(
    source: str,
    fmt: str = "svg",
    timeout_s: float = 20.0,
    progress=None,
    plain_text: bool = False,
) -> bytes:
    """Render DOT ``source`` with ``dot -T<fmt>`` in a subprocess.

    ``dot`` runs in its own process group: on time-out the whole group is killed, so a
    wrapper script (conda, a shim) leaves no process behind.

    Args:
        source: DOT text.
        fmt: ``'svg'``, ``'png'`` or ``'pdf'``.
        timeout_s: Seconds before ``dot`` is killed (finite, above 0).
        progress: Called as ``progress()`` about once a second while ``dot`` runs, in this
            thread; or None.
        plain_text: Every label of ``source`` is plain text in the ``monospace`` font: an SVG is
            then laid out without the text-layout plugin where :func:`plain_text_dir` can (the
            same picture, its boxes sized by ``dot``'s metrics of Courier).

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
    env, original = None, source
    if plain_text and fmt == "svg" and plain_text_dir(exe):
        env = dict(os.environ, GVBINDIR=plain_text_dir(exe))
        source = source.replace(MONOSPACE, MEASURED_AS)
    try:
        proc = platform.popen(
            [exe, f"-T{fmt}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
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
    head = out[:4096].lstrip()
    if env is not None and (proc.returncode != 0 or b"<svg" not in head):
        _PLAIN_DIRS[exe] = None  # this dot cannot do without its text-layout plugin: as installed
        left = timeout_s - (time.monotonic() - start)
        if left <= 0:
            raise DotTimeout(f"dot did not finish within {timeout_s:g} s")
        return run_dot(original, fmt, left, progress)
    if proc.returncode != 0:
        raise DotFailed(
            clean_text(err.decode("utf-8", "replace").strip()) or f"exit {proc.returncode}"
        )
    if fmt in _MAGIC and not any(
        m in head if fmt == "svg" else head.startswith(m) for m in _MAGIC[fmt]
    ):
        raise DotFailed(
            f"{exe} printed something that is not {fmt.upper()} ({len(out)} bytes starting "
            f"{clean_text(repr(out[:40]))}); is it Graphviz's dot?"
        )
    return out if env is None else out.replace(*SVG_FONT)


def _kill_group(proc) -> None:
    platform.kill_tree(proc)  # dot and whatever a wrapper script started, on every platform
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass
