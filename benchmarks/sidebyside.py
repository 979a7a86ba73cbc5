"""Side-by-side rows for the benchmarks: cudamagic and a peer on the same work, in one run.

:func:`compare` runs the two sides interleaved (A B A B ...) after one warm-up call each, times
every call in process CPU time (the headline: it does not count waiting, nor other processes on a
shared machine) and wall time, and prints one row: min and median of each side, the ratio of the
medians, and the load average. Before timing it runs the guard: ``work()`` of each side (what it
read) must be equal (the same GPUs and fields, the same series...); a row whose two sides did
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


class InProcess:
    """A side run in this process: ``fn()`` does the work once and returns what ``work`` reads."""

    def __init__(self, fn, work):
        self.fn, self._work = fn, work

    def work(self):
        return self._work(self.fn())

    def timed(self) -> tuple:
        """``(process CPU s, wall s)`` of one call."""
        _, cpu, wall = _timed(self.fn)
        return cpu, wall


def compare(
    title: str,
    ours,
    peer,
    *,
    peer_name: str,
    reps: int = 10,
    unit: str = "ms",
    note: str = "",
    attempts: int = 3,
) -> dict | None:
    """Time ``ours`` and ``peer`` interleaved and print one row; None when the guard refuses.

    Args:
        title: what both sides do (``"monitor tick, 64 GPUs"``).
        ours: cudamagic's side.
        peer: the peer's side. Each side is an :class:`InProcess`, or a worker process with the
            same two methods:
            ``work()`` does the work once and returns what it did (the same GPUs and fields, the
            same series...), which must be equal on both sides, else the row is refused with the
            difference; ``timed()`` does it once more and returns ``(CPU s, wall s)``, or
            ``(CPU s, wall s, stopped)``: ``stopped`` true when the side was stopped at a time
            limit before it finished (its figures and the ratio are then printed as bounds).
        peer_name: the peer as the row names it (``"nvitop 1.7.2"``).
        reps: timed calls per side.
        unit: ``"ms"`` or ``"s"``.
        note: printed under the row.
        attempts: how many times the guard reads both sides before refusing (a live server's
            answer can lose a series between two reads: a scrape that failed).

    Returns:
        ``{"ours": (cpu min, cpu median, wall min, wall median), "peer": (...), "ratio": cpu
        median ours / peer, "bound": "" or "< " or "> " (a side was stopped), None (both were)}``
        in seconds, or None when refused.
    """
    for _ in range(attempts):  # also the warm-up calls; a live source may change in between
        wa, wb = ours.work(), peer.work()
        if wa == wb:
            break
    else:
        print(f"  {title}: REFUSED, the two sides did not do the same work")
        print(f"    first difference: {_first_difference(wa, wb, peer_name)}")
        return None
    cpu = {"ours": [], "peer": []}
    wall = {"ours": [], "peer": []}
    stopped = {"ours": False, "peer": False}
    for _ in range(reps):
        for side, runner in (("ours", ours), ("peer", peer)):
            c, w, *why = runner.timed()
            cpu[side].append(c)
            wall[side].append(w)
            stopped[side] = stopped[side] or bool(why and why[0])
    scale = 1e3 if unit == "ms" else 1.0

    def stats(side):
        c, w = cpu[side], wall[side]
        return min(c), statistics.median(c), min(w), statistics.median(w)

    out = {"ours": stats("ours"), "peer": stats("peer")}
    out["ratio"] = out["ours"][1] / out["peer"][1] if out["peer"][1] else float("inf")
    # a side stopped at its limit did not finish: its figures are lower bounds, so is the ratio's
    # denominator (ours / peer < ratio) or numerator (> ratio); both stopped: no ratio
    out["bound"] = {(False, False): "", (False, True): "< ", (True, False): "> "}.get(
        (stopped["ours"], stopped["peer"]), None
    )
    o, p = out["ours"], out["peer"]
    print(f"  {title} ({reps} interleaved runs each; same work: guard passed; {load_average()})")
    for side, name, s in (("ours", "cudamagic", o), ("peer", peer_name, p)):
        at = ">" if stopped[side] else " "
        a, b, c, d = (f"{at}{v * scale:9.2f} {unit}" for v in s)
        print(
            f"    {name:<16} CPU min{a}, median{b}   | wall min{c}, median{d}"
            + ("   (stopped at its limit, unfinished: lower bounds)" if stopped[side] else "")
        )
    if out["bound"] is None:
        print(f"    -> cudamagic / {peer_name}: no ratio (both sides stopped at their limits)")
    else:
        print(
            f"    -> cudamagic / {peer_name}: CPU {out['bound']}{out['ratio']:.3g}x, wall "
            f"{out['bound']}{o[3] / p[3] if p[3] else float('inf'):.3g}x (medians)"
        )
    if note:
        print(f"    {note}")
    return out


def _first_difference(a, b, peer_name: str, path: str = "") -> str:
    """Where two work descriptions first differ, in words."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
            return f"{path or 'top'}: only cudamagic {only_a[:5]}, only {peer_name} {only_b[:5]}"
        for k in a:
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], peer_name, f"{path}/{k}")
    text = f"{path or 'top'}: cudamagic {a!r} vs {peer_name} {b!r}"
    return text if len(text) < 600 else text[:600] + " ..."
