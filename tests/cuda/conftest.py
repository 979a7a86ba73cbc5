"""Fixtures for %%cuda: a shell whose build cache is a fresh folder, and nvcc's presence."""

from __future__ import annotations

import shutil
import signal

import pytest

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")


@pytest.fixture(autouse=True)
def python_sigint():
    """SIGINT gets Python's own handler for every %%cuda test.

    The interrupt tests use ``_thread.interrupt_main()``, which does nothing where SIGINT is
    ignored (pytest started in the background of a shell without job control).
    """
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture
def cuda_ip(ip, tmp_path):
    """The ``ip`` shell with ``CudaMagics.cuda_cache_dir`` set to a fresh folder."""
    ip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {str(tmp_path / 'cache')!r}")
    try:
        yield ip
    finally:
        ip.run_line_magic("config", "CudaMagics.cuda_cache_dir = ''")


@pytest.fixture
def windows(monkeypatch):
    """Windows presented to cudamagic.core.platform, as tests/core/test_platform.py does."""
    from tests.core.test_platform import present_windows

    return present_windows(monkeypatch)


def cuda_magics():
    from cudamagic.extension import current

    return current().magics["cuda"]


def path_without_nvcc(tmp_path) -> str:
    """PATH with nvcc hidden.

    PATH with nvcc hidden: every PATH folder holding an nvcc is replaced by a folder of links to
    everything else in it (the kernel still finds python, c++, ...).
    """
    import os

    dirs = []
    for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        if d and os.path.isfile(os.path.join(d, "nvcc")):
            shadow = tmp_path / f"path-without-nvcc-{i}"
            shadow.mkdir(parents=True, exist_ok=True)
            for name in os.listdir(d):
                if name != "nvcc":
                    os.symlink(os.path.join(d, name), shadow / name)
            d = str(shadow)
        dirs.append(d)
    return os.pathsep.join(dirs)


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    """Poll ``condition()`` until it is true or ``timeout_s`` passed; its last value."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()
