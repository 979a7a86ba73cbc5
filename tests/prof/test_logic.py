"""Tier 1: the plain functions of the profiler area.

Tier 1: the plain functions of the profiler area (no IPython, no profiler run): GPU breakdown,
aggregation, trace self time, the trace size cap.
"""

from __future__ import annotations

import gzip
import json

import pytest

from cudamagic.prof.compare import compare, totals_from_trace
from cudamagic.prof.result import KernelRecord, OpRecord, ProfResult, aggregate
from cudamagic.prof.summary import frame_is_user, gpu_breakdown
from cudamagic.prof.trace import load_trace, write_capped
from tests.inline import plain


def test_gpu_breakdown_counts_overlaps_once_and_sums_to_span():
    ks = [
        KernelRecord("gemm", "kernel", 0, 7, 10, 40),
        KernelRecord(
            "Memcpy HtoD", "memcpy", 0, 8, 30, 60
        ),  # 30..40 overlaps the kernel: kernel wins
        KernelRecord("Memset", "memset", 0, 7, 70, 75),
        KernelRecord("late", "kernel", 0, 7, 95, 130),
    ]  # clipped to the span end (100)
    (b,) = gpu_breakdown(ks, (0.0, 100.0))
    assert (b.kernel_us, b.memcpy_us, b.memset_us) == (35.0, 20.0, 5.0)
    assert b.idle_us == pytest.approx(40.0)
    assert sum(b.pct().values()) == pytest.approx(100.0)


def test_gpu_breakdown_one_entry_per_device():
    ks = [KernelRecord("a", "kernel", 1, 7, 0, 10), KernelRecord("b", "kernel", 0, 7, 0, 5)]
    out = gpu_breakdown(ks, (0.0, 20.0))
    assert [b.device for b in out] == [0, 1]
    assert [b.kernel_us for b in out] == [5.0, 10.0]


def _op(name, shapes, start, end, self_us):
    return OpRecord(name, shapes, 1, start, end, self_us)


def test_aggregate_groups_by_shape_and_percentages_sum_to_100():
    ops = [
        _op("aten::mm", "[[2, 3]]", 0, 10, 10),
        _op("aten::mm", "[[4, 3]]", 10, 40, 30),
        _op("aten::mm", "[[2, 3]]", 40, 50, 10),
        _op("aten::add", "[[2]]", 50, 60, 40),
    ]
    by_op = aggregate(ops, "op")
    assert [(r.name, r.calls, r.self_us) for r in by_op] == [
        ("aten::mm", 3, 50),
        ("aten::add", 1, 40),
    ]
    by_shape = aggregate(ops, "shape")
    mm = [(r.detail, r.calls) for r in by_shape if r.name == "aten::mm"]
    assert sorted(mm) == [("[[2, 3]]", 2), ("[[4, 3]]", 1)]
    assert sum(r.self_pct for r in by_shape) == pytest.approx(100.0)


def test_frame_is_user_skips_library_frames():
    assert frame_is_user("/tmp/ipykernel_1/123.py(5): train")
    assert not frame_is_user("torch/nn/modules/linear.py(130): forward")
    assert not frame_is_user("<built-in method relu of type object at 0x1>")
    assert not frame_is_user("nn.Module: Linear_0")


def test_trace_self_time_subtracts_nested_events():
    data = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::linear",
                "ts": 0,
                "dur": 100,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::addmm",
                "ts": 10,
                "dur": 70,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::copy_",
                "ts": 20,
                "dur": 5,
                "pid": 1,
                "tid": 1,
            },
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::addmm",
                "ts": 10,
                "dur": 50,
                "pid": 1,
                "tid": 2,
            },
            {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 30, "dur": 8, "pid": 0, "tid": 7},
        ]
    }
    t = totals_from_trace(data)
    assert t[("operator", "aten::linear")] == [1, 30.0]
    assert t[("operator", "aten::addmm")] == [2, 115.0]
    assert t[("operator", "aten::copy_")] == [1, 5.0]
    assert t[("kernel", "sgemm")] == [1, 8.0]


def test_compare_ranks_the_biggest_change_first():
    a = ProfResult(ops=[_op("aten::mm", "", 0, 10, 10), _op("aten::add", "", 10, 20, 10)])
    b = ProfResult(
        ops=[
            _op("aten::mm", "", 0, 11, 11),
            _op("aten::add", "", 11, 100, 89),
            _op("aten::new", "", 100, 102, 2),
        ]
    )
    cmp = compare(a, b)
    assert [r.name for r in cmp.rows] == ["aten::add", "aten::new", "aten::mm"]
    assert cmp.rows[0].delta_us == 79
    assert "aten::add" in repr(cmp) and "aten::<wbr>add" in cmp._repr_html_()


def _big_trace(n_steps=20, per_step=500, stacks=True):
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    t = 0
    for s in range(n_steps):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s}",
                "ts": t,
                "dur": per_step * 10,
                "pid": 1,
                "tid": 1,
            }
        )
        for i in range(per_step):
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "ts": t + i * 10,
                    "dur": 9,
                    "pid": 1,
                    "tid": 1,
                    "args": {"Input Dims": [[64, 64], [64, 64]], "Call stack": "a.py(1): f;" * 5},
                }
            )
            if stacks:
                ev.append(
                    {
                        "ph": "X",
                        "cat": "python_function",
                        "name": "a.py(1): f",
                        "ts": t + i * 10,
                        "dur": 9,
                        "pid": 1,
                        "tid": 1,
                    }
                )
        t += per_step * 10
    return {"traceEvents": ev, "schemaVersion": 1}


def test_trace_under_the_cap_is_written_whole(tmp_path):
    data = _big_trace(2, 10)
    path = str(tmp_path / "t.json")
    assert write_capped(data, path, 10 * 2**20) == []
    assert load_trace(path) == json.loads(json.dumps(data))


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_trace_cap_drops_stacks_then_whole_steps(tmp_path, name):
    data = _big_trace()
    path = str(tmp_path / name)
    full = (
        len(json.dumps(data))
        if name.endswith(".json")
        else len(gzip.compress(json.dumps(data).encode()))
    )
    cap = full // 4
    notes = write_capped(data, path, cap)
    assert (tmp_path / name).stat().st_size <= cap
    loaded = load_trace(path)
    assert "Python stacks" in notes[0]
    assert not any(e.get("cat") == "python_function" for e in loaded["traceEvents"])
    assert not any("Call stack" in e.get("args", {}) for e in loaded["traceEvents"])
    # gzip compresses the repeated events so well that dropping stacks suffices
    if name.endswith(".json"):
        assert "profiler steps" in notes[1]
        steps = [e["name"] for e in loaded["traceEvents"] if e["name"].startswith("ProfilerStep#")]
        kept = len(steps)
        assert 0 < kept < 20 and steps == [f"ProfilerStep#{i}" for i in range(kept)]
        last_step_end = kept * 5000
        assert all(e["ts"] < last_step_end for e in loaded["traceEvents"] if "ts" in e)
        # whole steps
        assert sum(e["name"] == "aten::mm" for e in loaded["traceEvents"]) == kept * 500


def test_trace_cap_without_steps_keeps_the_earliest_events(tmp_path):
    data = _big_trace(1, 3000, stacks=False)
    data["traceEvents"] = [
        e for e in data["traceEvents"] if not e["name"].startswith("ProfilerStep")
    ]
    path = str(tmp_path / "t.json")
    notes = write_capped(data, path, 100_000)
    assert (tmp_path / "t.json").stat().st_size <= 100_000
    assert "dropped the latest" in notes[-1]
    ts = [e["ts"] for e in load_trace(path)["traceEvents"] if "ts" in e]
    assert ts == sorted(ts) and ts[0] == 0 and len(ts) < 3000


def test_summary_and_compare_html_are_themed_and_aligned():
    """Issue 16: one themed page, no hard-coded colour.

    Issue 16: one themed page, no hard-coded colour (the timeline's bars use theme variables with a
    fallback), numbers right-aligned, names left-aligned and wrapping, wide tables in a scroll box,
    N/A with its reason.
    """
    import re

    from cudamagic.core.style import hard_coded_colours

    ops = [_op("aten::mm", "", 0, 10, 10), _op("aten::add" + "_long" * 30, "", 10, 20, 10)]
    ks = [KernelRecord("gemm<float>", "kernel", 0, 7, 0, 5, launcher="aten::mm")]
    with_gpu = ProfResult(
        ops=ops,
        kernels=ks,
        span_us=(0.0, 20.0),
        gpu=gpu_breakdown(ks, (0.0, 20.0)),
        activities=["CPU", "CUDA"],
        error="RuntimeError: <boom>",
        notices=["#fff is not ours"],
    )
    cpu = ProfResult(ops=ops, span_us=(0.0, 20.0), activities=["CPU"])
    for res in (with_gpu, cpu):
        page = plain(res._repr_html_())
        assert page.startswith('<div class="cudamagic mathjax_ignore cm-prof">')
        assert hard_coded_colours(page.replace("#fff is not ours", "")) == []
        # the facts list is narrow
        assert page.count("<table") == page.count('<div class="cm-scroll"><table') + 1
        ops_head = re.search(r"<h4>Top operators.*?<thead>(.*?)</thead>", page).group(1)
        # the name first (a narrow output shows it before scrolling to the numbers), no rank
        assert ops_head.startswith(
            '<tr><th class="cm-prose cm-mono">operator</th><th class="cm-num">self %</th>'
        )
        assert '<th class="cm-num">#</th>' not in ops_head
    page = plain(with_gpu._repr_html_())
    assert (
        '<span class="cm-badge cm-error">\u2716 stopped by RuntimeError: &lt;boom&gt;</span>'
        in page
    )
    assert (
        '<th class="cm-prose cm-mono">kernel</th><th class="cm-prose cm-mono">launched by</th>'
        in page
    )
    assert '<th class="cm-num">kernel %</th>' in page
    assert '<span class="cm-na" title="run with --memory">N/A</span>' in page
    assert '<span class="cm-na" title="no GPU activity recorded">N/A</span>' in plain(
        cpu._repr_html_()
    )
    assert "peak allocated: N/A (run with --memory)" in repr(cpu)
    cmp = plain(compare(cpu, with_gpu)._repr_html_())
    assert (
        cmp.startswith('<div class="cudamagic mathjax_ignore cm-prof">')
        and hard_coded_colours(cmp) == []
    )
    assert (
        '<th class="cm-num">change ms</th>' in cmp
        and '<th class="cm-prose cm-mono">name</th>' in cmp
    )


def _bars_and_legend(svg):
    """(bar fills, legend swatch fills, legend (x, name), row labels) of a timeline SVG."""
    import re

    bars = re.findall(r'<rect x="[\d.]+" y="\d+" width="[\d.]+" height="17" fill="(#\w+)"/>', svg)
    legend = re.findall(
        r'<rect x="\d+" y="\d+" width="11" height="11" fill="(#\w+)"[^>]*/>'
        r'<text x="(\d+)"[^>]*>([^<]+)</text>',
        svg,
    )
    labels = re.findall(r'<text x="\d+" y="[\d.]+" fill="#\w+">([^<]+)</text><line', svg)
    return bars, [c for c, _, _ in legend], [(int(x), n) for _, x, n in legend], labels


def test_timeline_rows_per_level_and_every_colour_in_the_legend():
    from cudamagic.prof.render import OTHER_COLOUR, colours_of, timeline_svg

    ops = [
        OpRecord("aten::linear", "[]", 7, 0, 100, 10, True, depth=0),
        OpRecord("aten::addmm", "[]", 7, 5, 90, 60, False, depth=1),
        OpRecord("aten::copy_", "[]", 7, 10, 30, 20, False, depth=2),
        OpRecord("aten::deep", "[]", 7, 12, 20, 8, False, depth=3),
        OpRecord("aten::relu", "[]", 9, 0, 50, 50, True, depth=0),
    ] + [OpRecord(f"aten::rare{i}", "[]", 9, 60 + 4 * i, 62 + 4 * i, 0.01, True) for i in range(9)]
    svg = timeline_svg(ProfResult(ops=ops, span_us=(0.0, 100.0)))
    bars, swatches, names, labels = _bars_and_legend(svg)
    assert labels == [
        "thread 7",
        "\u21b3 called by the row above",
        "\u21b3 called by the row above",
        "thread 9",
    ]
    assert set(bars) == set(swatches) and len(swatches) == len(set(swatches))  # distinct hues
    expected = colours_of([r.name for r in ProfResult(ops=ops).rows("op")[:8]])
    legend = dict(zip([n for _, n in names], swatches, strict=True))
    assert legend["aten::addmm"] == expected["aten::addmm"]
    # past the 8 operators of the legend: grey, named; depth 3 is not drawn
    assert legend["other operators and kernels"] == OTHER_COLOUR
    assert "aten::deep" not in legend and "<title>" not in svg


def test_a_long_span_of_short_events_is_merged_not_a_barcode():
    from cudamagic.prof.render import MERGED_COLOUR, timeline_svg

    ops = [OpRecord(f"aten::op{i % 2}", "[]", 7, i, i + 0.5, 0.5, True) for i in range(20_000)]
    ops += [OpRecord("aten::long", "[]", 7, 20_000, 30_000, 10_000, True)]
    bars, swatches, names, _ = _bars_and_legend(
        timeline_svg(ProfResult(ops=ops, span_us=(0.0, 30_000.0)))
    )
    assert len(bars) == 2 and MERGED_COLOUR in bars  # one merged run, then the long one
    assert "many short operators, merged" in [n for _, n in names] and set(bars) == set(swatches)


def test_colour_of_a_name_is_the_same_in_another_process():
    import os
    import subprocess
    import sys

    from cudamagic.prof.render import colours_of

    names = ["aten::addmm", "aten::mm", "Optimizer.step#Adam.step", "aten::relu"]
    code = f"from cudamagic.prof.render import colours_of; print(colours_of({names!r}))"
    for seed in ("1", "2"):  # Python's own str hash differs between these processes
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        assert out.strip() == str(colours_of(names))
    assert len(set(colours_of(names).values())) == len(names)


def test_timeline_legend_wraps_instead_of_cutting_names():
    """Found by the browser survey: a long operator name near the end of the legend was cut."""
    from cudamagic.prof.render import FONT_PX, timeline_svg

    names = [f"aten::_log_softmax_backward_data_{i}_" + "x" * 20 for i in range(12)]
    ops = [OpRecord(n, "[]", 7, 10 * i, 10 * i + 9, 9, True, depth=0) for i, n in enumerate(names)]
    for width in (900, 600):
        svg = timeline_svg(ProfResult(ops=ops, span_us=(0.0, 120.0)), width=width)
        _, _, legend, _ = _bars_and_legend(svg)
        assert len(legend) == 9  # 8 operators and "other"
        assert {n for _, n in legend} - {"other operators and kernels"} <= set(names)  # whole
        for x, label in legend:
            assert x + FONT_PX * 0.62 * len(label) <= width - 10, (width, label)
