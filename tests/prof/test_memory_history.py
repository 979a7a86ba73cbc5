"""``--memory`` on CUDA and a memory history the user already records.

Stand-ins for ``torch.cuda.memory`` and ``torch._C`` record every call (this machine has a CPU-only
torch; the real check is in ``scripts/gpu_check_torchprof.py``).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from cudamagic.prof.run import _CudaMemoryHistory, cuda_history_enabled, cuda_snapshot_peak, since


def fake_torch(users_history, probe=True, traces=()):
    """A torch stand-in.

    ``calls`` lists every ``_record_memory_history`` call and ``_snapshot`` call.
    """
    calls = []
    state = {"on": users_history}

    def record(enabled="all", **kw):
        calls.append(("record", enabled, kw))
        state["on"] = enabled is not None

    def snapshot():
        calls.append(("snapshot",))
        return {"segments": [], "device_traces": [list(t) for t in traces]}

    memory = SimpleNamespace(_record_memory_history=record, _snapshot=snapshot)
    cuda = SimpleNamespace(
        memory=memory,
        is_initialized=lambda: True,
        device_count=lambda: 1,
        memory_allocated=lambda d: 1000,
    )
    c = SimpleNamespace(_cuda_isHistoryEnabled=lambda: state["on"]) if probe else SimpleNamespace()
    return SimpleNamespace(cuda=cuda, _C=c), calls, state


def test_no_user_history_is_switched_on_for_the_cell_and_off_after():
    torch, calls, state = fake_torch(False)
    h = _CudaMemoryHistory(torch)
    h.start()
    assert state["on"] and calls[0][:2] == ("record", "all")
    assert calls[0][2]["stacks"] == "python" and calls[0][2]["context"] == "all"
    h.snapshot()
    h.stop()
    assert [c[:2] for c in calls] == [("record", "all"), ("snapshot",), ("record", None)]
    assert not state["on"] and not h.users_history


def test_the_users_history_is_left_on_and_not_reconfigured():
    torch, calls, state = fake_torch(True)
    h = _CudaMemoryHistory(torch)
    h.start()
    h.snapshot()
    h.stop()
    assert calls == [("snapshot",)], "no _record_memory_history call may touch the user's recording"
    assert state["on"] and h.users_history


def test_without_the_probe_the_history_is_recorded_as_before():
    torch, calls, state = fake_torch(False, probe=False)
    assert cuda_history_enabled(torch) is None
    h = _CudaMemoryHistory(torch)
    h.start()
    h.stop()
    assert [c[:2] for c in calls] == [("record", "all"), ("record", None)]


def test_with_the_users_history_the_snapshot_keeps_only_the_cells_entries():
    now = time.time_ns() // 1000
    old = [
        {"action": "alloc", "size": 10_000, "time_us": now - 5_000_000},
        {"action": "free_completed", "size": 10_000, "time_us": now - 4_000_000},
    ]
    cell = [
        {"action": "alloc", "size": 300, "time_us": now + 10},
        {"action": "alloc", "size": 200, "time_us": now + 20},
        {"action": "free_completed", "size": 300, "time_us": now + 30},
    ]
    torch, calls, _ = fake_torch(True, traces=[old + cell])
    h = _CudaMemoryHistory(torch)
    h.start()
    h.start_time_us = now  # the cell started at `now`
    snap = h.snapshot()
    assert snap["device_traces"] == [cell]
    assert cuda_snapshot_peak(snap, h.start_allocated) == {"cuda:0": 1000 + 500}


@pytest.mark.parametrize(
    "entry, kept",
    [
        ({"action": "alloc", "size": 1}, True),
        ({"action": "alloc", "size": 1, "time_us": 99}, False),
        ({"action": "alloc", "size": 1, "time_us": 100}, True),
    ],
)
def test_since_cuts_by_time_and_keeps_entries_without_one(entry, kept):
    assert since({"device_traces": [[entry]], "segments": [1]}, 100) == {
        "device_traces": [[entry] if kept else []],
        "segments": [1],
    }
