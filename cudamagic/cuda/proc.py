"""Starting and killing child processes: the only place in ``%%cuda`` that knows about process groups.

Kept small so it can move to a shared platform module (issue 13): everything else calls
:func:`popen_kwargs` and :func:`kill_tree`.
"""

from __future__ import annotations

import os
import subprocess


def popen_kwargs() -> dict:
    """Keyword arguments for ``subprocess.Popen`` that put the child in a group of its own, so a kernel
    interrupt (SIGINT to the kernel's group) does not reach it and :func:`kill_tree` can end all of it."""
    if os.name == "nt":  # pragma: no cover - not run here
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def kill_tree(pid: int) -> int:
    """Kill process ``pid`` and every descendant (psutil, so it works on every platform).

    Returns:
        The number of processes signalled (0 when ``pid`` is already gone). Descendants are waited for up to
        0.2 s (SIGKILL cannot be caught; an orphan stays a zombie until its new parent reaps it); ``pid`` itself is left for its parent to reap (``Popen.wait()``).
    """
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs[:-1], timeout=0.2)  # the root is the caller's child: it reaps it (Popen.wait)
    return len(procs)
