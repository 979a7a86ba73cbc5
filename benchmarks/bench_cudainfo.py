"""Benchmark for issues 2 and 14: ``%cudainfo`` against ``torch.utils.collect_env``, like for like.

Every figure comes from fresh interpreters in which ``torch`` is already imported on both sides, so
neither side pays for ``import torch`` and both pay for their own first-call work (subprocess calls,
imports, caches). Our side is rendered the way IPython shows it (``display_formatter.format``: the
HTML and the text form; IPython's formatters are built beforehand, as a kernel builds them for its
first output of any kind); the other side returns the text it shows.

1. first call: ``%cudainfo`` in a fresh process vs ``get_pretty_env_info()`` in a fresh process, the
    two kinds of
   process alternating. Goal: >= 20x faster. The ratio is of the medians; the spread of the per-pair
       ratios is
   printed with it.
2. warm call: in one process holding both sides (after each side's first call), rounds of one
   ``get_pretty_env_info()`` and ``--per-round`` ``%cudainfo`` calls, the order alternating from
   round to round. A warm ``%cudainfo`` is about a millisecond, so single calls follow the machine's
   noise: the figure is the median of all calls per side (p10..p90 printed), and the ratio's spread
       is that of the per-round ratios (each
   round's ``collect_env`` time over the median of its own ``%cudainfo`` calls), which the load
   changes alike on
   both sides. Goal: >= 100x faster.
3. process to process, for reference: ``python -c 'import IPython ...; %cudainfo'`` vs
   ``python -m torch.utils.collect_env`` (the whole command, imports included).
4. ``%load_ext cudamagic`` vs ``import torch`` in fresh interpreters. Goal: load_ext < 5 % of import
    torch.

Like for like also means byte-compiled code on both sides: torch's modules have their ``.pyc`` files
from ``pip install``, while an editable cudamagic run with ``PYTHONDONTWRITEBYTECODE=1`` (as in CI
containers) would compile its sources again in every fresh process. The benchmark byte-compiles the
cudamagic the child processes import first, which is what ``pip install .`` (and any first import
without that variable) leaves behind.

The load average (``os.getloadavg``) is printed at the start and the end: on a shared machine every
wall-clock
figure grows with it. Usage: python benchmarks/bench_cudainfo.py [--runs N] [--rounds R]
    [--per-round K] [--quick]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
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
# What a notebook does with the object %cudainfo returns: every format IPython computes for display.
SHOW = r"""
import time
import torch
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic('load_ext', 'cudamagic')
ip.display_formatter.format(0)  # IPython builds its formatters once, for whatever it shows first
def cudainfo():
    data, _meta = ip.display_formatter.format(ip.run_line_magic('cudainfo', ''))
    assert 'text/html' in data and 'text/plain' in data
"""
CUDAINFO_FIRST = SHOW + "t = time.perf_counter(); cudainfo(); print(time.perf_counter() - t)\n"
COLLECT_ENV_FIRST = r"""
import time
import torch
from torch.utils import collect_env
t = time.perf_counter(); collect_env.get_pretty_env_info(); print(time.perf_counter() - t)
"""
# Both sides warm in one process, interleaved by rounds; prints {"ci": [[s, ...] per round], "ce":
# [s per round]}.
WARM = (
    SHOW
    + r"""
import json
from torch.utils import collect_env
# the first calls are measured in fresh processes, not here
cudainfo(); collect_env.get_pretty_env_info()
ci, ce = [], []
def one_ce():
    t = time.perf_counter(); collect_env.get_pretty_env_info(); ce.append(time.perf_counter() - t)
def block():
    ts = []
    for _ in range(__PER__):
        t = time.perf_counter(); cudainfo(); ts.append(time.perf_counter() - t)
    ci.append(ts)
for r in range(__ROUNDS__):
    if r % 2:
        block(); one_ce()
    else:
        one_ce(); block()
print(json.dumps({"ci": ci, "ce": ce}))
"""
)
CUDAINFO_PROCESS = (
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "ip = InteractiveShell.instance(); ip.run_line_magic('load_ext', 'cudamagic')\n"
    "print(ip.run_line_magic('cudainfo', '').to_text())\n"
)


def run_py(code):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t


def fmt(xs, unit=1000.0):
    return f"{statistics.median(xs) * unit:9.1f} ms  ({min(xs) * unit:.1f}..{max(xs) * unit:.1f})"


def pct(xs, q):
    """The q-th percentile (0..100) of xs, nearest rank."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def fmt_p(xs, unit=1000.0):
    return (
        f"{statistics.median(xs) * unit:9.2f} ms  (p10..p90 "
        f"{pct(xs, 10) * unit:.2f}..{pct(xs, 90) * unit:.2f}, "
        f"{len(xs)} calls)"
    )


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def byte_compile() -> str:
    """Byte-compile the cudamagic package the child processes import.

    Byte-compile the cudamagic package the child processes import (the one under the current
    directory first); returns its folder.
    """
    where = subprocess.run(
        [sys.executable, "-c", "import os, cudamagic; print(os.path.dirname(cudamagic.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    compileall.compile_dir(where, quiet=1)
    return where


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per side and figure")
    ap.add_argument(
        "--rounds", type=int, default=8, help="warm rounds per warm process (one collect_env each)"
    )
    ap.add_argument("--per-round", type=int, default=15, help="warm %%cudainfo calls per round")
    ap.add_argument(
        "--quick", action="store_true", help="3 runs; 2 warm processes of 5 rounds of 10 calls"
    )
    a = ap.parse_args()
    runs, warm_procs, rounds, per = (
        (3, 2, 5, 10) if a.quick else (a.runs, max(1, a.runs // 2), a.rounds, a.per_round)
    )
    compiled = byte_compile()
    print(f"cudainfo benchmark, start: {load()}", flush=True)
    ci_first, ce_first, ci_proc, ce_proc, load_ext, torch_imp = ([] for _ in range(6))
    for _ in range(runs):  # interleaved so both sides see the same machine load
        ci_first.append(float(run_py(CUDAINFO_FIRST)))
        ce_first.append(float(run_py(COLLECT_ENV_FIRST)))
        ci_proc.append(wall([sys.executable, "-c", CUDAINFO_PROCESS]))
        ce_proc.append(wall([sys.executable, "-m", "torch.utils.collect_env"]))
        load_ext.append(float(run_py(LOAD_EXT)))
        torch_imp.append(float(run_py(IMPORT_TORCH)))
    ci_warm, ce_warm, round_ratios = [], [], []
    for _ in range(warm_procs):
        got = json.loads(
            run_py(WARM.replace("__ROUNDS__", str(rounds)).replace("__PER__", str(per)))
        )
        for block, ce in zip(got["ci"], got["ce"], strict=True):
            ci_warm.extend(block)
            ce_warm.append(ce)
            round_ratios.append(ce / statistics.median(block))
    med = statistics.median
    pair_ratios = [e / c for c, e in zip(ci_first, ce_first, strict=True)]
    print(
        f"  medians over {runs} fresh processes per side (min..max); torch imported on both sides"
    )
    print(
        f"  (byte-compiled {compiled} first, as pip install leaves it; torch's modules are "
        "byte-compiled too)"
    )
    print(f"  first call  %cudainfo (shown: HTML + text)   {fmt(ci_first)}")
    print(f"  first call  collect_env.get_pretty_env_info {fmt(ce_first)}")
    print(
        f"  speed-up, first call                         {med(ce_first) / med(ci_first):7.1f}x  "
        "(goal >= 20x; "
        f"per pair {min(pair_ratios):.1f}..{max(pair_ratios):.1f}x)"
    )
    print(
        f"  warm calls: {warm_procs} processes x {rounds} rounds of 1 collect_env and {per} "
        "%cudainfo, interleaved"
    )
    print(f"  warm call   %cudainfo (shown: HTML + text)  {fmt_p(ci_warm)}")
    print(f"  warm call   collect_env.get_pretty_env_info {fmt_p(ce_warm)}")
    print(
        f"  speed-up, warm call                          {med(ce_warm) / med(ci_warm):7.1f}x  "
        "(goal >= 100x; "
        f"per round median {med(round_ratios):.0f}x, p10..p90 "
        f"{pct(round_ratios, 10):.0f}..{pct(round_ratios, 90):.0f}x"
        f", {len(round_ratios)} rounds)"
    )
    print("  reference, whole processes (imports included):")
    print(f"    python -c '%load_ext cudamagic; %cudainfo'  {fmt(ci_proc)}")
    print(f"    python -m torch.utils.collect_env          {fmt(ce_proc)}")
    print(f"    ratio                                      {med(ce_proc) / med(ci_proc):7.1f}x")
    print(f"  %load_ext cudamagic                         {fmt(load_ext)}")
    print(f"  import torch                                {fmt(torch_imp)}")
    print(
        f"  ratio load_ext / import torch                {med(load_ext) / med(torch_imp):7.2%}   "
        "(goal < 5 %)"
    )
    print(f"cudainfo benchmark, end: {load()}")


if __name__ == "__main__":
    main()
