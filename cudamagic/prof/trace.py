"""Writing the Chrome/Perfetto trace under a size cap.

Writing the Chrome/Perfetto trace of a profile (``--trace FILE``) under a size cap
(``--max-trace-mb``).

When the whole trace would pass the cap, Python stack events and stack arguments are dropped first;
then whole profiler steps from the end (``--steps`` runs), or else the latest events, until the file
fits; the notes say what was dropped. The written file is always JSON that ``json.load`` (after
``gzip.open`` for ``.json.gz``) reads.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from bisect import bisect_right

_STACK_ARGS = ("Call stack", "Python parent id", "Python id", "Python module id", "Python thread")


def _encode(data: dict, gz: bool) -> bytes:
    raw = json.dumps(data, separators=(",", ":")).encode("utf-8")
    return gzip.compress(raw, compresslevel=6) if gz else raw


def write_trace(prof, path: str, max_bytes: int) -> tuple[str, list]:
    """Export ``prof`` to ``path`` in at most ``max_bytes`` bytes.

    Export ``prof`` (a stopped ``torch.profiler.profile``) to ``path`` in at most ``max_bytes``
    bytes.

    Returns:
        (path, notes): notes are one-line texts of what the cap dropped (empty when nothing was).
    """
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="torchprof-")
    os.close(fd)
    notes = []
    try:
        prof.export_chrome_trace(tmp)
        with open(tmp, encoding="utf-8", errors="replace") as f:
            try:
                data = json.load(f)
            except ValueError as exc:
                data = _trace_from_events(prof)
                notes.append(
                    f"the profiler's own trace was not valid JSON ({exc}); wrote the operator and "
                    "kernel "
                    "events again from the profile"
                )
    finally:
        os.remove(tmp)
    notes += write_capped(data, path, max_bytes)
    return path, notes


def _trace_from_events(prof) -> dict:
    out = []
    for e in prof.events() or []:
        out.append(
            {
                "name": e.name,
                "ph": "X",
                "ts": e.time_range.start,
                "dur": e.time_range.elapsed_us(),
                "pid": int(getattr(e, "device_index", 0) or 0),
                "tid": int(e.thread),
                "cat": "cpu_op" if str(e.device_type).endswith("CPU") else "kernel",
            }
        )
    return {"traceEvents": out}


def write_capped(data: dict, path: str, max_bytes: int) -> list:
    """Write a trace dict to ``path`` in at most ``max_bytes`` bytes.

    Write the trace dict ``data`` (``{"traceEvents": [...], ...}``) to ``path`` (gzip when it ends
    in ``.gz``) in at most ``max_bytes`` bytes, dropping stacks, then steps, then the latest events.
    Returns the notes.
    """
    gz = path.lower().endswith(".gz")
    notes = []
    blob = _encode(data, gz)
    if len(blob) > max_bytes:
        events = data.get("traceEvents", [])
        kept, stacks = [], 0
        for e in events:
            if e.get("cat") == "python_function":
                stacks += 1
                continue
            args = e.get("args")
            if args and any(k in args for k in _STACK_ARGS):
                e = dict(e, args={k: v for k, v in args.items() if k not in _STACK_ARGS})
            kept.append(e)
        data = dict(data, traceEvents=kept)
        blob = _encode(data, gz)
        notes.append(
            f"dropped the Python stacks ({stacks} events) to stay under {max_bytes / 2**20:g} MiB"
        )
        if len(blob) > max_bytes:
            data, note = _truncate(data, gz, max_bytes, len(blob))
            notes.append(note)
            blob = _encode(data, gz)
    with open(path, "wb") as f:
        f.write(blob)
    return notes


def _truncate(data: dict, gz: bool, max_bytes: int, full_size: int) -> tuple[dict, str]:
    """Keep the earliest events (whole steps when marked) that fit."""
    events = data["traceEvents"]
    meta = [e for e in events if e.get("ph") == "M" or "ts" not in e]
    timed = sorted(
        (e for e in events if e.get("ph") != "M" and "ts" in e), key=lambda e: float(e["ts"])
    )
    sizes = [len(json.dumps(e, separators=(",", ":"))) + 1 for e in timed]
    prefix = [0]
    for s in sizes:
        prefix.append(prefix[-1] + s)
    base = len(_encode(dict(data, traceEvents=meta), False))
    ratio = full_size / max(1, base + prefix[-1]) if gz else 1.0
    steps = sorted(
        float(e["ts"]) for e in timed if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    stamps = [float(e["ts"]) for e in timed]
    budget = max_bytes
    for _ in range(20):
        raw_budget = budget / ratio - base
        n = max(0, bisect_right(prefix, raw_budget) - 1)
        cut_note = None
        if steps and n < len(timed):
            cutoff = stamps[n] if n < len(stamps) else float("inf")
            starts = [s for s in steps if s <= cutoff]
            if len(starts) >= 2:  # keep steps that start before the last step reached by n, whole
                n = bisect_right(stamps, starts[-1] - 1e-9)
                kept_steps = len(starts) - 1
                cut_note = (
                    f"dropped {len(steps) - kept_steps} of {len(steps)} profiler steps (kept the "
                    "first "
                    f"{kept_steps})"
                )
        out = dict(data, traceEvents=meta + timed[:n])
        if len(_encode(out, gz)) <= max_bytes:
            dropped = len(timed) - n
            if cut_note is None:
                last = stamps[n - 1] if n else 0
                cut_note = (
                    f"dropped the latest {dropped} of {len(timed)} events (the trace stops at "
                    f"ts={last:.0f} us)"
                )
            return out, cut_note + f" to stay under {max_bytes / 2**20:g} MiB"
        budget *= 0.9
    return dict(data, traceEvents=meta), (
        f"dropped all {len(timed)} timed events: even the first ones pass {max_bytes / 2**20:g} MiB"
    )


def load_trace(path: str) -> dict:
    """Read a ``.json`` or ``.json.gz`` Chrome trace.

    Raises ``OSError``/``ValueError`` when unreadable.
    """
    opener = gzip.open if path.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)
