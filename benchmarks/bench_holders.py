"""Cost of ``%cudamem why``'s holder search with 100,000 live tensors. Goal: under 2 s.

The namespace holds what a long notebook session does: a model and its optimizer, 100,000 small
tensors on a list (a per-sample cache), a dict of 1,000 activations, ``running_loss`` with a graph
of 400 steps (400 ``AddBackward0`` nodes and their saved tensors), 50 ``Out`` entries and a closure.
The search (:func:`cudamagic.mem.holders.find_holders`) runs once to take the baseline and then
against it, as ``%cudamem on`` + ``%cudamem why`` do; the median of the rounds is reported.

Run: ``python benchmarks/bench_holders.py [--tensors 100000] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def namespace(n_tensors: int) -> dict:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(32, 64)
    running_loss = 0.0
    for _ in range(400):
        running_loss += model(x).pow(2).mean()
    history = []

    def log(t):
        history.append(t)

    for _ in range(100):
        log(torch.zeros(16))
    return {
        "model": model,
        "opt": opt,
        "samples": [torch.zeros(4) for _ in range(n_tensors)],
        "acts": {f"layer{i}": torch.zeros(64) for i in range(1000)},
        "running_loss": running_loss,
        "log": log,
        "Out": {i: torch.zeros(8) for i in range(50)},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--quick", action="store_true", help="3 rounds (what `run_all.py --quick` passes)"
    )
    args = ap.parse_args()
    if args.quick:
        args.rounds = 3

    from cudamagic.mem.holders import find_holders

    ns = namespace(args.tensors)
    gc.collect()
    live = sum(1 for o in gc.get_objects() if type(o).__name__ in ("Tensor", "Parameter"))
    base = find_holders(ns).baseline
    times, cpu = [], []
    for _ in range(args.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        search = find_holders(ns, baseline=base)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    first = find_holders(ns)
    print(f"live tensor objects: {live}; objects visited: {search.visits}")
    print(f"holders listed without a baseline: {[h.name for h in first.holders][:6]}")
    print(
        f"find_holders against a baseline: median {statistics.median(times):.3f} s, "
        f"max {max(times):.3f} s over {args.rounds} rounds (goal: < 2 s); process CPU time "
        f"median {statistics.median(cpu):.3f} s (wall time includes waiting for a busy machine's "
        f"CPUs: load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main()
