"""Benchmark: %%autograd_graph vs torchviz make_dot + dot, side by side on the same graphs.

Each row runs the same forward pass twice, end to end: once as a ``%%autograd_graph``
cell in a real InteractiveShell (forward + walk + layout to SVG), once as the
forward + ``torchviz.make_dot`` + ``dot -Tsvg``. torchviz's ``dot`` gets a cap
(120 s, ``--cap``); a run past it prints ``> cap``; a torchviz exception prints its
type (``RecursionError`` on long chains).

Issue 14: every row states what each side drew. torchviz always draws the full graph (its node count
    is the
number of nodes in its DOT source). Our "full" row forces the full graph (``--no-fold --max-nodes
10**7``) so the two draw the same graph and the ratio compares like with like; our "default" row
(the view that fits the node
budget: full, collapsed to module depth D, or folded) is printed separately, with no ratio when it
    drew less.

Usage: python benchmarks/bench_graph.py [--quick] [--cap SECONDS]
    --quick: cap 30 s and skip the 200-step LSTM for torchviz (shown as 'skipped').
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETUP = """
import torch
torch.manual_seed(0)
nn = torch.nn
mlp = nn.Sequential(
    nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
)
mlp_x = torch.randn(32, 64)
layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
enc = nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
src = torch.randn(2, 16, 64)
cell = torch.nn.LSTMCell(16, 32)
xs = torch.randn(200, 4, 16)
chain_x = torch.randn(8, requires_grad=True)
def lstm(steps):
    h = c = torch.zeros(4, 32)
    for t in range(steps):
        h, c = cell(xs[t], (h, c))
    return h.sum()
def chain(n):
    z = chain_x
    for i in range(n):
        z = z.sin() if i % 2 else z * 1.001
    return z.sum()
"""

CASES = [
    (
        "MLP (3 Linear)",
        "torch.nn.functional.cross_entropy(mlp(mlp_x), torch.zeros(32, dtype=torch.long))",
    ),
    ("TransformerEncoder x 12", "enc(src).sum()"),
    ("LSTMCell x 25", "lstm(25)"),
    ("LSTMCell x 50", "lstm(50)"),
    ("LSTMCell x 200", "lstm(200)"),
    ("chain 10,000 ops", "chain(10_000)"),
]


FULL = "--no-fold --max-nodes 10000000"


def time_ours(ip, expr, line=""):
    """(seconds, what was drawn, view name) for one ``%%autograd_graph`` cell."""
    t0 = time.perf_counter()
    r = ip.run_cell_magic("autograd_graph", line, expr)
    dt = time.perf_counter() - t0
    how = "ok" if r.image is not None else f"no image: {r.problem}"
    return dt, f"{r.drawn.view}, {len(r.drawn.nodes)} nodes ({how})", r.drawn.view


TORCHVIZ_NODES = {}


def time_torchviz(ns, expr, cap_s):
    import torchviz

    t0 = time.perf_counter()
    try:
        y = eval(expr, ns)
        source = torchviz.make_dot(y).source
        TORCHVIZ_NODES[expr] = sum(1 for ln in source.splitlines() if re.match(r"\s*\d+ \[", ln))
    except RecursionError:
        return None, "RecursionError"
    except Exception as exc:  # reported in the table
        return None, type(exc).__name__
    finally:
        y = None
    try:
        proc = subprocess.run(
            ["dot", "-Tsvg"], input=source.encode(), capture_output=True, timeout=cap_s
        )
    except subprocess.TimeoutExpired:
        return None, f"> cap ({cap_s:g} s)"
    if proc.returncode:
        return None, "dot failed"
    return time.perf_counter() - t0, "ok"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--cap", type=float, default=None, help="seconds torchviz's dot may run (default 120)"
    )
    args = ap.parse_args(argv)
    cap = args.cap or (30.0 if args.quick else 120.0)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))

    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell(SETUP)
    ns = ip.user_ns
    # warm-up, untimed: first imports and first fork of each tool
    time_ours(ip, "(chain_x * 2).sum()")
    time_torchviz(ns, "(chain_x * 2).sum()", cap)
    rows = []
    for name, expr in CASES:
        if args.quick and name == "LSTMCell x 200":
            theirs, note = None, "skipped (--quick)"
        else:
            theirs, note = time_torchviz(ns, expr, cap)
        tv_drawn = f"full, {TORCHVIZ_NODES[expr]} nodes" if expr in TORCHVIZ_NODES else "-"
        if theirs is None and expr in TORCHVIZ_NODES:
            tv_drawn += " (DOT made, dot did not finish)"
        for mode, line in (("full", FULL), ("default", "")):
            ours, ours_note, view = time_ours(ip, expr, line)
            t = theirs
            if ours < 1.0 and t is not None and t < 1.0:
                # small graphs: one run is mostly noise on a shared machine; take the median of 7,
                # interleaved
                pairs = [
                    (time_ours(ip, expr, line)[0], time_torchviz(ns, expr, cap)[0])
                    for _ in range(7)
                ]
                ours = statistics.median(p[0] for p in pairs)
                t = statistics.median(p[1] for p in pairs)
                ours_note += " (median of 7)"
            same = view == "full"  # torchviz always draws the full graph
            if not same:
                ratio = "- (different graphs)"
            elif t is not None:
                ratio = f"{t / ours:.1f}x"
            elif note.startswith(">"):
                ratio = f"> {cap / ours:.0f}x"
            else:
                ratio = "-"
            rows.append(
                (
                    f"{name} [{mode}]",
                    f"{ours:.2f} s",
                    ours_note,
                    f"{t:.2f} s" if t is not None else note,
                    tv_drawn,
                    ratio,
                )
            )
            print(
                f"  {rows[-1][0]}: ours {ours:.2f} s, torchviz {rows[-1][3]}",
                file=sys.stderr,
                flush=True,
            )
    headers = (
        "graph [our view]",
        "%%autograd_graph",
        "we drew",
        "torchviz + dot",
        "torchviz drew",
        "torchviz / ours",
    )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
