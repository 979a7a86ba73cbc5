"""Speed of ``%%torchprof`` beside a bare ``torch.profiler``, on the same events, in one run.

1. Cell cost: the cell's run under ``%%torchprof`` (its own ``cpu_s``/``wall_s``, the cell only)
   against the same cell under a bare ``torch.profiler.profile`` with the same settings (CPU
   activity, ``record_shapes=True``), timed the same way around the cell. One torch thread
   (``torch.set_num_threads(1)``): with several, OpenMP's idle workers spin on a loaded machine
   and make either side's CPU time noise. Guard: both sides recorded the same operators, the same
   number of calls each. Ten times ``--rounds`` runs per side (a run is a tenth of a second).
2. Summary at about 100,000 events: from a stopped profiler to the shown summary, ``%%torchprof``'s
   (``build_result``, its HTML and text) against ``key_averages().table()`` on the same profile
   (torch's ``FunctionEvent`` tree built again each time). Guard: the same operators and calls on
   both sides. Goal: under 1 s CPU. The verdict (where the time went, findings) comes after the
   summary and is timed on its own line.

Both rows come from :func:`sidebyside.compare` (interleaved runs, process CPU time first).

Run: ``python benchmarks/bench_torchprof.py [--rounds 5] [--events 100000] [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.sidebyside import InProcess, compare  # noqa: E402

CELL = """
for i in range(30):
    xb, yb = X[(i % 14) * 128:(i % 14 + 1) * 128], y[(i % 14) * 128:(i % 14 + 1) * 128]
    loss = loss_fn(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
SETUP = """
import torch
from torch import nn
torch.manual_seed(0)
X, y = torch.rand(1797, 64), torch.randint(0, 10, (1797,))
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()
"""


def calls_of(key_averages) -> dict:
    """Operator -> calls, from torch's ``key_averages()``."""
    return {e.key: e.count for e in key_averages}


class CellSide:
    """One side of the cell-cost row: ``timed()`` is the CPU and wall time of the cell only."""

    def __init__(self, run):
        self.run = run  # () -> ((cpu s, wall s), operator -> calls)

    def work(self):
        return self.run()[1]

    def timed(self):
        return self.run()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true", help="2 rounds, 20,000 events")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.events = 2, 20_000

    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from torch.profiler import ProfilerActivity, profile

    from cudamagic.prof.run import _attach_verdict
    from cudamagic.prof.summary import build_result

    torch.set_num_threads(1)
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell(SETUP)
    ip.displayhook.cache_size = 0
    code = compile(CELL, "<bench>", "exec")
    exec(code, ip.user_ns)  # warm up

    def ours_cell():
        with contextlib.redirect_stdout(io.StringIO()):
            res = ip.run_cell_magic("torchprof", "", CELL)
        return (res.cpu_s, res.wall_s), {r.name: r.calls for r in res.rows("op")}

    def bare_cell():
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        with contextlib.redirect_stderr(io.StringIO()):
            prof.start()
        c0, t0 = time.process_time(), time.perf_counter()
        exec(code, ip.user_ns)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        with contextlib.redirect_stderr(io.StringIO()):
            prof.stop()
        return (cpu, wall), calls_of(prof.key_averages())

    print(
        f"bench_torchprof: python {sys.version.split()[0]}, torch {torch.__version__}, "
        f"1 torch thread"
    )
    compare(
        "cell run time, 30 training steps (the cell only, under each profiler)",
        CellSide(ours_cell),
        CellSide(bare_cell),
        peer_name="torch.profiler",
        reps=10 * args.rounds,  # a cell is a tenth of a second: more runs, less noise
        note="goal: %%torchprof costs the cell what a bare profiler costs it (about 1.0x)",
    )

    w = torch.randn(4, 4)

    def record(iters):
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        with contextlib.redirect_stderr(io.StringIO()):
            prof.start()
            for _ in range(iters):
                (w + 1).relu()
            prof.stop()
        return prof

    small = record(100)
    prof = record(int(args.events / (len(small.events()) / 100)))
    n_events = len(prof.profiler.kineto_results.events())

    def summary():
        res = build_result(
            prof,
            header="%%torchprof",
            wall_s=0.0,
            activities=["CPU"],
            with_stack=False,
            memory=False,
            group="op",
            stack_depth=3,
            top=15,
        )
        res.to_html(), res.to_text()
        return res

    def table():
        prof.profiler._function_events = None  # torch builds its FunctionEvent tree once per stop
        prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
        return prof

    row = compare(
        f"summary of {n_events:,} events (a stopped profiler -> the tables as HTML and text)",
        InProcess(summary, lambda res: {r.name: r.calls for r in res.rows("op")}),
        InProcess(table, lambda p: calls_of(p.key_averages())),
        peer_name="key_averages().table()",
        reps=args.rounds,
        unit="s",
        note="goal: %%torchprof's summary under 1 s CPU",
    )
    res = summary()
    verdict_cpu = []
    for _ in range(args.rounds):
        c0 = time.process_time()
        _attach_verdict(res, prof)
        verdict_cpu.append(time.process_time() - c0)
    print(
        f"    then the verdict (breakdown, findings): CPU median "
        f"{statistics.median(verdict_cpu):.2f} s; summary + verdict "
        f"{(row['ours'][1] if row else float('nan')) + statistics.median(verdict_cpu):.2f} s"
    )


if __name__ == "__main__":
    main()
