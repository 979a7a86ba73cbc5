"""Overhead per cell of ``%cudamem on`` (issue 5). Goal: under 1 ms per cell of our own overhead.

Measured side by side in one run, in a real ``InteractiveShell``:

* ``run_cell("pass")`` with ``%cudamem on`` vs. without, on an empty namespace and with 100 tensors
  in the namespace (interleaved rounds, median of per-round means, so drift hits both sides);
* the two callbacks alone (``pre_run_cell`` + ``post_run_cell``), CPU path (CUDA not initialised)
    and
  GPU path through the REAL reader (``mem.stats.TorchCudaStats``) on 2 devices whose
  ``torch.cuda.memory_stats_as_nested_dict`` returns the real key shape (tests/torch_stats.py: every
  counter of the caching allocator); only that one call is replaced (no GPU here), so the figure
  excludes the C++ read itself;
* the %gpuwatch sampler's allocator reader (``watch.sources.read_torch_allocator``: the real
  ``torch.cuda.memory_stats`` flattening of that shape), 2 devices;
* for reference, the cost of ``%%cudamem`` itself (a full tensors scan) with 100 tensors.

Run: ``python benchmarks/bench_cellmem.py [--cells 300] [--rounds 7]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def per_cell_ms(ip, cell, n):
    t0 = time.perf_counter()
    for _ in range(n):
        # store_history=False: keeps IPython's sqlite history writes out of the figures
        ip.run_cell(cell)
    return (time.perf_counter() - t0) / n * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=300, help="cells per round and configuration")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="100 cells x 3 rounds (what `run_all.py --quick` passes)",
    )
    args = ap.parse_args()
    if args.quick:
        args.cells, args.rounds = 100, 3

    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic.mem.history import MemHistory
    from cudamagic.mem.measure import CellMemMonitor

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_cell("import torch", store_history=True)
    # keep the output cache from growing into IPython's cull warning
    ip.displayhook.cache_size = 0

    def ab(label):
        off, on = [], []
        for _ in range(args.rounds):
            off.append(per_cell_ms(ip, "pass", args.cells))
            ip.run_line_magic("cudamem", "on")
            on.append(per_cell_ms(ip, "pass", args.cells))
            ip.run_line_magic("cudamem", "off")
        m_off, m_on = statistics.median(off), statistics.median(on)
        print(
            f"{label:<34} run_cell off {m_off:7.3f} ms   on {m_on:7.3f} ms   "
            f"overhead {m_on - m_off:+.3f} ms/cell   (ratio {m_on / m_off:.2f}x)"
        )
        return m_on - m_off

    print(
        f"bench_cellmem: {args.rounds} rounds x {args.cells} cells, python {sys.version.split()[0]}"
    )
    with contextlib.redirect_stdout(io.StringIO()):
        ip.run_line_magic("cudamem", "on")
        ip.run_line_magic("cudamem", "off")
    results = {}
    for key, label in (("empty", "empty namespace"), ("100", "100 tensors in the namespace")):
        if key == "100":
            ip.run_cell(
                "\n".join(f"t{i} = torch.randn(64, 64)" for i in range(100)), store_history=True
            )
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            results[key] = ab(label)
        print("\n".join(line for line in buf.getvalue().splitlines() if line.startswith(label)))

    # the callbacks alone
    hist = MemHistory()
    mon = CellMemMonitor(ip, hist, lambda: 16 << 20, out=lambda s: None)

    class Info:
        raw_cell = "pass"

    class Result:
        execution_count = 1
        error_in_exec = None
        error_before_exec = None

    def callbacks_us(n=20000):
        t0 = time.perf_counter()
        for _ in range(n):
            mon.pre_run_cell(Info)
            mon.post_run_cell(Result)
        return (time.perf_counter() - t0) / n * 1e6

    print(f"{'callbacks alone, CPU path':<34} {callbacks_us():7.1f} us/cell")

    import torch

    from cudamagic.mem.stats import TorchCudaStats
    from cudamagic.watch.sources import read_torch_allocator
    from tests.torch_stats import nested_stats

    shape = nested_stats(
        **{"allocated_bytes.all.current": 1 << 30, "reserved_bytes.all.current": 3 << 30}
    )
    saved = {
        k: getattr(torch.cuda, k)
        for k in ("is_initialized", "device_count", "memory_stats_as_nested_dict")
    }
    saved_mem = torch.cuda.memory.memory_stats_as_nested_dict
    try:
        torch.cuda.is_initialized = lambda: True
        torch.cuda.device_count = lambda: 2
        torch.cuda.memory_stats_as_nested_dict = torch.cuda.memory.memory_stats_as_nested_dict = (
            lambda device=None: shape
        )
        mon._source = TorchCudaStats()
        assert mon._source.read(0).reserved_bytes == 3 << 30  # the real reader on the real shape
        print(
            f"{'callbacks alone, 2-GPU path':<34} {callbacks_us(5000):7.1f} us/cell "
            "(real reader, real key shape; excludes the C++ stats read)"
        )
        n = 5000
        t0 = time.perf_counter()
        for _ in range(n):
            t = read_torch_allocator()
        assert t.reserved_bytes == 2 * (3 << 30)
        print(
            f"{'%gpuwatch allocator read, 2 GPUs':<34} {(time.perf_counter() - t0) / n * 1e6:7.1f} "
            "us/sample "
            "(real torch.cuda.memory_stats flattening of the real shape)"
        )
    finally:
        for k, v in saved.items():
            setattr(torch.cuda, k, v)
        torch.cuda.memory.memory_stats_as_nested_dict = saved_mem
        mon._source = None

    # %%cudamem itself, for reference
    n = 50
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        for _ in range(n):
            ip.run_cell("%%cudamem\npass", store_history=True)
    magic_ms = (time.perf_counter() - t0) / n * 1e3
    print(
        f"{'%%cudamem cell, 100 tensors':<34} {magic_ms:7.3f} ms/cell (incl. run_cell and tensors "
        "scan)"
    )
    ok = all(v < 1.0 for v in results.values())
    print(f"goal (< 1 ms/cell overhead of %cudamem on): {'met' if ok else 'NOT met'}")
    ip.run_line_magic("unload_ext", "cudamagic")


if __name__ == "__main__":
    main()
