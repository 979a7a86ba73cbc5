"""Benchmark: %%autograd_graph beside torchviz's make_dot + dot, on the same graphs.

Each side-by-side row (benchmarks/sidebyside.py ``compare``: interleaved, process CPU time as the
headline, wall beside it, the load average) runs the same forward pass on both sides, end to end:
a ``%%autograd_graph --no-fold --max-nodes 10000000 --shared-params`` cell in a real
InteractiveShell (forward, walk, ``dot -Tsvg``, the notebook's HTML), and the forward plus
``torchviz.make_dot(y).pipe(format="svg")``. The CPU time counts the ``dot`` child process of each
side (``RUSAGE_CHILDREN``). The guard: both sides draw the same graph, the same node and edge count
(read from the DOT source without laying it out); a row whose two sides differ is refused.

The torchviz side runs the very command ``pipe`` runs (``dot -Kdot -Tsvg``) on ``make_dot``'s
source, stopped after :data:`PEER_LIMIT_S` seconds of CPU: its ``dot`` on the LSTMCell x 50 graph
did not finish in 15.5 and 19.6 CPU minutes on this machine (killed), so that row prints the
torchviz side as what it had spent when stopped, a lower bound (``>``), and the ratio as an upper
bound (``<``).

Then, without a peer: the default view of a 10,000- and a 100,000-op chain (process CPU time of
the whole cell, the chain's forward pass included, and the peak memory it adds, in a fresh process
each, five a size, interleaved, min and median; beside it the CPU of the same forward pass run
alone, without the magic, and the rest), and the ratio of the medians (linear: about 10x).

Both sides run the same forward pass in one process, with ``torch.set_num_threads(1)``: idle
OpenMP workers spin, and their CPU counted on either side is noise.

Usage: python benchmarks/bench_graph.py [--quick] [--reps N] [--only TEXT] [--peer-limit S]
    --quick: 2 runs a side.
    --peer-limit S: CPU seconds torchviz's ``dot`` may use (default :data:`PEER_LIMIT_S`).
    --only TEXT: only the rows whose title contains TEXT ("default view": only the chains).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from sidebyside import compare, load_average

SETUP = """
import torch
torch.manual_seed(0)
torch.set_num_threads(1)  # both sides run the same forward; idle OpenMP workers spinning is noise
nn = torch.nn

def encoder(layers):
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

enc6, enc12 = encoder(6), encoder(12)
src = torch.randn(2, 16, 64)

class Block(nn.Module):  # torchvision's BasicBlock
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return (y + x).relu()

resnet = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
    *[Block(16) for _ in range(8)], nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
)
img = torch.randn(2, 3, 16, 16)
cell = nn.LSTMCell(16, 32)
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

#: (title, expression, runs a side in full mode): the graphs of issue 30.
CASES = [
    ("LSTMCell x 25", "lstm(25)", 3),
    ("LSTMCell x 50", "lstm(50)", 1),
    ("TransformerEncoder, 6 layers", "enc6(src).sum()", 5),
    ("TransformerEncoder, 12 layers", "enc12(src).sum()", 5),
    ("ResNet (8 BasicBlocks)", "torch.nn.functional.cross_entropy(resnet(img), "
     "torch.zeros(2, dtype=torch.long))", 5),
    ("chain of 10,000 ops", "chain(10_000)", 3),
]  # fmt: skip

FULL = "--no-fold --max-nodes 10000000 --shared-params --timeout 3600"
#: CPU seconds torchviz's ``dot`` may use before it is stopped (then a lower bound is printed).
PEER_LIMIT_S = 60.0


def children_cpu_s() -> float:
    """CPU seconds of the finished child processes (the ``dot`` runs) so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def dot_counts(source: str) -> dict:
    """Nodes and edges of a DOT source (one statement a line, as both sides write it)."""
    nodes = sum(1 for ln in source.splitlines() if re.match(r"\s*\w+ \[label=", ln))
    edges = sum(1 for ln in source.splitlines() if "->" in ln)
    return {"nodes": nodes, "edges": edges}


class Side:
    """One side of a row: ``run()`` draws the picture, ``count()`` builds the DOT only.

    ``run()`` returns true when it was stopped at its time limit, unfinished.
    """

    def __init__(self, run, count):
        self.run, self.count = run, count

    def work(self) -> dict:
        return self.count()

    def timed(self) -> tuple:
        c0, k0, t0 = time.process_time(), children_cpu_s(), time.perf_counter()
        stopped = self.run()
        cpu = time.process_time() - c0 + children_cpu_s() - k0
        return cpu, time.perf_counter() - t0, bool(stopped)


def peer_pipe(source: str, limit_s: float = PEER_LIMIT_S) -> bool:
    """The peer's ``dot`` run on ``source``, stopped after ``limit_s`` CPU seconds.

    The same command and input as graphviz's ``pipe`` (``dot -Kdot -Tsvg``, the source as UTF-8
    on stdin, stdout and stderr read), killed once it has used ``limit_s`` seconds of CPU (or run
    three times that long); returns True when it was stopped unfinished. Its CPU is counted either
    way (it is waited for).
    """
    import psutil
    from graphviz.backend import dot_command

    cmd = dot_command.command("dot", "svg")
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    data, start = source.encode("utf-8"), time.monotonic()
    while True:
        try:
            out, err = proc.communicate(data, timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            data = None
        try:
            used = sum(psutil.Process(proc.pid).cpu_times()[:2])
        except psutil.Error:
            continue
        if used >= limit_s or time.monotonic() - start >= 3 * limit_s:
            proc.kill()
            proc.communicate()
            return True
    if proc.returncode != 0 or b"<svg" not in out[:4096]:
        raise RuntimeError(f"torchviz's dot failed: {err[:500]!r}")
    return False


def sides(ip, expr: str, peer_limit_s: float = PEER_LIMIT_S) -> tuple:
    from cudamagic.graph import torchviz_engine

    make_dot = torchviz_engine.import_make_dot()
    ns = ip.user_ns

    def ours_run():
        r = ip.run_cell_magic("autograd_graph", FULL, expr)
        if r.image is None or r.drawn.view != "full":
            raise RuntimeError(
                f"cudamagic did not draw the full graph: {r.problem or r.drawn.view}"
            )
        r._repr_html_()

    def ours_count():
        r = ip.run_cell_magic("autograd_graph", FULL + " --format dot", expr)
        return dot_counts(r.inline_dot())

    def theirs_run():
        return peer_pipe(make_dot(eval(expr, ns)).source, peer_limit_s)

    def theirs_count():
        return dot_counts(make_dot(eval(expr, ns)).source)

    return Side(ours_run, ours_count), Side(theirs_run, theirs_count)


CHAIN_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
ip.run_cell({setup!r})
ip.run_cell_magic("autograd_graph", "", "chain(10)")
c0 = time.process_time()
ip.run_cell("_y = chain({n}); del _y")  # the forward pass alone: its CPU, and its peak before ours
forward = time.process_time() - c0
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
c0, t0 = time.process_time(), time.perf_counter()
r = ip.run_cell_magic("autograd_graph", "", "chain({n})")
r._repr_html_()
cpu, wall = time.process_time() - c0, time.perf_counter() - t0
extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps(dict(cpu=cpu, forward=forward, wall=wall, extra_kib=extra,
                      boxes=len(r.drawn.nodes), view=r.drawn.view, problem=r.problem)))
"""


def chain_default_view(n: int) -> dict:
    """CPU, wall and added peak memory of the default view of an ``n``-op chain (fresh process)."""
    code = CHAIN_CHILD.format(root=ROOT, setup=SETUP, n=n)
    c0 = children_cpu_s()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_cpu"] = children_cpu_s() - c0
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=None, help="runs a side (default: per graph)")
    ap.add_argument("--only", default=None, help="only the rows whose title contains this")
    ap.add_argument(
        "--peer-limit",
        type=float,
        default=PEER_LIMIT_S,
        help=f"CPU seconds torchviz's dot may use (default {PEER_LIMIT_S:g})",
    )
    args = ap.parse_args(argv)
    sys.setrecursionlimit(100_000)  # torchviz's make_dot recurses once per op
    import torchviz  # noqa: F401 (the bench extra)
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell(SETUP)
    version = __import__("importlib.metadata").metadata.version("torchviz")
    for title, expr, reps in CASES:
        if args.only and args.only not in title:
            continue
        ours, theirs = sides(ip, expr, args.peer_limit)
        same = ours.work()
        compare(
            f"%%autograd_graph vs torchviz, {title}, the full graph to SVG",
            ours,
            theirs,
            peer_name=f"torchviz {version}",
            reps=args.reps or (min(reps, 2) if args.quick else reps),
            unit="s",
            note=f"same graph: {same['nodes']} nodes, {same['edges']} edges; "
            f"CPU includes the dot child; ours: %%autograd_graph {FULL}; torchviz: make_dot, "
            f"then its dot (stopped if it passes {args.peer_limit:g} s of CPU)",
        )
    if args.only and "default view" not in args.only:
        return 0
    reps = 2 if args.quick else 5
    print(
        f"  default view of a chain of ops (no peer; {reps} fresh processes a size, interleaved; "
        f"{load_average()})"
    )
    runs = {10_000: [], 100_000: []}
    for _ in range(reps):
        for n, got in runs.items():
            got.append(chain_default_view(n))
    med, peak_mib = {}, {}
    for n, rs in runs.items():
        cpu, fwd = [r["cpu"] for r in rs], [r["forward"] for r in rs]
        rest = [r["cpu"] - r["forward"] for r in rs]
        med[n] = statistics.median(cpu)
        peak_mib[n] = max(x["extra_kib"] for x in rs) / 1024
        r = rs[0]
        print(
            f"    {n:>7,} ops: CPU min {min(cpu):.2f} s, median {med[n]:.2f} s (wall median "
            f"{statistics.median(x['wall'] for x in rs):.2f} s); of it the cell's own forward pass "
            f"run alone: median {statistics.median(fwd):.2f} s, the rest (walk, views, picture): "
            f"median {statistics.median(rest):.2f} s; peak memory at most "
            f"+{peak_mib[n]:.0f} MiB; drew {r['boxes']} boxes "
            f"({r['view']}{', ' + r['problem'] if r['problem'] else ''})"
        )
    ok_cpu = "meets" if med[100_000] < 2 else "MISSES"
    ok_mem = "meets" if peak_mib[100_000] < 150 else "MISSES"
    print(
        f"    100,000 / 10,000 ops: CPU {med[100_000] / med[10_000]:.1f}x of the medians (linear: "
        f"10x); goals at 100,000: under 2 s CPU ({ok_cpu}, median), under 150 MiB ({ok_mem})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
