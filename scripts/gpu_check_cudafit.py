"""GPU check of %%cudafit: run on a machine with an NVIDIA GPU and a CUDA build of PyTorch.

    python scripts/gpu_check_cudafit.py [--device 0] [--budget-gib 8]

For the six reference workloads of tests/fit/workloads.py (one fp32 training step each, model and
batch on the GPU), in this one process:
  1. predicted peak reserved (the fake-tensor estimate through the caching-allocator model, cuBLAS
     workspaces included) within +-10 % of ``torch.cuda.max_memory_reserved()`` of the real step;
  2. predicted process total (reserved + CUDA context) within +-10 % of what NVML reports for this
     process after the step (the context figure is checked only on the first workload, where the
     context is created; the measured context is printed so the table in
     cudamagic/fit/allocator.py can be corrected);
  3. ``--max-batch`` on the MLP and the GPT-like decoder under a reserved-memory budget
     (``torch.cuda.set_per_process_memory_fraction``, default 8 GiB): the predicted largest batch
     runs, and 1.25x that batch runs out of memory; then ``--verify``'s engine at that batch runs
     the step, puts the weights back and leaves reserved memory not above its value before.
Prints one table and exits 1 when a bound is missed. Under 5 minutes on an H200. Imports torch,
pynvml (nvidia-ml-py) and this checkout only: no IPython (the estimate is the magic's engine,
``cudamagic.fit.estimate``, called directly). Not run by the test suite (no GPU there).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BOUND = 0.10


def _fresh(device):
    """Free cached blocks and cuBLAS workspaces, reset the peak counters: each step starts bare."""
    import torch

    gc.collect()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)


def _on_gpu(ns, device):
    """The workload's model and batch moved to ``device`` (the optimizer keeps the same params)."""
    ns["model"].to(device)
    ns["x"], ns["y"] = ns["x"].to(device), ns["y"].to(device)
    return ns


#: NVML's ``memory.used`` of the GPU before this process created its CUDA context (set by main).
USED_BEFORE = {}


def _nvml_process_bytes(index: int):
    """GPU memory NVML attributes to this process on NVML GPU ``index``, or None.

    In a container NVML lists processes by their host PIDs, so this PID is not found: then the
    growth of the device's ``memory.used`` since before CUDA started (nothing else running).
    """
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
            return int(proc.usedGpuMemory)
    if index in USED_BEFORE:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used) - USED_BEFORE[index]
    return None


def _request(ns, target, initialized):
    from cudamagic.fit.estimate import Request
    from tests.fit.common import compiled
    from tests.fit.workloads import STEP

    code, tree = compiled(STEP)
    return Request(code, tree, ns, target, cuda_initialized=initialized)


def check_workload(name, make, device, nvml_index, target, rows) -> bool:
    """Steps 1 and 2 for one workload; appends table rows; True when within the bounds."""
    import torch

    from cudamagic.fit.estimate import measure
    from tests.fit.workloads import STEP

    first = not torch.cuda.is_initialized()
    ns = make()
    t0 = time.perf_counter()
    est = measure(_request(ns, target, initialized=not first))  # fake run: the CPU copy is enough
    fit_s = time.perf_counter() - t0
    if not first:
        _fresh(device)
    _on_gpu(ns, device)
    exec(STEP, ns)
    torch.cuda.synchronize(device)
    reserved = torch.cuda.max_memory_reserved(device)
    proc = _nvml_process_bytes(nvml_index)
    ok = True
    err = (est.peak_reserved_bytes - reserved) / reserved
    ok &= abs(err) <= BOUND
    rows.append(
        (name, "peak reserved", est.peak_reserved_bytes, reserved, err, abs(err) <= BOUND, fit_s)
    )
    if proc is not None and first:
        # the context is only new on the first workload; later ones share it
        total_err = (est.process_total_bytes - proc) / proc
        ok &= abs(total_err) <= BOUND
        rows.append(
            (
                name,
                "process total (NVML)",
                est.process_total_bytes,
                proc,
                total_err,
                abs(total_err) <= BOUND,
                0.0,
            )
        )
        rows.append(
            (
                name,
                "  measured context",
                0,
                proc - torch.cuda.memory_reserved(device),
                0.0,
                True,
                0.0,
            )
        )
    elif proc is None and first:
        rows.append((name, "process total (NVML)", est.process_total_bytes, 0, 0.0, False, 0.0))
        ok = False
    del ns
    return ok


def check_max_batch(name, make, device, budget, rows) -> bool:
    """Step 3: the predicted largest batch runs and 1.25x of it runs out of memory."""
    import torch

    from cudamagic.fit.estimate import estimate
    from cudamagic.fit.result import Target
    from tests.fit.workloads import STEP

    ns = make()
    target = Target("budget", budget, budget, torch.cuda.get_device_capability(device)[0], "budget")
    t0 = time.perf_counter()
    est = estimate(_request(ns, target, initialized=True), max_batch_names=("x", "y"))
    took = time.perf_counter() - t0
    batch = est.max_batch.batch
    outcomes = {}
    for size in (batch, int(batch * 1.25)):
        _fresh(device)
        trial = make(batch=size)
        try:
            _on_gpu(trial, device)
            exec(STEP, trial)
            torch.cuda.synchronize(device)
            outcomes[size] = "ran"
        except torch.OutOfMemoryError:
            outcomes[size] = "OOM"
        del trial
    ok = outcomes.get(batch) == "ran" and outcomes.get(int(batch * 1.25)) == "OOM"
    # --verify's engine just under that batch (its inputs are grown beside the originals): the
    # step runs, and afterwards the weights are the same and reserved memory is not above before
    from cudamagic.fit.verify import verify

    _fresh(device)
    _on_gpu(ns, device)
    req = _request(ns, target, initialized=True)
    weights = [p.detach().clone() for p in ns["model"].parameters()]
    vb = max(1, int(batch * 0.9))
    v = verify(
        req.code,
        req.tree,
        ns,
        device.index,
        {"x": vb, "y": int(ns["y"].shape[0]) * vb // int(ns["x"].shape[0])},
    )
    same = all(torch.equal(a, b) for a, b in zip(weights, ns["model"].parameters(), strict=True))
    good = not v.error and same and v.reserved_after_bytes <= v.reserved_before_bytes
    ok &= good
    rows.append(
        (
            name,
            f"--verify at {vb}: restored, reserved back",
            0,
            v.peak_reserved_bytes,
            0.0,
            good,
            0.0,
        )
    )
    rows.append((name, f"max batch {batch} ran / 1.25x OOM", batch, 0, 0.0, ok, took))
    rows.append((name, f"  outcomes {outcomes}", 0, 0, 0.0, ok, 0.0))
    return ok


def main(argv=None) -> int:
    """Run the checks, print the table, return the exit status."""
    import pynvml
    import torch

    from cudamagic.fit.result import Target
    from cudamagic.fit.target import nvml_index
    from tests.fit.workloads import WORKLOADS, gpt, mlp

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA ordinal (default 0)")
    parser.add_argument("--budget-gib", type=float, default=8.0, help="max-batch budget, GiB")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU visible to PyTorch: run this on a GPU machine")
        return 1
    device = torch.device("cuda", args.device)
    pynvml.nvmlInit()
    index = nvml_index(args.device)
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    USED_BEFORE[index] = int(mem.used)
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    name = pynvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else name
    target = Target(name, int(mem.total), int(mem.free), int(major), "NVML")
    print(f"{name} (cc {major}.{minor}), torch {torch.__version__}, CUDA {torch.version.cuda}")
    t_start = time.perf_counter()
    torch.manual_seed(0)
    rows, ok = [], True
    for wname, make in WORKLOADS.items():
        ok &= check_workload(wname, make, device, index, target, rows)
    budget = int(args.budget_gib * (1 << 30))
    torch.cuda.set_per_process_memory_fraction(
        budget / torch.cuda.get_device_properties(device).total_memory, device
    )
    for wname, make in (("mlp", mlp), ("gpt", gpt)):
        ok &= check_max_batch(wname, make, device, budget, rows)
    mib = 1 << 20
    print(
        f"{'workload':9} {'check':38} {'predicted MiB':>14} {'measured MiB':>13} {'error':>8} "
        f"{'ok':>3} {'est s':>6}"
    )
    for wname, check, pred, real, err, good, secs in rows:
        print(
            f"{wname:9} {check:38} {pred / mib:>14.1f} {real / mib:>13.1f} {100 * err:>+7.1f}% "
            f"{'yes' if good else 'NO':>3} {secs:>6.1f}"
        )
    took = time.perf_counter() - t_start
    print(
        f"{'all bounds met' if ok else 'a bound was missed'} in {took:.0f} s "
        f"(bound +-{100 * BOUND:.0f} %)"
    )
    return 0 if ok and took < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
