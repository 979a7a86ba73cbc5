"""%gpuwatch through the real pynvml binding and the stand-in NVML library (tests/nvml_stub).

Memory v2 and the driver's reserve, impossible numbers, processes one may not see, old traces.
"""

from __future__ import annotations

import json
import math
import re

import psutil
import pytest

from cudamagic.core import platform
from cudamagic.core.na import is_na
from cudamagic.watch import render, sources
from cudamagic.watch.trace import read_trace
from tests import fake_nvml as fm
from tests.watch.fakes import DEMO

MIB = 1024**2
GIB = 1024**3


def test_reserve_apart_in_samples_history_text_widget_and_trace(ip, stub_nvml, tmp_path):
    stub_nvml(fm.a100())
    log = tmp_path / "run.jsonl"
    w = ip.run_line_magic("gpuwatch", f"--text --log {log}")
    g = w.latest.gpus[0]
    assert (g.memory_used_bytes, g.memory_reserved_bytes) == (4 * MIB, 908 * MIB)
    row = w.history[0]
    assert row["memory.used"] == 4 * MIB and row["memory.reserved"] == 908 * MIB
    text = w.text()
    assert "0.0/80.0 GiB" in text  # used as nvidia-smi shows it, not 0.9 GiB
    assert "besides the driver's 908.0 MiB reserve" in text
    html = render.gpu_html(g)
    assert "reserved by the driver 908.0 MiB" in html
    widths = re.findall(r"width:([0-9.]+)%", html)
    assert widths[1:3] == [
        "0.0",
        "1.1",
    ]  # after the utilization bar: used, then the grey reserve segment
    header, samples = read_trace(str(log))
    assert header["units"]["memory.reserved"] == "bytes"
    line = json.loads(log.read_text().splitlines()[1])
    assert (
        line["gpus"][0]["memory.reserved"] == 908 * MIB
        and line["gpus"][0]["memory.used"] == 4 * MIB
    )
    assert samples[0].gpus[0].memory_reserved_bytes == 908 * MIB


def test_reserve_shown_in_the_text_view_also_when_processes_are_listed(ip, stub_nvml):
    stub_nvml(fm.a100(processes=[(4242, 2 * MIB)]))
    text = ip.run_line_magic("gpuwatch", "--text").text()
    assert "NVML lists no process" not in text
    assert (
        "GPU 0 memory reserved by the driver: 908.0 MiB (memory.reserved; not counted in memory "
        "used" in text
    )


def test_pre_r510_driver_reads_v1_and_says_why_reserved_is_na(ip, stub_nvml):
    stub_nvml(fm.a100(memory_v2=False))
    w = ip.run_line_magic("gpuwatch", "--text")
    g = w.latest.gpus[0]
    assert g.memory_used_bytes == 912 * MIB and is_na(g.memory_reserved_bytes)
    assert math.isnan(w.history[0]["memory.reserved"])
    assert (
        "GPU 0 memory reserved: N/A (this driver's NVML has only the legacy v1 memory call"
        in w.text().replace("\n  ", " ")
    )


def test_old_trace_without_memory_reserved_still_replays(ip):
    header, samples = read_trace(DEMO)
    assert "memory.reserved" not in open(DEMO, encoding="utf-8").read()
    g = samples[0].gpus[0]
    assert is_na(g.memory_reserved_bytes) and g.memory_reserved_bytes.reason == "not recorded"
    w = ip.run_line_magic("gpuwatch", f"--text --replay {DEMO} --count 3")
    assert w.samples_taken >= 1 and math.isnan(w.history[0]["memory.reserved"])


def test_impossible_readings_are_na_nan_and_no_bar(ip, stub_nvml):
    stub_nvml(
        {
            "driver_version": "580.65.06",
            "cuda_driver_version": 13000,
            "nvml_version": "13.580.65.06",
            "gpus": [
                fm._gpu(
                    0,
                    name="NVIDIA GeForce RTX 4090",
                    cc=(8, 9),
                    memory_total=24 * GIB,
                    power_draw_mw=3_700_000,
                    power_limit_mw=450_000,
                    util_gpu=0xFFFFFFFF,
                )
            ],
        }
    )
    w = ip.run_line_magic("gpuwatch", "--text")
    row = w.history[0]
    assert math.isnan(row["power.draw"]) and math.isnan(row["utilization.gpu"])
    assert row["power.limit"] == 450_000
    assert "NVML returned 3700000 mW for power.draw" in row["na_reasons"]
    assert "0xFFFFFFFF for utilization.gpu" in row["na_reasons"]
    text = w.text().replace("\n  ", " ")
    assert "N/A/450 W" in text and "4294967295" not in text and "3700/450" not in text
    assert "GPU 0 power draw: N/A (implausible reading: NVML returned 3700000 mW" in text
    html = render.gpu_html(w.latest.gpus[0])
    assert "100.0%" not in html and "4294967295" not in html
    info = ip.run_line_magic("cudainfo", "")
    g = info.to_dict()["gpus"][0]
    assert (
        g["power.draw"]["code"] == "implausible" and g["utilization.gpu"]["code"] == "not_available"
    )


@pytest.fixture
def hidepid(monkeypatch):
    """Psutil as under /proc hidepid.

    Pid ``b`` raises NoSuchProcess (hidepid=2), pid ``c`` AccessDenied.
    """
    hidden = {}
    real = psutil.Process

    class Hidden(real):
        def __init__(self, pid=None):
            if hidden.get(pid) == "gone":
                raise psutil.NoSuchProcess(pid)
            super().__init__(pid)

        def name(self):
            if hidden.get(self.pid) == "denied":
                raise psutil.AccessDenied(self.pid)
            return super().name()

    monkeypatch.setattr(psutil, "Process", Hidden)
    return hidden


def test_hidden_other_user_process_is_not_called_a_container(ip, stub_nvml, hidepid):
    import subprocess

    b = subprocess.Popen(["sleep", "60"])
    c = subprocess.Popen(["sleep", "61"])
    try:
        hidepid[b.pid], hidepid[c.pid] = "gone", "denied"
        stub_nvml(
            {
                "gpus": [
                    fm._gpu(
                        0, memory_used=30 * GIB, processes=[(b.pid, 20 * GIB), (c.pid, 9 * GIB)]
                    )
                ],
                "driver_version": "550.54.15",
                "nvml_version": "12.550.54.15",
                "cuda_driver_version": 12040,
            }
        )
        w = ip.run_line_magic("gpuwatch", "--text")
        procs = w.latest.gpus[0].processes
        assert [(p.name.code, p.visible) for p in procs] == [("hidden", True), ("hidden", True)]
        text = w.text().replace("\n  ", " ")
        assert "(another user's, hidden)" in text and "--pid=host" not in text
        assert "hidepid" in text and "sudo nvidia-smi" in text
        html = render.processes_html(w.latest.gpus[0])
        assert "another user&#x27;s, hidden" in html and "--pid=host" not in html
    finally:
        b.kill()
        c.kill()


def test_hidden_exited_and_other_namespace_processes_apart(monkeypatch):
    import subprocess

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that just exited
    monkeypatch.setattr(platform, "in_container", lambda: False)
    name, _, visible = sources.process_info(gone.pid)
    assert name.code == "exited" and not visible
    monkeypatch.setattr(platform, "in_container", lambda: True)
    name, _, visible = sources.process_info(gone.pid)
    assert name.code == "other_namespace" and not visible and "--pid=host" in name.reason
    # this kernel is in NVML's list: a missing pid cannot be another namespace
    name, _, _ = sources.process_info(gone.pid, host_namespace=True)
    assert name.code == "exited"
    # pid 1 exists; as non-root its cmdline may be readable; as any user psutil reads its name
    name, _, visible = sources.process_info(1)
    assert visible and (not is_na(name) or name.code == "hidden")


def test_every_na_in_the_process_table_shows_its_reason(ip, stub_nvml, monkeypatch):
    import os

    stub_nvml(
        {
            "gpus": [fm._gpu(0, processes=[(os.getpid(), None)])],
            "driver_version": "550.54.15",
            "nvml_version": "12.550.54.15",
            "cuda_driver_version": 12040,
        }
    )
    w = ip.run_line_magic("gpuwatch", "--text")
    text = w.text().replace("\n  ", " ")
    assert re.search(r"pid \d+ GPU memory: N/A \(not reported by the driver", text)


@pytest.mark.parametrize("name", sorted(fm.SCENARIOS))
def test_every_fake_scenario_samples_the_same_through_the_real_binding(name, fake_nvml, stub_nvml):
    """Fake module and real binding sample the same.

    The whole %gpuwatch reading path (LiveSource -> GpuSample) agrees between the fake module and
    the real binding over the stand-in library, for every scenario of tests/fake_nvml.py (moving
    values frozen).
    """
    from tests.core.test_nvml_stub import _frozen
    from tests.watch.fakes import live

    fake_nvml(_frozen(fm.SCENARIOS[name]))
    want = live().read(1, 1000.0).gpus
    stub_nvml(_frozen(fm.SCENARIOS[name]))
    got = live().read(1, 1000.0).gpus
    assert got == want
