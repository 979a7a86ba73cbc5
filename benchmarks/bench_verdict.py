"""Each seeded slow cell before and after the fix its verdict names, side by side in one run.

For every cause in ``tests/prof/seeded.py`` (data loading, Python overhead, tiny operators,
optimizer, host copies): the slow cell is profiled once with ``%%torchprof`` in a real
InteractiveShell and its verdict's first finding printed (which cause, the fix); then the slow
cell and the fixed cell run interleaved (slow, fixed, slow, fixed...) without the profiler, each
in its own namespace after one warm-up run, and the medians and their ratio are printed. One
intra-op thread, as in the tests.

Run: ``python benchmarks/bench_verdict.py [--rounds 5]``
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from IPython.core.interactiveshell import InteractiveShell

    from tests.prof.seeded import CAUSES, sources

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "cudamagic")
    print(f"{'cause':10} {'verdict names':14} {'slow ms':>9} {'fixed ms':>9} {'speed-up':>9}")
    failures = 0
    for cause in CAUSES:
        setup, cell = sources(cause)
        shell.run_cell(setup)
        shell.run_cell(cell)
        with contextlib.redirect_stdout(io.StringIO()):
            res = shell.run_cell_magic("torchprof", "", cell)
        first = res.verdict.first
        named = first.cause if first else "nothing"
        failures += named != cause
        spaces = []
        for fixed in (False, True):
            s, c = sources(cause, fixed)
            ns: dict = {}
            exec(compile(s, f"<{cause} setup>", "exec"), ns)
            code = compile(c, f"<{cause} cell>", "exec")
            exec(code, ns)  # warm-up (DataLoader workers start here)
            spaces.append((code, ns, []))
        for _ in range(args.rounds):
            for code, ns, times in spaces:
                t0 = time.perf_counter()
                exec(code, ns)
                times.append(time.perf_counter() - t0)
        slow, fast = (statistics.median(t) * 1000 for _, _, t in spaces)
        print(f"{cause:10} {named:14} {slow:9.2f} {fast:9.2f} {slow / fast:8.1f}x")
        print(f"{'':10} fix: {first.fix if first else '-'}")
        for _, ns, _ in spaces:
            ns.clear()  # persistent DataLoader workers end with their loader
    print(
        f"median of {args.rounds} interleaved rounds; verdict named the seeded cause first in "
        f"{len(CAUSES) - failures} of {len(CAUSES)}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
