"""Fixtures for %%cuda: a shell whose build cache is a fresh folder, and nvcc's presence."""

from __future__ import annotations

import shutil

import pytest

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


@pytest.fixture
def cuda_ip(ip, tmp_path):
    """The ``ip`` shell with ``CudaMagics.cuda_cache_dir`` set to a fresh folder."""
    ip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {str(tmp_path / 'cache')!r}")
    yield ip
    ip.run_line_magic("config", "CudaMagics.cuda_cache_dir = ''")


def cuda_magics():
    from cudamagic.extension import current

    return current().magics["cuda"]
