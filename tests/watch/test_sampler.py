"""Tier 1 for the %gpuwatch sampler.

Tier 1 for the %gpuwatch sampler: a fake clock, bounded memory, missed ticks, stopping, the end of a
replay. No IPython here.
"""

import re
import threading
import time
import tracemalloc

import pytest

from cudamagic.watch.magic import WatchSettings
from cudamagic.watch.options import interval_problem
from cudamagic.watch.sampler import MAX_INTERVAL_S, Sampler
from cudamagic.watch.samples import GpuSample, Sample
from cudamagic.watch.sources import EndOfTrace, ReplaySource
from cudamagic.watch.trace import TraceWriter
from tests.watch.fakes import DEMO, FakeClock, FakeHost, live, no_torch, wait_until

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


def test_sampler_bounded_memory_over_a_long_run():
    """A long run does not grow memory.

    27k samples after a 3k warm-up may not grow memory by 64 KiB: a leak of even one small object
    (>= 16 bytes) per sample would show as 400+ KiB. (100k samples under tracemalloc cost ~20 s a
    run; 30k show the same.)
    """
    clock = FakeClock()
    clock.waits = set()  # a set: the clock itself must not grow with the run
    clock.wait = lambda seconds: (
        (clock.waits.add(seconds), setattr(clock, "t", clock.t + seconds))[0] or False
    )
    src = CountingSource()
    sampler = Sampler(src, interval_s=1.0, history_len=500, count=3_000, clock=clock, wall=clock)
    tracemalloc.start()
    sampler.run_loop(wait=clock.wait)
    after_3k, _ = tracemalloc.get_traced_memory()
    sampler.count = 30_000
    sampler.run_loop(wait=clock.wait)
    after_30k, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sampler.samples_taken == 30_000 and src.n == 30_000
    assert len(sampler.history) == 500 and sampler.history[0].seq == 29_501
    assert after_30k - after_3k < 64 * 1024, (
        f"grew by {after_30k - after_3k} bytes from 3k to 30k samples"
    )
    # deadline scheduling: every wait is the interval (no drift); the fake clock advanced one
    # interval per sample
    assert clock.waits == {1.0} and clock.t == pytest.approx(29_998.0)


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
    assert (
        sampler.samples_taken == 5 and sampler.errors == 1 and "RuntimeError: boom" in sampler.error
    )
    assert all(w == 0 for w in clock.waits)  # fell behind: no negative waits, no catch-up bursts


def test_sampler_thread_stops_promptly_and_callback_errors_are_recorded():
    def bad_callback(sample):
        raise ValueError("widget gone")

    sampler = Sampler(CountingSource(), interval_s=0.05, on_sample=bad_callback)
    sampler.start()
    assert wait_until(lambda: sampler.errors >= 2)  # two samples, two failed callbacks
    assert sampler.running
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 1.0 and not sampler.running
    assert not any(t.name == "cudamagic-gpuwatch" for t in threading.enumerate())
    assert re.match(STAMP + "display update failed: ValueError: widget gone$", sampler.error)
    assert sampler.samples_taken >= 2 and sampler.errors == sampler.samples_taken
    # the name the leak checks of tests/watch/test_magic.py look for (and what py-spy /
    # threading.enumerate show)
    assert sampler._thread.daemon and sampler._thread.name == "cudamagic-gpuwatch"


def test_replay_source_ends_the_loop():
    src = ReplaySource(DEMO)
    clock = FakeClock()
    sampler = Sampler(src, interval_s=0.05, clock=clock)
    sampler.run_loop(wait=clock.wait)
    assert sampler.finished == "end of replay" and sampler.samples_taken == len(src.samples)
    with pytest.raises(
        EndOfTrace, match="^$"
    ):  # raised bare by ReplaySource.read after the last sample
        src.read(0, 0.0)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e300])
def test_sampler_refuses_an_interval_event_wait_cannot_take(bad):
    # inf or 1e300 used to start a thread that died at once with OverflowError in Event.wait
    with pytest.raises(ValueError, match=r"interval_s must be in \(0, 3600\] seconds, not "):
        Sampler(live(), interval_s=bad)


@pytest.mark.parametrize("good", [MAX_INTERVAL_S, 0.05])
def test_sampler_takes_every_interval_gpuwatch_accepts(good):
    """The bounds %gpuwatch accepts (options.interval_problem.

    Up to 3600 s, down to 0.05 s for a replay).
    """
    assert interval_problem(good, "--interval", replay=True) == ""
    assert Sampler(live(), interval_s=good).interval_s == good


def test_sampler_defaults_are_the_gpuwatch_settings_defaults():
    """A Sampler built without interval or history behaves as %gpuwatch does by default."""
    traits = WatchSettings.class_traits()
    clock = FakeClock()
    sampler = Sampler(CountingSource(), count=700, clock=clock)
    sampler.run_loop(wait=clock.wait)
    assert set(clock.waits) == {traits["watch_interval_s"].default_value}
    assert len(sampler.history) == traits["watch_history_samples"].default_value


# ---- failures are recorded, never raised; how the loop ends is said in `finished`
# ----------------------------


class RecordingWriter:
    """Stands in for a TraceWriter: records the samples written and the close calls."""

    path = "/tmp/run.jsonl"

    def __init__(self, fail=False):
        self.fail, self.written, self.closes = fail, [], 0

    def write(self, s):
        if self.fail:
            raise OSError(28, "No space left on device")
        self.written.append(s.seq)

    def close(self):
        self.closes += 1


STAMP = r"^\d\d:\d\d:\d\d "  # the wall-clock time the error was recorded (HH:MM:SS), then the text


def test_each_failure_is_counted_and_the_last_one_shown_with_its_time():
    class Failing(CountingSource):
        def read(self, seq, ts):
            if self.n in (1, 3):
                self.n += 1
                raise RuntimeError(f"boom {self.n}")
            return super().read(seq, ts)

    clock = FakeClock()
    sampler = Sampler(Failing(), interval_s=1.0, count=3, clock=clock, wall=clock)
    sampler.run_loop(wait=clock.wait)
    assert sampler.errors == 2 and sampler.samples_taken == 3
    assert re.match(STAMP + r"reading failed: RuntimeError: boom 4$", sampler.error), sampler.error
    assert sampler.finished == "3 samples taken (--count)"


def test_a_failing_trace_writer_stops_logging_and_sampling_goes_on(tmp_path):
    path = tmp_path / "run.jsonl"
    writer = TraceWriter(str(path))
    writer.close()  # the file is gone from under the writer (closed elsewhere)
    clock = FakeClock()
    sampler = Sampler(
        CountingSource(), interval_s=1.0, count=3, writer=writer, clock=clock, wall=clock
    )
    sampler.run_loop(wait=clock.wait)
    assert sampler.samples_taken == 3 and sampler.errors == 1 and sampler.writer is None
    assert re.match(
        STAMP
        + f"writing {re.escape(str(path))} failed: ValueError: I/O operation on closed file.*; "
        "logging stopped$",
        sampler.error,
    ), sampler.error
    assert (
        len(path.read_text().splitlines()) == 1
    )  # the header only: nothing half-written after the failure


def test_samples_reach_the_writer_and_callbacks_and_the_writer_is_closed_at_the_end():
    seen, finished = [], []
    writer = RecordingWriter()
    clock = FakeClock()
    sampler = Sampler(
        CountingSource(),
        interval_s=1.0,
        count=1,
        writer=writer,
        on_sample=lambda s: seen.append(s.seq),
        on_finish=lambda: finished.append(sampler.finished),
        clock=clock,
        wall=lambda: 1234.5,
    )
    sampler.run_loop(wait=clock.wait)
    assert writer.written == [1] and seen == [1] and writer.closes == 1 and sampler.error == ""
    assert finished == ["1 sample taken (--count)"] and sampler.latest.timestamp_s == 1234.5
    assert clock.waits == []  # count reached: no wait after the last sample


@pytest.mark.parametrize(
    "raised, finished",
    [
        (KeyboardInterrupt(), "interrupted"),
        (RuntimeError("bug"), "sampler crashed: RuntimeError: bug"),
    ],
)
def test_an_interrupt_or_a_bug_in_the_loop_ends_it_cleanly(raised, finished):
    """Ctrl-C in the foreground loop propagates (the user asked).

    Any other exception is recorded, not raised.
    """

    def wait(seconds):
        raise raised

    writer, ends = RecordingWriter(), []
    sampler = Sampler(
        CountingSource(), interval_s=1.0, writer=writer, on_finish=lambda: ends.append(1)
    )
    if isinstance(raised, KeyboardInterrupt):
        with pytest.raises(KeyboardInterrupt, match="^$"):
            sampler.run_loop(wait=wait)
        assert sampler.errors == 0
    else:
        sampler.run_loop(wait=wait)
        assert sampler.errors == 1 and re.match(STAMP + re.escape(finished) + "$", sampler.error)
    assert (
        sampler.finished == finished
        and sampler.samples_taken == 1
        and writer.closes == 1
        and ends == [1]
    )


def test_a_failing_finish_callback_is_recorded():
    def on_finish():
        raise ValueError("comm closed")

    clock = FakeClock()
    sampler = Sampler(CountingSource(), interval_s=1.0, count=1, on_finish=on_finish, clock=clock)
    sampler.run_loop(wait=clock.wait)
    assert re.match(STAMP + "display update failed: ValueError: comm closed$", sampler.error)
    assert sampler.finished == "1 sample taken (--count)"


# ---- scheduling
# -------------------------------------------------------------------------------------------


def test_deadline_scheduling_waits_the_rest_of_each_interval():
    """A read that takes 0.25 s of a 1 s interval: each wait is the remaining 0.75 s (no drift)."""
    clock = FakeClock()

    class Slow(CountingSource):
        def read(self, seq, ts):
            clock.t += 0.25
            return super().read(seq, ts)

    sampler = Sampler(Slow(), interval_s=1.0, count=4, clock=clock, wall=clock)
    sampler.run_loop(wait=clock.wait, first_delay=2.0)
    assert clock.waits == [2.0] + [pytest.approx(0.75)] * 3
    assert [s.timestamp_s for s in sampler.history] == [2.0, 3.0, 4.0, 5.0]


def test_stop_during_the_first_delay_takes_no_sample():
    calls = []
    sampler = Sampler(CountingSource(), interval_s=1.0, count=5)
    sampler.run_loop(wait=lambda s: calls.append(s) or True, first_delay=3.0)
    assert calls == [3.0] and sampler.samples_taken == 0 and sampler.finished == "stopped"


def test_stop_between_samples_ends_the_loop():
    clock = FakeClock()
    sampler = Sampler(CountingSource(), interval_s=0.5, count=5, clock=clock)
    sampler.run_loop(wait=lambda s: clock.wait(s) or len(clock.waits) == 2)
    assert (
        clock.waits == [0.5, 0.5] and sampler.samples_taken == 2 and sampler.finished == "stopped"
    )


def test_thread_cpu_time_accumulates_over_runs():
    class Busy(CountingSource):
        def read(self, seq, ts):
            end = time.thread_time() + 0.02
            while time.thread_time() < end:
                pass
            return super().read(seq, ts)

    while (
        time.thread_time() < 1.0
    ):  # a thread clock well above 0, so that an offset error in the sum would show
        pass
    clock = FakeClock()
    seen = []  # what a reader sees while the loop runs (updated after each sample)
    sampler = Sampler(
        Busy(),
        interval_s=1.0,
        count=2,
        clock=clock,
        on_sample=lambda s: seen.append(sampler.thread_cpu_s),
    )
    sampler.run_loop(wait=clock.wait)
    first = sampler.thread_cpu_s
    assert seen[0] == 0.0 and 0.02 <= seen[1] < 0.5 and 0.04 <= first < 0.5
    sampler.count = 4
    sampler.run_loop(wait=clock.wait)
    assert sampler.thread_cpu_s >= first + 0.04


# ---- the thread
# ---------------------------------------------------------------------------------------------


def test_thread_is_named_waits_its_first_delay_and_starts_once():
    sampler = Sampler(CountingSource(), interval_s=0.05, name="cudamagic-gpuwatch-test")
    assert not sampler.running
    sampler.start(first_delay=30.0)
    thread = sampler._thread
    try:
        sampler.start()  # a second start is a no-op
        assert (
            sampler._thread is thread and thread.name == "cudamagic-gpuwatch-test" and thread.daemon
        )
        time.sleep(0.2)
        assert sampler.running and sampler.samples_taken == 0  # still in its first delay
        assert (
            sampler.finished == "" and sampler.error == ""
        )  # documented: "" while running / no failure
    finally:
        sampler.stop()
    assert not sampler.running and not thread.is_alive() and sampler.finished == "stopped"


def test_stop_from_the_samplers_own_thread_does_not_join_itself():
    """The widget's Stop button may run in the sampler's thread (on_sample).

    Stop() must not join itself.
    """
    sampler = Sampler(CountingSource(), interval_s=0.01, on_sample=lambda s: sampler.stop())
    sampler.start()
    sampler._thread.join(5.0)
    assert not sampler._thread.is_alive() and sampler.error == "" and sampler.samples_taken == 1
    assert sampler.finished == "stopped"


def test_stop_waits_at_most_its_timeout_and_leaves_a_busy_writer_open():
    """A read stuck in NVML.

    Stop() returns after timeout_s and does not close the trace under the thread.
    """
    release = threading.Event()

    class Stuck(CountingSource):
        def read(self, seq, ts):
            release.wait(10.0)
            return super().read(seq, ts)

    writer = RecordingWriter()
    sampler = Sampler(Stuck(), interval_s=0.01, writer=writer)
    sampler.start()
    t0 = time.monotonic()
    sampler.stop(timeout_s=0.1)
    assert time.monotonic() - t0 < 2.0 and sampler._thread.is_alive()
    assert sampler.finished == "stopped" and writer.closes == 0
    release.set()
    sampler._thread.join(5.0)
    assert writer.closes == 1 and writer.written == [
        1
    ]  # the thread wrote its last sample, then closed


def test_stop_before_start_closes_the_writer_and_keeps_a_finished_reason():
    writer = RecordingWriter()
    sampler = Sampler(CountingSource(), writer=writer)
    sampler.stop()
    assert sampler.finished == "stopped" and writer.closes == 1 and not sampler.running
    clock = FakeClock()
    done = Sampler(CountingSource(), interval_s=1.0, count=2, clock=clock)
    done.run_loop(wait=clock.wait)
    done.stop()
    assert done.finished == "2 samples taken (--count)"  # stop() does not overwrite how it ended


def test_snapshot_is_the_latest_sample_and_a_copy_of_the_history():
    clock = FakeClock()
    sampler = Sampler(CountingSource(), interval_s=1.0, history_len=2, count=3, clock=clock)
    assert sampler.snapshot() == (None, [])
    sampler.run_loop(wait=clock.wait)
    latest, history = sampler.snapshot()
    assert latest.seq == 3 and [s.seq for s in history] == [2, 3]
    history.clear()
    assert len(sampler.history) == 2


def test_snapshot_of_the_newest_samples_only():
    clock = FakeClock()
    sampler = Sampler(CountingSource(), interval_s=1.0, history_len=5, count=7, clock=clock)
    sampler.run_loop(wait=clock.wait)
    latest, newest = sampler.snapshot(last=3)
    assert latest.seq == 7 and [s.seq for s in newest] == [5, 6, 7]  # oldest first, as kept
    assert [s.seq for s in sampler.snapshot(last=10)[1]] == [3, 4, 5, 6, 7]


def test_wait_says_whether_the_thread_ended():
    release = threading.Event()

    class Stuck(CountingSource):
        def read(self, seq, ts):
            release.wait(10.0)
            return super().read(seq, ts)

    sampler = Sampler(Stuck(), interval_s=0.01, count=2)
    assert sampler.wait(0.01) is True  # never started: nothing to wait for
    sampler.start()
    try:
        assert sampler.wait(0.05) is False and sampler.running  # its first read is stuck
    finally:
        release.set()
    assert sampler.wait(10.0) is True and sampler.samples_taken == 2
    assert sampler.finished == "2 samples taken (--count)"
