"""%cudainfo on a presented Windows.

Driver model per GPU, where NVML was loaded from, and the nvidia-smi.exe / nvml.dll copies that
driver updates leave behind.
"""

import os
import pathlib

import pytest

from cudamagic.core import platform
from cudamagic.core.na import NA
from tests.inline import plain

# file versions of the copies: 31.0.15.4633 is driver 546.33 (running), 31.0.15.3713 is 537.13 (an
# older one)
CURRENT, OLD = "31.0.15.4633", "31.0.15.3713"


@pytest.fixture
def laptop(monkeypatch, tmp_path):
    """A Windows disk with three nvidia-smi.exe copies; PATH holds the old driver's.

    Two DriverStore packages and one LastGood.Tmp leftover; the folder on PATH holds the old
    driver's copy, as after searching the disk and adding the first hit.
    """
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    store = tmp_path / "Windows" / "System32" / "DriverStore" / "FileRepository"
    versions = {}
    for folder, version in (
        ("nv_dispi.inf_amd64_old", OLD),
        ("nv_dispi.inf_amd64_new", CURRENT),
        ("nv_dispi.inf_amd64_LastGood.Tmp", OLD),
    ):
        (store / folder).mkdir(parents=True)
        for name in ("nvidia-smi.exe", "nvml.dll"):
            f = store / folder / name
            f.write_bytes(b"MZ")
            f.chmod(0o755)
            versions[str(f)] = version
    monkeypatch.setattr(platform, "windows_file_version", lambda path: versions.get(str(path)))
    monkeypatch.setenv("SystemRoot", str(tmp_path / "Windows"))
    monkeypatch.setenv(
        "PATH", str(store / "nv_dispi.inf_amd64_old") + os.pathsep + os.environ.get("PATH", "")
    )
    return store


def test_copies_carry_the_driver_they_belong_to(laptop):
    copies = platform.nvidia_tool_copies("nvidia-smi")
    assert [(pathlib.Path(c["path"]).parent.name, c["driver_version"]) for c in copies] == [
        ("nv_dispi.inf_amd64_LastGood.Tmp", "537.13"),
        ("nv_dispi.inf_amd64_new", "546.33"),
        ("nv_dispi.inf_amd64_old", "537.13"),
    ]
    assert platform.which("nvidia-smi").endswith("nv_dispi.inf_amd64_old/nvidia-smi.exe")
    assert platform.driver_version_from_file_version("32.0.15.6094") == "560.94"
    assert platform.driver_version_from_file_version("garbage") is None


def test_cudainfo_names_the_stale_nvidia_smi_and_what_to_run(ip, fake_nvml, laptop):
    fake_nvml("windows_wddm")
    report = ip.run_line_magic("cudainfo", "")
    by_id = {f.id: f for f in report.findings}
    stale = by_id["nvidia-smi-stale"]
    assert stale.severity == "warning" and "537.13, not the running 546.33" in stale.title
    assert "3 copies" in stale.cause and "LastGood.Tmp" in stale.cause
    assert stale.fix.startswith('run "') and "nv_dispi.inf_amd64_new" in stale.fix
    assert "WDDM" in by_id["wddm"].title and "GPU Process Memory counters" in by_id["wddm"].cause
    text = report.to_text()
    assert "driver model" in text and "WDDM" in text
    assert "C:\\Windows\\System32\\nvml.dll" in text  # where NVML was loaded from
    assert report.facts["gpus"][0]["driver_model.current"] == "WDDM"
    page = plain(report._repr_html_())
    assert (
        '<span title="nvmlDeviceGetDriverModel' in page and '<td class="cm-prose">WDDM</td>' in page
    )


def test_matching_nvidia_smi_on_path_is_not_a_finding(ip, fake_nvml, laptop, monkeypatch):
    monkeypatch.setenv("PATH", str(laptop / "nv_dispi.inf_amd64_new"))
    fake_nvml("windows_tcc")
    report = ip.run_line_magic("cudainfo", "")
    ids = [f.id for f in report.findings]
    assert "nvidia-smi-stale" not in ids and "wddm" not in ids
    assert report.facts["gpus"][0]["driver_model.current"] == "TCC"


def test_stale_nvml_dll_loaded_is_a_finding(ip, fake_nvml, laptop):
    fake = fake_nvml("windows_wddm")
    fake.module.nvmlLib._name = str(laptop / "nv_dispi.inf_amd64_LastGood.Tmp" / "nvml.dll")
    report = ip.run_line_magic("cudainfo", "")
    f = {x.id: x for x in report.findings}["nvml-stale"]
    assert "537.13" in f.title and "546.33" in f.title and "nv_dispi.inf_amd64_new" in f.fix


def test_linux_report_has_no_driver_model_line_and_no_windows_section(ip, fake_nvml):
    fake_nvml("one_gpu")
    report = ip.run_line_magic("cudainfo", "")
    assert "windows" not in report.facts and "driver model" not in report.to_text()
    assert (
        "driver model" not in report._repr_html_()
    )  # Linux: NVML answers "not supported", so no column
    assert not any(f.id in ("wddm", "nvidia-smi-stale", "nvml-stale") for f in report.findings)


def test_windows_facts_read_the_given_environment_not_the_process_one(
    fake_nvml, laptop, monkeypatch
):
    from cudamagic.info import facts

    fake_nvml("windows_wddm")
    root = os.environ["SystemRoot"]
    monkeypatch.delenv("SystemRoot")
    win = facts.collect_facts(
        env={"SystemRoot": root, "PATH": str(laptop / "nv_dispi.inf_amd64_new")}
    )["windows"]
    assert [pathlib.Path(c["path"]).name for c in win["nvidia-smi"]] == ["nvidia-smi.exe"] * 3
    assert [pathlib.Path(c["path"]).name for c in win["nvml"]] == ["nvml.dll"] * 3
    assert pathlib.Path(win["nvidia-smi on PATH"]).parent.name == "nv_dispi.inf_amd64_new"
    win = facts.collect_facts(env={"SystemRoot": root, "PATH": ""})["windows"]
    assert win["nvidia-smi on PATH"] == NA("no nvidia-smi.exe on PATH", "not_installed")
