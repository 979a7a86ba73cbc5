"""``%%cuda``'s build cache: content-addressed entries, least-recently-used pruning.

Layout under the root (``CudaMagics.cuda_cache_dir``, default ``~/.cache/cudamagic/cuda``)::

    prog/<key>/prog          a compiled program (``prog.exe`` on Windows)
    torch/<key>/<name>.so    a built PyTorch extension
    torch-build/<key>/       load_inline's build folder (ninja files, objects, its ``lock``)
    saved/<session>/NAME.cuh headers saved by ``--save`` in one session (removed on unload)
    toolkit/<digest>.json    nvcc's answers to -V and --list-gpu-arch

An entry appears by one atomic rename, so a reader never sees half of one. ``<key>`` is the
SHA-256 of everything that shapes the build, so an unchanged cell never calls nvcc again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import re
import shutil
import tempfile
import uuid

#: The folders of built entries (``toolkit/`` and ``saved/`` are not builds).
BUILD_KINDS = ("prog", "torch", "torch-build")

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def default_root() -> str:
    """``$XDG_CACHE_HOME/cudamagic/cuda``, else ``~/.cache/cudamagic/cuda``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudamagic", "cuda")


class Workspace:
    """The cache root and this session's saved headers.

    Args:
        root: the cache folder.

    Attributes:
        saved_dir: this session's folder of ``--save``d headers (on the include path).
        headers: header name -> its lines (line N is ``headers[name][N - 1]``).
    """

    def __init__(self, root: str):
        self.root = root
        self.saved_dir = os.path.join(root, "saved", f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self.headers: dict = {}

    def save(self, name: str, source: str) -> str:
        """Write ``source`` as header ``name``; returns its path."""
        os.makedirs(self.saved_dir, exist_ok=True)
        path = os.path.join(self.saved_dir, name)
        tmp = path + f".tmp-{uuid.uuid4().hex[:8]}"
        pathlib.Path(tmp).write_text(source, encoding="utf-8")
        os.replace(tmp, path)
        self.headers[name] = source.splitlines()
        return path

    def included(self, source: str) -> dict:
        """Saved headers ``source`` includes, also through other saved headers: name -> text."""
        found, todo = {}, [source]
        while todo:
            for name in _INCLUDE_RE.findall(todo.pop()):
                if name in self.headers and name not in found:
                    found[name] = "\n".join(self.headers[name])
                    todo.append(found[name])
        return found

    def remove_saved(self) -> None:
        """Delete this session's saved headers."""
        shutil.rmtree(self.saved_dir, ignore_errors=True)


def cache_key(**parts) -> str:
    """SHA-256 (hex) of the JSON of ``parts`` (sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def entry(root: str, kind: str, key: str) -> str:
    """The folder of one cache entry."""
    return os.path.join(root, kind, key)


def lookup(root: str, kind: str, key: str, name: str) -> str | None:
    """Path of file ``name`` in the entry, or None; a hit refreshes the entry's time."""
    path = os.path.join(entry(root, kind, key), name)
    if not os.path.isfile(path):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry(root, kind, key))
    return path


def publish(root: str, kind: str, key: str, files: dict) -> str:
    """Move ``files`` (name -> path) into the entry with one rename; returns the entry folder.

    A concurrent builder that got there first wins (ours is dropped).
    """
    final = entry(root, kind, key)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{key[:16]}.tmp-", dir=os.path.dirname(final))
    for name, path in files.items():
        shutil.move(path, os.path.join(tmp, name))
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _size(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(dirpath, n))
    return total


def _entries(root: str) -> list:
    """``(mtime, bytes, folder)`` of every build entry."""
    found = []
    for kind in BUILD_KINDS:
        folder = os.path.join(root, kind)
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            path = os.path.join(folder, name)
            found.append((os.path.getmtime(path), _size(path), path))
    return found


def prune(root: str, max_bytes: int, keep: str = "") -> int:
    """Remove least recently used entries until they total at most ``max_bytes``.

    Args:
        root: the cache folder.
        max_bytes: the bound.
        keep: an entry's folder name (key) that stays, the build just made.

    Returns:
        The bytes removed.
    """
    entries = [e for e in _entries(root) if os.path.basename(e[2]) != keep]
    total = sum(e[1] for e in entries)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed += size
    return removed


def clear(root: str) -> tuple:
    """Remove every build and nvcc's cached answers, not this session's saved headers.

    Returns:
        ``(entries, bytes)`` of builds removed.
    """
    shutil.rmtree(os.path.join(root, "toolkit"), ignore_errors=True)
    entries = _entries(root)
    for _, _, path in entries:
        shutil.rmtree(path, ignore_errors=True)
    return len(entries), sum(e[1] for e in entries)
