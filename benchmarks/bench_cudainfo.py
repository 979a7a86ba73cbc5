"""Benchmark for issues 2 and 14: ``%cudainfo`` against ``torch.utils.collect_env``, like for like.

Every figure comes from fresh interpreters in which ``torch`` is already imported on both sides, so
neither side pays for ``import torch`` and both pay for their own first-call work (subprocess calls,
imports, caches). Our side is rendered the way IPython shows it (``display_formatter.format``: the
HTML and the text form; IPython's formatters are built beforehand, as a kernel builds them for its
first output of any kind); the other side returns the text it shows.

1. first call: ``%cudainfo`` in a fresh process vs ``get_pretty_env_info()`` in a fresh process,
   interleaved (A B A B, benchmarks/sidebyside.py ``compare``), each timed inside its process:
   process CPU time plus the CPU of the child processes the call waited for (``collect_env`` runs
   ``pip list``, ``lscpu``, ``gcc --version`` ...; ``%cudainfo`` runs ``nvcc -V`` when it finds
   nvcc), wall time beside it. Guard: both sides report the same PyTorch version, Python version
   and CUDA availability (read from the text each shows). Goal: >= 20x less CPU.
2. warm call: in one process holding both sides (after each side's first call), interleaved
   calls, CPU as in 1. Goal: >= 100x less CPU.
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
figure grows with it. Usage: python benchmarks/bench_cudainfo.py [--runs N] [--reps N] [--quick]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from sidebyside import compare

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
"""
CPU_NOW = r"""
import json, re, resource, time
def cpu_now():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # the subprocesses the call waited for
    return time.process_time() + ru.ru_utime + ru.ru_stime
def facts(text):
    # what a side reported: PyTorch and Python versions, CUDA availability
    pats = {
        "torch": (r"PyTorch version: (\S+)", r"\[PyTorch\]\n  version +(\S+)"),
        "python": (r"Python version: (\d+\.\d+\.\d+)", r"\[Python\][\s\S]*?  version +(\S+)"),
        "cuda_available": (r"Is CUDA available: (\S+)", r"CUDA available +(\S+)"),
    }
    out = {}
    for key, options in pats.items():
        for pat in options:
            m = re.search(pat, text)
            if m:
                out[key] = m.group(1)
                break
    return out
def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime
def measured(fn):
    c0, k0, t0 = cpu_now(), children_cpu(), time.perf_counter()
    text = fn()
    return {"cpu": cpu_now() - c0, "wall": time.perf_counter() - t0, "work": facts(text),
            "children": children_cpu() - k0}
"""
CUDAINFO_TEXT = r"""
def cudainfo():
    r = ip.run_line_magic('cudainfo', '')
    data, _meta = ip.display_formatter.format(r)
    assert 'text/html' in data and 'text/plain' in data
    return data['text/plain']
"""
CUDAINFO_FIRST = SHOW + CPU_NOW + CUDAINFO_TEXT + "print(json.dumps(measured(cudainfo)))\n"
COLLECT_ENV_FIRST = (
    "import torch\nfrom torch.utils import collect_env\n"
    + CPU_NOW
    + "print(json.dumps(measured(collect_env.get_pretty_env_info)))\n"
)


class FreshProcess:
    """A side of the first-call row: each call in a fresh interpreter (torch imported first)."""

    def __init__(self, code):
        self.code = code
        self.children = []  # CPU s of the subprocesses of each timed call

    def _run(self):
        return json.loads(run_py(self.code))

    def work(self):
        return self._run()["work"]

    def timed(self):
        r = self._run()
        self.children.append(r["children"])
        return r["cpu"], r["wall"]


# Both sides warm in one process, interleaved by benchmarks/sidebyside.py's compare (it prints the
# row); each call's CPU counts the subprocesses it waited for.
WARM = (
    SHOW
    + CPU_NOW
    + CUDAINFO_TEXT
    + r"""
import sys
sys.path.insert(0, __HERE__)
from sidebyside import compare
from torch.utils import collect_env
class Side:
    def __init__(self, fn):
        self.fn = fn
    def work(self):
        return facts(self.fn())
    def timed(self):
        r = measured(self.fn)
        return r["cpu"], r["wall"]
compare(
    "%cudainfo vs collect_env, warm call (one process, after each side's first call)",
    Side(cudainfo),
    Side(collect_env.get_pretty_env_info),
    peer_name="collect_env",
    reps=__REPS__,
    note="goal: >= 100x less CPU; CPU includes the subprocesses each call waited for",
)
"""
)
CUDAINFO_PROCESS = (
    "from IPython.core.interactiveshell import InteractiveShell\n"
    "ip = InteractiveShell.instance(); ip.run_line_magic('load_ext', 'cudamagic')\n"
    "print(ip.run_line_magic('cudainfo', '').to_text())\n"
)


def run_py(code, tail=-1):
    """Run ``code`` in a fresh interpreter; its last line of output (all of it: ``tail=None``)."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.rstrip().splitlines()
    return "\n".join(lines) if tail is None else lines[tail]


def wall(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t


def fmt(xs, unit=1000.0):
    return f"{statistics.median(xs) * unit:9.1f} ms  ({min(xs) * unit:.1f}..{max(xs) * unit:.1f})"


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
    ap.add_argument("--reps", type=int, default=20, help="warm calls per side")
    ap.add_argument("--quick", action="store_true", help="3 fresh processes, 8 warm calls a side")
    a = ap.parse_args()
    runs, reps = (3, 8) if a.quick else (a.runs, a.reps)
    compiled = byte_compile()
    print(f"cudainfo benchmark, start: {load()}", flush=True)
    print(
        f"  (byte-compiled {compiled} first, as pip install leaves it; torch's modules are "
        "byte-compiled too; torch imported on both sides before the clock starts)"
    )
    ours, peer = FreshProcess(CUDAINFO_FIRST), FreshProcess(COLLECT_ENV_FIRST)
    compare(
        "%cudainfo vs collect_env, first call (a fresh process each; shown: HTML + text)",
        ours,
        peer,
        peer_name="collect_env",
        reps=runs,
        note="goal: >= 20x less CPU; CPU includes the subprocesses each call waited for",
    )
    med = statistics.median
    print(
        f"    of it in subprocesses (median): cudamagic {med(ours.children) * 1e3:.1f} ms "
        f"(`nvcc -V`), collect_env {med(peer.children) * 1e3:.1f} ms (`nvcc --version`, pip, "
        "lscpu, ...)"
    )
    print(run_py(WARM.replace("__HERE__", repr(HERE)).replace("__REPS__", str(reps)), tail=None))
    ci_proc, ce_proc, load_ext, torch_imp = ([] for _ in range(4))
    for _ in range(runs):  # interleaved so both sides see the same machine load
        ci_proc.append(wall([sys.executable, "-c", CUDAINFO_PROCESS]))
        ce_proc.append(wall([sys.executable, "-m", "torch.utils.collect_env"]))
        load_ext.append(float(run_py(LOAD_EXT)))
        torch_imp.append(float(run_py(IMPORT_TORCH)))
    print("  reference, whole processes (imports included), wall:")
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
