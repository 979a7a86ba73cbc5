"""Windows on the watch side.

Windows on the watch side: WDDM/TCC driver model, N/A process memory with its reason, "Insufficient
Permissions" rows, and per-process GPU memory from Windows' "GPU Process Memory" counters (through a
fake counter source: there is no Windows machine here).
"""

import re

import pytest

from cudamagic.core import nvml, wincounters
from cudamagic.core.na import is_na
from cudamagic.watch import trace
from cudamagic.watch.sources import LiveSource
from tests import fake_nvml as fm


@pytest.fixture
def counters(monkeypatch):
    def install(values=fm.WINDOWS_LAPTOP_COUNTERS):
        src = fm.FakeCounterSource(values)
        wincounters.set_source(src)
        return src

    yield install
    wincounters.set_source(None)


@pytest.fixture
def presented_windows(monkeypatch):
    from cudamagic.core import platform

    monkeypatch.setattr(platform, "SYSTEM", "windows")
    return monkeypatch


def _rows(text):
    """Process rows of the text table: ``{pid: (name, type, memory)}``."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\s*0\s+(\d{7})\s+(.*?)\s{2,}(C\+G|C|G)\s+(.*?)\s*$", line)
        if m:
            out[int(m.group(1))] = (m.group(2), m.group(3), m.group(4))
    return out


def test_aggregate_sums_adapters_and_skips_other_instances():
    got = wincounters.aggregate(fm.WINDOWS_LAPTOP_COUNTERS)
    assert len(got) == 10 and 0 not in got  # "_Total" is no process
    explorer = got[4100104]
    assert explorer.dedicated_bytes == 141 * fm.MIB and explorer.shared_bytes == (36 + 5) * fm.MIB
    assert set(explorer.adapters) == {
        "luid_0x00000000_0x0000D1E3_phys_0",
        "luid_0x00000000_0x0000A2F1_phys_0",
    }
    assert sum(p.dedicated_bytes for p in got.values()) == 686 * fm.MIB
    assert wincounters.parse_instance("pid_12_luid_0x0_0x1_phys_0") == (12, "luid_0x0_0x1_phys_0")
    assert wincounters.parse_instance("pid_12_luid_0x0_0x1_phys_0_eng_0_engtype_3D") is None


def test_counters_off_windows_say_why(presented_windows):
    presented_windows.setattr("cudamagic.core.platform.SYSTEM", "linux")
    wincounters.set_source(None)
    got = wincounters.read_process_memory()
    assert is_na(got) and "only on Windows" in got.reason


def test_counters_without_pywin32_say_what_to_install(presented_windows):
    wincounters.set_source(None)
    presented_windows.setitem(
        __import__("sys").modules, "win32pdh", None
    )  # import fails as without pywin32
    got = wincounters.read_process_memory()
    wincounters.set_source(None)
    assert is_na(got) and got.code == "no_binding" and "pip install pywin32" in got.reason


def test_wddm_process_memory_is_na_with_the_reason_without_counters(fake_nvml, presented_windows):
    fake_nvml("windows_wddm")
    wincounters.set_source(None)
    presented_windows.setitem(__import__("sys").modules, "win32pdh", None)
    procs = nvml.device(0).processes()
    assert len(procs) == 10 and {p.type for p in procs} == {"C+G"}
    assert all(is_na(p.used_memory_bytes) and p.used_memory_bytes.code == "wddm" for p in procs)
    assert "Windows manages GPU memory under WDDM" in procs[0].used_memory_bytes.reason
    sample = LiveSource(host=None).read(0, 0.0)
    wincounters.set_source(None)
    g = sample.gpus[0]
    assert g.driver_model == "WDDM"
    reasons = {p.used_memory_bytes.reason for p in g.processes}
    assert (
        len(reasons) == 1
        and "WDDM" in reasons.pop()
        and "pip install pywin32" in g.processes[0].used_memory_bytes.reason
    )


def test_the_notes_table_with_memory_from_the_counters(ip, fake_nvml, counters, presented_windows):
    fake = fake_nvml("windows_wddm")
    src = counters()
    watch = ip.run_line_magic("gpuwatch", "--text")
    text = ip.display_formatter.format(watch)[0]["text/plain"]
    assert "GeForce RTX 2060 (WDDM)" in text and "0.7/8.0 GiB" in text
    rows = _rows(text)
    assert len(rows) == 10 and {t for _, t, _ in rows.values()} == {"C+G"}
    assert rows[4100104] == ("C:\\Windows\\explorer.exe", "C+G", "141.0 MiB *")
    assert rows[4100524][2] == "176.0 MiB *" and rows[4100940][2] == "64.0 MiB *"
    assert (
        rows[4100316][0]
        == "\u2026" + "StartMenuExperienceHost_cw5n1h2txyewy\\StartMenuExperienceHost.exe"[-43:]
    )
    assert rows[4101044] == ("(other user or system)", "C+G", "103.0 MiB *")
    notes = " ".join(text.split())  # notes wrap at the text width
    assert 'Windows "GPU Process Memory" counters (Dedicated Usage' in notes
    assert "shared (system RAM) usage of these processes: 167.0 MiB" in notes
    assert "Insufficient Permissions" in notes and "another user or of the system" in notes
    assert src.reads == 1  # one read per sample, not one per process
    assert fake.call_count("nvmlDeviceGetDriverModel", 0) == 1


def test_counters_are_not_read_when_nvml_gives_numbers(fake_nvml, counters, presented_windows):
    fake_nvml("windows_tcc")
    src = counters()
    sample = LiveSource().read(0, 0.0)
    g = sample.gpus[0]
    assert g.driver_model == "TCC"
    (p,) = g.processes
    assert p.used_memory_bytes == 1090 * fm.MIB and p.memory_source == "NVML" and src.reads == 0
    assert p.name.endswith("python.exe")


def test_linux_gpus_have_no_driver_model_and_no_counter_reads(fake_nvml, counters):
    fake_nvml("process_in_other_pid_namespace")
    src = counters()
    g = LiveSource().read(0, 0.0).gpus[0]
    assert is_na(g.driver_model) and g.processes[0].used_memory_bytes == 1024**3 and src.reads == 0
    assert not g.processes[0].visible  # still another PID namespace on Linux


def test_windows_sample_survives_a_trace_round_trip(
    fake_nvml, counters, presented_windows, tmp_path
):
    fake_nvml("windows_wddm")
    counters()
    s = LiveSource().read(0, 0.0)
    log = tmp_path / "w.jsonl"
    w = trace.TraceWriter(str(log), source="synthetic")
    w.write(s)
    w.close()
    _, (back,) = trace.read_trace(str(log))
    g0, g1 = s.gpus[0], back.gpus[0]
    assert g1.driver_model == "WDDM"
    assert [
        (p.pid, p.used_memory_bytes, p.shared_memory_bytes, p.memory_source) for p in g1.processes
    ] == [
        (p.pid, p.used_memory_bytes, p.shared_memory_bytes, p.memory_source) for p in g0.processes
    ]


def test_library_path_and_process_name(fake_nvml):
    fake_nvml("windows_wddm")
    assert nvml.library_path() == "C:\\Windows\\System32\\nvml.dll"
    assert nvml.process_name(4100104) == "C:\\Windows\\explorer.exe"
    assert nvml.process_name(4101044).code == "no_permission"


def test_the_synthetic_windows_trace_replays_with_counter_memory(ip):
    import os

    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
        "examples",
        "trace_windows.jsonl",
    )
    header, samples = trace.read_trace(path)
    assert header["source"].startswith("SYNTHETIC") and len(samples) == 20
    watch = ip.run_line_magic("gpuwatch", f"--replay {path} --text --count 20 --interval 0.05")
    text = ip.display_formatter.format(watch)[0]["text/plain"]
    assert "REPLAY of" in text and "GeForce RTX 2060 (WDDM)" in text
    rows = _rows(text)
    assert (
        len(rows) == 10 and rows[4100940][2] == "1.6 GiB *"
    )  # python.exe after its training started
    assert rows[4101044][0] == "(other user or system)"
    first = {p.pid: p for p in samples[0].gpus[0].processes}
    assert first[4100940].used_memory_bytes == 64 * fm.MIB
    assert first[4100940].memory_source == wincounters.SOURCE_LABEL
