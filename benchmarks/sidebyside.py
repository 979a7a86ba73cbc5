"""Side-by-side rows for the benchmarks: cudamagic and a peer on the same work, in one run.

:func:`compare` runs the two sides interleaved (A B A B ...) after one warm-up call each, times
every call in process CPU time (the headline: it does not count waiting, nor other processes on a
shared machine) and wall time, and prints one row: min and median of each side, the ratio of the
medians, and the load average. Before timing it runs the guard: ``work(result)`` of each side's
answer must be equal (the same GPUs and fields, the same series...); a row whose two sides did
different work is refused, never printed as a ratio.
"""

from __future__ import annotations

import os
import statistics
import time


def _timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c0, time.perf_counter() - t0


def load_average() -> str:
    """The 1, 5 and 15 minute load averages and the CPU count, as one phrase."""
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "load average unknown"
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def compare(
    title: str,
    ours,
    peer,
    *,
    peer_name: str,
    work,
    reps: int = 10,
    unit: str = "ms",
    note: str = "",
) -> dict | None:
    """Time ``ours()`` and ``peer()`` interleaved and print one row; None when the guard refuses.

    Args:
        title: what both sides do (``"monitor tick, 64 GPUs"``).
        ours, peer: callables doing the work once; each returns what ``work`` reads.
        peer_name: the peer as the row names it (``"nvitop 1.7.2"``).
        work: ``(side, result) -> comparable`` describing the work done (``side`` is ``"ours"`` or
            ``"peer"``); the two must be equal, else the row is refused with the difference.
        reps: timed calls per side. unit: ``"ms"`` or ``"s"``. note: printed under the row.

    Returns:
        ``{"ours": (cpu min, cpu median, wall min, wall median), "peer": (...), "ratio": cpu
        median ours / peer}`` in seconds, or None when refused.
    """
    a0, _, _ = _timed(ours)
    b0, _, _ = _timed(peer)
    wa, wb = work("ours", a0), work("peer", b0)
    if wa != wb:
        print(f"  {title}: REFUSED, the two sides did not do the same work")
        print(f"    cudamagic: {_short(wa)}")
        print(f"    {peer_name}: {_short(wb)}")
        return None
    cpu = {"ours": [], "peer": []}
    wall = {"ours": [], "peer": []}
    for _ in range(reps):
        for side, fn in (("ours", ours), ("peer", peer)):
            _, c, w = _timed(fn)
            cpu[side].append(c)
            wall[side].append(w)
    scale = 1e3 if unit == "ms" else 1.0

    def stats(side):
        c, w = cpu[side], wall[side]
        return min(c), statistics.median(c), min(w), statistics.median(w)

    out = {"ours": stats("ours"), "peer": stats("peer")}
    out["ratio"] = out["ours"][1] / out["peer"][1] if out["peer"][1] else float("inf")
    o, p = out["ours"], out["peer"]
    print(f"  {title} ({reps} interleaved runs each; same work: guard passed; {load_average()})")
    for name, s in (("cudamagic", o), (peer_name, p)):
        print(
            f"    {name:<16} CPU min {s[0] * scale:9.2f} {unit}, median {s[1] * scale:9.2f} {unit}"
            f"   | wall min {s[2] * scale:9.2f} {unit}, median {s[3] * scale:9.2f} {unit}"
        )
    print(
        f"    -> cudamagic / {peer_name}: CPU {out['ratio']:.2f}x, wall "
        f"{o[3] / p[3] if p[3] else float('inf'):.2f}x (medians)"
    )
    if note:
        print(f"    {note}")
    return out


def _short(x) -> str:
    text = repr(x)
    return text if len(text) < 400 else text[:400] + " ..."
