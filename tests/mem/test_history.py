"""Tier 1 tests of cudamagic.mem.history: the bounded history."""

from __future__ import annotations

from cudamagic.mem import history, result, stats


def test_history_keeps_the_last_max_records_and_counts_the_dropped():
    limit = [3]
    hist = history.MemHistory(max_records=lambda: limit[0])
    for n in range(5):
        hist.append(
            result.build_report(
                stats.Snapshot(0.0, {}, False, 1),
                stats.Snapshot(0.0, {}, False, 1),
                cell=n,
                source="x",
                error=None,
                kind="auto",
            )
        )
    assert [r.cell for r in hist] == [2, 3, 4] and hist.dropped == 2
    assert "2 older dropped" in repr(hist) and "cudamem_history_cells = 3" in repr(hist)
    limit[0] = 1
    hist.append(hist[-1])
    assert len(hist) == 1 and hist.dropped == 5
    snap = hist.snapshot()
    hist.clear()
    assert len(snap) == 1 and snap.dropped == 5 and hist.dropped == 0
