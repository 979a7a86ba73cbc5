"""Tier 2: %%torchprof and %torchprof --compare in a real InteractiveShell, on the CPU.

Tier 2: %%torchprof and %torchprof --compare in a real InteractiveShell, on the CPU (the
quickstart's digits model), with real torch.profiler runs.
"""

from __future__ import annotations

import json
import re
import sys
import threading

import pytest
from IPython.core.error import UsageError

from cudamagic.core.fmt import NO_MATH
from cudamagic.prof.result import ProfResult

SETUP = """
import torch
from torch import nn
from sklearn.datasets import load_digits
digits = load_digits()
X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loss_fn = nn.CrossEntropyLoss()
def train(n):
    for i in range(n):
        xb, yb = X[i * 128:(i + 1) * 128], y[i * 128:(i + 1) * 128]
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss
"""


@pytest.fixture
def tip(ip):
    res = ip.run_cell(SETUP)
    assert res.success, res.error_in_exec
    yield ip
    for key in [k for k in ip.config.CudaMagics if k.startswith("torchprof_")]:
        del ip.config.CudaMagics[key]
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)
    give_memory_back()


def give_memory_back():
    """Return freed heap pages to the OS (glibc ``malloc_trim``) after each test.

    The profiler's buffers leave the heap with free pages that later tests measuring RSS growth
    (test_cellmem_shell) would otherwise reuse unseen.
    """
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def profiler_enabled():
    import torch

    return torch._C._autograd._profiler_enabled()


def optimizer_hooks():
    from torch.optim import optimizer

    return len(optimizer._global_optimizer_post_hooks)


def test_digits_training_step_summary(tip):
    res = tip.run_cell_magic("torchprof", "-o prof", "loss = train(3)")
    assert isinstance(res, ProfResult) and tip.user_ns["prof"] is res
    assert tip.user_ns["loss"].item() > 0  # the cell's variables stay
    rows = res.rows("op")
    assert abs(sum(r.self_pct for r in rows) - 100.0) <= 0.5
    names = {r.name for r in rows}
    assert {"aten::addmm", "aten::mm", "Optimizer.step#Adam.step"} <= names, sorted(names)
    long_name = "autograd::engine::evaluate_function: AddmmBackward0"
    assert long_name in names, sorted(names)
    # the summary shows the top 15, where this name may or may not be
    every = res.table(top=len(rows))
    # full, untruncated
    assert long_name in repr(every), repr(every)
    assert long_name in every._repr_html_().replace("<wbr>", "")  # breakable at "::", "_"
    text, html = repr(res), res._repr_html_().replace("<wbr>", "")
    assert rows[0].name in text and rows[0].name in html
    assert html.startswith(f'<div class="cudamagic {NO_MATH} cm-prof">')
    assert 'src="data:image/svg+xml;base64,' in html and "<svg" not in html
    # self-contained: the only source is the picture's data URI
    assert not re.search(r"(src|href)\s*=\s*\"(?!data:)|url\(|@import|<script", html)
    assert res.wall_s > 0 and res.span_us[1] > res.span_us[0]
    assert res.activities[0] == "CPU"


@pytest.mark.parametrize(
    "line", ["", "--group module"]
)  # the Kineto path and the FunctionEvent path
def test_operators_know_their_nesting_depth(tip, line):
    res = tip.run_cell_magic("torchprof", line, "train(1)")
    by_name = {}
    for op in res.ops:
        by_name.setdefault(op.name, set()).add(op.depth)
    assert by_name["aten::linear"] == {0} and min(by_name["aten::addmm"]) >= 1, by_name
    assert all(op.top == (op.depth == 0) for op in res.ops if op.name.startswith("aten::"))
    from cudamagic.prof.render import timeline_svg

    svg = timeline_svg(res)
    assert "thread " in svg and "\u21b3 called by the row above" in svg


def test_group_by_shape_splits_an_operator_called_with_two_shapes(tip):
    res = tip.run_cell_magic("torchprof", "--group shape", "train(2)")
    addmm = [r for r in res.rows() if r.name == "aten::addmm"]
    assert sorted(r.detail for r in addmm) == [
        "[[10], [128, 128], [128, 10], [], []]",
        "[[128], [128, 64], [64, 128], [], []]",
    ]
    assert all(r.calls == 2 for r in addmm)
    assert "input shapes" in repr(res)
    assert len([r for r in res.rows("op") if r.name == "aten::addmm"]) == 1


def test_a_default_profile_regroups_by_shape_afterwards(tip):
    """.table(group="shape") on a cell profiled without --group shape (the tour notebook)."""
    res = tip.run_cell_magic("torchprof", "", "train(2)")
    shapes = sorted(r.detail for r in res.rows("shape") if r.name == "aten::addmm")
    assert shapes == [
        "[[10], [128, 128], [128, 10], [], []]",
        "[[128], [128, 64], [64, 128], [], []]",
    ]
    assert "input shapes" in repr(res.table(group="shape"))


def test_group_by_module_names_the_layers(tip):
    res = tip.run_cell_magic("torchprof", "--group module", "train(1)")
    addmm = {r.detail for r in res.rows() if r.name == "aten::addmm"}
    assert addmm == {"Sequential_0/Linear_0", "Sequential_0/Linear_1"}


def test_group_by_stack_keeps_frames_of_user_code(tip):
    res = tip.run_cell_magic("torchprof", "--group stack --stack-depth 1", "train(1)")
    addmm = [r for r in res.rows() if r.name == "aten::addmm"]
    assert addmm and all(r.detail.endswith(": train") for r in addmm)


def test_stack_grouping_needs_recorded_calls(tip):
    res = tip.run_cell_magic("torchprof", "", "train(1)")
    with pytest.raises(ValueError, match="--group module"):
        res.table(group="module")


def test_to_pandas_one_row_per_operator_with_units(tip):
    res = tip.run_cell_magic("torchprof", "", "train(2)")
    df = res.to_pandas()
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
    assert set(df["kind"]) == {"operator"}  # no kernels on the CPU
    assert df["name"].is_unique
    assert df["self_time_pct"].sum() == pytest.approx(100.0, abs=0.5)
    assert (df["total_time_us"] >= df["self_time_us"] - 1e-6).all()


def test_table_and_save_html(tip, tmp_path):
    res = tip.run_cell_magic("torchprof", "--top 3", "train(1)")
    table = res.table(top=2)
    assert len(table.shown()[0]) == 2 and table.shown()[1][0] == len(res.rows()) - 2
    assert "(other" in repr(table)
    path = res.save_html(str(tmp_path / "p.html"))
    page = open(path, encoding="utf-8").read()
    assert page.startswith("<!DOCTYPE html>") and "aten::<wbr>addmm" in page


def test_steps_schedule_records_n_steps(tip):
    res = tip.run_cell_magic("torchprof", "--steps 2", "train(5)")
    assert [s.step for s in res.steps] == [1, 2]  # step 0 is the warm-up
    assert all(s.dur_us > 0 for s in res.steps)
    calls = {r.name: r.calls for r in res.rows()}
    # 2 steps, 2 layers
    assert calls["Optimizer.zero_grad#Adam.zero_grad"] == 2 and calls["aten::addmm"] == 4
    assert optimizer_hooks() == 0


def test_steps_without_optimizer_says_so(tip):
    res = tip.run_cell_magic("torchprof", "--steps 2", "z = torch.ones(10).sum()")
    assert any("no step was recorded" in n for n in res.notices)


def test_memory_gives_a_peak_and_a_timeline(tip):
    res = tip.run_cell_magic(
        "torchprof", "--memory", "big = torch.ones(1_000_000)\ndel big\nsmall = torch.ones(10)"
    )
    assert res.peak_memory_bytes["cpu"] >= 4_000_000
    assert "Allocated memory" in res._repr_html_()


def test_cpu_only_notice(tip):
    import torch

    res = tip.run_cell_magic("torchprof", "", "train(1)")
    if torch.profiler.ProfilerActivity.CUDA not in torch.profiler.supported_activities():
        assert any("Only CPU activity recorded" in n for n in res.notices)
        assert "GPU breakdown: N/A" in repr(res)


# Sizes stay under 16 MB per tensor: glibc raises its mmap threshold to the largest block freed, and
# a later test (test_cellmem_shell) needs a fresh 16 MB tensor to raise the RSS.
def test_compare_ranks_the_operator_made_slower_first(tip):
    tip.run_cell("v_small = torch.randn(1_000)\nv_big = torch.randn(1_000_000)")
    tip.run_cell_magic("torchprof", "-o prof_a", "train(2)\ns = torch.sort(v_small)")
    tip.run_cell_magic("torchprof", "-o prof_b", "train(2)\ns = torch.sort(v_big)")
    cmp = tip.run_line_magic("torchprof", "--compare prof_a prof_b")
    assert cmp.rows[0].name == "aten::sort" and cmp.rows[0].delta_us > 0
    assert "aten::sort" in repr(cmp).splitlines()[3]


def test_compare_saved_traces(tip, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json.gz"
    tip.run_cell("v_small = torch.randn(1_000)\nv_big = torch.randn(1_000_000)")
    tip.run_cell_magic(
        "torchprof", f"--trace {a}", "s = torch.sort(v_small)\nt = torch.ones(5).sum()"
    )
    tip.run_cell_magic(
        "torchprof", f"--trace {b}", "s = torch.sort(v_big)\nt = torch.ones(5).sum()"
    )
    cmp = tip.run_line_magic("torchprof", f"--compare {a} {b}")
    assert cmp.rows[0].name == "aten::sort"


def test_long_loop_trace_stays_under_the_cap_and_loads(tip, tmp_path):
    path = tmp_path / "loop.json"
    res = tip.run_cell_magic(
        "torchprof",
        f"--trace {path} --max-trace-mb 0.2",
        "w = torch.randn(8, 8)\nfor i in range(1000):\n    h = (w @ w).relu().sum()",
    )
    assert path.stat().st_size <= 0.2 * 2**20
    with open(path) as f:
        data = json.load(f)
    assert res.trace_path == str(path) and res.trace_notes
    assert "dropped the latest" in res.trace_notes[-1]
    names = {e.get("name") for e in data["traceEvents"]}
    assert "aten::relu" in names
    assert "note: dropped" in repr(res)


def test_gz_trace_loads(tip, tmp_path):
    import gzip

    path = tmp_path / "t.json.gz"
    tip.run_cell_magic("torchprof", f"--trace {path}", "train(1)")
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    assert any(e.get("name") == "aten::addmm" for e in data["traceEvents"])


def test_final_expression_is_displayed_and_syntax_error_does_not_run(tip, capsys):
    res = tip.run_cell("%%torchprof\n40 + 2")
    assert res.success
    assert "42" in capsys.readouterr().out
    res = tip.run_cell("%%torchprof\nran = 1\ndef (:")
    assert isinstance(res.error_in_exec, SyntaxError) and "ran" not in tip.user_ns


def test_user_error_propagates_with_a_profile_of_what_ran(tip, capsys):
    res = tip.run_cell(
        "%%torchprof -o prof_err\nloss = train(1)\nraise ValueError('bad batch')",
        store_history=True,
    )
    assert isinstance(res.error_in_exec, ValueError)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "raise ValueError('bad batch')" in out  # the real source line
    # the notebook's numbering: %%torchprof is line 1
    assert f"Cell In[{res.execution_count}], line 3" in out
    assert not re.search(r"cudamagic[/\\](prof|core)[/\\]\w+\.py", out)  # our frames are hidden
    prof = tip.user_ns["prof_err"]
    assert prof.error == "ValueError: bad batch"
    assert any(r.name == "aten::addmm" for r in prof.rows())
    assert not profiler_enabled() and optimizer_hooks() == 0


def test_already_active_profiler_runs_the_cell_unprofiled(tip, capsys):
    res = tip.run_cell(
        "with torch.profiler.profile() as outer:\n"
        "    inner = get_ipython().run_cell_magic('torchprof', '', 'done = torch.ones(3).sum()')"
    )
    assert res.success
    out = capsys.readouterr().out
    assert "already recording" in out and "ran unprofiled" in out
    assert tip.user_ns["inner"] is None and tip.user_ns["done"].item() == 3.0
    assert not profiler_enabled()


def test_profiler_warnings_are_summarised_others_kept(tip, capsys):
    with pytest.warns(UserWarning, match="the user's own") as record:
        res = tip.run_cell_magic(
            "torchprof",
            "",
            "import warnings, torch.profiler.profiler as pp\n"
            "for i in range(200):\n    pp._warn_once(f'profiler noise {i}', stacklevel=1)\n"
            'warnings.warn("the user\'s own")',
        )
    assert not any("profiler noise" in str(w.message) for w in record)
    assert len(res.warnings) == 200
    assert any(n.startswith("200 PyTorch warning(s) collected") for n in res.notices)


def test_unload_leaves_nothing_enabled(tip):
    threads = threading.active_count()
    tip.run_cell_magic("torchprof", "--steps 1 --memory", "train(3)")
    tip.run_line_magic("unload_ext", "cudamagic")
    try:
        assert not profiler_enabled() and optimizer_hooks() == 0
        assert threading.active_count() == threads
        assert "torchprof" not in tip.magics_manager.magics["cell"]
        with pytest.raises(UsageError, match="torchprof"):
            tip.run_cell_magic("torchprof", "", "1")
    finally:
        tip.run_line_magic("load_ext", "cudamagic")


@pytest.mark.parametrize(
    "line, cell, match",
    [
        ("--group layer", "1", "--group 'layer' is not a grouping"),
        ("--steps 0", "1", "--steps must be 1 or more"),
        ("--top -1", "1", "--top must be 1 or more"),
        ("--trace out.txt", "1", "must end in .json or .json.gz"),
        ("--trace no/such/dir/t.json", "1", "does not exist"),
        ("--max-trace-mb 5", "1", "add --trace"),
        ("--trace t.json --max-trace-mb 0", "1", "more than 0"),
        ("-o 2x", "1", "not a Python variable name"),
        ("--bogus", "1", "unrecognized arguments"),
        ("--compare a b", "1", "--compare is a line magic"),
        ("--compare a", None, "expected 2 arguments"),
        ("--compare a b --memory", None, "--memory applies to a profiled cell"),
        ("--compare nope prof_x", None, "'nope' is not defined, not a profile"),
        ("--compare missing.json b.json", None, "cannot read the trace"),
    ],
)
def test_bad_input_is_one_usage_error_before_the_cell_runs(tip, line, cell, match):
    with pytest.raises(UsageError, match=re.escape(match)):
        if cell is None:
            tip.run_line_magic("torchprof", line)
        else:
            tip.run_cell_magic("torchprof", line, "ran = 1")
    assert "ran" not in tip.user_ns
    assert not profiler_enabled()


def test_line_magic_alone_shows_the_last_result(tip, capsys):
    assert tip.run_line_magic("torchprof", "") is None
    assert "no cell profiled yet" in capsys.readouterr().out
    res = tip.run_cell_magic("torchprof", "", "x = torch.ones(3).sum()")
    assert tip.run_line_magic("torchprof", "") is res


def test_config_sets_the_default_rows(tip):
    tip.run_line_magic("config", "CudaMagics.torchprof_top_rows = 2")
    res = tip.run_cell_magic("torchprof", "", "train(1)")
    assert res.top == 2 and len(res.table().shown()[0]) == 2


# ---- the progress line


def test_progress_line_while_the_cell_runs_and_while_events_are_analysed(tip):
    """A long cell shows "profiling... N s", then "analysing N events", then nothing.

    The front end is a publisher that keeps every display (as a notebook's does, unlike a
    terminal's); the cell waits until the line has been updated once, which takes a second.
    """
    from IPython.core.displaypub import CapturingDisplayPublisher

    pub, old = CapturingDisplayPublisher(), tip.display_pub
    tip.display_pub = pub
    tip.user_ns["outputs"] = pub.outputs
    try:
        res = tip.run_cell_magic(
            "torchprof",
            "",
            "import time\ntrain(1)\nt0 = time.monotonic()\n"
            "while not any(o['update'] for o in outputs) and time.monotonic() - t0 < 30:\n"
            "    time.sleep(0.05)",
        )
    finally:
        tip.display_pub = old
    ids = {o["transient"]["display_id"] for o in pub.outputs}
    texts = [o["data"]["text/plain"] for o in pub.outputs]
    assert len(ids) == 1 and [o["update"] for o in pub.outputs][0] is False
    assert re.fullmatch(r"%%torchprof: profiling\.\.\. \d+\.\d s", texts[0])
    counts = [re.match(r"%%torchprof: analysing ([\d,]+) events\.\.\. [\d.]+ s$", t) for t in texts]
    # the events read: more than the operators kept (Python calls, the profiler's own ranges)
    read = [int(m[1].replace(",", "")) for m in counts if m]
    assert read and min(read) >= len(res.ops) > 0
    assert pub.outputs[-1]["data"] == {"text/plain": ""}
    assert not [t for t in threading.enumerate() if t.name == "cudamagic-progress"]


def test_no_progress_line_in_a_terminal(tip, capsys):
    """A terminal's outputs cannot be updated in place: no line, however long the cell."""
    tip.run_cell_magic("torchprof", "", "import time\ntrain(1)\ntime.sleep(1.5)")
    out = capsys.readouterr().out
    assert "profiling" not in out and "analysing" not in out
