"""Benchmark for issue 18 (``%%cuda``), measured side by side in one run on this machine.

1. Overhead of ``%%cuda`` (cold cache: compile + run, output streamed) over calling nvcc on the same
    file and
   running the program, alternated round by round. Goal: under 10 %.
2. An unchanged re-run (the build comes from the cache: no nvcc call; the program still runs). Goal:
    under 100 ms.
   Shown beside the time of just starting the compiled program, which is the floor.

Each figure is the median of several runs. Usage: python benchmarks/bench_cuda.py [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SOURCE = r"""#include <cstdio>
#include <vector>
#include <numeric>
int main() {
  std::vector<double> v(1000);
  std::iota(v.begin(), v.end(), 1.0);
  printf("sum %.0f\n", std::accumulate(v.begin(), v.end(), 0.0));
  return 0;
}
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("nvcc not found: nothing to measure")
        return 0
    from IPython.core.interactiveshell import InteractiveShell

    work = tempfile.mkdtemp(prefix="bench-cuda-")
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {os.path.join(work, 'cache')!r}")
    src = os.path.join(work, "cell.cu")
    with open(src, "w") as f:
        f.write(SOURCE)
    exe = os.path.join(work, "prog")
    cell = SOURCE
    magic, plain, rerun, floor = [], [], [], []
    sink = io.StringIO()
    with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
        # warm: nvcc -V and --list-gpu-arch are read once per session
        ip.run_cell_magic("cuda", "", cell)
        for i in range(a.runs):
            ip.run_line_magic("cuda", "--clear-cache")
            t = time.perf_counter()
            subprocess.run([nvcc, "-o", exe, src], check=True, capture_output=True)
            subprocess.run([exe], check=True, capture_output=True)
            plain.append(time.perf_counter() - t)
            body = cell + f"// round {i}\n"  # a new cell each round: a cold compile
            t = time.perf_counter()
            ip.run_cell_magic("cuda", "", body)
            magic.append(time.perf_counter() - t)
        for _ in range(max(10, a.runs)):
            t = time.perf_counter()
            ip.run_cell_magic("cuda", "", cell)
            rerun.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run([exe], check=True, capture_output=True)
            floor.append(time.perf_counter() - t)
    ip.run_line_magic("unload_ext", "cudamagic")
    shutil.rmtree(work, ignore_errors=True)
    m, p = statistics.median(magic), statistics.median(plain)
    r, fl = statistics.median(rerun), statistics.median(floor)
    print(
        f"%%cuda compile+run (cold cache): {m * 1000:.0f} ms   nvcc + run: {p * 1000:.0f} ms   "
        f"overhead {100 * (m / p - 1):+.1f} %  (goal < 10 %)  [median of {a.runs}]"
    )
    print(
        f"%%cuda unchanged re-run: {r * 1000:.1f} ms  (goal < 100 ms)   running the program alone: "
        f"{fl * 1000:.1f} ms   [median of {len(rerun)}]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
