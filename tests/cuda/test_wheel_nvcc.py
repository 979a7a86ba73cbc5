"""``%cudainfo`` and ``%%cuda`` find the same nvcc, also NVIDIA's ``nvidia-cuda-nvcc`` pip wheel.

The wheel puts nvcc in ``site-packages/nvidia/cuda_nvcc/bin/``; here a folder of that shape holds a
stand-in nvcc that answers ``-V`` and ``--list-gpu-arch`` and "compiles" a program that prints
``built by the wheel's nvcc``.
"""

from __future__ import annotations

import importlib
import stat

from cudamagic.core import nvcc

from .conftest import cuda_magics, path_without_nvcc

FAKE_NVCC = """#!/bin/sh
case "$1" in
  -V) echo "Cuda compilation tools, release 12.8, V12.8.93" ;;
  --list-gpu-arch) echo "compute_75 compute_80 compute_90" ;;
  *) while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
     printf '#!/bin/sh\\necho built by the wheel nvcc\\n' > "$out"; chmod +x "$out" ;;
esac
"""


def _wheel(tmp_path, monkeypatch) -> str:
    folder = tmp_path / "site-packages" / "nvidia" / "cuda_nvcc" / "bin"
    folder.mkdir(parents=True)
    path = folder / "nvcc"
    path.write_text(FAKE_NVCC)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    monkeypatch.syspath_prepend(str(tmp_path / "site-packages"))
    importlib.invalidate_caches()
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", path_without_nvcc(tmp_path))
    return str(path)


def test_no_nvcc_anywhere_is_na_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_without_nvcc(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(nvcc, "wheel_folders", lambda: [])
    found = nvcc.find_nvcc()
    assert found.code == "not_installed" and "not needed to run PyTorch" in found.reason


def test_cudainfo_and_cuda_use_the_wheel_nvcc(cuda_ip, fake_nvml, tmp_path, monkeypatch, capfd):
    wheel = _wheel(tmp_path, monkeypatch)
    assert nvcc.find_nvcc() == wheel
    fake_nvml("one_gpu")
    report = cuda_ip.run_line_magic("cudainfo", "")
    toolkit = report.to_dict()["toolkit"]
    assert (toolkit["path"], toolkit["release"]) == (wheel, "12.8")
    cuda_ip.run_cell_magic("cuda", "", "int main() { return 0; }\n")
    assert "built by the wheel nvcc" in capfd.readouterr().out
    assert cuda_magics().last.cached is False
