"""%cudainfo through the real pynvml binding and the stand-in NVML library.

Memory as nvidia-smi reports it, a lost GPU and the ECC health fields.
"""

from __future__ import annotations

import json

import pytest

from cudamagic.core import nvml
from cudamagic.info import facts as envinfo
from cudamagic.info import health
from cudamagic.info.findings import findings
from tests import fake_nvml as fm

MIB = 1024**2


def _ids(findings):
    return [f.id for f in findings]


def test_cudainfo_memory_used_and_reserved_as_nvidia_smi(ip, stub_nvml, capsys):
    stub_nvml(fm.a100())
    info = ip.run_line_magic("cudainfo", "")
    g = info.to_dict()["gpus"][0]
    assert (g["memory.used"], g["memory.reserved"], g["memory.free"]) == (
        4 * MIB,
        908 * MIB,
        81008 * MIB,
    )
    assert g["memory.api"] == "v2"
    text = info.to_text()
    assert (
        "memory reserved" in text and "908.0 MiB" in text and "nvmlDeviceGetMemoryInfo v2" in text
    )
    ip.run_line_magic("cudainfo", "--json")
    data = json.loads(capsys.readouterr().out)
    assert (
        data["gpus"][0]["memory.reserved"] == 908 * MIB
        and data["units"]["memory.reserved"] == "bytes"
    )


def test_lost_gpu_is_an_error_without_ordinal_and_not_a_different_model(ip, stub_nvml):
    stub = stub_nvml(fm.scenario_with_gpus(2))  # two identical H100s
    stub.lose_gpu(1)
    info = ip.run_line_magic("cudainfo", "")
    lost = [f for f in info.findings if f.id == "gpu-lost"]
    assert len(lost) == 1 and lost[0].severity == "error" and "GPU 1" in lost[0].title
    assert (
        "dmesg" in lost[0].fix and "nvidia-smi -r -i 1`" in lost[0].fix and "power" in lost[0].fix
    )
    assert "index-order" not in _ids(info.findings)  # identical GPUs are not claimed to differ
    gpus = info.to_dict()["gpus"]
    assert gpus[1]["cuda_ordinal"]["code"] == "gpu_lost" and gpus[0]["cuda_ordinal"] == 0
    assert info.verdict.title != "Verdict: ready"
    # the same machine seen by a CUDA build of PyTorch that still finds one device
    nvml.reset()
    facts = envinfo.collect_facts()
    facts["torch"].update(
        cuda_build="12.4",
        variant="cu124",
        cuda_available=True,
        device_count=1,
        arch_list=["sm_80", "sm_86", "sm_90"],
    )
    found = findings(facts)
    assert "gpu-lost" in _ids(found) and found[-1].title == "Verdict: action needed"


def test_ecc_health_fields_and_findings(ip, stub_nvml):
    stub_nvml(
        {
            "driver_version": "535.104.05",
            "cuda_driver_version": 12020,
            "nvml_version": "12.535.104.05",
            "gpus": [
                fm._gpu(
                    0,
                    name="NVIDIA A100-SXM4-80GB",
                    cc=(8, 0),
                    ecc={
                        "current": 1,
                        "volatile_uncorrected": 3,
                        "aggregate_uncorrected": 5,
                        "remapped_pending": 1,
                        "remapped_failure": 1,
                    },
                ),
                fm._gpu(
                    1,
                    name="NVIDIA A100-SXM4-80GB",
                    cc=(8, 0),
                    ecc={"current": 1, "aggregate_uncorrected": 2},
                ),
                fm._gpu(2, name="NVIDIA GeForce RTX 4090", cc=(8, 9)),
            ],
        }
    )
    info = ip.run_line_magic("cudainfo", "")
    by_id = {(f.id, f.title.split(" ")[1]): f for f in info.findings if f.title.startswith("GPU")}
    assert by_id[("ecc-uncorrected", "0")].severity == "error"
    assert by_id[("memory-repair-pending", "0")].severity == "warning"
    assert by_id[("row-remap-failed", "0")].severity == "error"
    assert by_id[("ecc-uncorrected-lifetime", "1")].severity == "warning"
    assert not any(k[1] == "2" for k in by_id)
    gpus = info.to_dict()["gpus"]
    assert (
        gpus[0]["ecc.errors.uncorrected.volatile.total"] == 3
        and gpus[0]["remapped_rows.failure"] == 1
    )
    assert gpus[2]["ecc.errors.uncorrected.volatile.total"]["code"] == "not_supported"
    assert gpus[2]["ecc.errors.uncorrected.volatile.total"]["na"] == health.NO_ECC.reason
    text = info.to_text()
    assert "ECC uncorrected (since boot)" in text and "N/A (this GPU has no ECC memory" in text
    assert "row remapping failed" in text and "Yes" in text


def test_healthy_gpu_has_no_health_findings(ip, stub_nvml):
    stub_nvml(
        {
            "gpus": [fm._gpu(0, ecc={"current": 1})],
            "driver_version": "550.54.15",
            "nvml_version": "12.550.54.15",
            "cuda_driver_version": 12040,
        }
    )
    info = ip.run_line_magic("cudainfo", "")
    assert not {
        "gpu-lost",
        "ecc-uncorrected",
        "ecc-uncorrected-lifetime",
        "memory-repair-pending",
        "row-remap-failed",
    } & set(_ids(info.findings))
    assert info.to_dict()["gpus"][0]["ecc.errors.uncorrected.volatile.total"] == 0


@pytest.mark.parametrize("name", sorted(fm.SCENARIOS))
def test_every_fake_scenario_gives_the_same_gpu_facts_through_the_real_binding(
    name, fake_nvml, stub_nvml
):
    from tests.core.test_nvml_stub import _frozen

    def gpu_facts():
        n = nvml.device_count()
        return envinfo._gpu_facts(n) if isinstance(n, int) else n

    fake_nvml(_frozen(fm.SCENARIOS[name]))
    want = gpu_facts()
    stub_nvml(_frozen(fm.SCENARIOS[name]))
    assert gpu_facts() == want
