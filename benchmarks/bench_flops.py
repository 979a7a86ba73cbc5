"""FLOP counts side by side: cudamagic against ``FlopCounterMode`` raw and ptflops.

For a Linear layer, a Conv2d, an SDPA attention block and a transformer encoder layer, in train
(forward + backward) and eval (``eval()`` + ``no_grad``), on this machine's CPU, the columns are:
the analytic count (matmul ``2*m*k*n``, convolution ``2 * batch * positions * weight elements``,
attention ``2*B*H*L*S*(E + Ev)``, backward twice the forward), cudamagic's count from a profile
(``%%torchprof``'s way: ``record_shapes=True``, no extra dispatch), cudamagic's count under
``FlopCounterMode`` with its formulas, ``FlopCounterMode``'s raw count, and ptflops' (forward
only: it counts multiply-accumulates per sample from module hooks; shown x2 x batch as FLOPs, in
eval rows). Each count is also given as a ratio to the analytic one.

Run: ``python benchmarks/bench_flops.py`` (ptflops from the ``bench`` extra: ``pip install
-e .[bench]``; without it that column says so).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    import torch
    from torch.profiler import profile
    from torch.utils.flop_counter import FlopCounterMode

    from cudamagic.prof.flops import count_flops, flops_from_profiler
    from tests.prof.test_flops import CASES, run

    try:
        from ptflops import get_model_complexity_info
    except ImportError:
        get_model_complexity_info = None
    torch.set_num_threads(1)
    head = ["model", "mode", "analytic", "cm profile", "cm counter", "FCM raw", "ptflops"]
    rows = []
    for name, (factory, inputs, forward) in CASES.items():
        for mode in ("train", "eval"):
            torch.manual_seed(0)
            model, x = factory(), inputs()
            expected = forward * (3 if mode == "train" else 1)
            with contextlib.redirect_stdout(io.StringIO()), profile(record_shapes=True) as prof:
                run(model, x.clone(), mode)
            cm_prof = sum(flops_from_profiler(prof).values())
            cm_counter, _ = count_flops(run, model, x.clone(), mode)
            raw = FlopCounterMode(display=False)
            with raw:
                run(model, x.clone(), mode)
            raw_n = raw.get_total_flops()
            if get_model_complexity_info is None:
                pt = "not installed"
            elif mode == "train":
                pt = "forward only"
            else:
                model.eval()
                with contextlib.redirect_stdout(io.StringIO()), torch.no_grad():
                    macs, _ = get_model_complexity_info(
                        model,
                        tuple(x.shape),
                        input_constructor=lambda shape: torch.randn(*shape),
                        as_strings=False,
                        print_per_layer_stat=False,
                    )
                pt = _cell(2 * macs * x.shape[0], expected)  # ptflops reports per sample
            rows.append(
                [
                    name,
                    mode,
                    f"{expected / 1e6:,.1f} M",
                    _cell(cm_prof, expected),
                    _cell(cm_counter, expected),
                    _cell(raw_n, expected),
                    pt,
                ]
            )
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    print(f"torch {torch.__version__}; FCM = torch.utils.flop_counter.FlopCounterMode")
    return 0


def _cell(n: float, expected: float) -> str:
    return f"{n / 1e6:,.1f} M ({n / expected:.3f}x)"


if __name__ == "__main__":
    sys.exit(main())
