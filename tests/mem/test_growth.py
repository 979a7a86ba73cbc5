"""The steady-growth detector and ``%cudamem on``'s growth watch on GPU figures.

Plain-function tier: a leak, a one-time rise, a cache that stops, and fragmentation told apart.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cudamagic.core.growth import GrowthDetector
from cudamagic.mem.why import CellGrowth

MiB = 1 << 20


def feed(det, series, reserved=None):
    out = []
    for i, a in enumerate(series):
        out.append(det.add(a * MiB, None if reserved is None else reserved[i] * MiB))
    return out


def test_three_rises_in_a_row_are_a_leak_told_once():
    det = GrowthDetector(unit="cell")
    got = feed(det, [100, 148, 196, 244, 292, 340])
    assert got[:3] == [None, None, None]
    g = got[3]
    assert g.kind == "leak" and g.steps == 3 and g.rate_bytes == 48 * MiB and g.new
    assert g.line() == (
        "allocated grows 48.0 MiB per cell (3 cells, +144.0 MiB): "
        "`%cudamem why` names what holds it"
    )
    assert got[4].steps == 4 and not got[4].new and not got[5].new


def test_no_alarm_for_a_one_time_rise_or_a_cache_that_stops():
    # the first step's gradients and optimizer state, then flat with noise under 1 MiB
    assert feed(GrowthDetector(), [100, 400, 400.5, 400.2, 400.9, 400.4]) == [None] * 6
    # a cache that fills in two steps and stops
    assert feed(GrowthDetector(), [100, 110, 120, 120, 120, 120]) == [None] * 6
    # rises under 1 MiB per step never count, however many
    assert feed(GrowthDetector(), [100 + 0.9 * i for i in range(20)]) == [None] * 20


def test_a_pause_rearms_the_detector_and_started_marks_the_first_rise():
    det = GrowthDetector()
    det.add(100 * MiB)
    det.add(110 * MiB)
    assert det.started and det.growing
    det.add(120 * MiB)
    assert not det.started
    assert det.add(130 * MiB).new
    assert det.add(130 * MiB) is None and not det.growing  # growth stopped: re-armed
    det.add(140 * MiB), det.add(150 * MiB)
    assert det.add(160 * MiB).new  # a new run is told again


def test_reserved_growing_with_allocated_flat_is_fragmentation():
    det = GrowthDetector(unit="step")
    got = feed(det, [500, 500, 500.5, 500], reserved=[600, 664, 728, 792])
    g = got[3]
    assert g.kind == "fragmentation" and g.metric == "reserved" and g.gap_bytes == 292 * MiB
    assert "while allocated stays flat" in g.line()
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (restart the kernel)" in g.line()
    assert "torch.cuda.empty_cache()" in g.line()
    # both growing: a leak, not fragmentation
    got = feed(GrowthDetector(), [500, 510, 520, 530], reserved=[600, 620, 640, 660])
    assert got[3].kind == "leak"


def _report(cell, allocated_mib, reserved_mib):
    gpu = SimpleNamespace(
        allocated_after_bytes=int(allocated_mib * MiB), reserved_after_bytes=int(reserved_mib * MiB)
    )
    return SimpleNamespace(cell=cell, gpus=[gpu], rss_after_bytes=0)


@pytest.mark.parametrize(
    "series, expected",
    [
        ([(1000, 1100), (1048, 1100), (1096, 1200), (1144, 1200)], "allocated grows 48.0 MiB"),
        ([(1000, 1100), (1000, 1164), (1000, 1228), (1000, 1292)], "the allocator is fragmented"),
        ([(1000, 1100), (1600, 2100), (1600, 2100), (1600.5, 2100)], None),
    ],
)
def test_cudamem_on_watch_uses_the_allocator_when_cuda_is_in_use(series, expected):
    watch = CellGrowth(SimpleNamespace(user_ns={}, user_ns_hidden={}))
    lines = [watch.observe(_report(i, a, r)) for i, (a, r) in enumerate(series, 1)]
    assert lines[:3] == [None] * 3
    if expected is None:
        assert lines[3] is None and watch.growth is None
    else:
        assert lines[3].startswith("[cudamem] ") and expected in lines[3]
        assert watch.growth_cell == 4
    assert watch.detector.metric == "allocated"
