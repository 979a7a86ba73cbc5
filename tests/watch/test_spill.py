"""``%gpuwatch`` warnings on the sample path: a Windows spill, and allocated memory growing.

The spill is presented with Windows counters that spill (as tests/watch/test_windows.py presents
Windows): this kernel's GPU memory moved into shared system RAM while the card is full.
"""

from __future__ import annotations

import copy

from cudamagic.watch import render
from cudamagic.watch.samples import TorchSample
from cudamagic.watch.sources import LiveSource
from tests import fake_nvml as fm
from tests.watch.test_windows import counters, presented_windows  # noqa: F401 - fixtures

MIB = fm.MIB
GIB = 1024 * MIB
PYTHON = 4100940  # python.exe in the laptop's process list: this kernel
KEY = f"pid_{PYTHON}_luid_0x00000000_0x0000D1E3_phys_0"


def full_laptop():
    """The WDDM laptop with its 8 GiB card full (7.9 GiB in use)."""
    scenario = copy.deepcopy(fm.WINDOWS_SCENARIOS["windows_wddm"])
    scenario["gpus"][0]["memory_used"] = 8090 * MIB
    return scenario


def spilling(shared_mib):
    """Counters where this kernel's Shared Usage follows ``shared_mib`` (one value per read)."""

    def values(read):
        got = dict(fm.WINDOWS_LAPTOP_COUNTERS)
        got[KEY] = (7200 * MIB, shared_mib[min(read, len(shared_mib) - 1)] * MIB)
        return got

    return values


def hints(source, n):
    return [source.read(i, float(i)).hint for i in range(n)]


def test_a_spill_is_told_on_the_first_sample_after_it(fake_nvml, counters, presented_windows):  # noqa: F811
    fake_nvml(full_laptop())
    counters(spilling([12, 12, 1548, 1548, 12]))
    got = hints(LiveSource(pid=PYTHON), 5)
    assert got[:2] == ["", ""]
    warning = got[2]
    assert "GPU 0's memory is full (7.9 GiB of 8.0 GiB)" in warning
    assert "moved 1.5 GiB of this kernel's GPU memory into shared system RAM" in warning
    assert "10-100x slower" in warning and "smaller batch" in warning and "`%%cudafit`" in warning
    assert '"CUDA - Sysmem Fallback Policy" = "Prefer No Sysmem Fallback"' in warning
    assert got[3] == warning  # still spilled: still told
    assert got[4] == ""  # back in dedicated memory


def test_shared_memory_is_no_spill_while_the_card_has_room(fake_nvml, counters, presented_windows):  # noqa: F811
    fake_nvml("windows_wddm")  # 742 MiB of 8 GiB in use
    counters(spilling([12, 900, 1548]))
    assert hints(LiveSource(pid=PYTHON), 3) == ["", "", ""]


def test_the_warning_reaches_the_text_table(fake_nvml, counters, presented_windows):  # noqa: F811
    fake_nvml(full_laptop())
    counters(spilling([12, 812]))
    src = LiveSource(pid=PYTHON)
    src.read(0, 0.0)
    table = render.sample_text(src.read(1, 1.0), "live", "running", "")
    assert "hint: GPU 0's memory is full" in " ".join(table.split())


def test_allocated_growing_sample_after_sample_is_told(fake_nvml):
    fake_nvml("one_gpu")
    readings = iter([1000, 1048, 1096, 1144, 1192, 1192])

    def torch_reader():
        return TorchSample(
            allocated_bytes=next(readings) * MIB, reserved_bytes=2 * GIB, peak_bytes=0
        )

    got = hints(LiveSource(torch_reader=torch_reader), 6)
    assert got[:3] == ["", "", ""]
    assert got[3].startswith("allocated grows 48.0 MiB per sample (3 samples, +144.0 MiB)")
    assert got[4].startswith("allocated grows 48.0 MiB per sample (4 samples, +192.0 MiB)")
    assert "`%cudamem why` names what holds it" in got[3]
    assert got[5] == ""  # flat again
