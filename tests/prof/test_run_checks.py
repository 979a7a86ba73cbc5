"""Tier 1-2: checks of a profiled cell's run: fd 2 warnings, a cell's own profiler, steps, CPU peak.

Each test fails on a %%torchprof that wraps only the profiler's start and stop in the fd 2
capture, never checks its session after the run, ends a step at every optimizer.step(), or shows
the CPU peak as exact.
"""

from __future__ import annotations

import os
import time

import pytest

from cudamagic.prof import stderr
from cudamagic.prof.steps import StepDriver
from tests.prof.test_shell import SETUP, profiler_enabled

GAN = """
import torch, torch.nn as nn
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
D = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
E = nn.Linear(16, 16)
optD = torch.optim.Adam(D.parameters()); optG = torch.optim.Adam(G.parameters())
optE = torch.optim.SGD(E.parameters(), lr=0.1)
real = torch.randn(32, 16)
def gan(n, three=False):
    for it in range(n):
        with torch.profiler.record_function("iteration"):
            fake = G(torch.randn(32, 8))
            lossD = (nn.functional.softplus(-D(real)).mean()
                     + nn.functional.softplus(D(fake.detach())).mean())
            optD.zero_grad(); lossD.backward(); optD.step()
            lossG = nn.functional.softplus(-D(fake)).mean()
            optG.zero_grad(); lossG.backward(); optG.step()
            if three:
                lossE = E(real).pow(2).mean(); optE.zero_grad(); lossE.backward(); optE.step()
"""
C10_LINE = "[W1202 02:18:05.876278568 SomeKernel.cpp:245] a C++ warning written while the cell runs"


@pytest.fixture
def tip(ip):
    assert ip.run_cell(SETUP + GAN).success
    return ip


def calls(res, name):
    return sum(r.calls for r in res.rows() if r.name == name)


# ---- PyTorch's C++ warnings written to fd 2 while the cell runs


def test_cpp_warning_during_the_cell_is_collected_and_user_stderr_kept(tip, capfd):
    res = tip.run_cell_magic(
        "torchprof",
        "",
        "import os\ntrain(1)\n"
        f"os.write(2, {(C10_LINE + chr(10)).encode()!r})\n"
        "os.write(2, b'the user own stderr line\\n')\ntrain(1)",
    )
    err = capfd.readouterr().err
    assert "SomeKernel.cpp" not in err and "the user own stderr line" in err
    assert C10_LINE in res.warnings
    assert any(n.startswith("1 PyTorch warning(s) collected") for n in res.notices)


def test_collector_passes_other_lines_on_while_the_block_runs(capfd):
    with stderr.Fd2Collector() as col:
        os.write(2, b"progress 10%")  # a partial line that cannot be a warning: passed on now
        time.sleep(6 * stderr.POLL_S)
        early = capfd.readouterr().err
        os.write(2, b"\n[W")  # may become a warning: held
        time.sleep(6 * stderr.POLL_S)
        held = capfd.readouterr().err
        os.write(2, b"0102 01:02:03.5 x.cpp:1] held\nUSDT:2026-12-02 x y.cpp:1] start\n")
    assert (early, held) == ("progress 10%", "\n")
    assert col.lines == ["[W0102 01:02:03.5 x.cpp:1] held", "USDT:2026-12-02 x y.cpp:1] start"]
    assert capfd.readouterr().err == ""


def test_line_kinds():
    assert stderr.C10_WARNING.match(C10_LINE) and stderr.C10_WARNING.match("[W x.cpp:3] old")
    assert not stderr.is_collected("[E1202 02:18:05.87 y.cpp:1] an error stays visible")
    assert not stderr.is_collected("Epoch 1: loss 0.3 (profile it later)")
    assert stderr.is_log("STAGE:2026-12-02 02:17:48 1:1 A.cpp:3] Completed Stage: Warm Up")


# ---- a profiler the cell starts replaces %%torchprof's session


@pytest.mark.parametrize(
    ("cell", "how"),
    [
        ("with torch.profiler.profile() as p:\n    train(2)", "stopped"),
        ("with torch.autograd.profiler.profile() as p:\n    train(2)", "stopped"),
        ("p = torch.profiler.profile()\np.start()\ntrain(2)", "replaced"),
    ],
)
def test_cells_own_profiler_is_detected_after_the_run(tip, cell, how):
    res = tip.run_cell_magic("torchprof", "", cell)
    assert res.lost == how and res.verdict is None
    assert res.notices[0].startswith("Profile lost: the cell started its own profiler")
    first = repr(res).splitlines()[0]
    assert "profile lost" in first and "0 operator calls" not in first
    assert "profile lost" in res._repr_html_()
    assert not profiler_enabled()


def test_a_plain_cell_is_not_lost(tip):
    res = tip.run_cell_magic("torchprof", "", "train(1)")
    assert res.lost is None and res.ops and not any("Profile lost" in n for n in res.notices)


# ---- a --steps step is one iteration


@pytest.mark.parametrize("three", [False, True])
def test_steps_are_iterations_with_several_optimizers_and_ranges_stay_whole(tip, three):
    res = tip.run_cell_magic("torchprof", "--steps 2", f"gan(5, three={three})")
    n_opt = 3 if three else 2
    assert [s.step for s in res.steps] == [1, 2]
    assert calls(res, "iteration") == 2  # both recorded iterations, whole
    steps = sum(r.calls for r in res.rows() if r.name.startswith("Optimizer.step#"))
    assert steps == 2 * n_opt
    assert any(n.startswith(f"{n_opt} optimizers stepped") for n in res.notices)
    assert not any("Optimizer.step#" in w for w in res.warnings)  # no boundary inside it


def test_single_optimizer_range_around_the_step_stays_whole(tip):
    res = tip.run_cell_magic(
        "torchprof",
        "--steps 3",
        "for i in range(5):\n"
        "    with torch.profiler.record_function('train_step'):\n"
        "        train(1)\n",
    )
    assert [s.step for s in res.steps] == [1, 2, 3] and calls(res, "train_step") == 3
    assert not any("optimizers stepped" in n for n in res.notices)


def test_range_around_the_whole_loop_does_not_swallow_the_steps(tip):
    res = tip.run_cell_magic(
        "torchprof",
        "--steps 2",
        "with torch.profiler.record_function('epoch'):\n    gan(6)\n",
    )
    assert len(res.steps) == 2 and calls(res, "iteration") == 2


def test_step_driver_ends_once_per_iteration_after_the_outer_range():
    import torch
    from torch.autograd.profiler import record_function

    events = []
    driver = StepDriver(lambda: events.append("step"))
    w = torch.nn.Parameter(torch.ones(2))
    a, b = torch.optim.SGD([w], lr=0.1), torch.optim.SGD([w], lr=0.1)
    original = record_function.__enter__
    driver.install()
    try:
        for _ in range(2):
            with record_function("iteration"):
                for opt in (a, b):
                    w.sum().backward()
                    opt.step()
                    events.append(type(opt).__name__)
            events.append("end of iteration")
    finally:
        driver.remove()
    assert record_function.__enter__ is original
    assert events == ["SGD", "SGD", "step", "end of iteration"] * 2
    assert driver.optimizers == [("SGD", 2), ("SGD", 2)]


# ---- the CPU peak of --memory


def test_cpu_peak_is_labelled_an_upper_bound(tip):
    tip.run_cell("big = torch.randn(1_000_000)")
    res = tip.run_cell_magic(
        "torchprof",
        "--memory",
        "del big\ny = torch.randn(250_000)\nz = torch.randn(500_000)\ndel z",
    )
    assert res.peak_memory_bytes["cpu"] >= 3_000_000
    assert res.peak_memory_bounds == {"cpu": "upper bound"}
    assert any(n.startswith("cpu peak") and "upper bound" in n for n in res.notices)
    assert "at most" in repr(res) and "(upper bound)" in repr(res)
