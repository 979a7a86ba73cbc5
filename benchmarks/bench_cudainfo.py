"""Benchmark for issues 2 and 14: ``%cudainfo`` against ``torch.utils.collect_env``, like for like.

Every figure comes from fresh interpreters in which ``torch`` is already imported on both sides, so neither side
pays for ``import torch`` and both pay for their own first-call work (subprocess calls, imports, caches):

1. first call: ``%cudainfo`` (with HTML and text rendering) in a fresh process vs
   ``get_pretty_env_info()`` in a fresh process. Goal: >= 20x faster.
2. warm call: the median of later calls in the same process on each side. Goal: >= 100x faster.
3. process to process, for reference: ``python -c 'import IPython ...; %cudainfo'`` vs
   ``python -m torch.utils.collect_env`` (the whole command, imports included).
4. ``%load_ext cudamagic`` vs ``import torch`` in fresh interpreters. Goal: load_ext < 5 % of import torch.

Like for like also means byte-compiled code on both sides: torch's modules have their ``.pyc`` files from ``pip
install``, while an editable cudamagic run with ``PYTHONDONTWRITEBYTECODE=1`` (as in CI containers) would compile its
sources again in every fresh process. The benchmark byte-compiles the cudamagic the child processes import first,
which is what ``pip install .`` (and any first import without that variable) leaves behind.

Each figure is the median over ``--runs`` fresh processes, the two sides interleaved so both see the same machine
load; the spread printed is min..max. Usage: python benchmarks/bench_cudainfo.py [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import compileall
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
# Both timed snippets: torch imported first (outside the timing), then the first call, then WARM warm calls.
CUDAINFO = r"""
import time
import torch
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic('load_ext', 'cudamagic')
def call():
    r = ip.run_line_magic('cudainfo', ''); r._repr_html_(); r.to_text()
t = time.perf_counter(); call(); first = time.perf_counter() - t
ts = []
for _ in range(WARM):
    t = time.perf_counter(); call(); ts.append(time.perf_counter() - t)
print(first, sorted(ts)[len(ts) // 2])
"""
COLLECT_ENV = r"""
import time
import torch
from torch.utils import collect_env
t = time.perf_counter(); collect_env.get_pretty_env_info(); first = time.perf_counter() - t
ts = []
for _ in range(WARM):
    t = time.perf_counter(); collect_env.get_pretty_env_info(); ts.append(time.perf_counter() - t)
print(first, sorted(ts)[len(ts) // 2])
"""
CUDAINFO_PROCESS = (
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "ip = InteractiveShell.instance(); ip.run_line_magic('load_ext', 'cudamagic')\n"
    "print(ip.run_line_magic('cudainfo', '').to_text())\n"
)


def run_py(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.strip().splitlines()[-1].split()]


def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t


def fmt(xs, unit=1000.0):
    return f"{statistics.median(xs) * unit:9.1f} ms  ({min(xs) * unit:.1f}..{max(xs) * unit:.1f})"


def byte_compile() -> str:
    """Byte-compile the cudamagic package the child processes import (the one under the current directory first);
    returns its folder."""
    where = subprocess.run([sys.executable, "-c", "import os, cudamagic; print(os.path.dirname(cudamagic.__file__))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    compileall.compile_dir(where, quiet=1)
    return where


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 runs, 3 warm calls")
    a = ap.parse_args()
    runs, warm = (3, 3) if a.quick else (a.runs, 5)
    compiled = byte_compile()
    ci_first, ci_warm, ce_first, ce_warm, ci_proc, ce_proc, load, torch_imp = ([] for _ in range(8))
    for _ in range(runs):  # interleaved so both sides see the same machine load
        f, w = run_py(CUDAINFO.replace("WARM", str(warm)))
        ci_first.append(f), ci_warm.append(w)
        f, w = run_py(COLLECT_ENV.replace("WARM", str(warm)))
        ce_first.append(f), ce_warm.append(w)
        ci_proc.append(wall([sys.executable, "-c", CUDAINFO_PROCESS]))
        ce_proc.append(wall([sys.executable, "-m", "torch.utils.collect_env"]))
        load.append(run_py(LOAD_EXT)[0])
        torch_imp.append(run_py(IMPORT_TORCH)[0])
    med = statistics.median
    print(f"cudainfo benchmark: medians over {runs} fresh processes per side (min..max); torch imported on both sides")
    print(f"  (byte-compiled {compiled} first, as pip install leaves it; torch's modules are byte-compiled too)")
    print(f"  first call  %cudainfo (+HTML, text)         {fmt(ci_first)}")
    print(f"  first call  collect_env.get_pretty_env_info {fmt(ce_first)}")
    print(f"  speed-up, first call                         {med(ce_first) / med(ci_first):7.1f}x  (goal >= 20x)")
    print(f"  warm call   %cudainfo (+HTML, text)         {fmt(ci_warm)}")
    print(f"  warm call   collect_env.get_pretty_env_info {fmt(ce_warm)}")
    print(f"  speed-up, warm call                          {med(ce_warm) / med(ci_warm):7.1f}x  (goal >= 100x)")
    print("  reference, whole processes (imports included):")
    print(f"    python -c '%load_ext cudamagic; %cudainfo'  {fmt(ci_proc)}")
    print(f"    python -m torch.utils.collect_env          {fmt(ce_proc)}")
    print(f"    ratio                                      {med(ce_proc) / med(ci_proc):7.1f}x")
    print(f"  %load_ext cudamagic                         {fmt(load)}")
    print(f"  import torch                                {fmt(torch_imp)}")
    print(f"  ratio load_ext / import torch                {med(load) / med(torch_imp):7.2%}   (goal < 5 %)")


if __name__ == "__main__":
    main()
