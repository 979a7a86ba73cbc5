"""Benchmark for %gpuwatch (issue 3). Run: ``python benchmarks/bench_gpuwatch.py [--quick]``.

1. Cost of one sample through the fake NVML (tests/fake_nvml.py) for 1 and 8 GPUs: the GPU part
   (our Python code + the fake's trivial functions, host stubbed) per GPU, the host part (psutil),
   and the widget update (``WatchView.apply``, widgets without a kernel). Goal: < 1 ms per GPU.
2. CPU share of the sampler thread at a 1 s interval over 30 s (``time.thread_time`` inside the
   thread), with the widget view attached.
3. Throughput of a CPU PyTorch training loop with and without the monitor (1 s interval, widgets)
   running in the same process: alternating runs, median ratio. Goal: < 1 % slowdown.

1b. The same sample through the real ``pynvml`` binding and the stand-in NVML library of the tests
   (tests/nvml_stub, built with gcc): the binding's ctypes calls and structures as in production, the C
   side answering at once. Printed beside the bare binding calls (the same NVML functions called directly)
   so that our own overhead per GPU is their difference. Goal: < 1 ms of our own overhead per GPU.

On a GPU machine add ``--real`` to also time one sample through the real NVML.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudamagic.core import nvml
from cudamagic.watch import monitor as W  # noqa: E402
from cudamagic.watch.samples import HostSample  # noqa: E402
from cudamagic.watch.sources import HostReader, LiveSource  # noqa: E402
from cudamagic.watch.trace import sample_to_json  # noqa: E402
from cudamagic.watch.widget import WatchView  # noqa: E402
from cudamagic.core.na import NA  # noqa: E402


class StubHost:
    def read(self):
        return HostSample(10.0, 8, 1, 2, 3.0)


def no_torch():
    return NA("PyTorch is not imported in this kernel", "no_torch")


def per_call_us(fn, n):
    fn()  # warm (static facts, first queries)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def install_fake(n_gpus):
    from tests import fake_nvml as fm

    scenario = fm.scenario_with_gpus(n_gpus)
    for g in scenario["gpus"]:
        g["processes"] = [(os.getpid(), 2 * fm.GIB), (999_999_0, fm.GIB)]
    fm.install(fm.FakeNVML(scenario))


def bench_sample_cost():
    print("1. one sample through the fake NVML (best of 5 runs)")
    host = HostReader()
    host_us = per_call_us(host.read, 200)
    print(f"   host part (psutil: CPU, RAM, workers):          {host_us:8.1f} us per sample")
    for n in (1, 8):
        install_fake(n)
        src = LiveSource(host=StubHost(), torch_reader=no_torch)
        gpu_us = per_call_us(lambda: src.read(1, 0.0), 2000 // n)
        s = src.read(1, 0.0)
        view = WatchView(src.devices)
        hist = [s] * 120
        apply_us = per_call_us(lambda: view.apply(s, hist, samples_taken=1), 200 // n)
        json_us = per_call_us(lambda: sample_to_json(s), 2000 // n)
        print(f"   {n} GPU(s): GPU part {gpu_us:8.1f} us = {gpu_us / n:6.1f} us per GPU "
              f"(goal < 1000); widget update {apply_us:7.1f} us ({apply_us / n:6.1f} per GPU); "
              f"log line {json_us:6.1f} us")
        view.close()
    nvml.reset()


def _bare_binding_calls(pynvml, handles):
    """The NVML calls one LiveSource sample makes per GPU, straight through the binding (no cudamagic)."""
    for h in handles:
        pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        pynvml.nvmlDeviceGetUtilizationRates(h)
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
        pynvml.nvmlDeviceGetFanSpeed(h)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        pynvml.nvmlDeviceGetPerformanceState(h)
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)


def bench_stub_cost():
    print("1b. one sample through the real pynvml binding + the stand-in NVML library (best of 5 runs)")
    from tests import fake_nvml as fm
    from tests import nvml_stub

    try:
        nvml_stub.load()
    except nvml_stub.StubUnavailable as exc:
        print(f"   skipped: {exc}")
        return
    pynvml = nvml_stub.real_pynvml()

    for n in (1, 8):
        scenario = fm.scenario_with_gpus(n)
        for g in scenario["gpus"]:
            g["processes"] = [(os.getpid(), 2 * fm.GIB), (999_999_0 % 4_000_000, fm.GIB)]
            g["memory_reserved"] = 512 * 1024 ** 2
        stub = nvml_stub.install(scenario)
        src = LiveSource(host=StubHost(), torch_reader=no_torch)
        ours_us = per_call_us(lambda: src.read(1, 0.0), 2000 // n)
        c0 = stub.calls()
        src.read(1, 0.0)
        calls = stub.calls() - c0
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        bare_us = per_call_us(lambda: _bare_binding_calls(pynvml, handles), 2000 // n)
        print(f"   {n} GPU(s): sample {ours_us:8.1f} us = {ours_us / n:6.1f} us per GPU ({calls / n:.0f} NVML calls "
              f"per GPU); the same calls straight through the binding {bare_us / n:6.1f} us per GPU; our own "
              f"overhead {(ours_us - bare_us) / n:6.1f} us per GPU (goal < 1000)")
    nvml_stub.unload()


def bench_thread_cpu(seconds):
    print(f"2. sampler thread CPU at a 1 s interval over {seconds:g} s (fake NVML, 1 GPU, real psutil, widgets)")
    install_fake(1)
    src = LiveSource()
    watch = W.start_watch(src, interval_s=1.0)
    wall0 = time.monotonic()
    time.sleep(seconds)
    cpu = watch.sampler.thread_cpu_s
    wall = time.monotonic() - wall0
    n = watch.samples_taken
    watch.stop()
    watch.view.close()
    print(f"   {n} samples, thread CPU {cpu * 1e3:.1f} ms over {wall:.1f} s = {100 * cpu / wall:.3f} % of one core "
          f"({cpu / max(1, n - 1) * 1e3:.2f} ms per sample)")
    nvml.reset()


def bench_training(block_s, pairs, interval_s=1.0):
    import torch

    print(f"3. CPU training loop throughput, with/without the monitor ({interval_s:g} s interval, widgets); "
          f"{pairs} alternating pairs of {block_s:g} s")
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one intra-op thread: OpenMP spin-waiting on a shared, oversubscribed box is noise
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))

    def steps_per_s():
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < block_s:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            n += 1
        return n / (time.perf_counter() - t0)

    install_fake(1)
    steps_per_s()  # warm up
    ratios, with_, without, cpu_share = [], [], [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {}
        for monitored in order:
            watch = None
            if monitored:
                watch = W.start_watch(LiveSource(), interval_s=interval_s)
            got[monitored] = steps_per_s()
            if watch is not None:
                cpu_share.append(watch.sampler.thread_cpu_s / block_s)
                watch.stop()
                watch.view.close()
        with_.append(got[True])
        without.append(got[False])
        ratios.append(got[True] / got[False])
    med = statistics.median(ratios)
    print(f"   steps/s without: median {statistics.median(without):.1f}; with: median {statistics.median(with_):.1f}")
    print(f"   ratio with/without per pair: {' '.join(f'{r:.3f}' for r in ratios)}")
    print(f"   median ratio {med:.4f} -> slowdown {100 * (1 - med):+.2f} % (goal < 1 %); the sampler thread "
          f"itself used {100 * statistics.median(cpu_share):.3f} % of one core (first sample included)")
    nvml.reset()


def bench_real():
    print("4. real NVML: one sample (all GPUs)")
    err = nvml.init()
    if err is not None:
        print(f"   skipped: {err.reason}")
        return
    src = LiveSource()
    us = per_call_us(lambda: src.read(1, 0.0), 50)
    print(f"   {len(src.devices)} GPU(s): {us:.0f} us per sample ({us / max(1, len(src.devices)):.0f} us per GPU, "
          "host part included)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5 s thread measurement, 4 pairs of 1.5 s")
    ap.add_argument("--real", action="store_true", help="also sample the real NVML (GPU machine)")
    ap.add_argument("--stub-only", action="store_true",
                    help="only the per-sample costs (fake module, and real binding + stand-in library)")
    a = ap.parse_args(argv)
    print(f"bench_gpuwatch on {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    bench_sample_cost()
    bench_stub_cost()
    if a.stub_only:
        return
    bench_thread_cpu(5.0 if a.quick else 30.0)
    bench_training(1.5 if a.quick else 3.0, 4 if a.quick else 8)
    # 10x the default rate: the effect is 10x larger, so it stands out of the noise of a shared machine
    bench_training(1.5 if a.quick else 2.0, 4 if a.quick else 8, interval_s=0.1)
    if a.real:
        bench_real()


if __name__ == "__main__":
    main()
