"""GPU check for memory that keeps growing (``%cudamem on``, ``%cudamem why``, ``%gpuwatch``).

Run on a machine with an NVIDIA GPU and a CUDA build of PyTorch (never in CI; the development
machine has no GPU). torch and pynvml only: no IPython; the cells are played by calling what the
magics call.

One seeded leak, the classic one: an evaluation loop that adds each step's loss tensor to
``running_loss`` (``running_loss += loss``), so every step's autograd graph and its 64 MiB of saved
activations stay alive on the GPU.

1. The growth notice of ``%cudamem on`` (``CellGrowth.observe`` on real allocator reports) comes
   within 3 steps, measured on ``allocated`` (not RSS).
2. PyTorch's allocation history was turned on with ``stacks="python"`` (never ``"all"``), and only
   after CUDA was initialised by the script itself.
3. ``%cudamem why`` (``why.explain``) names ``running_loss`` first, counts its ``AddBackward0``
   nodes, says ``loss.item()``, and the bytes it holds match what the allocator gained.
4. The memory snapshot places the growing allocations in this file (the line of the forward pass).
5. ``%gpuwatch``'s live source (real NVML, real allocator) says "allocated grows" in its hint.
6. The search costs under 2 s and keeps nothing alive: ``del running_loss`` returns the memory.
7. ``%cudamem off`` turns the allocation history off again.

Prints one line per check (``PASS``/``FAIL``/``SKIP``); exit status 1 on any FAIL.
Usage: .venv/bin/python scripts/gpu_check_cudamem.py
"""

from __future__ import annotations

import gc
import os
import sys
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MiB = 1 << 20
results = []


def check(name, ok, detail=""):
    results.append((name, ok))
    print(
        f"{'PASS' if ok is True else 'SKIP' if ok is None else 'FAIL'}  {name}  {detail}",
        flush=True,
    )


def main():
    import torch

    from cudamagic.mem import why
    from cudamagic.mem.result import build_report
    from cudamagic.mem.stats import take_snapshot
    from cudamagic.watch.sources import LiveSource

    if not torch.cuda.is_available():
        check("a CUDA device", None, "torch.cuda.is_available() is False: nothing to check")
        return
    calls = []
    real_record = torch.cuda.memory._record_memory_history

    def record(*args, **kwargs):
        calls.append((args, kwargs, torch.cuda.is_initialized()))
        return real_record(*args, **kwargs)

    torch.cuda.memory._record_memory_history = record
    shell = SimpleNamespace(user_ns={}, user_ns_hidden={})
    ns = shell.user_ns
    watch = why.CellGrowth(shell)
    source = LiveSource()
    hints = []

    def cell(number, code):
        """Run ``code`` as one notebook cell under ``%cudamem on``: the notice or None."""
        before = take_snapshot()
        code()
        torch.cuda.synchronize()
        after = take_snapshot()
        report = build_report(before, after, cell=number, source="", error=None, kind="auto")
        hints.append(source.read(number, time.time()).hint)
        return watch.observe(report)

    def setup():
        ns["model"] = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1)
        ).cuda()
        ns["X"] = torch.randn(4096, 1024, device="cuda")
        ns["Y"] = torch.randn(4096, 1, device="cuda")
        ns["running_loss"] = 0.0

    def step():
        out = ns["model"](ns["X"])  # the forward pass: its activations are what leaks
        loss = torch.nn.functional.mse_loss(out, ns["Y"])
        ns["running_loss"] += loss  # the seeded leak

    cell(1, setup)
    start = torch.cuda.memory_allocated()
    notice_at = None
    for n in range(1, 6):
        line = cell(n + 1, step)
        if line and notice_at is None:
            notice_at = n
            first_line = line
    grew = torch.cuda.memory_allocated() - start
    check(
        "growth notice within 3 steps",
        notice_at is not None and notice_at <= 3,
        f"step {notice_at}: {first_line if notice_at else 'no notice'}",
    )
    check(
        "the notice is on allocated memory",
        notice_at is not None and first_line.startswith("[cudamem] allocated grows"),
    )
    stacks = [c[1].get("stacks") for c in calls if c[1].get("enabled", "all") is not None]
    check(
        "allocation history with Python stacks only, after CUDA was initialised",
        stacks == ["python"] and all(c[2] for c in calls),
        f"calls: {calls}",
    )
    t = time.perf_counter()
    report = why.explain(shell, watch)
    elapsed = time.perf_counter() - t
    print(repr(report))
    top = report.holders[0] if report.holders else None
    check(
        "%cudamem why names running_loss with its AddBackward0 chain and loss.item()",
        top is not None
        and top.name == "running_loss"
        and top.node_types[0][0] == "AddBackward0"
        and "loss.item()" in top.fix,
        f"top: {top}",
    )
    check(
        "the bytes running_loss holds match the allocator's growth",
        top is not None and abs(top.bytes - grew) <= 0.1 * grew + 8 * MiB,
        f"holds {top.bytes if top else 0} B, allocator grew {grew} B",
    )
    here = os.path.basename(__file__)
    check(
        "the snapshot places the growing allocations in this file",
        bool(report.sites) and here in report.sites[0][0],
        f"sites: {report.sites}",
    )
    check(
        "%gpuwatch's live source tells the growth",
        any(h.startswith("allocated grows") or "allocated grows" in h for h in hints),
        f"hints: {hints}",
    )
    check("the search costs under 2 s", elapsed < 2.0, f"{elapsed:.3f} s")
    before_del = torch.cuda.memory_allocated()
    ns["running_loss"] = None
    gc.collect()
    freed = before_del - torch.cuda.memory_allocated()
    check(
        "nothing kept alive: dropping running_loss returns its memory",
        freed >= 0.9 * grew,
        f"freed {freed} B of {grew} B",
    )
    watch.stop()
    check(
        "%cudamem off turns the allocation history off",
        bool(calls) and calls[-1][1].get("enabled", "all") is None and not watch.recording,
    )
    torch.cuda.memory._record_memory_history = real_record


if __name__ == "__main__":
    main()
    sys.exit(1 if any(ok is False for _, ok in results) else 0)
