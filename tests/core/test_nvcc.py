"""Finding and running nvcc: stand-ins that hang, print garbage, fail, flood; the real nvcc."""

import stat

import pytest

from cudamagic.core import nvcc
from cudamagic.core.na import is_na


def _fake_nvcc(tmp_path, body):
    p = tmp_path / "nvcc"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_nvcc_hangs(tmp_path):
    path = _fake_nvcc(tmp_path, "sleep 30")
    info = nvcc.nvcc_info(path, timeout_s=0.5)
    assert is_na(info["release"]) and info["release"].code == "timeout"


def test_nvcc_garbage(tmp_path):
    path = _fake_nvcc(tmp_path, "echo 'Illegal instruction'")
    info = nvcc.nvcc_info(path, timeout_s=5)
    assert is_na(info["release"]) and "unrecognised" in info["release"].reason


def test_nvcc_real_is_found_and_cached():
    path = nvcc.find_nvcc()
    if is_na(path):
        pytest.skip("no nvcc on this machine")
    a = nvcc.nvcc_info(path)
    assert not is_na(a["release"])
    assert nvcc.nvcc_info(path) == a


def test_find_nvcc_prefers_cuda_home(tmp_path):
    (tmp_path / "bin").mkdir()
    _fake_nvcc(tmp_path / "bin", "echo 'release 11.8, V11.8.89'")
    assert nvcc.find_nvcc({"CUDA_HOME": str(tmp_path), "PATH": ""}) == str(
        tmp_path / "bin" / "nvcc"
    )
    assert is_na(nvcc.find_nvcc({"PATH": str(tmp_path / "nothing")}))


def test_nvcc_timeout_not_cached(tmp_path):
    path = _fake_nvcc(tmp_path, "sleep 1; echo 'Cuda compilation tools, release 12.4, V12.4.131'")
    assert nvcc.nvcc_info(path, timeout_s=0.2)["release"].code == "timeout"
    assert nvcc.nvcc_info(path, timeout_s=10)["release"] == "12.4"


def test_nvcc_timeout_kills_children(tmp_path):
    import psutil

    marker = tmp_path / "child.pid"
    path = _fake_nvcc(tmp_path, f"sleep 100 & echo $! > {marker}; wait")
    info = nvcc.nvcc_info(path, timeout_s=0.5)
    assert info["release"].code == "timeout"
    import time

    def dead(pid):
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    pid = int(marker.read_text())
    deadline = time.monotonic() + 10
    while not dead(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead(pid)


def test_nvcc_output_is_capped(tmp_path):
    path = _fake_nvcc(
        tmp_path, "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo 'release 12.1, V12.1.1'"
    )
    info = nvcc.nvcc_info(path, timeout_s=20)
    assert is_na(info["release"])  # the version line lies past the 64 KiB kept


def test_nvcc_exit_status(tmp_path):
    path = _fake_nvcc(tmp_path, "echo 'nvcc fatal: license expired'; exit 1")
    r = nvcc.nvcc_info(path)["release"]
    assert is_na(r) and "exit status 1" in r.reason and "license expired" in r.reason
