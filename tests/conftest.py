"""Shared fixtures.

A real IPython InteractiveShell with cudamagic loaded, and the fake NVML seam.
"""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
SCRIPTS = os.path.join(
    ROOT, "scripts"
)  # scripts/run_demo.py is the one notebook runner tests share
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)


@pytest.fixture
def ip():
    """A real ``InteractiveShell`` with ``%load_ext cudamagic``; unloaded afterwards."""
    import copy

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    # `%config CudaMagics.x = ...` writes into the (singleton) shell's config, which outlives the
    # extension: keep each test's settings to itself (a README block that turns the explainer off
    # once broke later explainer tests)
    saved = (
        copy.deepcopy(dict(shell.config["CudaMagics"])) if "CudaMagics" in shell.config else None
    )
    shell.run_line_magic("load_ext", "cudamagic")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "cudamagic")
        shell.reset(new_session=False)
        if saved is None:
            shell.config.pop("CudaMagics", None)
        else:
            shell.config["CudaMagics"] = type(shell.config)(saved)


@pytest.fixture
def fake_nvml(monkeypatch):
    """Install a fake ``pynvml`` playing a scenario. Usage: ``fake_nvml("gpu_without_fan")``.

    Returns the :class:`tests.fake_nvml.FakeNVML` instance so tests can change the
    scenario mid-run (lose a GPU, count calls).
    """
    from tests import fake_nvml as fm

    def install(scenario, **kw):
        if isinstance(scenario, str):
            scenario = (
                fm.SCENARIOS[scenario]
                if scenario in fm.SCENARIOS
                else fm.WINDOWS_SCENARIOS[scenario]
            )
        fake = fm.FakeNVML(scenario, **kw)
        fm.install(fake, monkeypatch)
        return fake

    yield install
    from cudamagic.core import nvml

    nvml.reset()


@pytest.fixture
def cuda_calls(monkeypatch):
    """The list of context-creating ``torch.cuda`` calls made during the test.

    See :mod:`tests.cuda_calls`.
    """
    torch = pytest.importorskip("torch")
    from tests.cuda_calls import record

    return record(torch, monkeypatch.setattr)


@pytest.fixture(scope="session")
def _nvml_stub_path():
    """Build the stand-in NVML library once per test session (gcc, cached by source hash)."""
    from tests import nvml_stub

    try:
        return nvml_stub.build()
    except nvml_stub.StubUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture
def stub_nvml(_nvml_stub_path, monkeypatch):
    """Play a scenario in the stand-in NVML library under the REAL ``pynvml`` binding.

    Usage: ``stub = stub_nvml("gpu_without_fan")`` or ``stub_nvml({...scenario...})``; returns the
    :class:`tests.nvml_stub.StubNVML` (``lose_gpu``, ``set``, ``tick``, ``calls``). The library is
    loaded for the test and unloaded after it, so later tests see this machine as it is.
    """
    from tests import fake_nvml as fm
    from tests import nvml_stub

    def install(scenario):
        return nvml_stub.install(
            fm.SCENARIOS[scenario] if isinstance(scenario, str) else scenario, monkeypatch
        )

    try:
        yield install
    finally:
        nvml_stub.unload()
