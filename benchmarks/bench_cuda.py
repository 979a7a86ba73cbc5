"""Benchmark for issue 18 (``%%cuda``), measured side by side in one run on this machine.

1. Overhead of ``%%cuda`` (cold cache: compile + run, output streamed) over calling nvcc on the same
    file and
   running the program, alternated round by round. Goal: under 10 %.
2. An unchanged re-run (the build comes from the cache: no nvcc call; the program still runs). Goal:
    under 100 ms.
   Shown beside the time of just starting the compiled program, which is the floor.
3. The same cell re-run under nvcc4jupyter's ``%%cuda`` (the ``bench`` extra), side by side
   (benchmarks/sidebyside.py ``compare``: interleaved, process CPU with the nvcc and program
   processes each call waited for, wall beside it). Guard: both printed the same program output.

Each figure is the median of several runs. Usage: python benchmarks/bench_cuda.py [--runs N]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.dirname(os.path.abspath(__file__))]

from sidebyside import compare

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
    rerun_beside_nvcc4jupyter(ip, cell, a.runs)
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


def cpu_now() -> float:
    """This process's CPU seconds plus those of the finished children it waited for."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ru.ru_utime + ru.ru_stime


class CellSide:
    """One side of the re-run row: ``run()`` prints the program's output (captured here)."""

    def __init__(self, run):
        self.run = run

    def work(self) -> list:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            self.run()
        return [line for line in out.getvalue().splitlines() if line.strip()]

    def timed(self) -> tuple:
        c0, t0 = cpu_now(), time.perf_counter()
        self.work()
        return cpu_now() - c0, time.perf_counter() - t0


def rerun_beside_nvcc4jupyter(ip, cell: str, runs: int) -> None:
    """Row 3: the unchanged cell again under both magics (nvcc4jupyter compiles every time)."""
    try:
        from nvcc4jupyter import NVCCPlugin, __version__
    except ImportError:
        print("nvcc4jupyter is not installed (`pip install -e '.[bench]'`): row 3 skipped")
        return
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its work folder
        theirs = NVCCPlugin(ip)  # called directly: both magics are named %%cuda
    compare(
        "%%cuda unchanged re-run vs nvcc4jupyter's %%cuda, same cell",
        CellSide(lambda: ip.run_cell_magic("cuda", "", cell)),
        CellSide(lambda: theirs.cuda("", cell)),
        peer_name=f"nvcc4jupyter {__version__}",
        reps=runs,
        note="CPU includes nvcc and the program (child processes); ours reuses its build",
    )
    shutil.rmtree(theirs.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
