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


def _report(cell, allocated_mib, reserved_mib, before_mib=None):
    """A cell's report on one GPU; ``before_mib``: (allocated, reserved) at the cell's start."""
    before = (allocated_mib, reserved_mib) if before_mib is None else before_mib
    gpu = SimpleNamespace(
        allocated_after_bytes=int(allocated_mib * MiB),
        reserved_after_bytes=int(reserved_mib * MiB),
        allocated_before_bytes=int(before[0] * MiB),
        reserved_before_bytes=int(before[1] * MiB),
    )
    return SimpleNamespace(cell=cell, gpus=[gpu], rss_after_bytes=0)


def test_the_cell_that_starts_cuda_counts_from_zero():
    watch = CellGrowth(SimpleNamespace(user_ns={}, user_ns_hidden={}))
    setup = watch.observe(_report(1, 500, 520, before_mib=(0, 0)))  # model.cuda()
    steps = [watch.observe(_report(n, 500 + 64 * n, 1000)) for n in (2, 3)]
    assert setup is None and steps[0] is None
    assert steps[1].startswith("[cudamem] allocated grows")  # setup + 2 leaking steps


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


class FakeHistory:
    """``torch.cuda.memory._record_memory_history`` / ``_snapshot`` of a GPU build.

    Blocks carry the Python stack that allocated them while the history is on.
    """

    def __init__(self):
        self.calls, self.enabled, self.blocks = [], False, []

    def record(self, enabled="all", context="all", stacks="all", max_entries=0, **kw):
        self.calls.append((enabled, context, stacks))
        self.enabled = enabled is not None

    def allocate(self, nbytes, line):
        frames = [
            {
                "filename": "/env/lib/python3.11/site-packages/torch/nn/modules/linear.py",
                "line": 125,
                "name": "forward",
            },
            {"filename": "/home/me/train.ipynb", "line": line, "name": "step"},
        ]
        self.blocks.append(
            {"size": nbytes, "state": "active_allocated", "frames": frames if self.enabled else []}
        )

    def snapshot(self, *args, **kw):
        return {"segments": [{"blocks": self.blocks + [{"size": 9 * MiB, "state": "inactive"}]}]}


def test_on_a_gpu_the_growing_allocations_are_grouped_by_where_they_were_made(monkeypatch):
    torch = pytest.importorskip("torch")
    from cudamagic.mem import why

    fake = FakeHistory()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", fake.record)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", fake.snapshot)
    shell = SimpleNamespace(user_ns={}, user_ns_hidden={})
    watch = CellGrowth(shell)
    fake.allocate(100 * MiB, 1)  # the model, before any growth
    watch.observe(_report(1, 100, 120))
    fake.allocate(48 * MiB, 7)
    watch.observe(_report(2, 148, 170))  # growth begins: history on, baseline taken
    assert fake.calls == [("all", "alloc", "python")]  # Python stacks only, never "all"
    for cell in (3, 4):
        fake.allocate(48 * MiB, 7)
        fake.allocate(2 * MiB, 9)
        line = watch.observe(_report(cell, 100 + 50 * cell, 200))
    assert line.startswith("[cudamem] allocated grows")
    report = why.explain(shell, watch)
    assert report.sites == [
        ("/home/me/train.ipynb:7 in step", 96 * MiB, 96 * MiB),
        ("/home/me/train.ipynb:9 in step", 4 * MiB, 4 * MiB),
    ]
    text = repr(report)
    assert "where the CUDA memory that grew was allocated" in text
    assert "+96.0 MiB (now 96.0 MiB) /home/me/train.ipynb:7 in step" in text
    watch.stop()
    assert fake.calls[-1] == (None, "all", "all") and not watch.recording


def test_without_glibc_the_cpu_figure_is_rss(monkeypatch):
    from cudamagic.core import platform

    monkeypatch.setattr(platform, "malloc_in_use_bytes", lambda: None)
    watch = CellGrowth(SimpleNamespace(user_ns={}, user_ns_hidden={}))
    lines = [
        watch.observe(SimpleNamespace(cell=n, gpus=[], rss_after_bytes=(300 + 8 * n) * MiB))
        for n in range(1, 5)
    ]
    assert lines[:3] == [None] * 3 and lines[3].startswith(
        "[cudamem] CPU RSS grows 8.0 MiB per cell"
    )


def test_glibc_reports_the_heap_in_use_and_it_follows_a_tensor():
    torch = pytest.importorskip("torch")
    from cudamagic.core import platform

    before = platform.malloc_in_use_bytes()
    if before is None:
        pytest.skip("no glibc mallinfo2 here")
    t = torch.ones(4 << 20, dtype=torch.uint8)  # 4 MiB
    grew = platform.malloc_in_use_bytes() - before
    del t
    assert 4 * MiB <= grew < 5 * MiB
    assert platform.malloc_in_use_bytes() - before < MiB
