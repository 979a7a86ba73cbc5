"""Tier 1 tests of cudamagic.mem.stats.

The in-cell peak arithmetic, the torch.cuda gate (never import torch, never create a context) and
RSS.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

from cudamagic.mem import stats
from cudamagic.mem.stats import GpuStats, in_cell_peak

MiB = 1 << 20


def reading(alloc, peak, total, reserved=0, device=0, retries=0, ooms=0):
    return GpuStats(device, alloc, peak, total, reserved, reserved, retries, ooms)


# ---- in-cell peak without resetting the user's counters ----------------------------


def test_peak_is_exact_when_the_cell_sets_a_new_high():
    before = reading(100 * MiB, 150 * MiB, 1000 * MiB)
    after = reading(120 * MiB, 400 * MiB, 1300 * MiB)
    assert in_cell_peak(before, after) == (400 * MiB, True)


def test_peak_is_an_upper_bound_below_an_earlier_peak():
    # earlier peak 1 GiB; the cell allocates 300 MiB in total and frees it again
    before = reading(100 * MiB, 1024 * MiB, 5000 * MiB)
    after = reading(100 * MiB, 1024 * MiB, 5300 * MiB)
    peak, exact = in_cell_peak(before, after)
    assert (peak, exact) == (400 * MiB, False)
    # the bound is capped by the earlier peak
    after_big = reading(100 * MiB, 1024 * MiB, 9000 * MiB)
    assert in_cell_peak(before, after_big) == (1024 * MiB, False)


def test_peak_is_exact_when_the_cell_allocates_nothing():
    before = reading(500 * MiB, 900 * MiB, 5000 * MiB)
    after = reading(200 * MiB, 900 * MiB, 5000 * MiB)  # only frees
    assert in_cell_peak(before, after) == (500 * MiB, True)


@pytest.mark.parametrize("kept", [1, 50 * MiB])
def test_peak_is_exact_when_the_cell_only_allocates_below_an_earlier_peak(kept):
    # nothing freed: the allocation at the end is the peak, whatever the earlier peak (even for one
    # byte)
    before = reading(100 * MiB, 1024 * MiB, 5000 * MiB)
    after = reading(100 * MiB + kept, 1024 * MiB, 5000 * MiB + kept)
    assert in_cell_peak(before, after) == (100 * MiB + kept, True)


def test_peak_when_cuda_was_initialised_by_the_cell_and_after_a_reset():
    after = reading(10 * MiB, 70 * MiB, 80 * MiB)
    assert in_cell_peak(None, after) == (70 * MiB, True)
    before = reading(100 * MiB, 1024 * MiB, 5000 * MiB)
    after = reading(100 * MiB, 100 * MiB, 5000 * MiB)
    assert in_cell_peak(before, after, peak_reset=True) == (100 * MiB, True)


# ---- the gate: never import torch, never touch CUDA unless initialised -------------


def test_real_source_does_not_import_torch_or_create_a_context(monkeypatch, cuda_calls):
    src = stats.TorchCudaStats()
    was_initialized = torch.cuda.is_initialized()
    monkeypatch.delitem(sys.modules, "torch")
    assert src.initialized() is False
    assert "torch" not in sys.modules
    monkeypatch.setitem(sys.modules, "torch", torch)
    snap = stats.take_snapshot(src)
    assert snap.cuda_initialized is was_initialized
    assert torch.cuda.is_initialized() is was_initialized  # reading never initialises CUDA
    if not was_initialized:
        assert snap.gpus == {}
        assert cuda_calls == []  # observed: no context-creating torch.cuda call at all


def test_snapshot_reads_nothing_from_an_uninitialised_source(monkeypatch):
    class Uninit:
        def initialized(self):
            return False

        def __getattr__(self, name):
            raise AssertionError(f"{name} called although CUDA is not initialised")

    snap = stats.take_snapshot(Uninit())
    assert snap.gpus == {} and not snap.cuda_initialized
    assert snap.rss_bytes > 0


def test_rss_matches_psutil_and_follows_allocation():
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process()
    assert abs(stats.rss_bytes() - proc.memory_info().rss) < 4 * MiB
    before = stats.rss_bytes()
    # 64 MiB, written: above glibc's largest mmap threshold (32 MiB), so it is fresh memory even
    # when earlier tests left freed, still-resident heap behind (a 16 MiB block could reuse it:
    # flaky)
    block = torch.ones(64 * MiB // 4)
    assert stats.rss_bytes() - before > 32 * MiB
    del block


def test_real_reader_reads_the_right_counters_of_the_real_key_shape(monkeypatch):
    """TorchCudaStats.read on torch's real nested-dict shape, every other counter distinct.

    TorchCudaStats.read on torch's real nested-dict shape, every other counter distinct
    (tests/torch_stats.py).
    """
    from tests.torch_stats import nested_stats

    chosen = {
        "allocated_bytes.all.current": 11,
        "allocated_bytes.all.peak": 22,
        "allocated_bytes.all.allocated": 33,
        "reserved_bytes.all.current": 44,
        "reserved_bytes.all.peak": 55,
        "num_alloc_retries": 66,
        "num_ooms": 77,
    }
    monkeypatch.setattr(
        torch.cuda, "memory_stats_as_nested_dict", lambda device=None: nested_stats(**chosen)
    )
    g = stats.TorchCudaStats().read(0)
    assert (
        g.allocated_bytes,
        g.peak_allocated_bytes,
        g.allocated_total_bytes,
        g.reserved_bytes,
        g.peak_reserved_bytes,
        g.num_alloc_retries,
        g.num_ooms,
    ) == (11, 22, 33, 44, 55, 66, 77)


def raising_is_initialized():
    raise RuntimeError("CUDA call failed lazily at initialization")


@pytest.mark.parametrize(
    "not_pytorch",
    [
        types.SimpleNamespace(
            __name__="torch"
        ),  # the user's own torch.py shadowing PyTorch: no torch.cuda
        types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=raising_is_initialized)),
    ],
    ids=["no-cuda-attribute", "is_initialized-raises"],
)
def test_a_torch_that_cannot_answer_counts_as_not_initialised(monkeypatch, not_pytorch):
    monkeypatch.setitem(sys.modules, "torch", not_pytorch)
    src = stats.TorchCudaStats()
    assert src.initialized() is False
    snap = stats.take_snapshot(src)
    assert (snap.cuda_initialized, snap.gpus) == (False, {}) and snap.rss_bytes > 0


def test_real_reader_gives_zeros_for_the_empty_dict_torch_returns_before_init(monkeypatch):
    """``memory_stats_as_nested_dict`` returns ``{}`` while CUDA is not initialised.

    ``memory_stats_as_nested_dict`` returns ``{}`` while CUDA is not initialised
    (torch/cuda/memory.py): the real function, made to see an uninitialised CUDA on any machine,
    gives the reader zeros, not a KeyError.
    """
    monkeypatch.setattr(torch.cuda.memory, "is_initialized", lambda: False)
    assert torch.cuda.memory_stats_as_nested_dict(1) == {}
    assert stats.TorchCudaStats().read(1) == GpuStats(1, 0, 0, 0, 0, 0, 0, 0)


def test_rss_unreadable_is_na_saying_how_to_fix_it(monkeypatch):
    monkeypatch.setattr(stats.platform, "rss_bytes", lambda: None)
    na = stats.rss_bytes()
    assert na.code == "error" and na.reason == (
        "process RSS could not be read (no /proc/self/statm, and psutil is "
        "missing or failed; `pip install psutil`)"
    )
    snap = stats.take_snapshot(stats.TorchCudaStats())
    assert snap.rss_bytes == na


def test_snapshot_reads_the_source_it_is_given_not_the_module_one(monkeypatch):
    class OneGpu:
        def initialized(self):
            return True

        def device_count(self):
            return 1

        def read(self, d):
            return reading(5 * MiB, 7 * MiB, 9 * MiB, device=d)

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(
                f"the module's source was used ({name}) although the caller gave one"
            )

    monkeypatch.setattr(stats, "SOURCE", Untouchable())
    snap = stats.take_snapshot(OneGpu())
    assert (
        snap.cuda_initialized
        and snap.gpus == {0: reading(5 * MiB, 7 * MiB, 9 * MiB)}
        and snap.gpus_na is None
    )
