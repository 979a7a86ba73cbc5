"""``%cudamem free``: give memory back after an error.

``%cudamem free``: drop the saved traceback and its frames' locals, release what the user names
(``Out[n]``, ``_``, variables), collect, empty the CUDA cache, and report what was freed and what
still holds tensors (:class:`FreeReport`, rendered by :mod:`.render`).

No IPython import: the shell is passed in.
"""

from __future__ import annotations

import gc
import inspect
import sys

from . import stats
from .census import find_holders, holder_bytes, tensor_census
from .holders import last_error_tracebacks
from .result import FreeReport
from .stats import gpu_status, take_snapshot


class FreeUsageError(LookupError):
    """A ``%cudamem free`` flag names something that does not exist."""


def _clear_frames(tb) -> None:
    """``frame.clear()`` on every frame of ``tb`` (skipping frames still running).

    On Python < 3.13, once anything read ``frame.f_locals`` (IPython's traceback formatter does),
    the frame keeps a snapshot dict of its locals that ``frame.clear()`` does not drop; for function
    frames (``CO_OPTIMIZED``, whose ``f_locals`` is only that snapshot) the dict is emptied after
    the frame is cleared.
    Module and class-body frames, whose ``f_locals`` is a real namespace, are never emptied.
    """
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        try:
            frame.clear()
        except RuntimeError:  # the frame is still executing: leave it alone
            continue
        if frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            try:
                snapshot = frame.f_locals
            except Exception:  # pragma: no cover - odd frame
                continue
            if type(snapshot) is dict and snapshot is not frame.f_globals:
                snapshot.clear()


def _clear_traceback(shell) -> list:
    """Drop the saved traceback and the locals of its frames. Returns what was released (names)."""
    released = []
    itb = getattr(shell, "InteractiveTB", None)
    for tb in last_error_tracebacks(
        (getattr(itb, "tb", None), getattr(shell, "_last_traceback", None))
    ):
        if tb is not None and hasattr(tb, "tb_frame"):
            _clear_frames(tb)
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)
            released.append(f"sys.{attr}")
    if itb is not None and getattr(itb, "tb", None) is not None:
        itb.tb = None
        released.append("InteractiveTB.tb")
    if getattr(shell, "_last_traceback", None) is not None:
        shell._last_traceback = None
        released.append("shell._last_traceback")
    return released


def _release_out(shell, numbers) -> list:
    """Remove ``Out[n]`` and IPython's other references to those values.

    Remove ``Out[n]`` (every entry holding tensors when ``numbers`` is empty) and all of IPython's
    other references to those values: ``_n`` (in ``user_ns`` and ``user_ns_hidden``),
    ``_``/``__``/``___`` (in both namespaces and the display hook's own copies) and the previous
    cell's ``last_execution_result.result``. With no numbers, ``_``/``__``/``___`` holding tensors
    are released too. Returns the names released.
    """
    user_ns = shell.user_ns
    hidden = shell.user_ns_hidden
    hook = shell.displayhook
    torch = sys.modules.get("torch")
    out = user_ns.get("Out")
    released = []
    if not isinstance(out, dict):
        return released

    def holds_tensors(obj):
        return (
            torch is not None and not isinstance(obj, str) and bool(holder_bytes("", obj, torch)[0])
        )

    targets = (
        list(numbers) if numbers else [n for n, obj in list(out.items()) if holds_tensors(obj)]
    )
    gone = []
    for n in targets:
        obj = out.pop(n, None)
        gone.append(obj)
        released.append(f"Out[{n}]")
        for ns in (user_ns, hidden):
            if f"_{n}" in ns and ns[f"_{n}"] is obj:
                del ns[f"_{n}"]

    def release(obj):
        return any(obj is g for g in gone) or (not numbers and holds_tensors(obj))

    for u in ("_", "__", "___"):
        hit = False
        for ns in (user_ns, hidden):
            if u in ns and release(ns[u]):
                ns[u] = ""
                hit = True
        if release(getattr(hook, u, "")):
            setattr(hook, u, "")
            hit = True
        if hit:
            released.append(u)
    last = shell.last_execution_result
    if last is not None and last.result is not None and release(last.result):
        last.result = None
        released.append("last_execution_result.result")
    return released


def free_memory(shell, *, out=None, variables=(), source=None) -> FreeReport:
    """Release what is safe to release, collect, empty the CUDA cache and report the bytes freed.

    Always released: the last traceback (``sys.last_traceback``/``last_value``/``last_type``/
    ``last_exc``, IPython's ``InteractiveTB.tb``, ``shell._last_traceback``) and the locals of its
    frames (``frame.clear()``; ``%debug`` can no longer inspect that error). Then ``gc.collect()``,
    and ``torch.cuda.empty_cache()`` only when CUDA is initialised.

    Released only when named: ``out`` (``[]`` = every ``Out[n]`` holding tensors plus ``_``/``__``/
    ``___``; ``[7, 9]`` = those entries) and ``variables`` (names deleted from the namespace).

    Args:
        shell: the ``InteractiveShell``.
        out: ``None`` (keep the output cache), ``[]`` or a list of ``Out`` numbers (ints).
        variables: names of user variables to delete.
        source: allocator-statistics source (tests).

    Returns:
        :class:`FreeReport`.

    Raises:
        FreeUsageError: a named ``Out`` entry or variable does not exist (nothing is released then).
    """
    source = source or stats.SOURCE
    user_ns = shell.user_ns
    hidden = shell.user_ns_hidden
    variables = list(dict.fromkeys(variables))  # a name given twice is deleted once
    if out is not None:
        out = list(dict.fromkeys(out))
    outd = user_ns.get("Out") if isinstance(user_ns.get("Out"), dict) else {}
    missing_out = [n for n in (out or []) if n not in outd]
    if missing_out:
        have = ", ".join(str(n) for n in sorted(outd)) or "none"
        raise FreeUsageError(f"Out[{missing_out[0]}] is not in the output cache (entries: {have})")
    for name in variables:
        if name not in user_ns:
            raise FreeUsageError(f"no variable named {name!r} in the namespace")

    torch = sys.modules.get("torch")
    before = take_snapshot(source)
    census_before = tensor_census(torch) if torch is not None else {}
    released = _clear_traceback(shell)
    if out is not None:
        released += _release_out(shell, out)
    for name in variables:
        del user_ns[name]
        released.append(name)
    collected = gc.collect()
    emptied = False
    if source.initialized():
        source.empty_cache()
        emptied = True
    after = take_snapshot(source)
    census_after = tensor_census(torch) if torch is not None else {}
    gone = {k: b for k, b in census_before.items() if k not in census_after}
    gpus = []
    for d, a in sorted(after.gpus.items()):
        b = before.gpus.get(d)
        ab = b.allocated_bytes if b else 0
        rb = b.reserved_bytes if b else 0
        gpus.append(
            {
                "device": f"cuda:{d}",
                "allocated_before_bytes": ab,
                "allocated_after_bytes": a.allocated_bytes,
                "allocated_freed_bytes": ab - a.allocated_bytes,
                "reserved_before_bytes": rb,
                "reserved_after_bytes": a.reserved_bytes,
                "reserved_freed_bytes": rb - a.reserved_bytes,
            }
        )
    return FreeReport(
        released=released,
        gpus=gpus,
        gpu_status=gpu_status(after),
        empty_cache_called=emptied,
        cpu_tensor_bytes_freed=sum(b for k, b in gone.items() if k[0] == "cpu"),
        tensor_bytes_freed=sum(gone.values()),
        rss_before_bytes=before.rss_bytes,
        rss_after_bytes=after.rss_bytes,
        gc_collected=collected,
        holders=find_holders(user_ns, hidden),
    )
