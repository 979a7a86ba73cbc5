"""Benchmark for issue 2, measured side by side in one run on this machine.

1. ``%load_ext cudamagic`` in a fresh interpreter (IPython already imported) against ``import torch`` in a fresh
   interpreter. Goal: load_ext < 5 % of import torch.
2. ``%cudainfo`` (torch already imported, second call: nvcc cached) against ``python -m torch.utils.collect_env``
   (wall time of the whole command, which gathers similar facts). Goal: >= 20x faster.

Each figure is the median of several runs. Usage: python benchmarks/bench_cudainfo.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

LOAD_EXT = r"""
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t = time.perf_counter(); ip.run_line_magic('load_ext', 'cudamagic'); dt = time.perf_counter() - t
print(dt)
"""
IMPORT_TORCH = "import time\nt = time.perf_counter()\nimport torch\nprint(time.perf_counter() - t)"
CUDAINFO = r"""
import time, io, contextlib
import torch
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic('load_ext', 'cudamagic')
r = ip.run_line_magic('cudainfo', '')
r._repr_html_(); r.to_text()
ts = []
for _ in range(5):
    t = time.perf_counter(); r = ip.run_line_magic('cudainfo', ''); r._repr_html_(); r.to_text(); ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts) // 2])
"""


def run_py(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    load, torch_imp = [], []
    for _ in range(a.runs):  # interleaved so both see the same machine load
        load.append(run_py(LOAD_EXT))
        torch_imp.append(run_py(IMPORT_TORCH))
    info = run_py(CUDAINFO)
    env = []
    for _ in range(max(1, a.runs // 2)):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "torch.utils.collect_env"], capture_output=True, check=True)
        env.append(time.perf_counter() - t)
    l, ti, ce = statistics.median(load), statistics.median(torch_imp), statistics.median(env)
    print("cudainfo benchmark (medians)")
    print(f"  %load_ext cudamagic          {l * 1000:9.1f} ms")
    print(f"  import torch                 {ti * 1000:9.1f} ms")
    print(f"  ratio load_ext / import torch  {l / ti:7.2%}   (goal < 5 %)")
    print(f"  %cudainfo (2nd call, +render) {info * 1000:8.1f} ms")
    print(f"  python -m torch.utils.collect_env {ce * 1000:8.1f} ms")
    print(f"  speed-up collect_env / %cudainfo {ce / info:7.1f}x  (goal >= 20x)")


if __name__ == "__main__":
    main()
