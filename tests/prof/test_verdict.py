"""The verdict of %%torchprof: seeded slow cells, traces of GPU causes, the breakdown.

Seeded slow cells run for real on this CPU (tier 2, a real InteractiveShell); GPU-only causes
on traces in the CUDA profiler's shape; the breakdown's arithmetic on hand-made records; and
``--compare``'s breakdown rows.
"""

from __future__ import annotations

import json

import pytest
import torch

from cudamagic.core.fmt import esc
from cudamagic.core.na import is_na
from cudamagic.prof.breakdown import CPU_ROWS, GPU_ROWS, breakdown, of_trace
from cudamagic.prof.result import KernelRecord, OpRecord, StepRecord
from cudamagic.prof.verdict import breakdown_change, build_verdict

from . import cuda_traces as ct
from .seeded import CAUSES, sources


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    threads = torch.get_num_threads()
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "cudamagic")
    yield sh
    torch.set_num_threads(threads)


def profile(shell, name, fixed=False):
    setup, cell = sources(name, fixed)
    assert shell.run_cell(setup).success
    assert shell.run_cell(cell).success  # warm-up: first-call costs are not the cause
    return shell.run_cell_magic("torchprof", "", cell)


# ---- seeded slow cells, run for real on this machine ----------------------------------------


@pytest.mark.parametrize("cause", CAUSES)
def test_the_verdict_names_the_seeded_cause_first(shell, cause, capsys):
    res = profile(shell, cause)
    v = res.verdict
    assert v is not None and v.findings, v
    assert v.first.cause == cause, v
    assert sum(v.breakdown.pct().values()) == pytest.approx(100.0, abs=0.01)
    assert tuple(v.breakdown.rows_us) == CPU_ROWS
    # the summary shows the verdict after the tables, with the fix
    text = repr(res)
    assert text.index("Verdict, biggest avoidable cost first") > text.index("Top operators")
    assert v.first.fix in text
    html = res._repr_html_()
    assert html.index("Verdict, biggest avoidable cost first") > html.index("Top operators")
    assert esc(v.first.fix) in html and "<script" not in html
    # no GPU advice on a machine without one
    for f in v.findings:
        assert "pin_memory" not in f.fix and "non_blocking" not in f.fix
        assert "cuda" not in f.fix.lower()


def test_a_healthy_compute_bound_loop_gets_no_finding(shell):
    v = profile(shell, "healthy").verdict
    assert v.findings == (), v
    assert v.breakdown.pct()["compute"] > 80
    assert "no avoidable cost found" in v.text()
    # FLOPs of 3 steps: 2 matmuls forward, 3 backward (the weights' gradients and the hidden
    # layer's input gradient; x needs none), each 2 * 512 * 512 * 1024
    expected = 3 * 5 * 2 * 512 * 512 * 1024
    assert sum(v.flops.values()) == pytest.approx(expected, rel=0.01)
    assert v.achieved_tflops > 0
    assert is_na(v.mfu_pct) and "no GPU kernel ran" in v.mfu_pct.reason


def test_an_optimizer_bound_step_without_a_fault_says_where_the_time_is(shell):
    """Adam on one large parameter that a cheap loss reads: few operators, most of the step.

    Names of its own: the module's shell is shared with the seeded cells (which use ``opt``).
    """
    setup = (
        "torch.set_num_threads(1)\nbig_w = nn.Parameter(torch.randn(2_000_000))\n"
        "big_opt = torch.optim.Adam([big_w], foreach=True)"
    )
    cell = (
        "for _ in range(3):\n"
        "    big_w[:4].sum().backward()\n    big_opt.step()\n    big_opt.zero_grad()\n"
    )
    assert shell.run_cell("import torch\nfrom torch import nn\n" + setup).success
    assert shell.run_cell(cell).success
    v = shell.run_cell_magic("torchprof", "", cell).verdict
    pct = v.breakdown.pct()
    assert v.findings == () and pct["optimizer"] > 50, pct
    assert f"most of the step ({pct['optimizer']:.0f} %) is the optimizer's arithmetic" in v.text()
    assert "compute)" not in v.text()


def test_the_data_fix_names_the_cores_and_the_windows_caveat(shell):
    res = profile(shell, "data")
    f = res.verdict.first
    assert "num_workers=" in f.fix and "persistent_workers=True" in f.fix
    assert "CPU cores here" in f.fix and "Windows" not in f.fix
    again = build_verdict(res.verdict.breakdown, cpu_count=6, windows=True)
    assert "num_workers=6" in again.first.fix
    assert "on Windows define the Dataset in a .py file" in again.first.fix


def test_steps_split_the_breakdown_per_step(shell):
    setup, cell = sources("copies")  # 4 optimizer steps: 1 warm-up, 2 recorded
    shell.run_cell(setup)
    res = shell.run_cell_magic("torchprof", "--steps 2", cell)
    bd = res.verdict.breakdown
    assert bd.steps == 2
    assert bd.total_us == pytest.approx(sum(s.dur_us for s in res.steps))
    assert res.verdict.first.cause == "copies"
    assert "2 x " in res.verdict.text()


def test_compare_says_which_row_changed(shell):
    a = profile(shell, "copies")
    b = profile(shell, "copies", fixed=True)
    shell.user_ns.update(slow=a, fast=b)
    cmp = shell.run_line_magic("torchprof", "--compare slow fast")
    assert cmp.changes[0].startswith("host copies "), cmp.changes
    assert cmp.changes[-1].startswith("step ") and "faster" in cmp.changes[-1]
    assert "Step-time breakdown" in repr(cmp)


# ---- GPU-only causes, on traces in the CUDA profiler's shape ----------------------------------


def gpu_verdict(trace, **kw):
    kw.setdefault("gpu_name", "NVIDIA H100 80GB HBM3")
    kw.setdefault("capability", (9, 0))
    return build_verdict(of_trace(json.loads(json.dumps(trace))), **kw)


def test_sync_stalls_from_item_on_every_step():
    v = gpu_verdict(ct.sync_stall_trace())
    bd = v.breakdown
    assert tuple(bd.rows_us) == GPU_ROWS and bd.steps == 4
    assert bd.pct()["sync stalls"] == pytest.approx(100 * 493 / 1500, abs=1.0)
    assert bd.pct()["GPU computing"] == pytest.approx(100 * 1000 / 1500, abs=1.0)
    assert v.first.cause == "sync"
    assert ".item()" in v.first.what and "1x per step" in v.first.what
    assert ".cpu()" not in v.first.what  # the .item()'s own stream sync is not a second one
    assert "accumulate on the GPU" in v.first.fix


def test_launch_gaps_of_tiny_kernels():
    v = gpu_verdict(ct.launch_bound_trace())
    assert v.first.cause == "launch"
    assert "median 3 us" in v.first.what
    assert "torch.compile" in v.first.fix and "CUDA graphs" in v.first.fix
    assert v.breakdown.facts["gpu_idle_pct"] > 80


def test_pageable_copies_get_pin_memory_and_pinned_ones_do_not():
    v = gpu_verdict(ct.copy_trace())
    assert v.first.cause == "copies" and v.first.cost_pct > 60
    assert "pin_memory=True" in v.first.fix and "non_blocking=True" in v.first.fix
    pinned = gpu_verdict(ct.copy_trace(pinned=True))
    assert pinned.first.cause == "copies"
    assert all("pin_memory" not in f.fix for f in pinned.findings)


def test_data_wait_on_a_gpu_adds_pinned_memory():
    v = gpu_verdict(ct.data_wait_trace())
    assert v.first.cause == "data" and v.first.cost_pct == pytest.approx(70, abs=1)
    assert "pin_memory=True" in v.first.fix and "non_blocking=True" in v.first.fix


def test_batches_already_on_the_gpu_get_no_pin_memory_and_no_workers():
    # `cannot pin 'torch.cuda.FloatTensor'`: pinning a GPU tensor is an error
    v = gpu_verdict(ct.data_wait_trace(on_gpu=True))
    assert v.first.cause == "data"
    assert "pin_memory=True" not in v.first.fix and "num_workers=" not in v.first.fix
    assert "already on the GPU" in v.first.fix


def test_a_busy_gpu_gets_no_finding():
    v = gpu_verdict(ct.healthy_trace())
    assert v.findings == ()
    assert v.breakdown.pct()["GPU computing"] == pytest.approx(96, abs=1)


def test_fp32_matmuls_on_ampere_or_newer_suggest_tf32_or_bf16():
    fp32 = {"fp32": 1e12}
    v = gpu_verdict(ct.healthy_trace(), flops=fp32, capability=(8, 0), gpu_name="NVIDIA A100")
    assert v.first.cause == "tf32"
    assert "set_float32_matmul_precision('high')" in v.first.fix
    assert gpu_verdict(ct.healthy_trace(), flops=fp32, capability=(7, 5)).findings == ()
    high = gpu_verdict(ct.healthy_trace(), flops=fp32, capability=(8, 0), fp32_precision="high")
    assert high.findings == ()
    assert gpu_verdict(ct.healthy_trace(), flops={"bf16": 1e12}, capability=(9, 0)).findings == ()


def test_mfu_uses_the_dense_peak_of_the_gpu_and_never_guesses():
    # 3 steps of 2 ms = 6 ms; 989.5 TFLOP/s dense bf16 on an H100 SXM
    flops = {"bf16": 989.5e12 * 0.006 * 0.5}
    v = gpu_verdict(ct.healthy_trace(), flops=flops)
    assert v.mfu_pct == pytest.approx(50.0, rel=1e-3)
    assert v.peak_source.startswith("https://")
    a100 = gpu_verdict(ct.healthy_trace(), flops=flops, gpu_name="NVIDIA A100-SXM4-80GB")
    assert a100.mfu_pct > 100  # the same work cannot run on an A100's 312 TFLOP/s: not clipped
    unknown = gpu_verdict(ct.healthy_trace(), flops=flops, gpu_name="NVIDIA A10G")
    assert is_na(unknown.mfu_pct) and "'NVIDIA A10G'" in unknown.mfu_pct.reason
    assert unknown.achieved_tflops == pytest.approx(989.5 * 0.5, rel=1e-3)
    old = gpu_verdict(ct.healthy_trace(), flops=flops, gpu_name="Tesla T4", capability=(7, 5))
    assert is_na(old.mfu_pct) and "bf16" in old.mfu_pct.reason


def test_compare_of_two_trace_files(shell, tmp_path):
    a, b = tmp_path / "slow.json", tmp_path / "fast.json"
    a.write_text(json.dumps(ct.copy_trace()))
    b.write_text(json.dumps(ct.healthy_trace()))
    cmp = shell.run_line_magic("torchprof", f"--compare {a} {b}")
    assert cmp.changes[0].startswith("host-device copies 6"), cmp.changes
    assert cmp.changes[-1] == "step 1.50x faster"


# ---- the breakdown's arithmetic ---------------------------------------------------------------


def op(name, start, end, thread=1):
    return OpRecord(name, "", thread, start, end, end - start)


def test_cpu_rows_take_the_first_that_applies_and_sum_to_the_span():
    ops = [
        op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 30),
        op("aten::stack", 10, 20),  # collate, inside the data wait
        op("aten::clone", 30, 40),  # a host copy
        op("aten::copy_", 31, 39),  # inside the clone: counted once
        op("aten::addmm", 45, 60),
        op("aten::copy_", 50, 55),  # a bias copy inside addmm: compute, not a host copy
        op("aten::mm", 55, 70, thread=2),  # autograd's thread: compute too
        op("Optimizer.step#SGD.step", 80, 90),
        op("aten::add_", 81, 82),
    ]
    bd = breakdown(ops, [], [], (0, 100))
    assert bd.rows_us == {
        "compute": 25.0,  # 45-70
        "data wait": 30.0,
        "host copies": 10.0,
        "optimizer": 10.0,
        "Python overhead": 25.0,  # 40-45, 70-80, 90-100
    }
    assert bd.facts["copy_calls"] == {"aten::clone": 1}
    assert bd.facts["optimizer"] == "SGD" and bd.facts["optimizer_ops"] == 1


def test_optimizer_operators_are_counted_per_optimizer_step_not_per_cell():
    # a cell of 100 SGD steps over 2 parameters (weight, bias), profiled as one span
    ops = []
    for i in range(100):
        t = i * 10
        ops += [op("Optimizer.step#SGD.step", t, t + 5), op("aten::add_", t + 1, t + 2)]
        ops.append(op("aten::add_", t + 3, t + 4))
    bd = breakdown(ops, [], [], (0, 1000))
    assert bd.facts["optimizer_ops"] == 2
    causes = [f.cause for f in build_verdict(bd).findings]
    assert "optimizer" not in causes, causes


def test_steps_are_the_windows_and_time_outside_them_is_left_out():
    ops = [op("aten::mm", 0, 50), op("aten::mm", 100, 150)]
    steps = [StepRecord(1, 0, 60), StepRecord(2, 100, 200)]
    bd = breakdown(ops, [], steps, (0, 200))
    assert bd.total_us == 160 and bd.steps == 2 and bd.step_us == 80
    assert bd.rows_us["compute"] == 100 and bd.rows_us["Python overhead"] == 60


def test_a_gpu_gap_after_a_sync_is_a_sync_stall_and_one_without_is_a_launch_gap():
    ops = [op("aten::mm", 0, 5), op("cudaStreamSynchronize", 6, 51), op("aten::mm", 80, 90)]
    kernels = [
        KernelRecord("gemm", "kernel", 0, 7, 5, 50),
        KernelRecord("gemm", "kernel", 0, 7, 100, 120),
    ]
    bd = breakdown(ops, kernels, [], (0, 120))
    assert bd.rows_us["GPU computing"] == 65
    assert bd.rows_us["sync stalls"] == 50  # 50-100: idle after the sync
    assert bd.rows_us["launch gaps"] == 5  # 0-5: the CPU launching, nothing ran yet
    assert sum(bd.rows_us.values()) == 120


def test_breakdown_change_orders_rows_by_change_and_gives_the_ratio():
    a = breakdown([op("enumerate(DataLoader)#x", 0, 62), op("aten::mm", 62, 100)], [], [], (0, 100))
    b = breakdown([op("enumerate(DataLoader)#x", 0, 3), op("aten::mm", 3, 35)], [], [], (0, 35))
    lines = breakdown_change(a, b)
    assert lines[0] == "data wait 62.0 % -> 8.6 % (0.06 -> 0.00 ms/step)"
    assert lines[1] == "compute 38.0 % -> 91.4 % (0.04 -> 0.03 ms/step)"
    assert lines[-1] == "step 2.86x faster"


def test_findings_below_their_threshold_are_not_reported():
    ops = [op("enumerate(DataLoader)#x", 0, 5), op("aten::mm", 5, 100)]
    v = build_verdict(breakdown(ops, [], [], (0, 100)))
    assert v.findings == ()
