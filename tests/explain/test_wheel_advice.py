"""Tier 1 and 2: the explainer's advice for a CPU-only PyTorch fits this machine (review M8).

No NVIDIA driver: the box leads with that fact and suggests no reinstall. A driver: the exact
command, with a wheel index the installed PyTorch release has (never ``cu121`` for 2.13) and, when
NVML answers, one the driver runs. The indexes come from :mod:`cudamagic.core.wheels`.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from cudamagic.core import platform, wheels  # noqa: E402
from cudamagic.explain.catalogue import CATALOGUE  # noqa: E402
from cudamagic.explain.context.cuda import ctx_not_compiled  # noqa: E402

from .failing import fail, notes  # noqa: E402

INSTALLED = wheels.base_version(torch.__version__)


def indexes(text: str) -> set:
    """The ``cuXYZ`` wheel indexes a text names, as (major, minor)."""
    return {(int(m[1]), int(m[2])) for m in re.finditer(r"whl/cu(\d\d)(\d)", text)}


def test_the_generic_fix_names_no_fixed_index():
    (entry,) = [e for e in CATALOGUE if e.id == "not-compiled-with-cuda"]
    assert not re.search(r"cu\d{3}", entry.fix) and "%cudainfo" in entry.fix


def test_no_driver_leads_with_that_fact(monkeypatch):
    monkeypatch.setattr(platform, "nvidia_driver_present", lambda: False)
    ctx = ctx_not_compiled(None, None)
    assert ctx.notes[0].startswith("This machine has no NVIDIA GPU driver")
    assert ctx.fix.startswith("This machine has no NVIDIA GPU:") and "device = " in ctx.fix
    assert "index-url" not in ctx.fix


def test_driver_with_nvml_gets_a_wheel_of_this_release_the_driver_runs(monkeypatch, fake_nvml):
    monkeypatch.setattr(platform, "nvidia_driver_present", lambda: True)
    fake_nvml("one_gpu")  # driver 550.54.15, CUDA 12.4
    ctx = ctx_not_compiled(None, None)
    (cuda,) = indexes(ctx.fix)
    assert cuda in wheels.wheel_cudas(INSTALLED)
    assert wheels.wheel_runs_on_driver(cuda, (12, 4), "550.54.15")
    assert f"torch=={INSTALLED} " in ctx.fix and ctx.fix.count("%pip install") == 1


def test_driver_without_nvml_gets_this_release_s_indexes(monkeypatch, fake_nvml):
    monkeypatch.setattr(platform, "nvidia_driver_present", lambda: True)
    fake_nvml("no_driver")
    ctx = ctx_not_compiled(None, None)
    assert indexes(ctx.fix) <= set(wheels.wheel_cudas(INSTALLED)) and indexes(ctx.fix)
    for cuda in wheels.wheel_cudas(INSTALLED):
        assert wheels.tag(cuda) in ctx.fix


@pytest.mark.parametrize("release", sorted(wheels.TORCH_CUDA_WHEELS))
def test_every_release_row_is_complete(release):
    version = f"{release[0]}.{release[1]}.0"
    cudas = wheels.wheel_cudas(version)
    assert cudas and all(c in wheels.WHEEL_ARCHS for c in cudas)
    assert all(c[0] in wheels.MIN_DRIVER for c in cudas)


def test_torch_2_13_has_no_cu121_and_a_newer_release_takes_the_last_row():
    assert (12, 1) not in wheels.wheel_cudas("2.13.0+cpu")
    assert wheels.wheel_cudas("2.99.0") == wheels.TORCH_CUDA_WHEELS[max(wheels.TORCH_CUDA_WHEELS)]
    assert wheels.wheel_cudas("2.0.1") == () and wheels.wheel_cudas("nonsense") == ()


@pytest.mark.parametrize(
    "cc, version, driver, want",
    [
        ((12, 0), "2.8.0+cu126", ((12, 8), "570.86.10"), ("2.8.0", (12, 8))),  # Blackwell
        ((12, 0), "2.6.0+cu124", ((12, 8), "570.86.10"), ("2.7.*", (12, 8))),  # 2.6 has none
        ((6, 1), "2.13.0+cu130", ((13, 0), "580.65.06"), ("2.13.0", (12, 6))),  # Pascal
        ((3, 7), "2.13.0+cu126", ((12, 4), "550.54.15"), ("2.7.*", (11, 8))),  # Kepler
        ((9, 0), "2.13.0", (None, None), ("2.13.0", (12, 6))),
    ],
)
def test_pick_for_arch(cc, version, driver, want):
    assert wheels.pick_for_arch(cc, version, *driver) == want


def test_box_without_driver_leads_with_it(ip, monkeypatch):
    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    monkeypatch.setattr(platform, "nvidia_driver_present", lambda: False)
    expl, _ = fail(ip, "x = torch.zeros(2, device='cuda')")
    assert expl.entry.id == "not-compiled-with-cuda"
    assert notes(expl).startswith("This machine has no NVIDIA GPU driver")
    text = " ".join(expl.to_text().split())
    assert "Fix: This machine has no NVIDIA GPU" in text and not re.search(r"cu\d{3}", text)


def test_driver_too_old_gets_the_exact_command(ip, monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # a CUDA build, as the message implies
    # c10/cuda/CUDAFunctions.cpp: device_count_impl (the start of the exact text)
    msg = "The NVIDIA driver on your system is too old (found version 11040). Please update"
    expl, _ = fail(ip, f"raise RuntimeError({msg!r})")
    assert expl.entry.id == "driver-too-old"
    # an 11.4 driver (470 or newer) runs cu118 through minor version compatibility; torch 2.7 is
    # the newest release with cu118 wheels
    assert "`%pip install --force-reinstall torch==2.7.* --index-url " in expl.context.fix
    assert indexes(expl.context.fix) == {(11, 8)}
