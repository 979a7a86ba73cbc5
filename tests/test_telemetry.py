"""Tier 1 for %gpuwatch: samples, sampler (fake clock), host/torch readers, traces, widget update logic.

No IPython here. NVML is the fake of tests/fake_nvml.py through the ``fake_nvml`` fixture.
"""

import json
import math
import os
import sys
import threading
import time
import tracemalloc
import types

import pytest

from cudamagic.watch import telemetry, widget as widgets
from cudamagic.watch.telemetry import (EndOfTrace, HostSample, LiveSource, Sampler, TorchSample, TraceError,
                                 TraceWriter, read_trace, sample_from_json, sample_to_json)
from cudamagic.core.na import NA, is_na
from tests.fake_nvml import GIB, HOSTILE_NAME

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "examples", "trace_demo.jsonl")


class FakeHost:
    """A host reader without psutil (deterministic)."""

    def __init__(self, cpu=12.5, kcpu=3.0, workers=()):
        self.cpu, self.kcpu, self.workers = cpu, kcpu, workers

    def read(self):
        return HostSample(cpu_util_pct=self.cpu, cpu_count=8, memory_used_bytes=4 * GIB,
                          memory_total_bytes=32 * GIB, kernel_cpu_pct=self.kcpu, workers=self.workers)


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


# ---- F01-F06 and a lost GPU through the live source ---------------------------------------------

def test_f01_no_driver_host_part_and_one_line(fake_nvml):
    fake_nvml("no_driver")
    src = live()
    s = src.read(1, 1000.0)
    assert s.gpus == () and is_na(s.nvml_status) and s.nvml_status.code == "no_driver"
    assert s.host.cpu_util_pct == 12.5
    text = widgets.sample_text(s)
    no_gpu_lines = [ln for ln in text.splitlines() if ln.startswith("No GPU data:")]
    assert len(no_gpu_lines) == 1 and "no NVIDIA driver" in no_gpu_lines[0]
    assert "host: CPU 12 %" in text or "host: CPU 13 %" in text
    assert "Traceback" not in text


def test_f02_version_mismatch_says_why(fake_nvml):
    fake_nvml("version_mismatch")
    s = live().read(1, 0.0)
    assert s.gpus == () and s.nvml_status.code == "version_mismatch"
    assert "reboot" in widgets.sample_text(s)


def test_f03_unsupported_fields_na_and_queried_once(fake_nvml):
    fake = fake_nvml("two_gpus_f03")
    src = live()
    samples = [src.read(i, float(i)) for i in range(1, 11)]
    g0, g1 = samples[-1].gpus
    for attr in ("fan_speed_pct", "power_draw_mw", "power_limit_mw"):
        assert not is_na(getattr(g0, attr))
        v = getattr(g1, attr)
        assert is_na(v) and v.reason == "not supported on this GPU"
    # the other fields of GPU 1 keep updating every tick
    assert len({s.gpus[1].gpu_util_pct for s in samples}) > 3
    assert fake.call_count("nvmlDeviceGetFanSpeed", 1) == 1
    assert fake.call_count("nvmlDeviceGetPowerUsage", 1) == 1
    assert fake.call_count("nvmlDeviceGetEnforcedPowerLimit", 1) == 1
    assert fake.call_count("nvmlDeviceGetFanSpeed", 0) == 10
    assert fake.call_count("nvmlDeviceGetUtilizationRates", 1) == 10
    # static facts are read once, not per tick
    assert fake.call_count("nvmlDeviceGetName", 1) == 1
    text = widgets.sample_text(samples[-1])
    assert "GPU 1 fan: N/A (not supported on this GPU)" in text


def test_f04_process_in_other_namespace_kept_and_labelled(fake_nvml):
    fake = fake_nvml("container_f04")
    # The field report's pid 28290 may well exist on a test machine (it did: a browser); a pid above
    # pid_max can never exist here, so real psutil answers NoSuchProcess as in a container.
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            ghost = int(fh.read()) + 28290
    except OSError:
        ghost = 2 ** 22 + 28290
    fake.gpus[0]["processes"] = [(ghost, GIB)]
    src = LiveSource(host=FakeHost(), torch_reader=lambda: TorchSample(3 * GIB, 4 * GIB, 5 * GIB))
    s = src.read(1, 0.0)
    import psutil
    assert not psutil.pid_exists(ghost)
    (p,) = s.gpus[0].processes
    assert p.pid == ghost and not p.visible and p.used_memory_bytes == GIB and p.name.code == "other_namespace"
    # this kernel's allocator is still shown; the NVML gap is NA because our pid is not in NVML's list
    assert s.torch.reserved_bytes == 4 * GIB and is_na(s.torch.gap_bytes)
    text = widgets.sample_text(s)
    assert str(ghost) in text and "(other PID namespace)" in text and "--pid=host" in text
    assert "no process" not in text.lower()
    html = widgets.gpu_html(s.gpus[0])
    assert str(ghost) in html and "other PID namespace" in html and "no process" not in html.lower()


def test_no_processes_listed_never_claims_nothing_while_memory_used(fake_nvml):
    fake_nvml("one_gpu")
    s = live().read(1, 0.0)
    text = widgets.sample_text(s)
    assert "NVML lists no process; 1.0 GiB in use" in text


def test_f05_bytes_and_str_names_identical(fake_nvml):
    outs = []
    for scenario in ("bytes_names", {**__import__("tests.fake_nvml").fake_nvml.SCENARIOS["bytes_names"],
                                     "bytes": False}):
        fake_nvml(scenario)
        s = live().read(1, 0.0)
        outs.append(sample_to_json(s)["gpus"])
        from cudamagic.core import nvml
        nvml.reset()
    assert outs[0] == outs[1]
    assert outs[0][0]["name"] == "Tesla T4" and outs[0][0]["uuid"].startswith("GPU-")


def test_f06_mig_shown_as_mig_with_na_utilization(fake_nvml):
    fake_nvml("mig")
    s = live().read(1, 0.0)
    g = s.gpus[0]
    assert g.mig_enabled is True
    assert is_na(g.gpu_util_pct) and g.gpu_util_pct.reason == "not reported in MIG mode"
    assert [m.uuid for m in g.mig_devices] == ["MIG-11111111-2222-3333-4444-555555555555",
                                              "MIG-66666666-7777-8888-9999-000000000000"]
    assert g.mig_devices[0].memory_used_bytes == 2 * GIB
    text = widgets.sample_text(s)
    assert "utilization: N/A (not reported in MIG mode)" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("0 "))
    assert "MIG A100-SXM4-80GB" in row  # the text table drops the "NVIDIA " prefix
    assert row.split("80GB")[1].split()[:2] == ["N/A", "N/A"]  # util and mem util: never a confident 0 %
    html = widgets.gpu_html(g)
    assert "MIG NVIDIA A100" in html and "not reported in MIG mode" in html


def test_gpu_lost_mid_watch_others_continue(fake_nvml):
    fake = fake_nvml("two_gpus_f03")
    clock = FakeClock()
    sampler = Sampler(live(), interval_s=1.0, count=10, clock=clock)
    for _ in range(3):
        sampler.step()
    fake.lose_gpu(0)
    sampler.run_loop(wait=clock.wait)
    assert sampler.samples_taken == 10 and sampler.error == ""
    last = sampler.latest
    assert last.gpus[0].lost is not None and last.gpus[0].lost.code == "gpu_lost"
    assert last.gpus[0].name == "NVIDIA H100 80GB HBM3"  # name remembered from before the loss
    assert last.gpus[1].lost is None and not is_na(last.gpus[1].gpu_util_pct)
    assert len({s.gpus[1].gpu_util_pct for s in sampler.history}) > 3
    text = widgets.sample_text(last)
    assert "[LOST]" in text and "GPU lost" in text
    calls_after = fake.call_count("nvmlDeviceGetUtilizationRates", 0)
    sampler.step()
    assert fake.call_count("nvmlDeviceGetUtilizationRates", 0) == calls_after  # a lost GPU is not re-queried


# ---- the sampler with a fake clock ------------------------------------------------------------

class CountingSource:
    label = "live"
    devices = [0]

    def __init__(self):
        self.n = 0
        self.base = None

    def read(self, seq, ts):
        self.n += 1
        g = telemetry.GpuSample(0, "fake", "GPU-x", seq % 100, 0, seq, 100, 30, 1, 2, 3, 4, 5, 0, 0)
        return telemetry.Sample(seq, ts, None, (g,), FakeHost().read(), no_torch())


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
    src = telemetry.ReplaySource(DEMO)
    clock = FakeClock()
    sampler = Sampler(src, interval_s=0.05, clock=clock)
    sampler.run_loop(wait=clock.wait)
    assert sampler.finished == "end of replay" and sampler.samples_taken == len(src.samples)
    with pytest.raises(EndOfTrace):
        src.read(0, 0.0)


# ---- host and PyTorch readers ---------------------------------------------------------------------

def test_host_reader_real_psutil_and_dataloader_workers():
    import multiprocessing as mp

    reader = telemetry.HostReader()
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=time.sleep, args=(1.5,)) for _ in range(2)]
    for p in procs:
        p.start()
    import subprocess
    other = subprocess.Popen(["sleep", "1.5"])  # a child that is not a DataLoader worker
    try:
        time.sleep(0.15)
        h = reader.read()
        assert 0 <= h.cpu_util_pct <= 100 and h.memory_total_bytes > h.memory_used_bytes > 0
        assert sorted(w.pid for w in h.workers) == sorted(p.pid for p in procs)
        assert other.pid not in [w.pid for w in h.workers]
    finally:
        for p in procs:
            p.join()
        other.wait()


def test_torch_reader_never_touches_cuda_when_not_initialised(monkeypatch):
    assert telemetry.read_torch_allocator().code in ("no_torch", "not_initialized")
    fake_cuda = types.SimpleNamespace(
        is_initialized=lambda: False,
        memory_stats=lambda i: pytest.fail("memory_stats called without an initialised CUDA"),
        device_count=lambda: pytest.fail("device_count called without an initialised CUDA"))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    na = telemetry.read_torch_allocator()
    assert na.code == "not_initialized" and "never creates a CUDA context" in na.reason
    monkeypatch.delitem(sys.modules, "torch")
    assert telemetry.read_torch_allocator().code == "no_torch"


def test_torch_reader_and_gap_when_initialised(monkeypatch, fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(os.getpid(), 3 * GIB)]
    stats = {"allocated_bytes.all.current": GIB, "reserved_bytes.all.current": 2 * GIB,
             "allocated_bytes.all.peak": int(1.5 * GIB)}
    fake_cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 1,
                                      memory_stats=lambda i: stats)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    s = LiveSource(host=FakeHost()).read(1, 0.0)
    t = s.torch
    assert (t.allocated_bytes, t.reserved_bytes, t.peak_bytes) == (GIB, 2 * GIB, int(1.5 * GIB))
    assert t.nvml_process_bytes == 3 * GIB and t.gap_bytes == GIB
    (p,) = s.gpus[0].processes
    assert p.own and p.visible
    assert "(this kernel)" in widgets.sample_text(s)


def test_idle_gpu_hint(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["util_gpu"] = 5
    fake.gpus[0]["processes"] = [(os.getpid(), GIB)]
    busy = live(host=FakeHost(cpu=97.0)).read(1, 0.0)
    assert "waiting for data" in busy.hint and "num_workers" in busy.hint
    single = live(host=FakeHost(cpu=40.0, kcpu=99.0)).read(1, 0.0)
    assert "main process" in single.hint
    calm = live(host=FakeHost(cpu=20.0, kcpu=10.0)).read(1, 0.0)
    assert calm.hint == ""
    fake.gpus[0]["util_gpu"] = 95
    assert live(host=FakeHost(cpu=97.0)).read(1, 0.0).hint == ""
    fake.gpus[0]["util_gpu"] = 5
    fake.gpus[0]["processes"] = []   # this kernel does not use the GPU: no hint
    assert live(host=FakeHost(cpu=97.0)).read(1, 0.0).hint == ""


# ---- traces: round trip and strict replay validation ----------------------------------------------

def test_log_round_trip_and_history_rows(fake_nvml, tmp_path):
    fake_nvml("two_gpus_f03")
    path = str(tmp_path / "run.jsonl")
    src = live()
    writer = TraceWriter(path)
    originals = [src.read(i, 1000.0 + i) for i in range(1, 6)]
    for s in originals:
        writer.write(s)
    writer.close()
    header, samples = read_trace(path)
    assert header["cudamagic_trace"] == 1 and header["units"]["memory.used"] == "bytes"
    assert samples == originals  # dataclasses compare by value, NA by reason
    rows = telemetry.sample_rows(samples[0])
    assert [r["index"] for r in rows] == [0, 1]
    assert {"timestamp", "utilization.gpu", "memory.used", "power.draw", "clocks.sm", "pstate",
            "host.cpu.utilization", "torch.reserved"} <= set(rows[0])
    assert math.isnan(rows[1]["fan.speed"]) and rows[0]["memory.total"] == 80 * GIB
    assert "fan.speed" in rows[1]["na_reasons"] and "not supported on this GPU" in rows[1]["na_reasons"]
    # appending to a non-trace file is refused
    other = tmp_path / "notes.txt"
    other.write_text("my precious notes\n")
    with pytest.raises(TraceError, match="refusing to append"):
        TraceWriter(str(other))
    assert other.read_text() == "my precious notes\n"


def test_demo_trace_is_valid_and_says_it_is_generated():
    header, samples = read_trace(DEMO)
    assert "generated by tests/fake_nvml.py" in header["source"]
    assert len(samples) >= 40
    utils = [s.gpus[0].gpu_util_pct for s in samples[:20]]
    assert len(set(utils)) > 5


def _good_line(demo_line=2):
    with open(DEMO, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    return lines[0], json.loads(lines[demo_line - 1])


HEADER = '{"cudamagic_trace": 1, "source": "test"}'


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"\x80\x04\x95pickle", "not UTF-8"),
    (b"import os; os.system('rm -rf /')\n", "not valid JSON"),
    (b'{"hello": 1}\n', "first line must be the trace header"),
    ((HEADER + "\n").encode(), "no samples"),
    ((HEADER + '\n{"timestamp_s": NaN, "gpus": [], "host": {}}\n').encode(), "not valid JSON"),
    ((HEADER + '\n{"timestamp_s": 1, "gpus": [], "host": {}, "__class__": "os.system"}\n').encode(),
     "unknown key '__class__'"),
    ((HEADER + '\n{"timestamp_s": "yesterday", "gpus": [], "host": {}}\n').encode(), "'timestamp_s' must be"),
    ((HEADER + '\n{"timestamp_s": 1, "gpus": {}, "host": {}}\n').encode(), "'gpus' must be a list"),
    ((HEADER + '\n{"timestamp_s": 1, "gpus": [{"index": 0, "memory.used": true}], "host": {}}\n').encode(),
     "'memory.used' must be"),
    ((HEADER + '\n{"timestamp_s": 1, "gpus": [{"index": 0, "name": {"na": 1}}], "host": {}}\n').encode(),
     "not-available value"),
    ((HEADER + "\n" + "[" * 100000 + "]" * 100000 + "\n").encode(), "line 2"),
    ((HEADER + '\n{"timestamp_s": 1, "gpus": [], "host": {}, "hint": "' + "x" * 5000 + '"}\n').encode(),
     "longer than 4096"),
])
def test_replay_rejects_malformed_and_hostile_files(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        read_trace(str(path))
    assert str(path) in str(info.value)


def test_replay_size_limits(tmp_path):
    path = tmp_path / "big.jsonl"
    header, line = _good_line()
    path.write_text(header + "\n" + (json.dumps(line) + "\n") * 5)
    assert len(read_trace(str(path))[1]) == 5
    with pytest.raises(TraceError, match="more than 3 samples"):
        read_trace(str(path), max_samples=3)
    with pytest.raises(TraceError, match="byte limit"):
        read_trace(str(path), max_bytes=1000)
    with pytest.raises(TraceError, match="longer than 100 bytes"):
        read_trace(str(path), max_line_bytes=100)


def test_sample_from_json_rebuilds_na_values():
    _, line = _good_line(3)
    s = sample_from_json(line)
    assert is_na(s.gpus[1].fan_speed_pct) and s.gpus[1].fan_speed_pct.code == "not_supported"


# ---- widget update logic without a kernel -----------------------------------------------------------

def test_widget_view_apply_sets_values_under_hold_sync(fake_nvml, monkeypatch):
    fake_nvml("two_gpus_f03")
    src = live()
    view = widgets.WatchView([0, 1], label="live")
    s1, s2 = src.read(1, 1000.0), src.read(2, 1001.0)
    view.apply(s1, [s1], samples_taken=1)
    first = {w: w.value for w in view.widgets() if hasattr(w, "value")}
    held = []
    for w in view.widgets():
        orig = w.hold_sync

        def spy(orig=orig, w=w):
            held.append(w)
            return orig()
        monkeypatch.setattr(w, "hold_sync", spy)
    view.apply(s2, [s1, s2], samples_taken=2)
    assert set(held) == set(view.widgets())
    assert view.cards[0].value != first[view.cards[0]]  # utilization moved
    assert "samples: 2" in view.status.value and "LIVE" in view.status.value
    assert "<polyline" in view.sparks[0].value
    assert "not supported on this GPU" in view.cards[1].value  # NA reason shown and as tooltip
    assert 'title="not supported on this GPU"' in view.cards[1].value
    view.apply(s2, [s1, s2], state="stopped (end)", samples_taken=2, stopped=True)
    assert view.button.disabled and view.button.description == "Stopped"
    view.close()


def test_widget_stop_button_calls_back():
    called = []
    view = widgets.WatchView([0], on_stop=lambda: called.append(1))
    view.button.click()
    assert called == [1]
    view.close()


def test_replay_is_labelled_as_replay():
    _, samples = read_trace(DEMO)
    view = widgets.WatchView([0, 1], label="replay of examples/<b>trace</b>.jsonl")
    view.apply(samples[0], samples[:1], samples_taken=1)
    assert "REPLAY" in view.status.value and "recorded at" in view.status.value
    assert "<b>trace</b>" not in view.status.value and "&lt;b&gt;trace&lt;/b&gt;" in view.status.value
    assert widgets.sample_text(samples[0], "replay of x.jsonl").startswith("gpuwatch  REPLAY of x.jsonl  recorded")
    view.close()


# ---- escaping ------------------------------------------------------------------------------------

def test_hostile_process_names_and_paths_are_escaped(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    fake.gpus[0]["name"] = "<script>alert('gpu')</script>"
    src = live(proc_info=lambda pid: (HOSTILE_NAME, '/tmp/"><svg onload=alert(2)>/run.py', True))
    s = src.read(1, 0.0)
    html_parts = [widgets.gpu_html(s.gpus[0]), widgets.host_html(s),
                  widgets.snapshot_html(s, [s], 'replay of /tmp/<img src=y onerror=alert(3)>.jsonl', "x", 1,
                                        "<b>err</b>"),
                  widgets.sparkline_svg([s], 0)]
    html = "".join(html_parts)
    for bad in (HOSTILE_NAME, "<script>", "<svg onload", "<img src=y", "<b>err</b>"):
        assert bad not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;" in html
    assert "&quot;&gt;&lt;svg onload=alert(2)&gt;" in html
    # the text form shows the name verbatim (it is text)
    assert HOSTILE_NAME in widgets.sample_text(s)


def test_make_demo_trace_script_regenerates_a_valid_trace(tmp_path):
    import subprocess

    out = tmp_path / "demo.jsonl"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_demo_trace.py"), "--samples", "6",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    header, samples = read_trace(str(out))
    assert "generated by tests/fake_nvml.py" in header["source"] and len(samples) == 6
    recorded = samples[5].gpus[0].processes[0]
    # the recording kernel is not the replaying one: named as such, not marked as this kernel
    assert not recorded.own and recorded.name.endswith("(the recording kernel)")
    assert samples[5].torch.reserved_bytes > 0
    assert is_na(samples[0].torch) and samples[5].timestamp_s - samples[0].timestamp_s == 5.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), 1e300])
def test_sampler_refuses_an_interval_event_wait_cannot_take(bad):
    # inf or 1e300 used to start a thread that died at once with OverflowError in Event.wait
    with pytest.raises(ValueError, match="interval_s"):
        Sampler(live(), interval_s=bad)


SCALARS = (int, float, str, bool)


@pytest.mark.parametrize("scenario", ["two_gpus_f03", "mig", "container_f04", "no_driver"])
def test_history_rows_are_flat_scalars_with_numeric_columns(fake_nvml, scenario):
    """watch.history must suit pandas.DataFrame: flat dicts of plain scalars, numbers stay numbers
    (an NA object in a numeric column made the column object-typed: .mean() raised TypeError)."""
    fake_nvml(scenario)
    rows = telemetry.sample_rows(live().read(1, 1000.0))
    assert rows and len({tuple(r) for r in rows}) == 1  # same columns in every row
    numeric = set(telemetry.GPU_FIELDS) | {"host.cpu.utilization", "host.memory.used", "torch.allocated",
                                           "torch.reserved", "torch.peak", "torch.gap", "index"}
    for r in rows:
        assert all(type(v) in SCALARS for v in r.values()), {k: v for k, v in r.items() if type(v) not in SCALARS}
        for key in numeric & set(r):
            assert isinstance(r[key], (int, float)) and not isinstance(r[key], bool), (key, r[key])
        assert sum(r[k] for k in numeric & set(r) if not math.isnan(r[k])) >= 0  # arithmetic works
        if any(isinstance(v, float) and math.isnan(v) for v in r.values()):
            assert r["na_reasons"]
    if scenario == "no_driver":  # the row says why there is no GPU (it said "no GPU selected")
        assert "not found" in rows[0]["na_reasons"] and "no GPU selected" not in rows[0]["na_reasons"]
        assert math.isnan(rows[0]["index"])
    if scenario == "mig":
        assert math.isnan(rows[0]["utilization.gpu"]) and "MIG" in rows[0]["na_reasons"]


TERMINAL_ATTACK = "evil\x1b[2J\x1b[31mRED\nGPU 9  fake row\r\x07\u202egnp.exe"


def test_text_view_neutralises_terminal_control_characters(fake_nvml):
    """A process or GPU name with ESC, newline, CR or a bidi override must not clear the terminal,
    colour it or forge a table row in the text view (it did: the bytes went out raw)."""
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    fake.gpus[0]["name"] = "H100\x1b]0;title\x07"
    clean = widgets.sample_text(live(proc_info=lambda pid: ("proc", "cmd", True)).read(1, 0.0))
    s = live(proc_info=lambda pid: (TERMINAL_ATTACK, TERMINAL_ATTACK, True)).read(1, 0.0)
    text = widgets.sample_text(s, "replay of /tmp/a\x1b[2Jb.jsonl", error="bad\nline")
    assert not any(ch in text for ch in "\x1b\r\x07\u202e")
    assert len(text.splitlines()) == len(clean.splitlines()) + 1  # + the error line; no forged rows
    assert "evil\\x1b[2J\\x1b[31mRED\\x0aGPU 9  fake row\\x0d\\x07\\u202egnp.exe" in text
    assert "H100\\x1b]0;title\\x07" in text and "a\\x1b[2Jb.jsonl" in text.splitlines()[0]
    assert HOSTILE_NAME == widgets.plain(HOSTILE_NAME)  # ordinary text (and HTML-looking text) unchanged


@pytest.mark.parametrize("scenario", ["two_gpus_f03", "mig", "container_f04", "no_driver", "version_mismatch",
                                      "training"])
def test_text_view_fits_100_columns(fake_nvml, scenario):
    """Terminal width: the GPU table was 122 columns and the F01/F02 and 'no process' lines up to 200;
    a 100-column terminal wrapped them mid-word. Prose now wraps at 100 and the table fits."""
    from tests import fake_nvml as fm

    fake = fake_nvml(fm.training_scenario() if scenario == "training" else scenario)
    if fake.gpus:
        fake.gpus[0]["processes"] = [(4242, GIB)]
    src = live(proc_info=lambda pid: ("python", "python train.py", True))
    src.read(1, 0.0)
    s = src.read(2, 1.0)
    text = widgets.sample_text(s, "live", "running, every 1 s")
    too_wide = [ln for ln in text.splitlines() if len(ln) > widgets.TEXT_WIDTH]
    assert too_wide == []
    if fake.gpus:
        assert "1980/2619" in text or "345/2619" in text
    else:
        assert "No GPU data:" in text and text.count("No GPU data:") == 1
