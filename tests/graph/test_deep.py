"""Deep graphs (100,000 chained ops).

The walk is iterative and freeing a walked chain does not crash.

About 25 s each: kept out of the mutation runs of walk.py (scripts/mutation.py), where every
    surviving mutant
would pay for them; tests/graph/test_walk.py covers the same functions on small graphs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import torch

from cudamagic.graph import draw
from cudamagic.graph import model as M
from cudamagic.graph import walk as G

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_chain_of_100k_ops_walks_iteratively():
    result = {}

    # a big C stack: freeing a 100k-deep graph recurses in PyTorch's C++ (pytorch#109948)
    def body():
        x = torch.randn(2, requires_grad=True)
        z = x
        for _ in range(100_000):
            z = z.sin()
        gr = G.walk([("z", z)])
        view, notes, fits = draw.choose_view(gr, None, True, 2500)
        result.update(n=len(gr.nodes), ops=gr.op_counts()["SinBackward0"], view=view, fits=fits)
        del z, x

    old = threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=body)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    assert result["n"] == 100_003 and result["ops"] == 100_000
    assert result["fits"]
    runs = result["view"].of_kind(M.RUN)
    assert [(r.label, r.count) for r in runs] == [("SinBackward0", 100_000)]


def test_freeing_a_walked_100k_chain_does_not_crash_the_process():
    code = textwrap.dedent("""
        import torch
        from cudamagic.graph import walk as G
        x = torch.randn(2, requires_grad=True)
        z = x
        for _ in range(100_000):
            z = z * 1.0001
        gr = G.walk([("z", z)])
        del z, x       # freeing the visited chain recursed past the 8 MiB stack: SIGSEGV
        print("alive", len(gr.nodes))
    """)
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        preexec_fn=_default_stack,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "alive 100003" in proc.stdout


def _default_stack():
    """In the child.

    The usual 8 MiB main-thread stack (the crash does not show with a bigger one).
    """
    import resource

    hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
    soft = 8 * 1024 * 1024
    resource.setrlimit(
        resource.RLIMIT_STACK, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
    )


def _lines_run(ip, n: int) -> int:
    """Python lines and calls that ``%%autograd_graph`` on an ``n``-op chain runs, shown as HTML."""
    events = [0]

    def count(frame, event, arg):
        events[0] += 1
        return count

    sys.settrace(count)
    try:
        r = ip.run_cell_magic("autograd_graph", "--format dot", f"chain({n})")
        r._repr_html_()
    finally:
        sys.settrace(None)
    assert r.drawn.view == "chains folded" and r.graph.op_counts()["SinBackward0"] == n // 2
    return events[0]


def test_the_default_view_of_a_chain_runs_work_linear_in_its_ops(ip):
    """Counted, not timed: each doubling of the chain adds the same Python work (lines run).

    The cell's forward pass, the walk, the view and the HTML together; work growing with the square
    of the ops (a quadratic pass) would add twice as much at each doubling.
    """
    ip.run_cell(
        "import torch\nx = torch.randn(4, requires_grad=True)\n"
        "def chain(n):\n    z = x\n    for i in range(n):\n"
        "        z = z.sin() if i % 2 else z * 1.001\n    return z.sum()"
    )
    _lines_run(ip, 200)  # first-call work (caches, imports) out of the comparison
    a, b, c = (_lines_run(ip, n) for n in (1000, 2000, 4000))
    assert b - a > 20 * 1000  # the walk's and the view's lines per op are counted
    assert abs((c - b) - 2 * (b - a)) < 0.01 * (c - b), (a, b, c)
