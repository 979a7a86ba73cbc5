"""Tier 1 for %gpuwatch sources: the live source on the fake NVML, the host and PyTorch readers.

The NVML cases: no driver, a version mismatch, unsupported fields, another PID namespace, bytes
names, MIG, a lost GPU. Also the idle-GPU hint. No IPython here.
"""

import os
import subprocess
import sys
import time
import types

import psutil
import pytest

from cudamagic.core import platform
from cudamagic.core.na import is_na
from cudamagic.watch.render import gpu_html, sample_text
from cudamagic.watch.sampler import Sampler
from cudamagic.watch.samples import TorchSample
from cudamagic.watch.sources import (
    CHILD_LISTING_S,
    HostReader,
    LiveSource,
    read_torch_allocator,
)
from cudamagic.watch.trace import sample_to_json
from tests.fake_nvml import GIB, SCENARIOS
from tests.watch.fakes import FakeClock, FakeHost, live, wait_until

# ---- NVML faults and a lost GPU through the live source
# ---------------------------------------------


def test_no_driver_host_part_and_one_line(fake_nvml):
    fake_nvml("no_driver")
    src = live()
    s = src.read(1, 1000.0)
    assert s.gpus == () and is_na(s.nvml_status) and s.nvml_status.code == "no_driver"
    assert s.host.cpu_util_pct == 12.5
    text = sample_text(s)
    no_gpu_lines = [ln for ln in text.splitlines() if ln.startswith("No GPU data:")]
    assert len(no_gpu_lines) == 1 and "no NVIDIA driver" in no_gpu_lines[0]
    assert "host: CPU 12 %" in text or "host: CPU 13 %" in text
    assert "Traceback" not in text


def test_version_mismatch_says_why(fake_nvml):
    fake_nvml("version_mismatch")
    s = live().read(1, 0.0)
    assert s.gpus == () and s.nvml_status.code == "version_mismatch"
    assert "reboot" in sample_text(s)


def test_unsupported_fields_na_and_queried_once(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
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
    text = sample_text(samples[-1])
    assert "GPU 1 fan: N/A (not supported on this GPU)" in text


def test_process_in_other_namespace_kept_and_labelled(fake_nvml):
    fake = fake_nvml("process_in_other_pid_namespace")
    # The field report's pid 28290 may well exist on a test machine (it did: a browser); a pid above
    # pid_max can never exist here, so real psutil answers NoSuchProcess as in a container.
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            ghost = int(fh.read()) + 28290
    except OSError:
        ghost = 2**22 + 28290
    fake.gpus[0]["processes"] = [(ghost, GIB)]
    src = LiveSource(host=FakeHost(), torch_reader=lambda: TorchSample(3 * GIB, 4 * GIB, 5 * GIB))
    s = src.read(1, 0.0)
    import psutil

    assert not psutil.pid_exists(ghost)
    (p,) = s.gpus[0].processes
    assert (
        p.pid == ghost
        and not p.visible
        and p.used_memory_bytes == GIB
        and p.name.code == "other_namespace"
    )
    # this kernel's allocator is still shown; the NVML gap is NA because our pid is not in NVML's
    # list
    assert s.torch.reserved_bytes == 4 * GIB and is_na(s.torch.gap_bytes)
    text = sample_text(s)
    assert str(ghost) in text and "(other PID namespace)" in text and "--pid=host" in text
    assert "no process" not in text.lower()
    html = gpu_html(s.gpus[0])
    assert str(ghost) in html and "other PID namespace" in html and "no process" not in html.lower()


def test_no_processes_listed_never_claims_nothing_while_memory_used(fake_nvml):
    fake_nvml("one_gpu")
    s = live().read(1, 0.0)
    text = sample_text(s)
    assert "NVML lists no process; 1.0 GiB in use" in text


def test_bytes_and_str_names_identical(fake_nvml):
    outs = []
    for scenario in (
        "bytes_names",
        {**SCENARIOS["bytes_names"], "bytes": False},
    ):
        fake_nvml(scenario)
        s = live().read(1, 0.0)
        outs.append(sample_to_json(s)["gpus"])
        from cudamagic.core import nvml

        nvml.reset()
    assert outs[0] == outs[1]
    assert outs[0][0]["name"] == "Tesla T4" and outs[0][0]["uuid"].startswith("GPU-")


def test_mig_shown_as_mig_with_na_utilization(fake_nvml):
    fake_nvml("mig")
    s = live().read(1, 0.0)
    g = s.gpus[0]
    assert g.mig_enabled is True
    assert is_na(g.gpu_util_pct) and g.gpu_util_pct.reason == "not reported in MIG mode"
    assert [m.uuid for m in g.mig_devices] == [
        "MIG-11111111-2222-3333-4444-555555555555",
        "MIG-66666666-7777-8888-9999-000000000000",
    ]
    assert g.mig_devices[0].memory_used_bytes == 2 * GIB
    text = sample_text(s)
    assert "utilization: N/A (not reported in MIG mode)" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("0 "))
    assert "MIG A100-SXM4-80GB" in row  # the text table drops the "NVIDIA " prefix
    assert row.split("80GB")[1].split()[:2] == [
        "N/A",
        "N/A",
    ]  # util and mem util: never a confident 0 %
    html = gpu_html(g)
    assert "MIG NVIDIA A100" in html and "not reported in MIG mode" in html


def test_gpu_lost_mid_watch_others_continue(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
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
    text = sample_text(last)
    assert "[LOST]" in text and "GPU lost" in text
    calls_after = fake.call_count("nvmlDeviceGetUtilizationRates", 0)
    sampler.step()
    assert (
        fake.call_count("nvmlDeviceGetUtilizationRates", 0) == calls_after
    )  # a lost GPU is not re-queried


# ---- host and PyTorch readers
# ---------------------------------------------------------------------


def test_host_reader_real_psutil_and_dataloader_workers():
    import multiprocessing as mp

    ticks = iter(range(100))  # a clock one second apart per reading: CPU % has two readings
    reader = HostReader(clock=lambda: float(next(ticks)))
    cpu_seconds = sum(psutil.cpu_times())  # CPU % also needs the CPUs' own counters to move
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=time.sleep, args=(60,)) for _ in range(2)]
    for p in procs:
        p.start()
    other = subprocess.Popen(["sleep", "60"])  # a child that is not a DataLoader worker
    # multiprocessing's resource tracker (left running by the first spawn start): its command line
    script = "from multiprocessing.resource_tracker import main; import time; time.sleep(60)"
    tracker = subprocess.Popen([sys.executable, "-c", script])

    def started(proc, word):
        try:
            return word in " ".join(psutil.Process(proc.pid).cmdline())
        except psutil.Error:
            return False

    try:
        assert wait_until(
            lambda: (
                started(other, "sleep")
                and started(tracker, "resource_tracker")
                and sum(psutil.cpu_times()) > cpu_seconds + 0.05
            )
        )
        h = reader.read()
        assert 0 <= h.cpu_util_pct <= 100 and h.memory_total_bytes > h.memory_used_bytes > 0
        workers = [w.pid for w in h.workers]
        assert other.pid not in workers and tracker.pid not in workers
        assert sorted(workers) == sorted(p.pid for p in procs)
    finally:
        for child in (*procs, other, tracker):
            child.kill()
        for p in procs:
            p.join()
        other.wait()
        tracker.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc")
def test_host_files_read_what_psutil_reads():
    files = platform.ProcFiles()
    hz = os.sysconf("SC_CLK_TCK")
    # CPU time: psutil's fields in seconds, the files' in clock ticks; counters only grow, so
    # the files' reading lies between psutil's readings before and after it
    before = psutil.cpu_times()
    busy, total = files.cpu_busy_total()
    after = psutil.cpu_times()
    assert sum(before) * hz - 1 <= total <= sum(after) * hz + 1
    assert (
        (before.idle + before.iowait) * hz - 1
        <= total - busy
        <= (after.idle + after.iowait) * hz + 1
    )
    used, mem_total = files.memory()
    vm = psutil.virtual_memory()
    assert mem_total == vm.total and abs(used - (vm.total - vm.available)) < vm.total * 0.05
    files.close()
    files.close()
    with pytest.raises(OSError):
        files.cpu_busy_total()  # closed: never another file that took its number


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's /proc")
def test_host_reader_closed_reads_psutil_and_warms_up_again(monkeypatch):
    now = [0.0]
    reader = HostReader(clock=lambda: now[0])
    assert reader._files is not None
    now[0] = 1.0
    assert not is_na(reader.read().memory_total_bytes)
    reader.close()  # what a stopped monitor does; psutil from now on, in other units
    asked = []
    real = psutil.cpu_times
    monkeypatch.setattr(psutil, "cpu_times", lambda: asked.append(1) or real())
    now[0] = 2.0
    cpu_seconds = sum(real())
    first = reader.read()
    assert first.cpu_util_pct.code == "warming_up" and asked  # no delta of ticks and seconds
    assert wait_until(lambda: sum(real()) > cpu_seconds + 0.05)  # the CPUs' counters moved
    now[0] = 3.0
    assert 0 <= reader.read().cpu_util_pct <= 100


def test_workers_listed_at_most_once_a_second_and_dropped_as_soon_as_they_exit():
    import multiprocessing as mp

    now = [0.0]
    reader = HostReader(clock=lambda: now[0])
    before = {w.pid for w in reader.read().workers}
    worker = mp.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.start()
    try:
        assert wait_until(lambda: psutil.pid_exists(worker.pid))
        now[0] = CHILD_LISTING_S / 2  # the children listed at 0 s are kept until 1 s
        assert {w.pid for w in reader.read().workers} == before
        now[0] = CHILD_LISTING_S
        assert worker.pid in {w.pid for w in reader.read().workers}
    finally:
        worker.kill()
        worker.join()
    now[0] = CHILD_LISTING_S * 1.5  # listed, but gone: not shown
    assert worker.pid not in {w.pid for w in reader.read().workers}


def test_torch_reader_never_touches_cuda_when_not_initialised(monkeypatch):
    assert read_torch_allocator().code in ("no_torch", "not_initialized")
    fake_cuda = types.SimpleNamespace(
        is_initialized=lambda: False,
        memory_stats=lambda i: pytest.fail("memory_stats called without an initialised CUDA"),
        device_count=lambda: pytest.fail("device_count called without an initialised CUDA"),
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=fake_cuda))
    na = read_torch_allocator()
    assert na.code == "not_initialized" and "never creates a CUDA context" in na.reason
    monkeypatch.delitem(sys.modules, "torch")
    assert read_torch_allocator().code == "no_torch"


def real_torch_stats(monkeypatch, n_devices=1, **chosen):
    """Make the real ``torch.cuda.memory_stats`` return the real key shape.

    Make the REAL ``torch.cuda.memory_stats`` return the real key shape: only the nested dict
    underneath it (and is_initialized/device_count) is replaced, torch flattens it itself. Every
    other counter differs.
    """
    import torch

    from tests.torch_stats import nested_stats

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n_devices)

    def nested(device=None):
        return nested_stats(**chosen)

    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", nested)
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", nested)
    return torch


def test_torch_reader_and_gap_when_initialised(monkeypatch, fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(os.getpid(), 3 * GIB)]
    torch = real_torch_stats(
        monkeypatch,
        **{
            "allocated_bytes.all.current": GIB,
            "reserved_bytes.all.current": 2 * GIB,
            "allocated_bytes.all.peak": int(1.5 * GIB),
        },
    )
    assert len(torch.cuda.memory_stats(0)) > 100  # the real flattening ran on the real key shape
    s = LiveSource(host=FakeHost()).read(1, 0.0)
    t = s.torch
    assert (t.allocated_bytes, t.reserved_bytes, t.peak_bytes) == (GIB, 2 * GIB, int(1.5 * GIB))
    assert t.nvml_process_bytes == 3 * GIB and t.gap_bytes == GIB
    (p,) = s.gpus[0].processes
    assert p.own and p.visible
    assert "(this kernel)" in sample_text(s)


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
    fake.gpus[0]["processes"] = []  # this kernel does not use the GPU: no hint
    assert live(host=FakeHost(cpu=97.0)).read(1, 0.0).hint == ""


def test_torch_reader_sums_the_right_counters_over_devices(monkeypatch):
    real_torch_stats(
        monkeypatch,
        n_devices=2,
        **{
            "allocated_bytes.all.current": 10,
            "reserved_bytes.all.current": 20,
            "allocated_bytes.all.peak": 30,
        },
    )
    t = read_torch_allocator()
    assert (t.allocated_bytes, t.reserved_bytes, t.peak_bytes) == (20, 40, 60)


def test_own_process_memory_na_under_wddm_keeps_samples(fake_nvml):
    """Windows WDDM: NVML lists this kernel's pid with usedGpuMemory N/A.

    The sample still has every GPU field, the process is listed with NA memory, and the
    NVML-vs-allocator gap is NA with the reason (not an error).
    """
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(os.getpid(), None), (os.getpid() + 1, None)]
    src = LiveSource(host=FakeHost(), torch_reader=lambda: TorchSample(GIB, 2 * GIB, 3 * GIB))
    sampler = Sampler(src, interval_s=0.01)
    s = src.read(1, 0.0)
    g = s.gpus[0]
    assert not is_na(g.memory_used_bytes) and not is_na(g.gpu_util_pct)
    own = [p for p in g.processes if p.own]
    assert (
        len(own) == 1 and is_na(own[0].used_memory_bytes) and own[0].used_memory_bytes.reason
    )  # N/A, with why
    assert (
        s.torch.reserved_bytes == 2 * GIB
        and is_na(s.torch.gap_bytes)
        and is_na(s.torch.nvml_process_bytes)
    )
    assert "Traceback" not in sample_text(s)
    gpu_html(g), sample_to_json(s)
    sampler.start()
    try:
        assert wait_until(lambda: sampler.samples_taken >= 3), sampler.error
        assert (
            sampler.error == ""
            and sampler.errors == 0
            and not is_na(sampler.latest.gpus[0].memory_used_bytes)
        )
    finally:
        sampler.stop()


def test_compute_and_graphics_process_merged_as_c_plus_g(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, 2 * GIB), (4343, GIB)]
    fake.gpus[0]["graphics_processes"] = [(4242, 3 * GIB), (4444, GIB // 2)]
    s = live().read(1, 0.0)
    rows = {p.pid: (p.type, p.used_memory_bytes) for p in s.gpus[0].processes}
    assert rows == {4242: ("C+G", 3 * GIB), 4343: ("C", GIB), 4444: ("G", GIB // 2)}


def test_a_process_that_reads_the_same_is_the_same_row(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(os.getpid(), 3 * GIB), (4242, GIB)]
    src = LiveSource(host=FakeHost())
    first = src.read(1, 0.0).gpus[0].processes
    again = src.read(2, 1.0).gpus[0].processes
    assert again is first  # the same rows: the card compares them at once
    fake.gpus[0]["processes"] = [(os.getpid(), 3 * GIB), (4242, 2 * GIB)]
    moved = src.read(3, 2.0).gpus[0].processes
    before, after = ({p.pid: p for p in rows} for rows in (first, moved))
    assert after[os.getpid()] is before[os.getpid()] and after[4242] is not before[4242]
    assert after[4242].used_memory_bytes == 2 * GIB
    fake.gpus[0]["processes"] = [(os.getpid(), 3 * GIB)]
    assert src.read(4, 3.0).gpus[0].processes == (before[os.getpid()],)


@pytest.mark.parametrize("other", ["win32", "darwin"])
def test_host_reader_asks_psutil_where_there_is_no_proc(monkeypatch, other):
    monkeypatch.setattr(platform.sys, "platform", other)  # the other platform, presented
    assert platform.proc_files() is None
    asked = []
    real = psutil.virtual_memory
    monkeypatch.setattr(psutil, "virtual_memory", lambda: asked.append(1) or real())
    now = [0.0]
    reader = HostReader(clock=lambda: now[0])
    assert reader._files is None
    now[0] = 1.0
    sample = reader.read()
    assert asked and sample.memory_total_bytes == real().total
