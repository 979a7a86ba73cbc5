"""Tier 1: the %cudainfo report's text: width, unbroken paths, a kernel without PyTorch."""

from cudamagic.info.facts import collect, collect_facts
from cudamagic.info.findings import findings
from tests.inline import own_styles, plain


def test_report_without_torch_says_not_installed(monkeypatch, fake_nvml):
    import builtins

    real_import = builtins.__import__

    def no_torch(name, *a, **k):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("No module named 'torch'")
        return real_import(name, *a, **k)

    fake_nvml("no_driver")
    monkeypatch.setattr(builtins, "__import__", no_torch)
    text = collect(env={}).to_text()
    assert "not collected" not in text and "no GPU code" not in text
    assert text.count("PyTorch is not installed in this kernel") >= 8


def test_text_fits_100_columns(fake_nvml):
    for scenario in ("no_driver", "gpu_without_fan", "mig"):
        fake_nvml(scenario)
        text = collect(env={"CUDA_VISIBLE_DEVICES": ""}).to_text()
        # only a single unbreakable word (a path) may run past 100 columns, never cut in two
        assert all(len(line) <= 100 or len(line.split()[-1]) > 60 for line in text.splitlines()), (
            scenario
        )
        assert "'' (set to the empty string)" in text


def test_long_paths_are_not_cut(fake_nvml, monkeypatch):
    fake_nvml("no_driver")
    f = collect_facts(env={})
    f["torch"]["file"] = "/very/long/" + "x" * 120 + "/torch/__init__.py"
    from cudamagic.info.result import CudaInfoReport

    text = CudaInfoReport(f, findings(f)).to_text()
    assert f["torch"]["file"] in text


PER_GPU_NUMBERS = [
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "multiprocessor_count",
]


def test_every_gpu_number_carries_its_source_in_text_and_html(ip, fake_nvml):
    import html
    import re

    from cudamagic.info.render import GPU_COLUMNS

    fake_nvml("one_gpu")
    report = ip.run_line_magic("cudainfo", "")
    text = report.to_text()
    gpus_block = text[text.index("[GPUs]") : text.index("[Environment]")]
    flat = " ".join(gpus_block.split())  # sources may wrap
    page = report._repr_html_()
    # one row per field: the label (its source on hover), one cell per GPU, the source in the last
    # column
    rows = {
        html.unescape(label): (html.unescape(title), html.unescape(src))
        for title, label, src in re.findall(
            r'<tr><td><span title="([^"]*)">([^<]*)</span></td><td class="cm-prose">.*?'
            r'<td class="cm-prose cm-src">([^<]*)</td></tr>',
            plain(page),
        )
    }
    sources = {key: (label, src) for key, label, src in GPU_COLUMNS}
    for key in PER_GPU_NUMBERS:
        label, src = sources[key]
        assert f"{label} {src}" in flat, key
        assert rows[label] == (src, src), key


# ---- the look: one themed page, no hard-coded colours, no internal ids, aligned columns ----------


def _user_text(page):
    """What a person reads: the text between tags, without the stylesheet and attribute values."""
    import html
    import re

    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_html_is_one_themed_page_without_hard_coded_colours_or_finding_ids(
    ip, fake_nvml, monkeypatch
):
    import re

    from cudamagic.core import style
    from cudamagic.core.style import hard_coded_colours

    monkeypatch.setenv("CUDA_HOME", "/nowhere/cuda")
    for scenario in (
        "no_driver",
        "one_gpu",
        "gpu_without_fan",
        "mig",
        "driver_450",
        "windows_wddm",
    ):
        fake_nvml(scenario)
        report = ip.run_line_magic("cudainfo", "")
        page = report._repr_html_()
        assert page.startswith('<div class="cudamagic mathjax_ignore cm-info">'), scenario
        assert hard_coded_colours(page) == [], scenario
        assert len(report.findings) >= 2, scenario
        for f in report.findings:
            # the id is kept for scripts and tests as an attribute; a person reads icon, severity,
            # title, cause, fix
            m = re.search(
                f'<div class="cm-box cm-(ok|info|warn|error)" '
                f'data-id="{re.escape(f.id)}">(.*?</p>)</div>',
                plain(page),
            )
            assert m, (scenario, f.id)
            assert m.group(1) == {"warning": "warn"}.get(f.severity, f.severity)
            shown = " ".join(_user_text(m.group(2)).split())
            word = "" if f is report.verdict else f"{f.severity.upper()}: "
            expected = f"{style.icon(m.group(1))} {word}{f.title} {f.cause}" + (
                f" Fix: {f.fix}" if f.fix else ""
            )
            # `code` spans are <code> elements: no literal backticks in what a person reads
            assert "`" not in shown, (scenario, shown)
            assert "".join(shown.split()) == "".join(expected.replace("`", "").split()), shown
        assert not re.search(r"\bF\d\d\b", _user_text(page)), scenario  # no field-report ids either
        # nor in the facts table's sources ("`nvcc -V`", "`python` in a shell")
        assert "`" not in _user_text(page), scenario
        assert own_styles(page) == [], scenario  # every look comes from the stylesheet


def test_gpu_table_has_one_column_per_gpu_and_wraps_in_a_scroll_box(ip, fake_nvml):
    fake_nvml("gpu_without_fan")
    page = plain(ip.run_line_magic("cudainfo", "")._repr_html_())
    assert '<th>field</th><th class="cm-prose">GPU 0</th><th class="cm-prose">GPU 1</th>' in page
    gpus = page[page.index("<h4>GPUs</h4>") :]
    assert gpus.split("<table", 1)[0].endswith(
        '<div class="cm-scroll">'
    )  # a visible cue if it is still too wide
    assert page.count('<td class="cm-prose">Tesla T4</td>') == 1
    assert "<details><summary>Environment variables (" in page  # technical detail, collapsible


def _value_columns(block, labels):
    """The column each row's value starts at (continuation lines: their indent)."""
    from cudamagic.core.fmt import display_width

    columns = []
    for line in block:
        label = next(
            (lb for lb in sorted(labels, key=len, reverse=True) if line[4:].startswith(lb + " ")),
            None,
        )
        if label is None:  # a wrapped continuation line: its text starts under the values
            columns.append(display_width(line) - display_width(line.lstrip()))
            continue
        rest = line[4 + len(label) :]
        columns.append(
            display_width(line[: 4 + len(label)])
            + display_width(rest)
            - display_width(rest.lstrip())
        )
    return columns


def test_every_value_of_the_per_gpu_block_starts_at_the_same_column(fake_nvml):
    # the health rows ("ECC uncorrected (since boot)", "retired pages pending") are longer than the
    # old 20 columns
    from cudamagic.core.fmt import TEXT_WIDTH, display_width
    from cudamagic.info.render import GPU_COLUMNS

    fake_nvml("one_gpu")
    lines = collect(env={}).to_text().splitlines()
    labels = [label for _key, label, _src in GPU_COLUMNS]
    start = lines.index("  GPU 0:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("    "))
    sources = lines.index("  Sources of the GPU fields:") + 1
    sources_end = next(i for i in range(sources, len(lines)) if not lines[i].startswith("    "))
    for block in (lines[start:end], lines[sources:sources_end]):
        assert any(ln.startswith("    ECC uncorrected (since boot) ") for ln in block)
        assert any(ln.startswith("    retired pages pending ") for ln in block)
        columns = _value_columns(block, labels)
        assert len(set(columns)) == 1, list(zip(columns, block, strict=True))
        assert columns[0] > 4 + max(
            display_width(lb) for lb in labels if any(ln[4:].startswith(lb) for ln in block)
        )
        assert all(display_width(ln) <= TEXT_WIDTH for ln in block)


def test_outside_text_cannot_drive_the_terminal(fake_nvml):
    """Environment values, paths and NVML names come from outside.

    An ESC sequence, a newline or a bidi control in them is shown escaped in the text report, never
    sent to the terminal (nor able to forge a report line).
    """
    fake_nvml("mig")
    f = collect_facts(
        env={"CUDA_VISIBLE_DEVICES": "0\x1b[2J", "CUDA_HOME": "/opt/cuda\nFAKE: all good"}
    )
    f["torch"]["file"] = "/home/u/\u202eyp.hcrot/torch/__init__.py"
    f["gpus"][0]["name"] = "NVIDIA A100\x1b]0;pwned\x07"
    mig = f["gpus"][0]["mig_devices"]
    assert mig, "the 'mig' scenario lists MIG instances"
    mig[0]["uuid"] = "MIG-1\x1b[31m"
    from cudamagic.info.result import CudaInfoReport

    text = CudaInfoReport(f, findings(f)).to_text()
    assert not any(c in text for c in "\x1b\x07\u202e"), repr(text)
    assert "0\\x1b[2J" in text and "\\x1b]0;pwned\\x07" in text and "MIG-1\\x1b[31m" in text
    assert "\\u202eyp.hcrot" in text
    assert not any(line.lstrip().startswith("FAKE:") for line in text.splitlines())
    assert "/opt/cuda\\x0aFAKE: all good" in text


def test_variant_named_once_when_it_is_the_kind(ip, fake_nvml):
    """``+cpu`` reads "cpu", not "cpu (cpu)"; ``+cu126`` keeps its kind, "cu126 (cuda)"."""
    from cudamagic.info import render

    fake_nvml("no_driver")
    facts = ip.run_line_magic("cudainfo", "").facts
    for variant, kind, shown in (("cpu", "cpu", "cpu"), ("cu126", "cuda", "cu126 (cuda)")):
        torch = dict(facts["torch"], variant={"variant": variant, "kind": kind})
        assert render._variant(dict(facts, torch=torch)) == shown
