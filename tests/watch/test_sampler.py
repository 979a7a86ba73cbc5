"""Tier 1 for the %gpuwatch sampler: a fake clock, bounded memory, missed ticks, stopping, the end of a
replay. No IPython here."""

import threading
import time
import tracemalloc

import pytest

from cudamagic.watch.sampler import Sampler
from cudamagic.watch.samples import GpuSample, Sample
from cudamagic.watch.sources import EndOfTrace, ReplaySource
from tests.watch.fakes import DEMO, FakeClock, FakeHost, live, no_torch


# ---- the sampler with a fake clock ------------------------------------------------------------

class CountingSource:
    label = "live"
    devices = [0]

    def __init__(self):
        self.n = 0
        self.base = None

    def read(self, seq, ts):
        self.n += 1
        g = GpuSample(0, "fake", "GPU-x", seq % 100, 0, seq, 100, 30, 1, 2, 3, 4, 5, 0, 0)
        return Sample(seq, ts, None, (g,), FakeHost().read(), no_torch())


def test_sampler_bounded_memory_after_100k_samples():
    clock = FakeClock()
    clock.waits = set()  # a set: the clock itself must not grow with the run
    clock.wait = lambda seconds: (clock.waits.add(seconds), setattr(clock, "t", clock.t + seconds))[0] or False
    src = CountingSource()
    sampler = Sampler(src, interval_s=1.0, history_len=500, count=10_000, clock=clock, wall=clock)
    tracemalloc.start()
    sampler.run_loop(wait=clock.wait)
    after_10k, _ = tracemalloc.get_traced_memory()
    sampler.count = 100_000
    sampler.run_loop(wait=clock.wait)
    after_100k, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sampler.samples_taken == 100_000 and src.n == 100_000
    assert len(sampler.history) == 500 and sampler.history[0].seq == 99_501
    assert after_100k - after_10k < 64 * 1024, f"grew by {after_100k - after_10k} bytes from 10k to 100k samples"
    # deadline scheduling: every wait is the interval (no drift); the fake clock advanced one interval per sample
    assert clock.waits == {1.0} and clock.t == pytest.approx(99_998.0)


def test_sampler_skips_missed_ticks_and_records_errors():
    clock = FakeClock()

    class Flaky(CountingSource):
        def read(self, seq, ts):
            clock.t += 2.5  # slower than the interval
            if self.n == 2:
                self.n += 1
                raise RuntimeError("boom")
            return super().read(seq, ts)

    sampler = Sampler(Flaky(), interval_s=1.0, count=5, clock=clock, wall=clock)
    sampler.run_loop(wait=clock.wait)
    assert sampler.samples_taken == 5 and sampler.errors == 1 and "RuntimeError: boom" in sampler.error
    assert all(w == 0 for w in clock.waits)  # fell behind: no negative waits, no catch-up bursts


def test_sampler_thread_stops_promptly_and_callback_errors_are_recorded():
    def bad_callback(sample):
        raise ValueError("widget gone")

    sampler = Sampler(CountingSource(), interval_s=0.05, on_sample=bad_callback)
    sampler.start()
    time.sleep(0.2)
    assert sampler.running
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 1.0 and not sampler.running
    assert not any(t.name == "cudamagic-gpuwatch" for t in threading.enumerate())
    assert "widget gone" in sampler.error and sampler.samples_taken >= 2
    assert sampler._thread.daemon


def test_replay_source_ends_the_loop():
    src = ReplaySource(DEMO)
    clock = FakeClock()
    sampler = Sampler(src, interval_s=0.05, clock=clock)
    sampler.run_loop(wait=clock.wait)
    assert sampler.finished == "end of replay" and sampler.samples_taken == len(src.samples)
    with pytest.raises(EndOfTrace, match="^$"):  # raised bare by ReplaySource.read after the last sample
        src.read(0, 0.0)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e300])
def test_sampler_refuses_an_interval_event_wait_cannot_take(bad):
    # inf or 1e300 used to start a thread that died at once with OverflowError in Event.wait
    with pytest.raises(ValueError, match="interval_s"):
        Sampler(live(), interval_s=bad)
