"""Tier 1: the summary of a profile.

Tier 1: the summary of a profile (cudamagic/prof/summary.py) on real ``torch.profiler`` profiles of
a small CPU workload, compared with torch's own ``key_averages()`` for the same profile, and on
hand-built event lists of the real shapes (Kineto events, ``FunctionEvent`` objects) for what a CPU
build cannot record (GPU kernels, memcpy, several threads, odd ranges). No IPython, no kernel:
seconds in all.
"""

from __future__ import annotations

import re
import types

import pytest
import torch
from IPython.core.error import UsageError
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, schedule

from cudamagic.core.na import NA
from cudamagic.prof.render import DETAIL_HEADERS
from cudamagic.prof.result import (
    GROUPS,
    GpuBreakdown,
    KernelRecord,
    OpRecord,
    ProfResult,
    StepRecord,
    TableRow,
    aggregate,
    aggregate_kernels,
)
from cudamagic.prof.summary import build_result, frame_is_user, gpu_breakdown

SETTINGS = {"header": "%%torchprof", "wall_s": 0.5, "group": "op", "stack_depth": 3, "top": 15}


def _train_step(model, opt, x):
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()


def _workload():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(5, 8)


def _record_steps():
    """Three steps of a tiny training loop, steps 1 and 2 recorded.

    Three steps of a tiny training loop, steps 1 and 2 recorded (step 0 is the warm-up), with shapes
    and allocations, no Python calls; a 4 MB tensor allocated and freed in step 2.
    """
    model, opt, x = _workload()
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        profile_memory=True,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
    ) as prof:
        for i in range(3):
            _train_step(model, opt, x)
            if i == 2:
                big = torch.ones(1_000_000)
                del big
            prof.step()
    prof.events()  # the FunctionEvent tree, built once
    return prof


def _record_stack():
    """One step with Python calls recorded.

    One step with Python calls recorded (module and stack groupings), inside a ``record_function``
    range.
    """
    model, opt, x = _workload()
    with (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof,
        torch.profiler.record_function("my_range"),
    ):
        _train_step(model, opt, x)
    prof.events()  # the FunctionEvent tree, built once
    return prof


# Recorded once, when the module is imported: mutation testing (mutmut) runs the tests again in
# processes forked from one that has imported this module, and a profiler started in such a fork can
# hang; reading a stopped profile is plain data.
STEPS_PROF, STACK_PROF = _record_steps(), _record_stack()


@pytest.fixture
def steps_prof():
    return STEPS_PROF


@pytest.fixture
def stack_prof():
    return STACK_PROF


def _build(prof, with_stack, memory=False, activities=("CPU",), **kw):
    return build_result(
        prof,
        with_stack=with_stack,
        memory=memory,
        activities=list(activities),
        **{**SETTINGS, **kw},
    )


# ---- real profiles against torch's own tables
# ----------------------------------------------------------------


@pytest.mark.parametrize("with_stack", [False, True], ids=["kineto", "function_events"])
def test_rows_match_torch_key_averages(steps_prof, with_stack):
    """Calls, self and total time per operator are what ``key_averages()`` shows.

    For the same profile, on both reading paths; the ``aten::sum`` that redispatches to itself is
    counted once, as torch does.
    """
    res = _build(steps_prof, with_stack)
    ka = {e.key: e for e in steps_prof.key_averages()}
    rows = res.rows("op")
    assert {r.name for r in rows} == set(ka) - {"ProfilerStep*"}
    for r in rows:
        e = ka[r.name]
        assert (r.name, r.calls) == (e.key, e.count)
        assert r.self_us == pytest.approx(e.self_cpu_time_total, abs=1e-6), r.name
        assert r.total_us == pytest.approx(e.cpu_time_total, abs=1e-6), r.name
    assert [r.self_us for r in rows] == sorted((r.self_us for r in rows), reverse=True)
    assert sum(r.self_pct for r in rows) == pytest.approx(100.0)
    assert rows[0].self_pct == pytest.approx(100.0 * rows[0].self_us / sum(r.self_us for r in rows))
    raw = sum(e.name() == "aten::sum" for e in steps_prof.profiler.kineto_results.events())
    # the redispatch merged
    assert raw > {r.name: r.calls for r in rows}["aten::sum"] == ka["aten::sum"].count
    assert res.slowest() == rows[0]


def test_both_paths_give_the_same_records(stack_prof):
    """The raw-Kineto path and the FunctionEvent path (Python calls recorded) agree call by call.

    Times, nesting depth, top, thread and shapes, and self time for the ``aten::`` operators (torch
    counts the Python calls recorded directly under a ``record_function`` range as its children, the
    Kineto path does not see them).
    """
    fast, slow = _build(stack_prof, False, group="shape"), _build(stack_prof, True)
    assert len(fast.ops) == len(slow.ops) > 20

    def key(o):
        return o.start_us, o.name

    for a, b in zip(sorted(fast.ops, key=key), sorted(slow.ops, key=key), strict=True):
        assert (a.name, a.input_shapes(), a.thread, a.depth, a.top) == (
            b.name,
            b.input_shapes(),
            b.thread,
            b.depth,
            b.top,
        )
        assert (a.start_us, a.end_us) == pytest.approx((b.start_us, b.end_us))
        if a.name.startswith("aten::"):
            assert a.self_us == pytest.approx(b.self_us, abs=1e-6), a.name
    depths = {o.name: o.depth for o in fast.ops}
    assert depths["my_range"] == 0 and depths["aten::linear"] == 1 and depths["aten::addmm"] == 2
    assert {o.name for o in fast.ops if o.top} == {"my_range"}
    assert fast.span_us == pytest.approx(slow.span_us)
    assert fast.span_us[0] == min(o.start_us for o in fast.ops)
    assert fast.span_us[1] == max(o.end_us for o in fast.ops)


def test_steps_are_read_on_both_paths_and_kept_out_of_the_depth(steps_prof):
    for with_stack in (False, True):
        res = _build(steps_prof, with_stack)
        assert [s.step for s in res.steps] == [1, 2]
        (s1, s2) = res.steps
        assert s1.end_us <= s2.start_us and s1.dur_us > 0
        assert res.span_us[0] == pytest.approx(s1.start_us) and res.span_us[1] >= s2.end_us
        assert not any(o.name.startswith("ProfilerStep") for o in res.ops)
        linear = [o for o in res.ops if o.name == "aten::linear"]
        # the step range is not a parent
        assert len(linear) == 4 and all(o.depth == 0 and o.top for o in linear)
        addmm = [o for o in res.ops if o.name == "aten::addmm"]
        assert addmm and all(o.depth == 1 and not o.top for o in addmm)


def test_python_calls_give_module_paths_and_user_frames(stack_prof):
    res = _build(stack_prof, True, stack_depth=2)
    addmm = [o for o in res.ops if o.name == "aten::addmm"]
    assert sorted(o.module for o in addmm) == ["Sequential_0/Linear_0", "Sequential_0/Linear_1"]
    for o in addmm:
        assert o.stack[0].endswith(": _train_step") and "test_summary.py(" in o.stack[0]
        assert all(frame_is_user(f) for f in o.stack) and o.depth == 2 and not o.top
    assert next(o for o in res.ops if o.name == "my_range").module == ""
    by_module = {(r.name, r.detail) for r in res.rows("module")}
    assert ("aten::addmm", "Sequential_0/Linear_1") in by_module
    assert ("my_range", "(outside any nn.Module)") in by_module
    stack_rows = res.rows("stack")
    assert all(1 <= r.detail.count(": ") <= 2 for r in stack_rows)  # stack_depth 2
    assert any(r.detail.count(" <- ") == 1 for r in stack_rows)
    one = res.rows("stack", stack_depth=1)
    assert all(" <- " not in r.detail for r in one) and len(one) <= len(stack_rows)
    assert res.rows("stack") == stack_rows  # cached per depth, not overwritten by the depth-1 call
    with pytest.raises(
        ValueError, match="unknown grouping 'layer': use one of op, shape, module, stack"
    ):
        res.rows("layer")


def test_python_context_stops_at_the_frame_limit(stack_prof):
    from cudamagic.prof.summary import _python_context

    evts = [e for e in stack_prof.events() if e.name == "aten::addmm"]
    module, frames, top, depth = _python_context(evts[0])
    assert frames and _python_context(evts[0], depth_limit=0)[1] == ()
    assert _python_context(evts[0], depth_limit=1)[1] == frames[:1]
    assert module.startswith("Sequential_0/Linear_") and not top and depth == 2


def test_python_frames_kept_per_operator_are_capped():
    """An operator called 70 frames deep in your code keeps the innermost 64."""
    from cudamagic.prof.summary import _python_context

    op = _fevt(0, "aten::sum", 50, 51)
    child = op
    for i in range(70):
        frame = _fevt(i + 1, f"cell.py({i}): recurse", 0, 100, python=True)
        child.cpu_parent, child = frame, frame
    module, frames, top, depth = _python_context(op)
    assert frames == tuple(f"cell.py({i}): recurse" for i in range(64)) and (
        module,
        top,
        depth,
    ) == ("", True, 0)


def test_python_context_survives_a_parent_cycle():
    from cudamagic.prof.summary import _python_context

    loop, op = _fevt(1, "aten::loop", 0, 10), _fevt(2, "aten::mm", 1, 2)
    loop.cpu_parent, op.cpu_parent = loop, loop
    assert _python_context(op) == ("", (), False, 10_000)


def test_without_python_calls_module_and_stack_need_a_new_profile(steps_prof):
    res = _build(steps_prof, False)
    for group in ("module", "stack"):
        with pytest.raises(
            ValueError, match=f"needs the Python calls.*`%%torchprof --group {group}`"
        ):
            res.rows(group)
        with pytest.raises(ValueError, match=f"grouping by {group}"):
            res.table(group=group)
    # FunctionEvent path, no Python events: empty keys
    shaped = _build(steps_prof, True, group="shape")
    assert all(o.module == "" and o.stack == () for o in shaped.ops)
    assert {r.detail for r in shaped.rows("module")} == {"(outside any nn.Module)"}
    assert {r.detail for r in shaped.rows("stack")} == {"(no frame of your code)"}
    addmm = sorted(r.detail for r in shaped.rows() if r.name == "aten::addmm")
    assert addmm == ["[[16], [5, 8], [8, 16], [], []]", "[[4], [5, 16], [16, 4], [], []]"]


def test_memory_peak_and_timeline(steps_prof):
    for with_stack in (False, True):  # events handed over (Kineto path) or read again
        res = _build(steps_prof, with_stack, memory=True)
        peak = res.peak_memory_bytes["cpu"]
        assert 4_000_000 <= peak < 4_000_000 + 200_000
        (pts,) = res.memory_points.values()
        assert list(res.memory_points) == ["cpu"]
        assert pts[0] == (res.span_us[0], 0)
        assert [t for t, _ in pts] == sorted(t for t, _ in pts) and len(pts) > 10
        assert max(level for _, level in pts) == peak
        levels = [level for _, level in pts]
        i = levels.index(peak)
        # the 4 MB, then freed
        assert levels[i] - levels[i - 1] == 4_000_000 and levels[i + 1] == levels[i - 1]
        assert pts[i][0] >= res.steps[1].start_us  # at its time, from the trace start


def test_memory_not_recorded_says_why(stack_prof):
    res = _build(stack_prof, False, memory=True)  # the profile ran without profile_memory
    assert isinstance(res.peak_memory_bytes, NA) and res.peak_memory_bytes.code == "no_activity"
    assert (
        res.peak_memory_bytes.reason == "no allocation happened while profiling"
        and res.memory_points == {}
    )
    assert _build(stack_prof, False).peak_memory_bytes.reason == "run with --memory"


def test_gpu_na_says_whether_gpu_was_recorded(stack_prof):
    cpu = _build(stack_prof, False)
    assert (cpu.gpu.code, cpu.gpu.reason) == (
        "not_recorded",
        "GPU activity was not recorded (see the notice above)",
    )
    both = _build(stack_prof, False, activities=("CPU", "CUDA"))
    assert both.gpu.code == "no_activity"
    assert both.gpu.reason == "no GPU activity in the profiled span (the cell launched no kernel)"
    assert both.kernels == [] and both.kernel_rows() == []


# ---- hand-built events of the real shapes
# ---------------------------------------------------------------------


class KinetoEvent:
    """The accessors of ``torch._C._autograd._KinetoEvent`` that the summary reads (times in ns)."""

    def __init__(
        self,
        name,
        start_ns,
        dur_ns,
        device=DeviceType.CPU,
        tid=1,
        end_tid=None,
        corr=0,
        linked=0,
        python=False,
        is_async=False,
        annotation=False,
        shapes=(),
        device_index=0,
        stream=0,
        nbytes=0,
    ):
        self._v = {
            "name": name,
            "start_ns": start_ns,
            "duration_ns": dur_ns,
            "device_type": device,
            "start_thread_id": tid,
            "end_thread_id": tid if end_tid is None else end_tid,
            "correlation_id": corr,
            "linked_correlation_id": linked,
            "is_python_function": python,
            "is_async": is_async,
            "is_user_annotation": annotation,
            "shapes": list(shapes),
            "device_index": device_index,
            "device_resource_id": stream,
            "nbytes": nbytes,
        }

    def __getattr__(self, name):
        try:
            value = self.__dict__["_v"][name]
        except KeyError:
            raise AttributeError(name) from None
        return lambda: value


def _kineto_prof(events, t0=1_000_000):
    kin = types.SimpleNamespace(trace_start_ns=lambda: t0, events=lambda: list(events))
    return types.SimpleNamespace(profiler=types.SimpleNamespace(kineto_results=kin), events=list)


T0 = 1_000_000  # ns
CUDA = DeviceType.CUDA


def _gpu_events():
    """Thread 1: linear [0, 100) us > addmm [10, 80) > cudaLaunchKernel [20, 30).

    Thread 1: linear [0, 100) us > addmm [10, 80) > cudaLaunchKernel [20, 30) (corr 5) and
    cudaMemcpyAsync [40, 50) (corr 6); thread 2: a later relu [5, 15) (corr 7 launching a memset);
    device 0: a kernel [35, 60) on stream 7 (linked to 5) and a memcpy [50, 70) (linked to 6);
    device 1 a memset.
    """
    us = 1000
    return [
        KinetoEvent("aten::linear", T0 + 0, 100 * us, corr=1, shapes=[[5, 8], [16, 8], [16]]),
        KinetoEvent("aten::addmm", T0 + 10 * us, 70 * us, corr=2),
        KinetoEvent("cudaLaunchKernel", T0 + 20 * us, 10 * us, corr=5),
        KinetoEvent("cudaMemcpyAsync", T0 + 40 * us, 10 * us, corr=6),
        KinetoEvent("aten::relu", T0 + 5 * us, 10 * us, tid=2, corr=7),
        KinetoEvent(
            "volta_sgemm_128x64_nn", T0 + 35 * us, 25 * us, device=CUDA, linked=5, stream=7
        ),
        KinetoEvent(
            "Memcpy HtoD (Pageable -> Device)",
            T0 + 50 * us,
            20 * us,
            device=CUDA,
            linked=6,
            stream=8,
        ),
        KinetoEvent(
            "Memset (Device)", T0 + 10 * us, 2 * us, device=CUDA, device_index=1, linked=7, stream=3
        ),
        KinetoEvent("orphan_kernel", T0 + 90 * us, 10 * us, device=CUDA, linked=99),
    ]


def test_kineto_path_links_kernels_to_their_launchers():
    res = _build(_kineto_prof(_gpu_events()), False, activities=("CPU", "CUDA"), group="shape")
    kinds = {
        k.name: (k.kind, k.device, k.stream, k.start_us, k.end_us, k.launcher) for k in res.kernels
    }
    assert kinds == {
        "volta_sgemm_128x64_nn": ("kernel", 0, 7, 35.0, 60.0, "cudaLaunchKernel"),
        "Memcpy HtoD (Pageable -> Device)": ("memcpy", 0, 8, 50.0, 70.0, "cudaMemcpyAsync"),
        "Memset (Device)": ("memset", 1, 3, 10.0, 12.0, "aten::relu"),
        "orphan_kernel": ("kernel", 0, 0, 90.0, 100.0, ""),
    }
    ops = {o.name: o for o in res.ops}
    assert [o.name for o in res.ops] == [
        "aten::linear",
        "aten::relu",
        "aten::addmm",
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
    ]  # two threads: by start time
    assert ops["cudaLaunchKernel"].device_us == 25.0 and ops["cudaMemcpyAsync"].device_us == 20.0
    assert ops["aten::relu"].device_us == 2.0 and ops["aten::addmm"].device_us == 0.0
    assert (ops["aten::linear"].self_us, ops["aten::addmm"].self_us) == (30.0, 50.0)
    assert [(o.depth, o.top) for o in res.ops] == [
        (0, True),
        (0, True),
        (1, False),
        (2, False),
        (2, False),
    ]
    assert (ops["aten::relu"].thread, ops["aten::linear"].input_shapes()) == (
        2,
        [[5, 8], [16, 8], [16]],
    )
    assert ops["aten::addmm"].input_shapes() == []
    assert {r.detail for r in res.rows("shape") if r.name == "aten::linear"} == {
        "[[5, 8], [16, 8], [16]]"
    }
    assert res.span_us == (0.0, 100.0)
    gpu = {b.device: b for b in res.gpu}
    assert (gpu[0].kernel_us, gpu[0].memcpy_us, gpu[0].memset_us, gpu[0].idle_us) == (
        35.0,
        10.0,
        0.0,
        55.0,
    )
    assert (gpu[1].memset_us, gpu[1].idle_us) == (2.0, 98.0)
    rows = res.kernel_rows()
    assert [(r.name, r.calls, r.self_us, r.launcher) for r in rows][:2] == [
        ("volta_sgemm_128x64_nn", 1, 25.0, "cudaLaunchKernel"),
        ("Memcpy HtoD (Pageable -> Device)", 1, 20.0, "cudaMemcpyAsync"),
    ]


def test_build_result_keeps_the_settings_and_reads_the_events_once():
    """The raw Kineto events are read once for the records and the allocations.

    The raw Kineto events are read once for the records and the allocations (each read of
    ``kineto_results.events()`` wraps every event again: seconds for a long profile).
    """
    prof = _kineto_prof(_gpu_events() + [KinetoEvent("[memory]", T0 + 1000, 0, nbytes=8)])
    kin = prof.profiler.kineto_results
    reads = []
    events = kin.events
    kin.events = lambda: reads.append(1) or events()
    acts = ("CPU", "CUDA")
    res = build_result(
        prof,
        header="%%torchprof --top 4",
        wall_s=1.25,
        activities=acts,
        with_stack=False,
        memory=True,
        group="shape",
        stack_depth=5,
        top=4,
    )
    assert len(reads) == 1 and res.peak_memory_bytes == {"cpu": 8} and len(res.ops) == 5
    assert (
        res.header,
        res.wall_s,
        res.activities,
        res.group,
        res.stack_depth,
        res.top,
        res.with_stack,
    ) == ("%%torchprof --top 4", 1.25, ["CPU", "CUDA"], "shape", 5, 4, False)
    assert type(res.activities) is list
    assert (
        build_result(
            STACK_PROF,
            header="h",
            wall_s=0.0,
            activities=["CPU"],
            with_stack=True,
            memory=False,
            group="stack",
            stack_depth=1,
            top=2,
        ).with_stack
        is True
    )


def test_kineto_path_skips_what_torch_tables_skip():
    us = 1000
    evs = [
        KinetoEvent("aten::mm", T0, 50 * us, corr=1),
        KinetoEvent("aten::is_leaf", T0 + 1 * us, 1 * us),
        KinetoEvent("[memory]", T0 + 2 * us, 0, nbytes=64),
        KinetoEvent("profiler::_record_function_exit", T0 + 3 * us, 1 * us),
        KinetoEvent("cell.py(3): f", T0 + 4 * us, 5 * us, python=True),
        KinetoEvent("async_range", T0 + 10 * us, 5 * us, is_async=True),
        KinetoEvent("moved_thread", T0 + 20 * us, 5 * us, tid=1, end_tid=3),
        KinetoEvent("ProfilerStep#7", T0 - 10 * us, 200 * us, annotation=True),
        KinetoEvent("ProfilerStep#x", T0 + 300 * us, 10 * us, annotation=True),
        KinetoEvent(
            "ProfilerStep#8", T0 + 320 * us, 10 * us
        ),  # not an annotation: an operator range
        KinetoEvent(
            "cudaLaunchKernel", T0 + 30 * us, 5 * us, corr=4, linked=3
        ),  # linked: not a launcher
        KinetoEvent("k", T0 + 40 * us, 5 * us, device=CUDA, linked=4),
    ]
    res = _build(_kineto_prof(evs), False, memory=False, activities=("CPU", "CUDA"))
    assert [o.name for o in res.ops] == ["aten::mm", "cudaLaunchKernel", "ProfilerStep#8"]
    assert res.ops[0].self_us == 45.0 and res.ops[1].depth == 1
    assert [(s.step, s.start_us, s.end_us) for s in res.steps] == [
        (7, -10.0, 190.0),
        (1, 300.0, 310.0),
    ]
    assert res.kernels[0].launcher == "" and res.ops[1].device_us == 0.0
    assert res.span_us == (-10.0, 330.0)


def test_kineto_self_time_never_negative_and_redispatch_merged():
    us = 1000
    evs = [  # a child running past its parent's end: the parent's self time would be -10 us
        KinetoEvent("outer", T0, 20 * us),
        KinetoEvent("a", T0 + 0, 15 * us),
        KinetoEvent("b", T0 + 15 * us, 15 * us),
        # aten::sum calling aten::sum (only child): one call; its kernel is credited to the outer
        # one
        KinetoEvent("aten::sum", T0 + 100 * us, 50 * us, corr=10),
        KinetoEvent("aten::sum", T0 + 110 * us, 30 * us, corr=11),
        KinetoEvent("aten::sum", T0 + 112 * us, 20 * us, corr=12),  # a chain merges whole
        KinetoEvent("aten::fill_", T0 + 120 * us, 5 * us),
        # merged, its parent then has two children: the inner aten::mean stays a call of its own (as
        # in torch)
        KinetoEvent("aten::mean", T0 + 300 * us, 50 * us),
        KinetoEvent("aten::mean", T0 + 305 * us, 40 * us),
        KinetoEvent("aten::mean", T0 + 310 * us, 10 * us),
        KinetoEvent("aten::div_", T0 + 330 * us, 5 * us),
        # same name but a sibling follows: two calls, as in torch
        KinetoEvent("aten::add", T0 + 200 * us, 50 * us),
        KinetoEvent("aten::add", T0 + 210 * us, 10 * us),
        KinetoEvent("aten::copy_", T0 + 230 * us, 10 * us),
        KinetoEvent("sum_kernel", T0 + 130 * us, 4 * us, device=CUDA, linked=12),
        KinetoEvent("sum_kernel", T0 + 140 * us, 6 * us, device=CUDA, linked=10),
    ]
    res = _build(_kineto_prof(evs), False, activities=("CPU", "CUDA"))
    ops = {(o.name, o.start_us): o for o in res.ops}
    # b starts as a ends: a sibling
    assert ops[("outer", 0.0)].self_us == 0.0 and ops[("b", 15.0)].depth == 1
    assert ops[("a", 0.0)].self_us == 15.0 and ops[("b", 15.0)].self_us == 15.0
    sums = [o for o in res.ops if o.name == "aten::sum"]
    assert len(sums) == 1 and sums[0].self_us == 45.0 and sums[0].device_us == 10.0
    assert {k.launcher for k in res.kernels} == {"aten::sum"}
    fill = ops[("aten::fill_", 120.0)]
    assert (fill.depth, fill.top) == (1, False)
    assert [(o.calls, o.self_us, o.total_us) for o in res.rows() if o.name == "aten::add"] == [
        (2, 40.0, 60.0)
    ]
    assert ops[("aten::copy_", 230.0)].depth == 1
    assert [r.calls for r in res.rows() if r.name == "aten::sum"] == [1]
    means = [(o.start_us, o.depth, o.self_us) for o in res.ops if o.name == "aten::mean"]
    assert means == [(300.0, 0, 35.0), (310.0, 1, 10.0)]


def test_kineto_path_cpu_device_types_demangling_and_unlinked_kernels():
    us = 1000
    evs = [
        KinetoEvent("mkldnn_convolution", T0, 10 * us, device=DeviceType.MKLDNN, corr=1),
        KinetoEvent("ideep_op", T0 + 20 * us, 10 * us, device=DeviceType.IDEEP, corr=2),
        KinetoEvent("ProfilerStep#4", T0 + 40 * us, 10 * us),  # correlation id 0: launches nothing
        KinetoEvent("_Z5saxpyifPfS_", T0 + 41 * us, 3 * us, device=CUDA, linked=1, stream=9),
        KinetoEvent("unlinked", T0 + 45 * us, 2 * us, device=CUDA, linked=0),
    ]
    res = _build(_kineto_prof(evs), False, activities=("CPU", "CUDA"))
    assert [(o.name, o.start_us, o.end_us, o.depth) for o in res.ops] == [
        ("mkldnn_convolution", 0.0, 10.0, 0),
        ("ideep_op", 20.0, 30.0, 0),
        ("ProfilerStep#4", 40.0, 50.0, 0),
    ]
    assert [(k.name, k.kind, k.launcher) for k in res.kernels] == [
        ("saxpy(int, float, float*, float*)", "kernel", "mkldnn_convolution"),
        ("unlinked", "kernel", ""),
    ]
    assert res.ops[0].device_us == 3.0 and res.ops[2].device_us == 0.0


def _fevt(
    id,
    name,
    start,
    end,
    device=None,
    linked=-1,
    thread=1,
    shapes=None,
    python=False,
    annotation=False,
    is_async=False,
    trace_name=None,
):
    from torch.autograd.profiler_util import FunctionEvent

    return FunctionEvent(
        id=id,
        name=name,
        thread=thread,
        start_us=start,
        end_us=end,
        input_shapes=shapes,
        device_type=device or DeviceType.CPU,
        device_index=0 if device is None else 1,
        device_resource_id=4 if device else thread,
        linked_correlation_id=linked,
        is_python_function=python,
        is_user_annotation=annotation,
        is_async=is_async,
        trace_name=trace_name,
    )


def _function_event_prof(evts):
    from torch.autograd.profiler_util import EventList

    el = EventList(evts)
    el._build_tree()
    return types.SimpleNamespace(events=lambda: el)  # no .profiler: read through prof.events()


def test_function_event_path_links_kernels_and_steps():
    evts = [
        _fevt(1, "ProfilerStep#3", 0, 200, annotation=True, trace_name="ProfilerStep#3"),
        _fevt(2, "aten::mm", 10, 100, shapes=[[2, 3], [3, 4]]),
        _fevt(3, "cudaLaunchKernel", 20, 30),
        _fevt(4, "aten::is_leaf", 105, 106),
        _fevt(5, "async", 50, 60, is_async=True),
        _fevt(
            6, "ProfilerStep#9", 300, 400, annotation=True
        ),  # trace name missing: numbered by position
        _fevt(7, "gemm", 25, 75, device=CUDA, linked=3),
        _fevt(8, "Memset (Device)", 80, 81, device=CUDA),
        _fevt(9, "aten::add", 310, 320),
        _fevt(10, "my_range", 500, 600, annotation=True),
        _fevt(11, "aten::linear", 510, 590),
        _fevt(12, "aten::addmm", 520, 580),
        _fevt(13, "cudaLaunchKernel", 530, 540),
        _fevt(14, "gemm", 541, 545, device=CUDA, linked=13),
        _fevt(15, "gemm", 546, 556, device=CUDA, linked=13),
    ]
    res = _build(_function_event_prof(evts), False, activities=("CPU", "CUDA"))
    assert [(s.step, s.start_us, s.end_us) for s in res.steps] == [(3, 0, 200), (1, 300, 400)]
    assert [(o.name, o.depth, o.top, o.self_us, o.device_us) for o in res.ops] == [
        ("aten::mm", 0, True, 80, 0.0),
        ("cudaLaunchKernel", 1, False, 10, 50.0),
        ("aten::add", 0, True, 10, 0.0),
        ("my_range", 0, True, 20, 0.0),
        ("aten::linear", 1, False, 20, 0.0),
        ("aten::addmm", 2, False, 50, 0.0),
        ("cudaLaunchKernel", 3, False, 10, 14.0),
    ]
    assert res.ops[0].shapes == [[2, 3], [3, 4]] and res.ops[2].shapes == []
    assert all(o.module == "" and o.stack == () for o in res.ops)
    assert [
        (k.name, k.kind, k.device, k.stream, k.start_us, k.end_us, k.launcher) for k in res.kernels
    ][:2] == [
        ("gemm", "kernel", 1, 4, 25, 75, "cudaLaunchKernel"),
        ("Memset (Device)", "memset", 1, 4, 80, 81, ""),
    ]
    assert [b.device for b in res.gpu] == [1] and res.gpu[0].kernel_us == 64  # 50 + 4 + 10
    with pytest.raises(ValueError, match="grouping by module needs the Python calls"):
        res.rows("module")
    empty = _build(_function_event_prof([]), True)
    assert (empty.ops, empty.kernels, empty.steps, empty.span_us) == ([], [], [], (0.0, 0.0))


# ---- plain functions
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame, user",
    [
        ("/tmp/ipykernel_1/123.py(5): train", True),
        ("cell.py(1): <module>", True),
        ("torch/nn/modules/linear.py(130): forward", False),
        ("/x/cudamagic/prof/run.py(3): f", False),
        ("/usr/lib/python3/site-packages/numpy/a.py(1): f", False),
        ("<built-in method relu>(1): x", False),
        ("/x/IPython/core/interactiveshell.py(3): run_code", False),
        ("/x/ipykernel/kernelbase.py(9): f", False),
        ("/usr/lib/python3.11/threading.py(1): run", False),
        ("nn.Module: Linear_0", False),
        ("train", False),
    ],
)
def test_frame_is_user(frame, user):
    assert frame_is_user(frame) is user


def _op(name, detail="", start=0.0, end=10.0, self_us=10.0, module="", stack=()):
    return OpRecord(name, detail, 1, start, end, self_us, module=module, stack=stack)


def test_aggregate_keys_totals_and_order():
    ops = [
        _op(
            "aten::mm",
            "[[2]]",
            0,
            10,
            4,
            "M/Linear_0",
            ("a.py(1): f", "a.py(2): g", "a.py(3): h", "a.py(4): i"),
        ),
        _op("aten::mm", "[[3]]", 10, 30, 4, "M/Linear_1", ("a.py(1): f", "a.py(9): k")),
        _op("aten::add", "[[2]]", 30, 38, 8),
        _op("aten::abs", "[[2]]", 40, 41, 8),
    ]
    by_op = aggregate(ops)
    assert [(r.name, r.detail, r.calls, r.self_us, r.total_us) for r in by_op] == [
        ("aten::abs", "", 1, 8, 1),
        ("aten::add", "", 1, 8, 8),
        ("aten::mm", "", 2, 8, 30),
    ]  # ties: by name
    assert [r.self_pct for r in by_op] == [pytest.approx(100 / 3)] * 3
    by_shape = aggregate(ops, "shape")
    assert [(r.name, r.detail) for r in by_shape][2:] == [
        ("aten::mm", "[[2]]"),
        ("aten::mm", "[[3]]"),
    ]
    by_module = aggregate(ops, "module")
    assert [r.detail for r in by_module] == ["(outside any nn.Module)"] * 2 + [
        "M/Linear_0",
        "M/Linear_1",
    ]
    assert [r.detail for r in aggregate(ops, "stack", 2)][2:] == [
        "a.py(1): f <- a.py(2): g",
        "a.py(1): f <- a.py(9): k",
    ]
    assert aggregate(ops, "stack")[2].detail == "a.py(1): f <- a.py(2): g <- a.py(3): h"
    assert aggregate(ops, "stack")[0].detail == "(no frame of your code)"
    zero = aggregate([_op("a", self_us=0.0), _op("b", self_us=0.0)])
    assert [(r.name, r.self_pct) for r in zero] == [("a", 0.0), ("b", 0.0)]
    assert aggregate([]) == []


def test_aggregate_kernels_sums_device_time_and_ranks_launchers():
    ks = [
        KernelRecord("gemm", "kernel", 0, 7, 0, 30, "aten::addmm"),
        KernelRecord("gemm", "kernel", 0, 7, 40, 50, "aten::mm"),
        KernelRecord("gemm", "kernel", 0, 7, 60, 70, "aten::mm"),
        KernelRecord("gemm", "kernel", 0, 7, 80, 81),
        KernelRecord("fill", "memset", 0, 7, 90, 91),
        KernelRecord("copy", "memcpy", 0, 7, 100, 150, "x"),
    ]
    rows = aggregate_kernels(ks)
    assert [(r.name, r.detail, r.calls, r.self_us, r.total_us, r.launcher) for r in rows] == [
        ("gemm", "", 4, 51, 51, "aten::mm, aten::addmm"),
        ("copy", "", 1, 50, 50, "x"),
        ("fill", "", 1, 1, 1, ""),
    ]
    assert [r.self_pct for r in rows] == pytest.approx([5100 / 102, 5000 / 102, 100 / 102])
    assert aggregate_kernels([KernelRecord("z", "kernel", 0, 0, 5, 5)])[0].self_pct == 0.0


def test_gpu_breakdown_priorities_edges_and_clipping():
    ks = [
        KernelRecord("m", "memset", 0, 1, 0, 10),
        KernelRecord("c", "memcpy", 0, 2, 5, 20),
        KernelRecord("k", "kernel", 0, 3, 15, 25),
        KernelRecord("k2", "kernel", 0, 3, 25, 30),  # touching
        KernelRecord("before", "kernel", 0, 3, -20, -5),
        KernelRecord("empty", "memcpy", 0, 3, 40, 40),
        KernelRecord("early", "kernel", 2, 3, -10, 5),
    ]
    out = gpu_breakdown(ks, (0.0, 50.0))
    assert [b.device for b in out] == [0, 2]  # no entry for a device with nothing inside the span
    b = out[0]
    assert (b.span_us, b.kernel_us, b.memcpy_us, b.memset_us, b.idle_us) == (
        50.0,
        15.0,
        10.0,
        5.0,
        20.0,
    )
    assert b.pct() == {"kernel": 30.0, "memcpy": 20.0, "memset": 10.0, "idle": 40.0}
    assert (out[1].kernel_us, out[1].idle_us) == (5.0, 45.0)
    assert gpu_breakdown([], (0.0, 1.0)) == []
    lone = gpu_breakdown([KernelRecord("k", "kernel", 0, 0, 3, 8)], (2.0, 10.0))[0]
    assert (lone.span_us, lone.kernel_us, lone.idle_us) == (8.0, 5.0, 3.0)
    # overlapping kernels (two streams) count once; a device busy the whole span has no idle time; a
    # device whose only activity ends where the span starts has no entry
    busy = gpu_breakdown(
        [
            KernelRecord("a", "kernel", 0, 1, 0, 6),
            KernelRecord("b", "kernel", 0, 2, 4, 10),
            KernelRecord("c", "memcpy", 0, 3, 2, 3),
            KernelRecord("d", "kernel", 5, 3, -4, 0),
        ],
        (0.0, 10.0),
    )
    assert [(b.device, b.kernel_us, b.memcpy_us, b.idle_us) for b in busy] == [(0, 10.0, 0.0, 0.0)]
    assert GpuBreakdown(0, 0.0, 0.0, 0.0, 0.0, 0.0).pct() == {
        "kernel": 0.0,
        "memcpy": 0.0,
        "memset": 0.0,
        "idle": 0.0,
    }
    assert GpuBreakdown(0, 8.0, 2.0, 2.0, 2.0, 2.0).pct() == {
        "kernel": 25.0,
        "memcpy": 25.0,
        "memset": 25.0,
        "idle": 25.0,
    }


def test_memory_without_kineto_results_says_so():
    from cudamagic.prof.summary import _memory_from_profiler

    res = ProfResult()
    _memory_from_profiler(types.SimpleNamespace(), res)
    assert res.peak_memory_bytes.code == "not_recorded"
    assert res.peak_memory_bytes.reason == "the profiler kept no allocation events"


def test_memory_per_device_from_kineto_events():
    us = 1000
    evs = [
        KinetoEvent("aten::empty", T0, 100 * us),
        KinetoEvent("[memory]", T0 + 20 * us, 0, nbytes=300),
        KinetoEvent("[memory]", T0 + 10 * us, 0, nbytes=100),
        KinetoEvent("[memory]", T0 + 30 * us, 0, nbytes=-400),
        KinetoEvent("[memory]", T0 + 5 * us, 0, device=CUDA, device_index=1, nbytes=1 << 20),
        KinetoEvent("[memory]", T0 + 6 * us, 0, device=CUDA, device_index=1, nbytes=-(1 << 19)),
        KinetoEvent("[memory]", T0 + 7 * us, 0, device=DeviceType.MKLDNN, nbytes=50),
        KinetoEvent("[memory]", T0 + 8 * us, 0, device=DeviceType.IDEEP, nbytes=0),
    ]
    res = _build(_kineto_prof(evs), False, memory=True)
    assert res.peak_memory_bytes == {"cpu": 450, "cuda:1": 1 << 20}
    assert res.memory_points["cpu"] == [
        (0.0, 0),
        (7.0, 50),
        (8.0, 50),
        (10.0, 150),
        (20.0, 450),
        (30.0, 50),
    ]
    assert res.memory_points["cuda:1"] == [(0.0, 0), (5.0, 1 << 20), (6.0, 1 << 19)]
    slow = _build(_kineto_prof(evs), True, memory=True)  # memory read again from the Kineto results
    assert slow.peak_memory_bytes == res.peak_memory_bytes and slow.ops == []
    freed = [
        KinetoEvent("[memory]", T0 + 1 * us, 0, nbytes=-64)
    ]  # freed a block allocated before: peak 0
    assert _build(_kineto_prof(freed), False, memory=True).peak_memory_bytes == {"cpu": 0}


# ---- the result object
# -------------------------------------------------------------------------------------------


def _result(**kw):
    ops = [
        _op("aten::mm", "[[2]]", 0, 10, 6),
        _op("aten::mm", "[[3]]", 10, 30, 6),
        _op("aten::add", "[[2]]", 30, 35, 5),
    ]
    ks = [
        KernelRecord("gemm", "kernel", 0, 7, 0, 8, "aten::mm"),
        KernelRecord("fill", "memset", 0, 7, 9, 10),
    ]
    return ProfResult(ops=ops, kernels=ks, span_us=(0.0, 35.0), **kw)


def test_table_top_kind_and_group():
    res = _result(top=1, group="shape")
    t = res.table()
    assert t.group == "shape" and t.top == 1 and len(t.rows) == 3 and t.shown()[1][0] == 2
    assert res.table(top=2).top == 2
    assert [r.name for r in res.table(group="op").rows] == ["aten::mm", "aten::add"]
    assert res.table(group="op").group == "op"
    k = res.table(kind="kernels")
    assert k.group == "kernels" and [r.name for r in k.rows] == ["gemm", "fill"] and k.top == 1
    assert res.table(kind="kernels", top=5).top == 5
    with pytest.raises(ValueError, match="kind must be 'ops' or 'kernels', not 'memory'"):
        res.table(kind="memory")
    shape = res.table(stack_depth=1)
    assert "input shapes" in repr(shape)
    assert res.rows() == res.rows("shape") and len(res.rows("op")) == 2
    res.ops.append(_op("aten::relu"))  # a record added after a first table: the cache follows
    assert len(res.rows()) == 4
    stacked = ProfResult(
        ops=[_op("aten::mm", stack=("a.py(1): f", "a.py(2): g"))], with_stack=True, group="stack"
    )
    assert [r.detail for r in stacked.table(stack_depth=1).rows] == ["a.py(1): f"]
    assert [r.detail for r in stacked.table().rows] == ["a.py(1): f <- a.py(2): g"]


def test_to_pandas_lists_operators_then_kernels():
    pytest.importorskip("pandas")
    df = _result().to_pandas()
    assert list(df.columns) == [
        "kind",
        "name",
        "detail",
        "calls",
        "self_time_us",
        "total_time_us",
        "self_time_pct",
        "launcher",
    ]
    assert df.to_dict("records") == [
        {
            "kind": "operator",
            "name": "aten::mm",
            "detail": "",
            "calls": 2,
            "self_time_us": 12.0,
            "total_time_us": 30.0,
            "self_time_pct": pytest.approx(1200 / 17),
            "launcher": "",
        },
        {
            "kind": "operator",
            "name": "aten::add",
            "detail": "",
            "calls": 1,
            "self_time_us": 5.0,
            "total_time_us": 5.0,
            "self_time_pct": pytest.approx(500 / 17),
            "launcher": "",
        },
        {
            "kind": "kernel",
            "name": "gemm",
            "detail": "",
            "calls": 1,
            "self_time_us": 8.0,
            "total_time_us": 8.0,
            "self_time_pct": pytest.approx(800 / 9),
            "launcher": "aten::mm",
        },
        {
            "kind": "kernel",
            "name": "fill",
            "detail": "",
            "calls": 1,
            "self_time_us": 1.0,
            "total_time_us": 1.0,
            "self_time_pct": pytest.approx(100 / 9),
            "launcher": "",
        },
    ]
    assert list(_result().to_pandas("shape")["detail"])[:3] == ["[[2]]", "[[3]]", "[[2]]"]
    empty = ProfResult().to_pandas()  # nothing recorded: the same columns, no row
    assert list(empty.columns) == list(df.columns) and len(empty) == 0


def test_to_pandas_without_pandas_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(
        UsageError, match=r"^ProfResult\.to_pandas\(\) needs pandas: `pip install pandas`\.$"
    ):
        _result().to_pandas()


def test_slowest_span_and_outputs(tmp_path):
    res = _result(header="%%torchprof --top 2")
    assert res.slowest().name == "aten::mm" and res.slowest("shape").detail in ("[[2]]", "[[3]]")
    assert ProfResult().slowest() is None
    assert ProfResult(span_us=(1_000.0, 2_501_000.0)).span_s == 2.5
    path = str(tmp_path / "p.html")
    assert res.save_html(path) == path
    page = (tmp_path / "p.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<title>%%torchprof --top 2</title>" in page
    assert res.to_html() in page and res._repr_html_() == res.to_html() and "aten::<wbr>mm" in page
    assert "aten::mm" in repr(res) and repr(res).startswith("%%torchprof --top 2")


def test_save_html_writes_utf8_whatever_the_locale(tmp_path, monkeypatch):
    """The page declares UTF-8.

    A non-ASCII name is written as UTF-8 even where the locale's encoding is ASCII (a C locale
    without coercion, checked in a real process) or cp1252 (Windows).
    """
    import builtins
    import os
    import subprocess
    import sys

    import cudamagic
    from cudamagic.prof import result

    path = tmp_path / "p.html"
    code = (
        "from cudamagic.prof.result import ProfResult, OpRecord\n"
        "r = ProfResult(header='%%torchprof \\u00b5s \\u2716', ops=[OpRecord('k\\u00e9rnel', '[]', "
        "1, 0.0, 1.0, 1.0)])\n"
        f"r.save_html({str(path)!r})\n"
    )
    # the copy under test
    here_root = os.path.dirname(os.path.dirname(os.path.abspath(cudamagic.__file__)))
    env = {
        **os.environ,
        "LC_ALL": "C",
        "LANG": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONPATH": here_root,
    }
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    page = path.read_bytes().decode("utf-8")
    assert "<title>%%torchprof \u00b5s \u2716</title>" in page and "k\u00e9rnel" in page

    # the same in this process, with the locale's default encoding made cp1252 for the module
    # (mutation testing names mutants with non-ASCII characters, which a C-locale child process
    # cannot read from its environment)
    def cp1252_default(file, mode="r", *args, encoding=None, **kw):
        return builtins.open(
            file, mode, *args, encoding=encoding or ("cp1252" if "b" not in mode else None), **kw
        )

    monkeypatch.setattr(result, "open", cp1252_default, raising=False)
    here = ProfResult(
        header="%%torchprof \u00b5s \u2716", ops=[OpRecord("k\u00e9rnel", "[]", 1, 0.0, 1.0, 1.0)]
    )
    assert here.save_html(str(tmp_path / "q.html")) == str(tmp_path / "q.html")
    assert (tmp_path / "q.html").read_bytes().decode("utf-8") == page


def test_records_and_rows_are_plain_data():
    assert OpRecord("a", "[]", 1, 2.0, 7.5, 1.0).total_us == 5.5
    assert (
        KernelRecord("k", "kernel", 0, 0, 1.0, 4.0).dur_us == 3.0
        and StepRecord(0, 1.0, 3.0).dur_us == 2.0
    )
    assert TableRow("a", "", 1, 1.0, 1.0, 100.0).launcher == ""
    assert GROUPS == ("op", "shape", "module", "stack")
    assert list(DETAIL_HEADERS) == list(GROUPS)


def test_a_thread_whose_only_nesting_is_a_redispatch_still_merges_it():
    """The merge pass is skipped only when no parent shares its child's name.

    A thread holding nothing but aten::sum inside aten::sum is one call (as key_averages() counts
    it), not two.
    """
    us = 1000
    evs = [KinetoEvent("aten::sum", T0, 50 * us), KinetoEvent("aten::sum", T0 + 10 * us, 30 * us)]
    res = _build(_kineto_prof(evs), False, activities=("CPU",))
    assert [(o.name, o.start_us) for o in res.ops] == [("aten::sum", 0.0)]
    assert {r.name: r.calls for r in res.rows()}["aten::sum"] == 1


# ---- an untrusted notebook: JupyterLab's sanitiser


def _lab_sanitise(html_text: str) -> str:
    """``html_text`` as an untrusted notebook in JupyterLab shows it (its sanitiser's rules).

    No ``<style>`` or ``<svg>`` (an SVG's text stays in the flow), the attributes JupyterLab keeps,
    ``data:`` images, and no ``var()`` value in a ``style`` (its CSS patterns refuse them).
    """
    import nh3

    html_text = re.sub(
        r"<svg\b.*?</svg>", lambda m: re.sub(r"<[^>]+>", " ", m.group(0)), html_text, flags=re.S
    )
    tags = "div span table thead tbody tr th td h4 img wbr ul li code b i small details summary"
    return nh3.clean(
        html_text,
        tags=set(tags.split()),
        clean_content_tags={"script", "style"},
        attributes={
            "*": {"class", "style", "title"},
            "img": {"src", "alt", "width", "height"},
        },
        attribute_filter=lambda tag, attr, value: (
            ";".join(d for d in value.split(";") if "var(" not in d) or None
            if attr == "style"
            else value
        ),
        url_schemes={"http", "https", "data"},
        link_rel=None,
    )


def test_untrusted_notebook_keeps_the_tables_and_the_pictures():
    """Found by the browser review: sanitised, the summary was an 11,775 px wall of text."""
    import base64

    res = _result(memory_points={"cpu": [(0.0, 0), (20.0, 4096)]})
    clean = _lab_sanitise(res.to_html())
    names = re.findall(r"<td[^>]*><span style=\"([^\"]+)\">(.*?)</span></td>", clean)
    assert ("overflow-wrap:normal;word-break:normal", "aten::<wbr>mm") in names
    assert "gemm" in [n for _, n in names]  # the kernel table too
    pictures = re.findall(r'<img src="data:image/svg\+xml;base64,([^"]+)" width="(\d+)"', clean)
    assert len(pictures) == 2 and "<title" not in clean and "<svg" not in clean
    svg = base64.b64decode(pictures[0][0]).decode()
    assert svg.startswith("<svg") and "aten::mm" in svg and "cuda:0 stream 7" in svg
    # the picture keeps its size and scrolls where the output is narrower
    box = re.search(r'<div class="cm-scroll" style="([^"]+)"><img [^>]*style="([^"]+)"', clean)
    assert "overflow-x:auto" in box[1] and box[2] == "max-width:none"
