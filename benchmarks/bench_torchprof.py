"""Speed of ``%%torchprof`` (issue 17), side by side in one run.

1. Overhead: the cell's run time under ``%%torchprof`` (its own ``wall_s``) against the same cell
    under a bare
   ``torch.profiler.profile`` with the same settings (CPU activity, ``record_shapes=True``), timed
   the same way (``perf_counter`` around the ``exec``), interleaved rounds, median of each. Goal:
   within 5 %.
2. Summary: the time from the end of the cell to the rendered summary for a profile of about 100,000
    events:
   ``stop()`` (shared by both, timed once), then ``build_result`` + HTML + text against
   ``key_averages().table()`` (which first builds torch's ``FunctionEvent`` tree) on the same
   profile. Goal: under 2 s.

Run: ``python benchmarks/bench_torchprof.py [--rounds 5] [--events 100000]``
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


def bare_cell_s(ns, code) -> float:
    import torch
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
    with contextlib.redirect_stderr(io.StringIO()):
        prof.start()
    t0, c0 = time.perf_counter(), time.process_time()
    exec(code, ns)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    with contextlib.redirect_stderr(io.StringIO()):
        prof.stop()
    del torch
    return dt, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--events", type=int, default=100_000)
    args = ap.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell(SETUP)
    ip.displayhook.cache_size = 0
    code = compile(CELL, "<bench>", "exec")
    exec(code, ip.user_ns)  # warm up
    ours, bare = [], []
    for _ in range(args.rounds):
        bare.append(bare_cell_s(ip.user_ns, code))
        with contextlib.redirect_stdout(io.StringIO()):
            res = ip.run_cell_magic("torchprof", "", CELL)
        ours.append((res.wall_s, res.cpu_s))
    print(
        f"bench_torchprof: python {sys.version.split()[0]}, {args.rounds} interleaved rounds, "
        f"{os.cpu_count()} CPUs (a loaded machine shows in the wall times; CPU time is steadier)"
    )
    for i, what in ((0, "wall, best of rounds"), (1, "process CPU time, median")):
        pick = min if i == 0 else statistics.median
        o, b = pick(x[i] for x in ours), pick(x[i] for x in bare)
        print(
            f"cell run time ({what}): %%torchprof {o * 1e3:8.1f} ms   bare torch.profiler.profile "
            f"{b * 1e3:8.1f} ms   ratio {o / b:.3f}x (goal <= 1.05)"
        )

    # 2. end of cell -> rendered summary, ~N events, one profile: stop() (shared) timed first, then
    # our summary (which reads the raw Kineto events), then key_averages().table() (which builds
    # torch's FunctionEvent tree)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cudamagic.prof.summary import build_result

    w = torch.randn(4, 4)

    def record(iters):
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
        with contextlib.redirect_stderr(io.StringIO()):
            prof.start()
            for _ in range(iters):
                (w + 1).relu()
        return prof

    small = record(100)
    small.stop()
    per_iter = len(small.events()) / 100
    prof = record(int(args.events / per_iter))
    t0 = time.perf_counter()  # the end of the cell
    with contextlib.redirect_stderr(io.StringIO()):
        prof.stop()
    t_parse = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
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
    html = res._repr_html_()
    repr(res)  # the text form, timed too
    n_events = len(res.ops)
    t_ours, c_ours = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    t_table, c_table = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"{n_events:,} events: stop() (shared) {t_parse:6.2f} s; then %%torchprof summary "
        f"{t_ours:6.2f} s (HTML {len(html) / 1024:.0f} KiB + text) vs key_averages().table() "
        f"{t_table:6.2f} s; "
        f"end of cell -> summary {t_parse + t_ours:6.2f} s vs {t_parse + t_table:6.2f} s (goal < 2 "
        "s); "
        f"CPU time {c_ours:.2f} s vs {c_table:.2f} s"
    )


if __name__ == "__main__":
    main()
