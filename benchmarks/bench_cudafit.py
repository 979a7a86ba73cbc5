"""How far each memory estimate is from the real peak of one training step (issue: %%cudafit).

For the six reference workloads of tests/fit/workloads.py (MLP + SGD momentum, ResNet-like CNN +
Adam, UNet + AdamW, LSTM + Adam, 6-layer transformer encoder + AdamW, GPT-2-like decoder + AdamW;
fp32; one forward + backward + optimizer step, the first one), side by side:

* real: the peak of live tensor bytes of the step run for real on this CPU, counted by an
  independent real-mode ``TorchDispatchMode`` (tests/fit/common.py);
* %%cudafit: ``tensor_peak_bytes`` of the fake-tensor estimate (the CPU-comparable figure; the GPU
  figures add the caching allocator's rounding, workspaces and context on top);
* torchinfo 1.8: ``summary(model, input_data=[x])``'s "Estimated Total Size" (input + forward/
  backward pass + parameters);
* accelerate's ``estimate-memory`` rule (``accelerate.commands.estimate``): the peak of
  ``estimate_training_usage(parameter bytes, "float32")`` (4x the parameters for Adam; no batch).

Each tool gets a fresh copy of the workload (torchinfo runs a real forward). torchinfo and
accelerate are the ``bench`` extra (``pip install -e ".[bench]"``); a missing one shows N/A.

Run: ``python benchmarks/bench_cudafit.py [--quick]`` (``--quick``: three workloads).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def real_peak(make) -> int:
    """The step's real peak of live tensor bytes on this CPU."""
    from tests.fit.common import live_peak_bytes, step_tensors
    from tests.fit.workloads import STEP

    ns = make()
    return live_peak_bytes(ns, STEP, step_tensors(ns))


def cudafit_peak(make) -> tuple:
    """``(tensor_peak_bytes, seconds)`` of the %%cudafit estimate."""
    from cudamagic.core.na import NA
    from cudamagic.fit.estimate import Request, measure
    from tests.fit.common import compiled
    from tests.fit.workloads import STEP

    ns = make()
    code, tree = compiled(STEP)
    t0 = time.perf_counter()
    est = measure(Request(code, tree, ns, NA("benchmark", "benchmark")))
    return est.tensor_peak_bytes, time.perf_counter() - t0


def torchinfo_peak(make):
    """The "Estimated Total Size" of torchinfo in bytes, or None when torchinfo is missing."""
    try:
        import torchinfo
    except ImportError:
        return None
    ns = make()
    s = torchinfo.summary(ns["model"], input_data=[ns["x"]], verbose=0, device="cpu")
    return int(s.total_input + s.total_output_bytes + s.total_param_bytes)


def accelerate_peak(make):
    """The training estimate of accelerate (peak of its stages) in bytes, or None when missing."""
    try:
        from accelerate.commands.estimate import calculate_maximum_sizes, estimate_training_usage
    except ImportError:
        return None
    total, _ = calculate_maximum_sizes(make()["model"])
    return int(max(estimate_training_usage(total, "float32").values()))


def main(argv=None) -> int:
    """Print the table; exit status 0."""
    import torch

    from tests.fit.workloads import WORKLOADS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three workloads only")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    names = list(WORKLOADS)[:3] if args.quick else list(WORKLOADS)

    def err(value, real):
        return "N/A" if value is None else f"{100 * (value - real) / real:+.1f} %"

    header = (
        f"{'workload':10} {'real peak':>12} {'%%cudafit':>10} {'torchinfo':>10} "
        f"{'accelerate':>11} {'fit s':>6}"
    )
    print(header)
    print("-" * len(header))
    for name in names:
        make = WORKLOADS[name]
        real = real_peak(make)
        fit, took = cudafit_peak(make)
        row = (
            f"{name:10} {real:>12,} {err(fit, real):>10} {err(torchinfo_peak(make), real):>10} "
            f"{err(accelerate_peak(make), real):>11} {took:>6.2f}"
        )
        print(row, flush=True)
    print("error = (estimate - real) / real; real = live tensor bytes of one step on this CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
