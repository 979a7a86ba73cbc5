"""GPU check of %%torchprof (issue 17).

Run on a machine with an NVIDIA GPU and a CUDA build of PyTorch.

    python scripts/gpu_check_torchprof.py

In a fresh process (so that the session's peak is the profiled cell's), profiles a short training
loop on cuda:0 with `%%torchprof --memory --steps 3 --trace ...` in a real InteractiveShell and
checks:
  1. the kernel table is present (kernels recorded, each with a launching operator for most of
      them);
  2. the GPU breakdown of the profiled span sums to 100 +- 0.5 %;
  3. the CUDA memory snapshot dumps in under 10 s and PyTorch's memory viewer was written;
  4. the peak from the snapshot equals torch.cuda.max_memory_allocated() within 1 %;
  5. the trace loads with json.load and nothing stays enabled (profiler, optimizer hooks, memory
      history).
  6. the verdict: the seeded slow cells of tests/prof/seeded.py on cuda:0, each named
      first by the verdict; a healthy large-matmul loop gets no finding; `.item()` on every step
      shows sync stalls; the MFU of a bf16 8192^3 matmul is printed and must be 60-90 % (H200).
Prints one line per check and exits 1 if any fails. Not run by the test suite (no GPU there).

Needs torch (a CUDA build) and this checkout; nothing else. With IPython installed the checks go
through the magic in a real InteractiveShell; without it (a bare GPU machine with only torch and
nvidia-ml-py) they run %%torchprof's engine, ``cudamagic.prof.run.run_profiled``, on a plain
stand-in shell (:class:`PlainShell`) and say so on the first line. The summary, the memory snapshot
and the trace are the same code in both.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import importlib.util
import json
import linecache
import os
import shlex
import sys
import tempfile
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SETUP = """
import torch
from torch import nn
device = torch.device('cuda')
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(512, 1024, device=device)
"""
CELL = """
for i in range(8):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
"""


class _PlainCompiler:
    """The three calls of IPython's ``CachingCompiler`` that ``cudamagic.core.cell`` makes."""

    def cache(self, text, number, raw_code=None):
        name = f"<torchprof-cell-{number}>"
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        return name

    def ast_parse(self, source, filename="<unknown>"):
        return ast.parse(source, filename)

    def __call__(self, tree, filename, mode):
        return compile(tree, filename, mode)


class PlainShell:
    """The parts of an ``InteractiveShell`` that ``run_profiled`` uses, without IPython."""

    execution_count = 1
    displayhook = None

    def __init__(self, ns: dict):
        self.user_ns = ns
        self.compile = _PlainCompiler()

    def transform_cell(self, cell):
        return cell

    def transform_ast(self, tree):
        return tree


class MagicRunner:
    """The real path: ``%%torchprof`` in an ``InteractiveShell``."""

    name = "%%torchprof in an IPython InteractiveShell"

    def __init__(self):
        from IPython.core.interactiveshell import InteractiveShell

        self.ip = InteractiveShell.instance()
        self.ip.run_line_magic("load_ext", "cudamagic")

    def setup(self, src):
        res = self.ip.run_cell(src)
        if not res.success:
            raise res.error_in_exec

    def torchprof(self, line, cell):
        return self.ip.run_cell_magic("torchprof", line, cell)

    def close(self):
        self.ip.run_line_magic("unload_ext", "cudamagic")


class EngineRunner:
    """Without IPython: ``run_profiled`` (what the magic calls) on a :class:`PlainShell`."""

    name = (
        "IPython is not installed: %%torchprof's engine (cudamagic.prof.run.run_profiled) "
        "on a plain shell"
    )

    def __init__(self):
        self.ns = {"__name__": "__main__"}

    def setup(self, src):
        exec(compile(src, "<setup>", "exec"), self.ns)

    def torchprof(self, line, cell):
        from cudamagic.prof.run import run_profiled

        ap = argparse.ArgumentParser(prog="%%torchprof")
        ap.add_argument("--memory", action="store_true")
        ap.add_argument("--steps", type=int, default=None)
        ap.add_argument("--trace", default=None)
        ap.add_argument("-o", "--out", default=None)
        a = ap.parse_args(shlex.split(line))
        opts = SimpleNamespace(
            group="op",
            stack_depth=3,
            top=15,
            steps=a.steps,
            memory=a.memory,
            trace=a.trace,
            max_trace_mb=100.0,
            out=a.out,
            with_stack=False,
        )
        run = run_profiled(PlainShell(self.ns), cell, opts, header=f"%%torchprof {line}".rstrip())
        if run.skipped:
            print(f"[torchprof] {run.skipped}")
        if run.exception is not None:
            raise run.exception
        if a.out:
            self.ns[a.out] = run.result
        return run.result

    def close(self):
        pass


def has_ipython() -> bool:
    try:
        return importlib.util.find_spec("IPython") is not None
    except (ImportError, ValueError):  # ValueError: blocked with sys.modules["IPython"] = None
        return False


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check_torchprof: no CUDA device available; nothing checked")
        return 1
    runner = MagicRunner() if has_ipython() else EngineRunner()
    print(f"gpu_check_torchprof: {runner.name}")
    runner.setup(SETUP)
    out = tempfile.mkdtemp(prefix="torchprof-gpu-")
    trace = os.path.join(out, "run.json.gz")
    res = runner.torchprof(f"--memory --steps 3 --trace {trace} -o prof", CELL)
    failures = []

    def check(ok, text):
        print(("PASS " if ok else "FAIL ") + text)
        if not ok:
            failures.append(text)

    print(repr(res))
    rows = res.kernel_rows()
    launched = sum(r.calls for r in rows if r.launcher)
    check(
        bool(rows) and "CUDA" in res.activities,
        f"kernel table: {len(rows)} kernels, {sum(r.calls for r in rows)} launches ({launched} "
        "with their operator)",
    )
    ok = isinstance(res.gpu, list) and bool(res.gpu)
    total = sum(res.gpu[0].pct().values()) if ok else float("nan")
    check(
        bool(ok) and abs(total - 100.0) <= 0.5, f"GPU breakdown sums to {total:.3f} % (100 +- 0.5)"
    )
    snap_s = res.memory_snapshot_s
    check(
        snap_s is not None
        and snap_s < 10.0
        and bool(res.memory_html_path)
        and os.path.exists(res.memory_html_path or ""),
        f"memory snapshot dumped in {snap_s} s (< 10 s); viewer {res.memory_html_path}",
    )
    peak = res.peak_memory_bytes.get("cuda:0") if isinstance(res.peak_memory_bytes, dict) else None
    ref = torch.cuda.max_memory_allocated(0)
    check(
        peak is not None and abs(peak - ref) <= 0.01 * ref,
        f"snapshot peak {peak} B vs torch.cuda.max_memory_allocated() {ref} B (within 1 %)",
    )
    with gzip.open(trace, "rt") as f:
        n = len(json.load(f)["traceEvents"])
    from torch.optim import optimizer

    recording = (
        torch._C._cuda_isHistoryEnabled() if hasattr(torch._C, "_cuda_isHistoryEnabled") else False
    )
    check(
        n > 0
        and not torch._C._autograd._profiler_enabled()
        and not optimizer._global_optimizer_post_hooks
        and not recording,
        f"trace loads ({n} events); profiler, optimizer hooks and memory history all off",
    )
    # a memory history the user records already: --memory leaves it on, with the user's settings
    torch.cuda.reset_peak_memory_stats(0)
    torch.cuda.memory._record_memory_history(
        enabled="all", context="alloc", stacks="python", max_entries=200_000
    )
    try:
        res2 = runner.torchprof("--memory", CELL)
        still_on = torch._C._cuda_isHistoryEnabled()
        peak2 = (
            res2.peak_memory_bytes.get("cuda:0")
            if isinstance(res2.peak_memory_bytes, dict)
            else None
        )
        ref2 = torch.cuda.max_memory_allocated(0)
        check(
            still_on and any("already recording" in n for n in res2.notices),
            f"a memory history recorded before the cell stays on after --memory (on: {still_on})",
        )
        check(
            peak2 is not None and abs(peak2 - ref2) <= 0.01 * ref2,
            f"with the user's history, the cell's snapshot peak {peak2} B vs "
            f"max_memory_allocated() {ref2} B",
        )
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    verdict_checks(runner, check, "cuda")
    runner.close()
    print(f"gpu_check_torchprof: {len(failures)} failure(s); files in {out}")
    return 1 if failures else 0


#: seeded cause -> the finding the verdict must name first on a GPU (tests/prof/seeded.py).
GPU_FIRST = {
    "data": "data",
    "python": "python",
    "tiny_ops": "launch",  # tiny kernels: the GPU idles between launches
    "optimizer": "optimizer",
    "copies": "copies",
}
SYNC_SETUP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)]).to(DEVICE)
x = torch.randn(64, 256, device=DEVICE)
total = 0.0
"""
SYNC_CELL = """
for step in range(200):
    loss = model(x).square().mean()
    total += loss.item()  # a sync on every step
"""
HEALTHY_SETUP = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4096, 8192), nn.ReLU(), nn.Linear(8192, 4096))
model = model.to(DEVICE, dtype=DTYPE)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 4096, device=DEVICE, dtype=DTYPE)
"""
HEALTHY_CELL = """
for step in range(4):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
"""
MATMUL_SETUP = """
import torch
a = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
"""
MATMUL_CELL = """
for _ in range(50):
    c = a @ b
torch.cuda.synchronize()
"""
#: MFU of MATMUL_CELL on an H200, in percent (cuBLAS bf16 at 8192^3).
MFU_BOUNDS = (60.0, 90.0)


def verdict_checks(runner, check, device: str) -> None:
    """The seeded slow cells and a sync-per-step loop with the verdict; MFU of a bf16 matmul.

    On ``cuda`` each seeded cause must be named first (:data:`GPU_FIRST`), the healthy loop
    must get no finding, the sync loop a sync stall, and the matmul's MFU must be within
    :data:`MFU_BOUNDS`. On ``cpu`` (a dry run of this script's logic) the seeded causes keep
    their own names and the GPU-only parts are skipped.
    """
    from tests.prof.seeded import CAUSES, sources

    def verdict_of(setup, cell):
        runner.setup(f"DEVICE = {device!r}\n" + setup)
        runner.setup(cell)  # warm-up: CUDA context, cuBLAS handles, first-call costs
        res = runner.torchprof("", cell)
        return res.verdict

    for cause in CAUSES:
        setup, cell = sources(cause, device=device)
        v = verdict_of(setup.split("\n", 1)[1], cell)
        want = GPU_FIRST[cause] if device == "cuda" else cause
        named = v.first.cause if v.first else "nothing"
        print(v.text())
        check(named == want, f"seeded {cause} on {device}: verdict names {named} first ({want})")
    setup, cell = sources("healthy", device=device)
    if device == "cuda":
        setup, cell = HEALTHY_SETUP, HEALTHY_CELL
    else:
        setup = setup.split("\n", 1)[1]
    v = verdict_of("import torch\nDTYPE = torch.bfloat16\n" + setup, cell)
    print(v.text())
    check(not v.findings, f"healthy loop on {device}: no finding ({[f.cause for f in v.findings]})")
    if device != "cuda":
        return
    import torch

    if torch.cuda.get_device_capability(0) >= (8, 0):
        v = verdict_of("import torch\nDTYPE = torch.float32\n" + setup, cell)
        print(v.text())
        named = v.first.cause if v.first else "nothing"
        check(
            named == "tf32" and torch.get_float32_matmul_precision() == "highest",
            f"the same loop in FP32 on compute capability 8.0+: verdict names {named} first (tf32)",
        )
    v = verdict_of(SYNC_SETUP, SYNC_CELL)
    print(v.text())
    rows = v.breakdown.pct()
    check(
        any(f.cause == "sync" for f in v.findings) and rows["sync stalls"] > 5,
        f".item() every step: sync stalls {rows['sync stalls']:.1f} % of the step, findings "
        f"{[f.cause for f in v.findings]}",
    )
    v = verdict_of(MATMUL_SETUP, MATMUL_CELL)
    print(v.text())
    mfu = v.mfu_pct
    lo, hi = MFU_BOUNDS
    check(
        isinstance(mfu, float) and lo <= mfu <= hi,
        f"bf16 8192^3 matmul: MFU {mfu} % of {v.gpu_name}'s dense peak ({lo:g}-{hi:g} % expected), "
        f"{v.achieved_tflops} TFLOP/s achieved",
    )


if __name__ == "__main__":
    sys.exit(main())
