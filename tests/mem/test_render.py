"""Tier 1 tests of cudamagic.mem.render through the report objects.

NA shown with its reason, outside text escaped, every text report within 100 columns.
"""

from __future__ import annotations

from cudamagic.core.na import is_na
from cudamagic.mem import census, free, history, result, stats
from tests.inline import own_styles, plain
from tests.mem.test_stats import reading

MiB = 1 << 20


def test_report_renders_na_and_escapes_errors():
    before = stats.Snapshot(0.0, {}, False, 100)
    after = stats.Snapshot(0.5, {}, False, 300)
    rep = result.build_report(
        before,
        after,
        cell=4,
        source="%%cudamem\nx = 1\n",
        error="ValueError: <b>bad</b>",
        kind="cell",
    )
    assert is_na(rep.gpu_status) and rep.rss_delta_bytes == 200 and rep.source == "x = 1"
    html = rep._repr_html_()
    assert "&lt;b&gt;bad&lt;/b&gt;" in html and "<b>bad</b>" not in html
    assert "In[4]" in repr(rep) and "not initialised" in repr(rep)
    assert rep.to_dict()["gpu_status"]["code"] == "not_initialized"


def _wide_report(error="RuntimeError: " + "CUDA out of memory. Tried to allocate 20.00 GiB " * 4):
    """A report with everything that makes text wide.

    2 GPUs, a bound peak, OOMs, a long error, an NVML reason, long module paths and a 5-d shape.
    """
    before = stats.Snapshot(
        0.0,
        {0: reading(1000 * MiB, 9000 * MiB, 10**12, 9000 * MiB), 1: reading(0, 0, 0, device=1)},
        True,
        100 * MiB,
    )
    after = stats.Snapshot(
        0.5,
        {
            0: reading(1020 * MiB, 9000 * MiB, 10**12 + 5000 * MiB, 9000 * MiB, retries=3, ooms=2),
            1: reading(900 * MiB, 1000 * MiB, 1000 * MiB, 1024 * MiB, device=1),
        },
        True,
        300 * MiB,
    )
    name = "encoder_with_a_long_name.layers.11.self_attention_block.output_projection.weight.grad"
    rows = [
        census.TensorRow(name, (64, 3, 224, 224, 2), "torch.float32", "cuda:1", 999 * MiB, True),
        census.TensorRow("d['key\nwith a newline']", (3,), "torch.float32", "cpu", 12),
    ]
    nvml = stats.NA(
        "NVML library libnvidia-ml.so.1 not found: no NVIDIA driver is installed on this "
        "machine (or its library is not on the loader path)",
        "no_library",
    )
    return result.build_report(
        before,
        after,
        cell=1234,
        source="x = " + "y" * 300,
        error=error,
        kind="cell",
        nvml_before=nvml,
        nvml_after=nvml,
        tensors=rows,
        tensors_total=2,
    )


def _widest(text):
    return max(len(line) for line in text.splitlines())


def test_text_reports_fit_in_100_columns():
    rep = _wide_report()
    text = repr(rep)
    assert _widest(text) <= 100, text
    assert "OutOfMemory" not in text and "2 OOMs" in text and "3 allocator retries" in text
    assert "<=" in text and "upper bound" in text  # the bound peak is still marked
    assert "key\\nwith a newline" in text  # a newline in a name does not break the row
    assert "1234" in text and "encoder_with" in text
    summary = rep.summary_line()
    assert _widest(summary) <= 100 and summary.startswith("[cudamem] In[1234]")
    assert "cuda:0" in summary and "cuda:1" in summary and "2 OOM" in summary
    cpu = result.build_report(
        stats.Snapshot(0.0, {}, False, 1),
        stats.Snapshot(1.0, {}, False, 2),
        cell=2,
        source="z",
        error=None,
        kind="cell",
    )
    assert _widest(repr(cpu)) <= 100  # the long 'CUDA is not initialised' reason is wrapped
    hist = history.MemHistory([rep, cpu, _wide_report(error=None)])
    assert _widest(repr(hist)) <= 100, repr(hist)
    assert "RuntimeError" in repr(hist)
    # the HTML keeps every column and the whole text
    html = rep._repr_html_()
    assert "retries" in html and "OOMs" in html and "(upper bound)" in html


def test_one_changed_device_gives_one_summary_line():
    before = stats.Snapshot(
        0.0,
        {0: reading(0, 0, 0), 1: reading(100 * MiB, 900 * MiB, 900 * MiB, 1024 * MiB, 1)},
        True,
        1,
    )
    after = stats.Snapshot(
        12.5,
        {0: reading(0, 0, 0), 1: reading(612 * MiB, 900 * MiB, 1412 * MiB, 1024 * MiB, 1)},
        True,
        1,
    )
    rep = result.build_report(
        before, after, cell=123, source="x", error="OutOfMemoryError: CUDA", kind="auto"
    )
    assert rep.summary_line() == (
        "[cudamem] In[123] 12.50 s  cuda:1 +512.0 MiB \u2192 612.0 MiB (peak 612.0 MiB, "
        "reserved 1.0 GiB)\n    error: OutOfMemoryError"
    )
    rep.error = None
    assert "\n" not in rep.summary_line()


def test_free_report_fits_in_100_columns():
    holders = [census.Holder("variable", "v" * 80, 5 * MiB, ("cpu",), "--var " + "v" * 80)]
    rep = free.FreeReport(
        released=[
            "sys.last_type",
            "sys.last_value",
            "sys.last_traceback",
            "InteractiveTB.tb",
            "Out[12]",
            "__",
            "last_execution_result.result",
        ],
        gpus=[],
        gpu_status=stats.NO_CUDA,
        empty_cache_called=False,
        cpu_tensor_bytes_freed=0,
        tensor_bytes_freed=0,
        rss_before_bytes=1,
        rss_after_bytes=1,
        gc_collected=3,
        holders=holders,
    )
    assert _widest(repr(rep)) <= 100, repr(rep)


def test_html_is_themed_aligned_and_scrolls_with_a_cue():
    """One themed page per output (issue 16).

    No hard-coded colours, byte columns right-aligned, prose (error, source, names) left-aligned
    and wrapping, wide tables in a scroll box with a visible cue.
    """
    import re

    from cudamagic.core.style import hard_coded_colours

    rep = _wide_report()
    cpu = result.build_report(
        stats.Snapshot(0.0, {}, False, 1),
        stats.Snapshot(1.0, {}, False, 2),
        cell=2,
        source="z = 1\nw = 2",
        error="ValueError: x",
        kind="auto",
    )
    hist = history.MemHistory([rep, cpu])
    holders = [census.Holder("variable", "v" * 80, 5 * MiB, ("cpu",), "--var " + "v" * 80)]
    fr = free.FreeReport(
        released=["Out[12]"],
        gpus=[],
        gpu_status=stats.NO_CUDA,
        empty_cache_called=False,
        cpu_tensor_bytes_freed=0,
        tensor_bytes_freed=0,
        rss_before_bytes=1,
        rss_after_bytes=1,
        gc_collected=3,
        holders=holders,
    )
    for obj in (rep, cpu, hist, history.MemHistory([]), fr):
        html = obj._repr_html_()
        assert html.startswith('<div class="cudamagic mathjax_ignore cm-mem">'), type(obj)
        assert hard_coded_colours(html) == [], type(obj)
        assert own_styles(html) == [], type(obj)
        assert html.count("<table") == plain(html).count('<div class="cm-scroll"><table'), type(obj)
    page = plain(hist._repr_html_())
    head = re.search(r"<thead>(.*?)</thead>", page).group(1)
    assert (
        '<th class="cm-num">allocated delta</th>' in head
        and '<th class="cm-prose">error</th>' in head
    )
    assert '<th class="cm-prose">source</th>' in head
    assert '<td class="cm-prose"><code class="cm-pre">z = 1</code></td>' in page
    assert '<td class="cm-num">+1 B</td>' in page  # the CPU cell's RSS delta
    cell = plain(rep._repr_html_())
    assert '<th class="cm-num">retries</th><th class="cm-num">OOMs</th>' in cell
    # "cell raised ...": a badge, text in the theme colour
    assert '<span class="cm-badge cm-error">' in cell
    assert '<td class="cm-num">999.0 MiB</td>' in cell
    only_cpu = history.MemHistory([cpu])._repr_html_()
    assert "allocated delta" not in only_cpu and "RSS delta" in only_cpu  # no empty GPU columns
    assert '<td class="cm-prose"><code>' + "v" * 80 + "</code></td>" in plain(fr._repr_html_())


def test_rss_that_grew_less_than_the_new_cpu_tensors_says_why():
    """16 MiB of new CPU tensors, RSS +4 KiB: the allocator reused pages (review round 3, L12)."""
    import dataclasses

    base = result.build_report(
        stats.Snapshot(0.0, {}, False, 100 * MiB),
        stats.Snapshot(1.0, {}, False, 100 * MiB + 4096),
        cell=3,
        source="x = torch.ones(2048, 2048)",
        error=None,
        kind="cell",
    )
    row = census.TensorRow("x", (2048, 2048), "torch.float32", "cpu", 16 * MiB, new=True)
    reused = dataclasses.replace(base, tensors=[row])
    for shown in (repr(reused), reused._repr_html_()):
        assert "(+4.0 KiB); the new CPU tensors hold 16.0 MiB" in " ".join(shown.split())
    grown = dataclasses.replace(base, tensors=[row], rss_delta_bytes=16 * MiB)
    old = dataclasses.replace(base, tensors=[dataclasses.replace(row, new=False)])
    for quiet in (grown, old, base):
        assert "new CPU tensors hold" not in repr(quiet) + quiet._repr_html_()
