"""Tier 2 tests of %%cudamem / %cudamem in a real InteractiveShell, on CPU tensors."""

from __future__ import annotations

import json
import re
import sys

import pytest
from IPython.core.error import UsageError

from cudamagic import extension as cm_extension
from cudamagic.core.na import is_na
from cudamagic.mem.history import MemHistory
from cudamagic.mem.measure import CellMemMonitor
from cudamagic.mem.result import CellMemReport, FreeReport
from tests.inline import plain as unstyled

MiB = 1 << 20
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# : A traceback line naming a file of our package (``.../cudamagic/mem/measure.py``): never shown to
# the user.
OUR_FRAME = re.compile(r"cudamagic[/\\](mem|core)[/\\]\w+\.py")


def run(ip, cell):
    return ip.run_cell(cell, store_history=True)


def plain(text):
    return ANSI.sub("", text)


class NoCuda:
    """Allocator source of a machine where CUDA is not initialised.

    Allocator source of a machine where CUDA is not initialised (these tests are the CPU path, also
    when the suite runs on a GPU machine where another test initialised CUDA).
    """

    def initialized(self):
        return False


@pytest.fixture
def tip(ip, monkeypatch):
    """The shell with torch imported in the user namespace, on the CPU path."""
    from cudamagic.mem import stats

    monkeypatch.setattr(stats, "SOURCE", NoCuda())
    run(ip, "import torch, weakref")
    yield ip
    for key in [
        k for k in ip.config.CudaMagics if k.startswith("cudamem_")
    ]:  # %config is shell-wide
        del ip.config.CudaMagics[key]
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)


def monitor_callbacks(ip):
    return [
        cb
        for event in ("pre_run_cell", "post_run_cell")
        for cb in ip.events.callbacks[event]
        if isinstance(getattr(cb, "__self__", None), CellMemMonitor)
    ]


# ---- %%cudamem -------------------------------------------------------------------------


def test_cell_reports_cpu_delta_and_tensors_left(tip):
    run(tip, "net = torch.nn.Sequential(torch.nn.Linear(64, 32))\nold = torch.ones(10)")
    # 64 MB: above glibc's largest dynamic mmap threshold (32 MiB), so the pages are new and RSS
    # must grow by them (a 16 MB tensor could reuse heap pages freed by earlier tests and grow RSS
    # by less than its size)
    res = run(
        tip,
        "%%cudamem\nbig = torch.ones(16_000_000)\nparts = [torch.zeros(100, 10), torch.ones(3)]\n",
    )
    rep = res.result
    assert isinstance(rep, CellMemReport) and res.error_in_exec is None
    assert tip.user_ns["big"].numel() == 16_000_000  # variables persist
    assert (
        rep.cell == res.execution_count
        and rep.kind == "cell"
        and rep.source == "big = torch.ones(16_000_000)"
    )
    assert is_na(rep.gpu_status) and rep.gpus == []
    assert rep.rss_delta_bytes > 48 * MiB  # 64 MB of ones were written
    rows = {t.name: t for t in rep.tensors}
    assert (
        rep.tensors[0].name == "big" and rep.tensors[0].bytes == 64_000_000 and rep.tensors[0].new
    )
    assert rows["parts[0]"].shape == (100, 10) and rows["parts[0]"].new
    assert rows["net.0.weight"].bytes == 64 * 32 * 4 and not rows["net.0.weight"].new
    assert not rows["old"].new
    assert "big" in repr(rep) and '<td class="cm-prose"><code>big</code></td>' in unstyled(
        rep._repr_html_()
    )
    assert len(tip.run_line_magic("cudamem", "history")) == 1


def test_out_entries_and_top(tip):
    res = run(tip, "torch.ones(1234)")
    n = res.execution_count
    rep = run(tip, "%%cudamem --top 1\nx = torch.ones(10)").result
    assert [t.name for t in rep.tensors] == [f"Out[{n}]"] and rep.tensors_total >= 2


def test_final_expression_is_displayed_not_stored(tip, capsys):
    res = run(tip, "%%cudamem\ny = torch.arange(3)\ny.sum() * 11")
    assert isinstance(res.result, CellMemReport)
    out = capsys.readouterr().out
    assert "tensor(33)" in out
    res = run(tip, "%%cudamem\ny.sum() * 12;")
    assert "tensor(36)" not in capsys.readouterr().out


def test_error_in_cell_propagates_with_source_lines_and_is_recorded(tip, capsys):
    res = run(tip, "%%cudamem\na_var = 5\nkept = torch.ones(10)\nraise ValueError('boom <here>')\n")
    assert isinstance(res.error_in_exec, ValueError) and str(res.error_in_exec) == "boom <here>"
    assert tip.user_ns["a_var"] == 5
    out = plain(capsys.readouterr().out)
    # the notebook's numbering: %%cudamem is line 1
    assert f"Cell In[{res.execution_count}], line 4" in out
    assert "raise ValueError('boom <here>')" in out
    assert not OUR_FRAME.search(out)  # our frames (magic.py, measure.py ...) are hidden
    # the report was displayed before the traceback
    assert "cell raised ValueError: boom <here>" in out
    rec = tip.run_line_magic("cudamem", "history")[-1]
    assert rec.error == "ValueError: boom <here>" and rec.cell == res.execution_count


def test_syntax_error_points_at_the_cell_line(tip):
    res = run(tip, "%%cudamem\nx = 1\ny = (\n")
    assert isinstance(res.error_in_exec, SyntaxError)
    assert res.error_in_exec.lineno == 3


def test_cell_events_fire_once(tip):
    seen = []

    def pre(info):
        seen.append("pre")

    def post(result):
        seen.append("post")

    tip.events.register("pre_run_cell", pre)
    tip.events.register("post_run_cell", post)
    try:
        run(tip, "%%cudamem\nz = 1")
    finally:
        tip.events.unregister("pre_run_cell", pre)
        tip.events.unregister("post_run_cell", post)
    assert seen == ["pre", "post"]


# ---- %cudamem on / off / history --------------------------------------------------------


def test_on_prints_summary_only_above_threshold_and_off_removes_callbacks(tip, capsys):
    run(tip, "%cudamem on --threshold 4MiB")
    # flag sets the trait, not the config
    assert tip.config.CudaMagics.get("cudamem_threshold_bytes") is None
    assert len(monitor_callbacks(tip)) == 2
    capsys.readouterr()
    # 64 MB, written: above glibc's largest mmap threshold (32 MiB), so fresh memory even when
    # earlier tests left freed, still-resident heap behind (32 MB could reuse it and RSS would not
    # grow: failed under mutmut's order)
    res = run(tip, "grow = torch.ones(16_000_000)")
    line = capsys.readouterr().out
    assert f"[cudamem] In[{res.execution_count}]" in line and "CPU RSS +" in line
    run(tip, "small = 1")
    assert "[cudamem]" not in capsys.readouterr().out
    run(tip, "%config CudaMagics.cudamem_threshold_bytes = 1024**4")
    capsys.readouterr()
    run(tip, "grow2 = torch.ones(8_000_000)")
    assert "[cudamem]" not in capsys.readouterr().out  # threshold read per cell
    run(tip, "%cudamem off")
    assert monitor_callbacks(tip) == []
    hist = tip.run_line_magic("cudamem", "history")
    assert [r.kind for r in hist] == [
        "auto"
    ] * 4  # grow, small, %config, grow2; not the on/off lines' twice
    capsys.readouterr()
    run(tip, "%config CudaMagics.cudamem_threshold_bytes = 1")
    run(tip, "grow3 = torch.ones(8_000_000)")
    assert "[cudamem]" not in capsys.readouterr().out


def test_unload_removes_callbacks(tip):
    run(tip, "%cudamem on")
    assert len(monitor_callbacks(tip)) == 2
    tip.run_line_magic("unload_ext", "cudamagic")
    try:
        assert monitor_callbacks(tip) == []
    finally:
        tip.run_line_magic("load_ext", "cudamagic")


def test_cudamem_cell_while_on_is_recorded_once(tip, capsys):
    run(tip, "%cudamem on --threshold 1")
    capsys.readouterr()
    res = run(tip, "%%cudamem\nw = torch.ones(1000)")
    out = capsys.readouterr().out
    assert "[cudamem] In[" not in out  # the full report, not the one-liner too
    hist = tip.run_line_magic("cudamem", "history")
    assert [(r.cell, r.kind) for r in hist if r.cell == res.execution_count] == [
        (res.execution_count, "cell")
    ]
    run(tip, "%cudamem off")


def test_history_table_json_and_clear(tip, capsys):
    run(tip, "%%cudamem\nh1 = torch.ones(100)")
    run(tip, "%%cudamem\nh2 = 1/0")
    hist = tip.run_line_magic("cudamem", "history")
    assert isinstance(hist, MemHistory) and len(hist) == 2
    assert "ZeroDivisionError" in repr(hist) and "h1 = torch.ones(100)" in repr(hist)
    assert "<table" in hist._repr_html_()
    capsys.readouterr()
    tip.run_line_magic("cudamem", "history --json")
    data = json.loads(capsys.readouterr().out)
    assert [d["error"] for d in data] == [None, "ZeroDivisionError: division by zero"]
    assert (
        data[0]["tensors"][0]["name"] == "h1" and data[0]["gpu_status"]["code"] == "not_initialized"
    )
    snap = tip.run_line_magic("cudamem", "history --clear")
    assert len(snap) == 2 and len(tip.run_line_magic("cudamem", "history")) == 0


# ---- %cudamem free -------------------------------------------------------------------------

HELD = """
holder = {}
def fail():
    big = torch.ones(8_000_000)  # 32 MB, alive only through this frame
    holder['ref'] = weakref.ref(big)
    raise RuntimeError('CUDA out of memory (simulated)')
fail()
"""


def test_free_releases_memory_held_by_the_saved_traceback(tip):
    res = run(tip, HELD)
    assert isinstance(res.error_in_exec, RuntimeError)
    del res
    ref = tip.user_ns["holder"]["ref"]
    assert ref() is not None and sys.last_traceback is not None
    run(tip, "keep_me = torch.ones(10)")
    rep = run(tip, "%cudamem free").result
    assert isinstance(rep, FreeReport)
    assert ref() is None  # the memory is actually released
    assert rep.cpu_tensor_bytes_freed >= 32_000_000 and rep.tensor_bytes_freed >= 32_000_000
    assert "sys.last_traceback" in rep.released and not hasattr(sys, "last_traceback")
    assert not rep.empty_cache_called and is_na(rep.gpu_status)
    assert tip.user_ns["keep_me"].numel() == 10  # the namespace is untouched
    assert "tensor storage freed: 30.5 MiB" in repr(rep)


def test_free_lists_holders_and_releases_only_named_ones(tip):
    n = run(
        tip, "torch.ones(1_000_000)"
    ).execution_count  # (an ExecutionResult would hold the value)
    ref = weakref_to(tip, f"Out[{n}]")
    run(tip, "acts = torch.zeros(2_000_000)")
    rep = run(tip, "%cudamem free").result
    holders = {h.name: h for h in rep.holders}
    assert holders[f"Out[{n}]"].release == f"--out {n}" and holders[f"Out[{n}]"].bytes == 4_000_000
    assert holders["acts"].release == "--var acts" and holders["acts"].kind == "variable"
    assert ref() is not None and n in tip.user_ns["Out"]  # listed, not released
    assert "%cudamem free --var acts" in repr(rep)
    rep = run(tip, f"%cudamem free --out {n} --var acts").result
    assert ref() is None and n not in tip.user_ns["Out"] and f"_{n}" not in tip.user_ns
    assert "acts" not in tip.user_ns and "acts" in rep.released and f"Out[{n}]" in rep.released
    assert rep.cpu_tensor_bytes_freed >= 4_000_000 + 8_000_000
    assert not any(h.name in (f"Out[{n}]", "acts") for h in rep.holders)


def test_free_out_without_numbers_releases_every_tensor_entry(tip):
    n = run(tip, "torch.ones(500_000)").execution_count
    ref = weakref_to(tip, f"Out[{n}]")
    run(tip, "123")
    rep = run(tip, "%cudamem free --out").result
    assert ref() is None and f"Out[{n}]" in rep.released
    assert tip.user_ns["Out"].get(n + 1) == 123  # entries without tensors stay


def weakref_to(ip, expr):
    import weakref

    return weakref.ref(eval(expr, ip.user_ns))


# ---- usage errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, words",
    [
        ("", "needs an action"),
        ("bogus", "unknown %cudamem action"),
        ("history --out", "--out does not apply to %cudamem history"),
        ("on --threshold lots", "not a size"),
        ("free --var no_such_name", "no variable named 'no_such_name'"),
        ("free --out 99999", "Out[99999] is not in the output cache"),
    ],
)
def test_usage_errors(tip, line, words):
    with pytest.raises(UsageError, match=re.escape(words)):
        tip.run_line_magic("cudamem", line)


def test_cell_usage_errors(tip):
    with pytest.raises(UsageError, match="takes no action word"):
        tip.run_cell_magic("cudamem", "on", "x = 1")
    with pytest.raises(UsageError, match="--json does not apply to %%cudamem"):
        tip.run_cell_magic("cudamem", "--json", "x = 1")


# ---- review fixes ---------------------------------------------------------------------------


def test_syntax_error_traceback_shows_no_cudamagic_or_parser_frames(tip, capsys):
    capsys.readouterr()
    res = run(tip, "%%cudamem\nx = 1\ny = (\n")
    assert isinstance(res.error_in_exec, SyntaxError) and res.error_in_exec.lineno == 3
    out = plain(capsys.readouterr().out)
    assert f"Cell In[{res.execution_count}], line 3" in out
    # the parser frames (measure.py) are gone; IPython still prints magic.py's `raise` frames for a
    # SyntaxError
    assert "measure.py" not in out and "compilerop.py" not in out and "codeop.py" not in out
    assert "%%cudamem In[" not in out  # the cell did not run: no report
    assert all(r.cell != res.execution_count for r in tip.run_line_magic("cudamem", "history"))


def test_free_with_a_name_given_twice_releases_it_once(tip):
    n = run(tip, "torch.ones(100)").execution_count
    run(tip, "twice = torch.ones(1000)")
    res = run(tip, f"%cudamem free --var twice --var twice --out {n} {n}")
    assert res.error_in_exec is None, res.error_in_exec
    rep = res.result
    assert rep.released.count("twice") == 1 and rep.released.count(f"Out[{n}]") == 1
    assert "twice" not in tip.user_ns and n not in tip.user_ns["Out"]


def test_top_zero_hides_the_table_but_says_how_many_tensors(tip):
    run(tip, "t1 = torch.ones(10)\nt2 = torch.ones(20)")
    rep = run(tip, "%%cudamem --top 0\nt3 = torch.ones(30)").result
    assert rep.tensors == [] and rep.tensors_total >= 3
    assert f"{rep.tensors_total} tensor storages reachable" in repr(rep)
    assert (
        "no tensors reachable" not in repr(rep) and "no tensors reachable" not in rep._repr_html_()
    )


def test_history_is_bounded_by_a_config_trait(tip):
    run(tip, "%config CudaMagics.cudamem_history_cells = 2")
    cells = [run(tip, f"%%cudamem\nq{i} = {i}").execution_count for i in range(4)]
    hist = tip.run_line_magic("cudamem", "history")
    assert [r.cell for r in hist] == cells[-2:] and hist.dropped == 2
    assert "2 older dropped" in repr(hist)


@pytest.mark.parametrize(
    "trait", ["cudamem_threshold_bytes", "cudamem_top_tensors", "cudamem_history_cells"]
)
def test_negative_config_values_are_refused(tip, trait):
    magics = cm_extension.current().settings
    before = getattr(magics, trait)
    run(tip, f"%config CudaMagics.{trait} = -1")
    assert getattr(magics, trait) == before


def test_on_and_reports_fit_a_100_column_terminal(tip, capsys):
    capsys.readouterr()
    run(tip, "%cudamem on --threshold 1023.9MiB")  # the widest threshold text
    run(tip, "%cudamem on --threshold 1")
    run(tip, "wide = torch.ones(2_000_000)")
    run(tip, "%cudamem off")
    run(tip, "%%cudamem\nw2 = torch.ones(10)\n1/0 # " + "x" * 120)
    out = plain(capsys.readouterr().out)
    report_lines = [
        ln
        for ln in out.splitlines()
        if not ln.startswith(("----> ", "      ")) and "run_cell_magic(" not in ln
    ]
    assert max(len(ln) for ln in report_lines) <= 100, out
    assert "[cudamem] on:" in out and "CUDA is not initialised" in out
    assert max(len(ln) for ln in repr(tip.run_line_magic("cudamem", "history")).splitlines()) <= 100


def test_history_json_with_clear_prints_then_forgets(tip, capsys):
    run(tip, "%%cudamem\nj1 = 1")
    capsys.readouterr()
    tip.run_line_magic("cudamem", "history --json --clear")
    assert [d["source"] for d in json.loads(capsys.readouterr().out)] == ["j1 = 1"]
    assert len(tip.run_line_magic("cudamem", "history")) == 0


def test_html_outputs_opt_out_of_math_typesetting(ip):
    """`$` in a variable name or path must not be typeset as a formula by JupyterLab."""
    r = ip.run_cell_magic("cudamem", "", "import torch\nt_dollar = torch.zeros(10)")
    assert r._repr_html_().startswith('<div class="cudamagic mathjax_ignore cm-mem">')
    h = ip.run_line_magic("cudamem", "history")
    assert h._repr_html_().startswith('<div class="cudamagic mathjax_ignore cm-mem">')
