"""Tier 1: parsers and compatibility rules behind %cudainfo, table-driven, with field reports as cases."""

import os
import stat

import pytest

from cudamagic.info import facts as envinfo
from cudamagic.core.na import NA, is_na


@pytest.mark.parametrize("value, expected", [
    (7605, "7.6.5"), (8902, "8.9.2"), (8100, "8.1.0"), (90100, "9.1.0"), (91002, "9.10.2"), (90501, "9.5.1"),
    (90000, "9.0.0"), (8000, "8.0.0"), (99999, "9.99.99"),  # the 9.x boundary and both ends of the 9.x encoding
])
def test_decode_cudnn(value, expected):
    assert envinfo.decode_cudnn_version(value) == expected


@pytest.mark.parametrize("value", [None, 0, -5, "garbage"])
def test_decode_cudnn_na(value):
    assert is_na(envinfo.decode_cudnn_version(value))


NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0"""
NVCC_101 = "Cuda compilation tools, release 10.1, V10.1.243"


@pytest.mark.parametrize("text, release, build", [(NVCC_13, "13.0", "13.0.88"), (NVCC_101, "10.1", "10.1.243")])
def test_parse_nvcc(text, release, build):
    assert envinfo.parse_nvcc_version(text) == {"release": release, "build": build}


@pytest.mark.parametrize("text", ["", "Segmentation fault", "\x00\xff garbage", None])
def test_parse_nvcc_garbage(text):
    assert is_na(envinfo.parse_nvcc_version(text))


@pytest.mark.parametrize("version, kind, variant, tag", [
    ("2.3.1+cpu", "cpu", "cpu", None), ("2.13.0+cpu", "cpu", "cpu", None), ("2.4.0+cu121", "cuda", "cu121", "12.1"),
    ("2.6.0+cu126", "cuda", "cu126", "12.6"), ("1.13.1+cu117", "cuda", "cu117", "11.7"),
    ("2.5.0", "default", "", None), ("2.4.0+rocm6.1", "rocm", "rocm6.1", None),
    ("2.6.0a0+git1234abc", "source", "git1234abc", None), ("2.9.0+cu130", "cuda", "cu130", "13.0"),
])
def test_parse_torch_version(version, kind, variant, tag):
    v = envinfo.parse_torch_version(version)
    assert (v["kind"], v["variant"], v["cuda_tag"]) == (kind, variant, tag)


@pytest.mark.parametrize("raw, kinds, hides_all, invalid, ignored", [
    (None, [], False, None, []),
    ("", [], True, None, []),
    ("-1", [], True, "-1", []),
    ("-1,0", [], True, "-1", ["0"]),
    ("0", ["index"], False, None, []),
    ("1,0", ["index", "index"], False, None, []),
    ("0,foo,1", ["index"], False, "foo", ["1"]),
    ("0,foo,1,GPU-ab", ["index"], False, "foo", ["1", "GPU-ab"]),
    ("0,1,bar", ["index", "index"], False, "bar", []),
    ("GPU-8932f937-d72c", ["uuid"], False, None, []),
    ("MIG-11111111-2222-3333-4444-555555555555", ["mig"], False, None, []),
    ("MIG-GPU-8932f937/1/0", ["mig"], False, None, []),
    (" 0 , 1 ", ["index", "index"], False, None, []),
])
def test_parse_cuda_visible_devices(raw, kinds, hides_all, invalid, ignored):
    r = envinfo.parse_cuda_visible_devices(raw)
    assert [e["kind"] for e in r["entries"]] == kinds
    assert r["hides_all"] == hides_all
    assert r["invalid"] == invalid
    assert r["ignored"] == ignored  # the entries CUDA drops after the first invalid one, in order


@pytest.mark.parametrize("cc, arch, ok", [
    ("8.6", ["sm_80", "sm_90"], True),         # same major, lower minor cubin runs
    ("9.0", ["sm_80", "sm_86"], False),        # newer major, no PTX
    ("9.0", ["sm_80", "compute_80"], True),    # PTX JIT
    ("3.7", ["sm_50", "sm_60", "sm_70"], False),  # too old for the build (Kepler)
    ("12.0", ["sm_90", "sm_100", "sm_120"], True),
])
def test_arch_supported(cc, arch, ok):
    assert envinfo.arch_supported(cc, arch) is ok


@pytest.mark.parametrize("driver, wheel", [((11, 4), "cu118"), ((12, 8), "cu128"), ((12, 4), "cu124"),
                                            ((12, 5), "cu124"), ((13, 0), "cu130"), ((11, 0), "cu118"),
                                            ((10, 2), None)])
def test_best_wheel_for_driver(driver, wheel):
    assert envinfo.best_wheel_for_driver(driver) == wheel


# ---- rules on whole fact sets built through the fake NVML ----------------------------------

def torch_facts(version="2.13.0+cpu", cuda=None, available=False, count=0, arch=()):
    return {
        "installed": True, "version": version, "variant": envinfo.parse_torch_version(version),
        "file": "/x/torch/__init__.py",
        "cuda_build": cuda or NA("this PyTorch build has no CUDA support", "not_available"),
        "hip_build": NA("not a ROCm build", "not_available"), "cudnn": NA("x", "not_available"),
        "nccl": NA("x", "not_available"), "cuda_available": available, "device_count": count,
        "arch_list": list(arch), "cuda_initialized": False, "devices": [],
    }


def facts_for(fake_nvml, scenario, torch=None, env=None, nvcc=None, monkeypatch=None):
    fake_nvml(scenario)
    env = dict(env or {})
    f = envinfo.collect_facts(env=env)
    if torch is not None:
        f["torch"] = torch
    if nvcc is not None:
        f["toolkit"] = nvcc
    return f


def ids(found):
    return [x.id for x in found]


NVCC_101_FACTS = {"path": "/usr/local/cuda-10.1/bin/nvcc", "release": "10.1", "build": "10.1.243"}


def test_f16_three_cuda_versions(fake_nvml):
    f = facts_for(fake_nvml, "driver_450", torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]), nvcc=NVCC_101_FACTS)
    assert f["driver"]["cuda_driver_version"] == "11.0"
    found = envinfo.findings(f)
    assert "toolkit-differs" in ids(found) and "driver-too-old" not in ids(found)
    differs = [x for x in found if x.id == "toolkit-differs"][0]
    assert "10.1" in differs.cause and "10.2" in differs.cause and "extensions" in differs.cause
    assert found[-1].severity == "ok" and found[-1].title == "Verdict: ready"


def test_f16_variant_no_nvcc(fake_nvml):
    missing = NA("not installed; not needed to run PyTorch (only to compile CUDA extensions)", "not_installed")
    f = facts_for(fake_nvml, "driver_450", torch_facts("1.7.0+cu102", "10.2", True, 1, ["sm_70"]),
                  nvcc={"path": missing, "release": missing, "build": missing})
    found = envinfo.findings(f)
    nv = [x for x in found if x.id == "nvcc-missing"][0]
    assert "not needed to run PyTorch" in nv.cause
    assert found[-1].title == "Verdict: ready"


def test_f17_cpu_wheel_on_gpu_machine(fake_nvml):
    f = facts_for(fake_nvml, "driver_470", torch_facts("2.3.1+cpu"))
    found = envinfo.findings(f)
    cpu = [x for x in found if x.id == "cpu-only-build"][0]
    assert cpu.severity == "error"
    assert "GPU and driver found, but this PyTorch build has no CUDA support" == cpu.title
    assert "whl/cu118" in cpu.fix          # the newest wheel an 11.4 driver runs
    assert found[-1].severity == "error"
    assert "no GPU" not in " ".join(x.title for x in found)


def test_f19_driver_too_old(fake_nvml):
    f = facts_for(fake_nvml, "driver_470", torch_facts("2.1.0+cu121", "12.1", False, 0, ["sm_80", "sm_86"]))
    found = envinfo.findings(f)
    old = [x for x in found if x.id == "driver-too-old"][0]
    assert "11.4" in old.cause and "12.1" in old.cause
    assert "525.60.13" in old.fix and "whl/cu118" in old.fix
    assert "toolkit does not help" in old.fix


def test_f18_interpreter_hint(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    f["python"] = {"executable": "/opt/conda/envs/a/bin/python", "version": "3.11", "prefix": "/opt",
                   "shell_python": "/usr/bin/python3"}
    found = envinfo.findings(f)
    hint = [x for x in found if x.id == "interpreter"][0]
    assert "/opt/conda/envs/a/bin/python" in hint.cause and "/usr/bin/python3" in hint.cause


def test_f01_no_driver_reports_torch_and_reason(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    assert f["torch"]["installed"] and f["torch"]["version"].startswith("2.")
    found = envinfo.findings(f)
    nv = [x for x in found if x.id == "nvml-unavailable"][0]
    assert "no NVIDIA driver" in nv.cause
    assert f["gpus"] == []


def test_f02_mismatch_is_an_error(fake_nvml):
    f = facts_for(fake_nvml, "version_mismatch", torch_facts("2.4.0+cu121", "12.1"))
    found = envinfo.findings(f)
    nv = [x for x in found if x.id == "nvml-unavailable"][0]
    assert nv.severity == "error" and "reboot" in nv.fix
    assert "mismatch" in nv.cause


def test_f06_mig_and_cvd_mig_uuid(fake_nvml):
    env = {"CUDA_VISIBLE_DEVICES": "MIG-11111111-2222-3333-4444-555555555555"}
    f = facts_for(fake_nvml, "mig", env=env)
    g = f["gpus"][0]
    assert g["utilization.gpu"] == NA("not reported in MIG mode", "mig")
    assert len(g["mig_devices"]) == 2
    assert g["cuda_ordinal"] == 0 and g["cuda_mig_uuid"].startswith("MIG-1111")
    found = envinfo.findings(f)
    assert "mig" in ids(found) and "cvd-unknown" not in ids(found)


def test_cvd_hides_all(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03", env={"CUDA_VISIBLE_DEVICES": ""})
    assert all(is_na(g["cuda_ordinal"]) for g in f["gpus"])
    assert "cvd-hides-all" in ids(envinfo.findings(f))


def test_cvd_unknown_index(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03", env={"CUDA_VISIBLE_DEVICES": "1,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert f["gpus"][1]["cuda_ordinal"] == 0 and is_na(f["gpus"][0]["cuda_ordinal"])
    found = envinfo.findings(f)
    bad = [x for x in found if x.id == "cvd-unknown"][0]
    assert bad.cause.startswith("5 in CUDA_VISIBLE_DEVICES='1,5'")  # 5 is blamed, not 1


@pytest.mark.parametrize("raw, blamed", [("2", "2"), ("0,2", "2"), ("1", None), ("0,1", None)])
def test_cvd_index_equal_to_gpu_count_is_flagged(fake_nvml, raw, blamed):
    """Two GPUs: index 2 (== the count) does not exist; 0 and 1 do (the boundary of the `>= n_gpus` check)."""
    f = facts_for(fake_nvml, "two_gpus_f03", env={"CUDA_VISIBLE_DEVICES": raw, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    bad = [x for x in envinfo.findings(f) if x.id == "cvd-unknown"]
    if blamed is None:
        assert bad == []
    else:
        assert len(bad) == 1 and bad[0].cause.startswith(f"{blamed} in CUDA_VISIBLE_DEVICES={raw!r}")


def test_index_order_uncertain_with_mixed_gpus(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03")  # H100 + T4, default FASTEST_FIRST
    assert all(is_na(g["cuda_ordinal"]) and g["cuda_ordinal"].code == "uncertain" for g in f["gpus"])
    assert "index-order" in ids(envinfo.findings(f))
    f = facts_for(fake_nvml, "two_gpus_f03", env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,0"})
    assert [g["cuda_ordinal"] for g in f["gpus"]] == [1, 0]
    assert "index-map" in ids(envinfo.findings(f))


def test_cvd_uuid_maps_by_uuid(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03", env={"CUDA_VISIBLE_DEVICES": "GPU-00000001", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert f["gpus"][1]["cuda_ordinal"] == 0


def test_mapping_from_initialised_cuda_uses_uuid(fake_nvml):
    fake_nvml("two_gpus_f03")
    f = envinfo.collect_facts(env={})
    gpus = f["gpus"]
    tdev = [{"ordinal": 0, "uuid": gpus[1]["uuid"], "pci.bus_id": None},
            {"ordinal": 1, "uuid": gpus[0]["uuid"], "pci.bus_id": None}]
    res = envinfo.map_cuda_ordinals(gpus, {}, tdev)
    assert res["certain"] and [g["cuda_ordinal"] for g in gpus] == [1, 0]


def test_no_kernel_image_finding(fake_nvml):
    f = facts_for(fake_nvml, "two_gpus_f03", torch_facts("2.0.0+cu117", "11.7", True, 2, ["sm_75", "sm_80"]),
                  env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    found = envinfo.findings(f)
    bad = [x for x in found if x.id == "no-kernel-image"]
    assert len(bad) == 1 and "9.0" in bad[0].cause  # the H100; the T4 (7.5) is fine


def test_bytes_names_f05_identical_report(fake_nvml):
    from tests.fake_nvml import SCENARIOS
    out = []
    for as_bytes in (True, False):
        fake_nvml(dict(SCENARIOS["bytes_names"], bytes=as_bytes))
        r = envinfo.collect(env={})
        out.append((r.to_text(), r.to_dict()["gpus"]))
    assert out[0] == out[1]
    assert "Tesla T4" in out[0][0] and "b'Tesla" not in out[0][0]


def _fake_nvcc(tmp_path, body):
    p = tmp_path / "nvcc"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_nvcc_hangs(tmp_path):
    path = _fake_nvcc(tmp_path, "sleep 30")
    info = envinfo.nvcc_info(path, timeout_s=0.5)
    assert is_na(info["release"]) and info["release"].code == "timeout"


def test_nvcc_garbage(tmp_path):
    path = _fake_nvcc(tmp_path, "echo 'Illegal instruction'")
    info = envinfo.nvcc_info(path, timeout_s=5)
    assert is_na(info["release"]) and "unrecognised" in info["release"].reason


def test_nvcc_real_is_found_and_cached():
    path = envinfo.find_nvcc()
    if is_na(path):
        pytest.skip("no nvcc on this machine")
    a = envinfo.nvcc_info(path)
    assert not is_na(a["release"])
    assert envinfo.nvcc_info(path) == a


def test_find_nvcc_prefers_cuda_home(tmp_path):
    (tmp_path / "bin").mkdir()
    _fake_nvcc(tmp_path / "bin", "echo 'release 11.8, V11.8.89'")
    assert envinfo.find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": ""}) == str(tmp_path / "bin" / "nvcc")
    assert is_na(envinfo.find_nvcc({"PATH": str(tmp_path / "nothing")}))


def test_torch_missing(monkeypatch, fake_nvml):
    import builtins
    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *a, **k)

    fake_nvml("driver_470")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    r = envinfo.collect(env={})
    assert not r.facts["torch"]["installed"]
    assert "torch-missing" in ids(r.findings)
    assert "PyTorch is not importable" in r.to_text()


def test_nvml_call_raising_anything_still_renders(fake_nvml):
    fake = fake_nvml("one_gpu")

    def boom(h):
        raise RuntimeError("weird binding failure")

    fake.module.nvmlDeviceGetTemperature = lambda h, s: boom(h)
    r = envinfo.collect(env={})
    t = r.facts["gpus"][0]["temperature.gpu"]
    assert is_na(t) and "weird binding failure" in t.reason
    assert "weird binding failure" in r._repr_html_()


def test_f17_advice_does_not_trigger_own_driver_warning(fake_nvml):
    """The recommended wheel for a 12.4 driver must not be newer than 12.4."""
    f = facts_for(fake_nvml, "one_gpu", torch_facts("2.3.1+cpu"))
    cpu = [x for x in envinfo.findings(f) if x.id == "cpu-only-build"][0]
    assert cpu.fix.endswith("whl/cu124")


def test_nvcc_timeout_not_cached(tmp_path):
    path = _fake_nvcc(tmp_path, "sleep 1; echo 'Cuda compilation tools, release 12.4, V12.4.131'")
    assert envinfo.nvcc_info(path, timeout_s=0.2)["release"].code == "timeout"
    assert envinfo.nvcc_info(path, timeout_s=10)["release"] == "12.4"


def test_nvcc_timeout_kills_children(tmp_path):
    import psutil
    marker = tmp_path / "child.pid"
    path = _fake_nvcc(tmp_path, f"sleep 100 & echo $! > {marker}; wait")
    info = envinfo.nvcc_info(path, timeout_s=0.5)
    assert info["release"].code == "timeout"
    import time
    pid = int(marker.read_text())
    for _ in range(50):
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_nvcc_output_is_capped(tmp_path):
    path = _fake_nvcc(tmp_path, "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo 'release 12.1, V12.1.1'")
    info = envinfo.nvcc_info(path, timeout_s=20)
    assert is_na(info["release"])  # the version line lies past the 64 KiB kept


def test_nvcc_exit_status(tmp_path):
    path = _fake_nvcc(tmp_path, "echo 'nvcc fatal: license expired'; exit 1")
    r = envinfo.nvcc_info(path)["release"]
    assert is_na(r) and "exit status 1" in r.reason and "license expired" in r.reason


@pytest.mark.parametrize("setup, expect", [("missing", "does not exist"), ("nobin", "has no bin/nvcc"),
                                           ("noexec", "is not executable")])
def test_bad_cuda_home(tmp_path, setup, expect, fake_nvml):
    home = tmp_path / "cuda"
    if setup != "missing":
        (home / "bin").mkdir(parents=True)
    if setup == "noexec":
        (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    f = facts_for(fake_nvml, "no_driver", env={"CUDA_HOME": str(home), "PATH": os.environ["PATH"]})
    found = [x for x in envinfo.findings(f) if x.id == "cuda-home"]
    assert found and expect in found[0].cause and "cpp_extension" in found[0].cause


def test_f18_two_venvs_of_one_base_python(tmp_path, fake_nvml):
    """A venv's python on PATH that is not the kernel's venv must be flagged, though both resolve to one binary."""
    import sys
    venv = tmp_path / "other"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = x\n")
    os.symlink(os.path.realpath(sys.executable), venv / "bin" / "python3")
    f = facts_for(fake_nvml, "no_driver", env={"PATH": str(venv / "bin")})
    assert f["python"]["shell_python"] == str(venv / "bin" / "python3")
    assert "interpreter" in ids(envinfo.findings(f))
    kernel_bin = os.path.dirname(sys.executable)
    f = facts_for(fake_nvml, "no_driver", env={"PATH": kernel_bin})
    if os.path.exists(os.path.join(kernel_bin, "python3")):
        assert "interpreter" not in ids(envinfo.findings(f))


def test_cvd_invalid_entry_flagged_without_nvml(fake_nvml):
    f = facts_for(fake_nvml, "no_driver", env={"CUDA_VISIBLE_DEVICES": "0,foo"})
    bad = [x for x in envinfo.findings(f) if x.id == "cvd-unknown"]
    assert bad and "'foo'" in bad[0].cause


def test_report_without_torch_says_not_installed(monkeypatch, fake_nvml):
    import builtins
    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *a, **k)

    fake_nvml("no_driver")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    text = envinfo.collect(env={}).to_text()
    assert "not collected" not in text and "no GPU code" not in text
    assert text.count("PyTorch is not installed in this kernel") >= 8


def test_text_fits_100_columns(fake_nvml):
    for scenario in ("no_driver", "two_gpus_f03", "mig"):
        fake_nvml(scenario)
        text = envinfo.collect(env={"CUDA_VISIBLE_DEVICES": ""}).to_text()
        # only a single unbreakable word (a path) may run past 100 columns, never cut in two
        assert all(len(line) <= 100 or len(line.split()[-1]) > 60 for line in text.splitlines()), scenario
        assert "'' (set to the empty string)" in text


def test_long_paths_are_not_cut(fake_nvml, monkeypatch):
    fake_nvml("no_driver")
    f = envinfo.collect_facts(env={})
    f["torch"]["file"] = "/very/long/" + "x" * 120 + "/torch/__init__.py"
    from cudamagic.info.report import CudaInfoReport
    text = CudaInfoReport(f, envinfo.findings(f)).to_text()
    assert f["torch"]["file"] in text


def test_mapping_note_without_gpus(fake_nvml):
    f = facts_for(fake_nvml, "no_driver")
    assert f["mapping"]["note"].startswith("no GPU visible")
