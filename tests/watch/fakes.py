"""Helpers shared by the %gpuwatch tests.

Helpers shared by the %gpuwatch tests: a deterministic host reader, a fake clock, a live source on
the fake NVML (``tests/fake_nvml.py`` through the ``fake_nvml`` fixture) and the demo trace's path.
"""

import os
import re
import threading

from cudamagic.core.na import NA
from cudamagic.watch.samples import HostSample
from cudamagic.watch.sources import LiveSource
from tests.fake_nvml import GIB

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "examples", "trace_demo.jsonl")


class FakeHost:
    """A host reader without psutil (deterministic)."""

    def __init__(self, cpu=12.5, kcpu=3.0, workers=()):
        self.cpu, self.kcpu, self.workers = cpu, kcpu, workers

    def read(self):
        return HostSample(
            cpu_util_pct=self.cpu,
            cpu_count=8,
            memory_used_bytes=4 * GIB,
            memory_total_bytes=32 * GIB,
            kernel_cpu_pct=self.kcpu,
            workers=self.workers,
        )


def no_torch():
    return NA("PyTorch is not imported in this kernel", "no_torch")


def live(**kw):
    kw.setdefault("host", FakeHost())
    kw.setdefault("torch_reader", no_torch)
    kw.setdefault("proc_info", lambda pid: (f"proc{pid}", f"python train{pid}.py", True))
    return LiveSource(**kw)


class FakeClock:
    def __init__(self):
        self.t = 0.0
        self.waits = []

    def __call__(self):
        return self.t

    def wait(self, seconds):
        self.waits.append(seconds)
        self.t += seconds
        return False


def wait_until(condition, timeout_s: float = 10.0):
    """Wait until ``condition()`` is truthy and return it; None after ``timeout_s`` seconds.

    The condition is checked every 10 ms on an Event that is never set, so a waiting test costs
    no CPU and ends as soon as the condition holds.
    """
    tick = threading.Event()
    for _ in range(int(timeout_s * 100)):
        got = condition()
        if got:
            return got
        tick.wait(0.01)
    return condition() or None


def as_read(html: str) -> str:
    """``html`` with its decimal character references as the characters a browser reads.

    (``&#183;`` -> ``·``: the live widget sends its HTML as ASCII; ``esc`` writes ``&#x27;``.)
    """
    return re.sub(r"&#([0-9]+);", lambda m: chr(int(m[1])), html)


def gpu_row(view, index: int) -> str:
    """The HTML of GPU ``index``'s row (card and chart) in a WatchView's ``gpus`` widget.

    Its character references read as the browser reads them (:func:`as_read`).
    """
    rows = view.gpus.value.split('<div class="cm-gpu-row">')
    return as_read(rows[1 + view.indices.index(index)])
