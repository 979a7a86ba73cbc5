"""Tier 1.

Collecting the facts through the fake NVML: GPUs, MIG, CUDA ordinals under CUDA_VISIBLE_DEVICES and
CUDA_DEVICE_ORDER, a missing PyTorch, a failing NVML call.
"""

from cudamagic.core.na import NA, is_na
from cudamagic.info.facts import collect, collect_facts, map_cuda_ordinals
from cudamagic.info.findings import findings
from tests.info.factsets import facts_for, ids


def test_no_driver_reports_torch_and_reason(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    assert f["torch"]["installed"] and f["torch"]["version"].startswith("2.")
    found = findings(f)
    nv = [x for x in found if x.id == "nvml-unavailable"][0]
    assert "no NVIDIA driver" in nv.cause
    assert f["gpus"] == []


def test_mig_and_cvd_mig_uuid(fake_nvml):
    env = {"CUDA_VISIBLE_DEVICES": "MIG-11111111-2222-3333-4444-555555555555"}
    f = facts_for(fake_nvml, "mig", env=env)
    g = f["gpus"][0]
    assert g["utilization.gpu"] == NA("not reported in MIG mode", "mig")
    assert len(g["mig_devices"]) == 2
    assert g["cuda_ordinal"] == 0 and g["cuda_mig_uuid"].startswith("MIG-1111")
    found = findings(f)
    assert "mig" in ids(found) and "cvd-unknown" not in ids(found)


def test_cvd_hides_all(fake_nvml):
    f = facts_for(fake_nvml, "gpu_without_fan", env={"CUDA_VISIBLE_DEVICES": ""})
    assert all(is_na(g["cuda_ordinal"]) for g in f["gpus"])
    assert "cvd-hides-all" in ids(findings(f))


def test_cvd_unknown_index(fake_nvml):
    f = facts_for(
        fake_nvml,
        "gpu_without_fan",
        env={"CUDA_VISIBLE_DEVICES": "1,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert f["gpus"][1]["cuda_ordinal"] == 0 and is_na(f["gpus"][0]["cuda_ordinal"])
    found = findings(f)
    bad = [x for x in found if x.id == "cvd-unknown"][0]
    assert bad.cause.startswith("5 in CUDA_VISIBLE_DEVICES='1,5'")  # 5 is blamed, not 1


def test_index_order_uncertain_with_mixed_gpus(fake_nvml):
    f = facts_for(fake_nvml, "gpu_without_fan")  # H100 + T4, default FASTEST_FIRST
    assert all(
        is_na(g["cuda_ordinal"]) and g["cuda_ordinal"].code == "uncertain" for g in f["gpus"]
    )
    assert "index-order" in ids(findings(f))
    f = facts_for(
        fake_nvml,
        "gpu_without_fan",
        env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,0"},
    )
    assert [g["cuda_ordinal"] for g in f["gpus"]] == [1, 0]
    assert "index-map" in ids(findings(f))


def test_cvd_uuid_maps_by_uuid(fake_nvml):
    f = facts_for(
        fake_nvml,
        "gpu_without_fan",
        env={"CUDA_VISIBLE_DEVICES": "GPU-00000001", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
    )
    assert f["gpus"][1]["cuda_ordinal"] == 0


def test_mapping_from_initialised_cuda_uses_uuid(fake_nvml):
    fake_nvml("gpu_without_fan")
    f = collect_facts(env={})
    gpus = f["gpus"]
    tdev = [
        {"ordinal": 0, "uuid": gpus[1]["uuid"], "pci.bus_id": None},
        {"ordinal": 1, "uuid": gpus[0]["uuid"], "pci.bus_id": None},
    ]
    res = map_cuda_ordinals(gpus, {}, tdev)
    assert res["certain"] and [g["cuda_ordinal"] for g in gpus] == [1, 0]


def test_mapping_note_without_gpus(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    assert f["mapping"]["note"].startswith("no GPU visible")


def test_bytes_names_give_the_same_report_as_str_names(fake_nvml):
    from tests.fake_nvml import SCENARIOS

    out = []
    for as_bytes in (True, False):
        fake_nvml(dict(SCENARIOS["bytes_names"], bytes=as_bytes))
        r = collect(env={})
        out.append((r.to_text(), r.to_dict()["gpus"]))
    assert out[0] == out[1]
    assert "Tesla T4" in out[0][0] and "b'Tesla" not in out[0][0]


def test_torch_missing(monkeypatch, fake_nvml):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *a, **k)

    fake_nvml("driver_470")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    r = collect(env={})
    assert not r.facts["torch"]["installed"]
    err = r.to_dict()["torch"]["error"]
    assert err["code"] == "not_installed" and "(ImportError: No module named 'torch')" in err["na"]
    assert "torch-missing" in ids(r.findings)
    assert "PyTorch is not importable" in r.to_text()


def test_nvml_call_raising_anything_still_renders(fake_nvml):
    fake = fake_nvml("one_gpu")

    def boom(h):
        raise RuntimeError("weird binding failure")

    fake.module.nvmlDeviceGetTemperature = lambda h, s: boom(h)
    r = collect(env={})
    t = r.facts["gpus"][0]["temperature.gpu"]
    assert is_na(t) and "weird binding failure" in t.reason
    assert "weird binding failure" in r._repr_html_()


def test_nvcc_runs_while_everything_else_is_read(fake_nvml, monkeypatch):
    """`nvcc -V` (the one subprocess) starts first and its answer is taken last.

    The environment, read last of the rest, is read while it still runs; the facts are the same,
    section for section, as collect_facts gives.
    """
    import threading

    from cudamagic.info import facts as facts_mod

    fake_nvml("gpu_without_fan")
    env_read, seen = threading.Event(), {}
    real_nvcc, real_env = facts_mod.nvcc_info, facts_mod._env_facts

    def nvcc_waiting_for_the_rest(path, timeout_s):
        seen["rest read while nvcc ran"] = env_read.wait(timeout=5)
        return real_nvcc(path, timeout_s=timeout_s)

    def env_facts(env):
        out = real_env(env)
        env_read.set()
        return out

    monkeypatch.setattr(facts_mod, "nvcc_info", nvcc_waiting_for_the_rest)
    monkeypatch.setattr(facts_mod, "_env_facts", env_facts)
    env = {"PATH": "/usr/local/bin:/usr/bin", "CUDA_VISIBLE_DEVICES": "1"}
    report = collect(env=env)
    assert seen == {"rest read while nvcc ran": True}
    monkeypatch.setattr(facts_mod, "nvcc_info", real_nvcc)
    plain = collect_facts(env=env)
    assert (
        list(report.facts)
        == list(plain)
        == [
            "python",
            "torch",
            "driver",
            "toolkit",
            "gpus",
            "mapping",
            "env",
            "cuda_visible_devices",
        ]
    )
    assert (
        report.facts["toolkit"] == plain["toolkit"] and report.facts["mapping"] == plain["mapping"]
    )
    assert [g["cuda_ordinal"] for g in report.facts["gpus"]] == [
        g["cuda_ordinal"] for g in plain["gpus"]
    ]
