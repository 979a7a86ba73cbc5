"""GPU check of %%torchprof (issue 17): run on a machine with an NVIDIA GPU and a CUDA build of PyTorch.

    python scripts/gpu_check_torchprof.py

In a fresh process (so that the session's peak is the profiled cell's), profiles a short training loop on cuda:0
with `%%torchprof --memory --steps 3 --trace ...` in a real InteractiveShell and checks:
  1. the kernel table is present (kernels recorded, each with a launching operator for most of them);
  2. the GPU breakdown of the profiled span sums to 100 +- 0.5 %;
  3. the CUDA memory snapshot dumps in under 10 s and PyTorch's memory viewer was written;
  4. the peak from the snapshot equals torch.cuda.max_memory_allocated() within 1 %;
  5. the trace loads with json.load and nothing stays enabled (profiler, optimizer hooks, memory history).
Prints one line per check and exits 1 if any fails. Not run by the test suite (no GPU there).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import tempfile

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


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu_check_torchprof: no CUDA device available; nothing checked")
        return 1
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    assert ip.run_cell(SETUP).success
    out = tempfile.mkdtemp(prefix="torchprof-gpu-")
    trace = os.path.join(out, "run.json.gz")
    res = ip.run_cell_magic("torchprof", f"--memory --steps 3 --trace {trace} -o prof", CELL)
    failures = []

    def check(ok, text):
        print(("PASS " if ok else "FAIL ") + text)
        if not ok:
            failures.append(text)

    print(repr(res))
    rows = res.kernel_rows()
    launched = sum(r.calls for r in rows if r.launcher)
    check(bool(rows) and "CUDA" in res.activities,
          f"kernel table: {len(rows)} kernels, {sum(r.calls for r in rows)} launches ({launched} with their operator)")
    ok = isinstance(res.gpu, list) and bool(res.gpu)
    total = sum(res.gpu[0].pct().values()) if ok else float("nan")
    check(bool(ok) and abs(total - 100.0) <= 0.5, f"GPU breakdown sums to {total:.3f} % (100 +- 0.5)")
    snap_s = res.memory_snapshot_s
    check(snap_s is not None and snap_s < 10.0 and bool(res.memory_html_path)
          and os.path.exists(res.memory_html_path or ""),
          f"memory snapshot dumped in {snap_s} s (< 10 s); viewer {res.memory_html_path}")
    peak = res.peak_memory_bytes.get("cuda:0") if isinstance(res.peak_memory_bytes, dict) else None
    ref = torch.cuda.max_memory_allocated(0)
    check(peak is not None and abs(peak - ref) <= 0.01 * ref,
          f"snapshot peak {peak} B vs torch.cuda.max_memory_allocated() {ref} B (within 1 %)")
    with gzip.open(trace, "rt") as f:
        n = len(json.load(f)["traceEvents"])
    from torch.optim import optimizer

    recording = torch._C._cuda_isHistoryEnabled() if hasattr(torch._C, "_cuda_isHistoryEnabled") else False
    check(n > 0 and not torch._C._autograd._profiler_enabled() and not optimizer._global_optimizer_post_hooks
          and not recording, f"trace loads ({n} events); profiler, optimizer hooks and memory history all off")
    # a memory history the user records already: --memory leaves it on, with the user's settings
    torch.cuda.reset_peak_memory_stats(0)
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=200_000)
    try:
        res2 = ip.run_cell_magic("torchprof", "--memory", CELL)
        still_on = torch._C._cuda_isHistoryEnabled()
        peak2 = res2.peak_memory_bytes.get("cuda:0") if isinstance(res2.peak_memory_bytes, dict) else None
        ref2 = torch.cuda.max_memory_allocated(0)
        check(still_on and any("already recording" in n for n in res2.notices),
              f"a memory history recorded before the cell stays on after --memory (on: {still_on})")
        check(peak2 is not None and abs(peak2 - ref2) <= 0.01 * ref2,
              f"with the user's history, the cell's snapshot peak {peak2} B vs max_memory_allocated() {ref2} B")
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    ip.run_line_magic("unload_ext", "cudamagic")
    print(f"gpu_check_torchprof: {len(failures)} failure(s); files in {out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
