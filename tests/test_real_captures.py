"""Real machines' ``nvidia-smi -q -x`` captures played through NVML, field by field.

cudamagic gives the capture's values in nvidia-smi's units, and N/A (with a reason) exactly where
it says N/A. Each capture (``tests/data/real``, ``PROVENANCE.md``) becomes a scenario
(``tests/real_captures.py``) played by the stand-in library under the real ``pynvml``, or by the
fake where the capture has what only the fake plays (Windows' driver model, graphics processes).
``%cudainfo --json`` and ``%gpuwatch``'s latest sample and history are compared with the capture.
"""

from __future__ import annotations

import json
import math
import os
import sys

import pytest

from cudamagic.core.na import is_na
from tests import real_captures as rc

MIB = rc.MIB
CAPTURES = rc.captures()
IDS = [os.path.basename(p).split(".")[0] for p in CAPTURES]
NO_DOCTYPE = {"telegraf-gtx-1660-ti-r418.xml"}


def _same(got, want, scale=1, where=""):
    """``got`` (cudamagic, raw unit; NA or ``{"na": ...}`` from JSON) equals ``want`` (capture)."""
    if want == rc.NA_TEXT:
        reason = got.get("na") if isinstance(got, dict) else getattr(got, "reason", None)
        assert reason, f"{where}: the capture says N/A, cudamagic gives {got!r}"
        return
    assert not is_na(got) and not isinstance(got, dict), f"{where}: {got!r} for {want!r}"
    assert got == round(want * scale), f"{where}: {got!r} != {want!r} x {scale}"


@pytest.mark.parametrize("path", CAPTURES, ids=IDS)
def test_each_capture_is_a_full_nvidia_smi_log(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    name = os.path.basename(path)
    if name.endswith(".q.txt"):  # nvidia-smi -q, the same report as text
        assert text.startswith(rc.Q_HEADER + "\n\nTimestamp ")
    else:  # the one exception is in PROVENANCE.md: the project's R418 copy lost the line
        assert '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device' in text or name in NO_DOCTYPE
    cap = rc.parse(path)
    assert cap["timestamp"] and cap["driver_version"] and cap["gpus"]
    with open(os.path.join(rc.HERE, "PROVENANCE.md"), encoding="utf-8") as fh:
        assert f"`{name}`" in fh.read()


@pytest.fixture
def play(fake_nvml, stub_nvml, monkeypatch):
    """Play a capture: the stand-in library where it can, else the fake.

    A Windows capture plays on a presented Windows without the performance counters, so WDDM
    process memory stays N/A, as the capture says.
    """
    from cudamagic.core import platform, wincounters

    def install(cap):
        if rc.is_windows(cap):
            monkeypatch.setattr(platform, "SYSTEM", "windows")
            monkeypatch.setitem(sys.modules, "win32pdh", None)
            wincounters.set_source(None)
        sc = rc.scenario(cap)
        return ("fake", fake_nvml(sc)) if rc.needs_fake(cap) else ("stub", stub_nvml(sc))

    yield install
    wincounters.set_source(None)


@pytest.mark.parametrize("path", CAPTURES, ids=IDS)
def test_cudainfo_json_gives_the_captures_values(path, ip, play, capsys):
    cap = rc.parse(path)
    play(cap)
    ip.run_line_magic("cudainfo", "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["driver"]["driver_version"] == cap["driver_version"]
    assert data["driver"]["cuda_driver_version"] == cap["cuda_version"]
    assert len(data["gpus"]) == len(cap["gpus"])
    for want, got in zip(cap["gpus"], data["gpus"], strict=True):
        assert (got["name"], got["uuid"]) == (want["name"], want["uuid"])
        for key, field, scale in (
            ("memory.total", "memory_total_mib", MIB),
            ("memory.used", "memory_used_mib", MIB),
            ("memory.reserved", "memory_reserved_mib", MIB),
            ("utilization.gpu", "util_gpu_pct", 1),
            ("temperature.gpu", "temperature_c", 1),
            ("power.draw", "power_draw_w", 1000),
            ("power.limit", "power_limit_w", 1000),
            ("ecc.errors.uncorrected.volatile.total", "ecc_volatile_uncorrected", 1),
            ("ecc.errors.uncorrected.aggregate.total", "ecc_aggregate_uncorrected", 1),
        ):
            _same(got[key], want[field], scale, f"{key} of {want['name']}")
        if want["ecc_mode"] == "Enabled":
            assert got["ecc.mode.current"] == "Enabled"
        else:  # Disabled or N/A: nvidia-smi shows no counts, cudamagic an NA that says why
            assert got["ecc.mode.current"]["na"]
        if want["driver_model"] == rc.NA_TEXT:
            assert got["driver_model.current"]["na"]
        else:
            assert got["driver_model.current"] == want["driver_model"]
        # each MIG instance's memory (nvidia-smi's mig_device fb_memory_usage)
        assert [(m["memory.total"], m["memory.used"]) for m in got["mig_devices"]] == [
            (total * MIB, used * MIB) for _, total, used in want["mig_devices"]
        ]
        assert got["mig.mode.current"] == (
            "Enabled" if want["mig_mode"] == "Enabled" else "Disabled"
        ) or (want["mig_mode"] == rc.NA_TEXT and got["mig.mode.current"] == "Disabled")


@pytest.mark.parametrize("path", CAPTURES, ids=IDS)
def test_gpuwatch_sample_and_history_give_the_captures_values(path, ip, play):
    cap = rc.parse(path)
    play(cap)
    w = ip.run_line_magic("gpuwatch", "--text")
    try:
        gpus, row = w.latest.gpus, w.history
    finally:
        ip.run_line_magic("gpuwatch", "--stop")
    assert len(gpus) == len(cap["gpus"])
    for i, (want, g) in enumerate(zip(cap["gpus"], gpus, strict=True)):
        where = f"GPU {i} {want['name']}"
        for attr, field, scale in (
            ("gpu_util_pct", "util_gpu_pct", 1),
            ("mem_util_pct", "util_mem_pct", 1),
            ("memory_used_bytes", "memory_used_mib", MIB),
            ("memory_total_bytes", "memory_total_mib", MIB),
            ("memory_reserved_bytes", "memory_reserved_mib", MIB),
            ("temperature_c", "temperature_c", 1),
            ("power_draw_mw", "power_draw_w", 1000),
            ("power_limit_mw", "power_limit_w", 1000),
            ("fan_speed_pct", "fan_pct", 1),
            ("clock_sm_mhz", "clock_sm_mhz", 1),
            ("clock_mem_mhz", "clock_mem_mhz", 1),
            ("pstate", "pstate", 1),
        ):
            if want["mig_mode"] == "Enabled" and attr in ("gpu_util_pct", "mem_util_pct"):
                assert is_na(getattr(g, attr))  # MIG: not reported per GPU, as nvidia-smi
                continue
            _same(getattr(g, attr), want[field], scale, f"{attr} of {where}")
        if want["driver_model"] != rc.NA_TEXT:
            assert g.driver_model == want["driver_model"]
        assert [(m.memory_total_bytes, m.memory_used_bytes) for m in g.mig_devices] == [
            (total * MIB, used * MIB) for _, total, used in want["mig_devices"]
        ]
        # each process and its memory (nvidia-smi's used_memory; N/A under WDDM)
        got = {p.pid: p.used_memory_bytes for p in g.processes}
        assert set(got) == {pid for pid, *_ in want["processes"]}, where
        assert {p.pid: p.type for p in g.processes} == {
            pid: kind for pid, kind, *_ in want["processes"]
        }, where  # nvidia-smi's C, G or C+G
        for pid, _, _, used in want["processes"]:
            _same(got[pid], used, MIB, f"process {pid} on {where}")
        # the history rows (nvidia-smi keys, raw units, NaN for N/A: its reason is on the sample)
        hist = [r for r in row if r["index"] == i][-1]
        for key, field, scale in (
            ("memory.used", "memory_used_mib", MIB),
            ("memory.total", "memory_total_mib", MIB),
            ("power.draw", "power_draw_w", 1000),
            ("temperature.gpu", "temperature_c", 1),
            ("clocks.sm", "clock_sm_mhz", 1),
        ):
            if want[field] == rc.NA_TEXT:
                assert math.isnan(hist[key]), f"history {key} of {where}: {hist[key]!r}"
            else:
                assert hist[key] == round(want[field] * scale), f"history {key} of {where}"


def _fake_nvidia_smi(tmp_path, monkeypatch, capture):
    """A ``nvidia-smi`` on PATH that prints ``capture`` for ``-q -x``."""
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\ncat {capture}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")


XML_CAPTURES = [p for p in CAPTURES if p.endswith(".xml")]


@pytest.mark.parametrize("path", XML_CAPTURES, ids=[os.path.basename(p) for p in XML_CAPTURES])
def test_gpu_check_xml_agrees_with_the_machine_it_reads(path, tmp_path, monkeypatch, play):
    """scripts/gpu_check.py --xml on a machine whose nvidia-smi and NVML say the capture."""
    import gpu_check  # scripts/ is on sys.path (tests/conftest.py)

    cap = rc.parse(path)
    play(cap)
    _fake_nvidia_smi(tmp_path, monkeypatch, path)
    monkeypatch.setattr(gpu_check, "results", [])
    gpu_check.check_xml(str(tmp_path / "saved.xml"))
    assert [n for n, ok in gpu_check.results if ok is False] == []
    assert sum(ok is True for _, ok in gpu_check.results) >= 12
    assert (tmp_path / "saved.xml").read_text() == open(path).read()


def test_gpu_check_xml_reports_a_value_that_differs(tmp_path, monkeypatch, play, capsys):
    """``gpu_check.py --xml``: a differing value fails the run; a SKIP is not counted a pass."""
    import gpu_check

    path = os.path.join(rc.HERE, "telegraf-tesla-t4.xml")
    cap = rc.parse(path)
    cap["gpus"][0]["memory_total_mib"] -= 1024  # NVML says 1 GiB less than nvidia-smi
    cap["gpus"][0]["processes"] = cap["gpus"][0]["processes"][:1]  # and misses a process
    play(cap)
    _fake_nvidia_smi(tmp_path, monkeypatch, path)
    monkeypatch.setattr(gpu_check, "results", [])
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--xml"])
    assert gpu_check.main() == 1
    failed = {n for n, ok in gpu_check.results if ok is False}
    assert {"xml GPU 0 memory.total (%cudainfo)", "xml GPU 0 process 5762"} <= failed
    counts = [sum(ok is k for _, ok in gpu_check.results) for k in (True, None, False)]
    assert counts[1] >= 1  # the fan: N/A on both sides
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"{counts[0]} passed, {counts[1]} skipped, {counts[2]} failed"


def test_gpu_check_xml_reports_a_differing_mode_name_and_mig_instance(tmp_path, monkeypatch, play):
    import gpu_check

    path = os.path.join(rc.HERE, "telegraf-a100-sxm4-80gb-mig-r535.xml")
    cap = rc.parse(path)
    gi, total, used = cap["gpus"][0]["mig_devices"][1]
    cap["gpus"][0]["mig_devices"][1] = (gi, total, used + 1024)  # NVML: 1 GiB more in use
    cap["gpus"][0]["ecc_mode"] = "N/A"  # NVML: no ECC
    cap["gpus"][0]["name"] = "NVIDIA A100 80GB PCIe"
    play(cap)
    _fake_nvidia_smi(tmp_path, monkeypatch, path)
    monkeypatch.setattr(gpu_check, "results", [])
    gpu_check.check_xml()
    failed = {n for n, ok in gpu_check.results if ok is False}
    assert failed == {
        "xml GPU 0 name",
        "xml GPU 0 ecc.mode.current",
        "xml GPU 0 ecc.errors.uncorrected.volatile.total (%cudainfo)",
        "xml GPU 0 ecc.errors.uncorrected.aggregate.total (%cudainfo)",
        "xml GPU 0 MIG instance 1 memory.used",
    }


def test_the_stand_in_library_under_the_real_binding_plays_most_captures():
    """The fake plays only what the stand-in cannot: Windows, graphics processes, one ECC count."""
    on_stub = [os.path.basename(p) for p in CAPTURES if not rc.needs_fake(rc.parse(p))]
    assert len(on_stub) >= 4, on_stub
