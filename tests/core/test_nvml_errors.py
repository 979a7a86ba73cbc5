"""Tier 1: every NVML error code the binding defines gets a cause and a fix.

The codes are read from the installed ``pynvml`` (``nvidia-ml-py``) itself, so a binding that adds
a code fails here until the table in :mod:`cudamagic.core.nvml_errors` says what it means.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from cudamagic.core import nvml, platform
from cudamagic.core.nvml_errors import CONTAINER_NOTICE


def _binding_codes() -> dict:
    """``{value: name}`` of every ``NVML_ERROR_*`` constant in the installed binding's source.

    Read from the file, not the module: tests replace ``pynvml`` in ``sys.modules`` by a fake.
    """
    spec = importlib.util.find_spec("pynvml")
    text = Path(spec.origin).read_text(encoding="utf-8")
    found = re.findall(r"^(NVML_ERROR_\w+)\s*=\s*(\d+)\s*$", text, re.M)
    return {int(value): name for name, value in found}


CODES = _binding_codes()


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


def test_the_binding_defines_the_codes_we_know():
    assert len(CODES) >= 30 and CODES[999] == "NVML_ERROR_UNKNOWN"


@pytest.mark.parametrize("code", sorted(CODES), ids=[CODES[c] for c in sorted(CODES)])
def test_every_code_has_a_cause_and_a_fix(monkeypatch, code):
    monkeypatch.setattr(platform, "in_container", lambda: False)
    na = nvml.translate(NVMLError(code))
    assert not na.reason.startswith("NVML error:"), na.reason  # not the generic fallback
    assert str(code) not in na.reason.split()  # words, not the number
    assert len(na.fix) > 15 and na.fix != na.reason


def test_generic_fallback_still_has_a_fix():
    na = nvml.translate(RuntimeError("boom"))
    assert na.reason == "NVML error: RuntimeError: boom" and "nvidia-smi" in na.fix


def test_unknown_error_in_a_container_is_the_lost_devices_failure(monkeypatch):
    monkeypatch.setattr(platform, "in_container", lambda: True)
    na = nvml.translate(NVMLError(999))
    assert na.code == "container_gpu_lost"
    assert "container" in na.reason and "cgroup" in na.reason and "daemon-reload" in na.reason
    assert na.fix.startswith("recreate the container")
    assert CONTAINER_NOTICE in na.fix and "create-dev-char-symlinks" in na.fix


def test_unknown_error_outside_a_container_is_not_blamed_on_one(monkeypatch):
    monkeypatch.setattr(platform, "in_container", lambda: False)
    na = nvml.translate(NVMLError(999))
    assert "container" not in na.reason + na.fix and "Unknown Error" in na.reason


def test_init_failure_keeps_the_fix(monkeypatch):
    import sys
    import types

    def fail():
        raise NVMLError(999)

    mod = types.ModuleType("pynvml")
    mod.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monkeypatch.setattr(platform, "in_container", lambda: True)
    nvml.reset()
    try:
        st = nvml.init()
        assert st.code == "container_gpu_lost" and st.fix.startswith("recreate")
        assert nvml.system_info().status.fix == st.fix
    finally:
        nvml.reset()
