"""Tier 1: the %cudainfo report's text: width, unbroken paths, a kernel without PyTorch."""

from cudamagic.info.facts import collect, collect_facts
from cudamagic.info.findings import findings


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
    for scenario in ("no_driver", "two_gpus_f03", "mig"):
        fake_nvml(scenario)
        text = collect(env={"CUDA_VISIBLE_DEVICES": ""}).to_text()
        # only a single unbreakable word (a path) may run past 100 columns, never cut in two
        assert all(len(line) <= 100 or len(line.split()[-1]) > 60 for line in text.splitlines()), scenario
        assert "'' (set to the empty string)" in text


def test_long_paths_are_not_cut(fake_nvml, monkeypatch):
    fake_nvml("no_driver")
    f = collect_facts(env={})
    f["torch"]["file"] = "/very/long/" + "x" * 120 + "/torch/__init__.py"
    from cudamagic.info.report import CudaInfoReport
    text = CudaInfoReport(f, findings(f)).to_text()
    assert f["torch"]["file"] in text


PER_GPU_NUMBERS = ["memory.total", "memory.used", "memory.free", "utilization.gpu", "temperature.gpu", "power.draw",
                   "power.limit", "multiprocessor_count"]


def test_every_gpu_number_carries_its_source_in_text_and_html(ip, fake_nvml):
    import html
    import re

    from cudamagic.info.report import GPU_COLUMNS

    fake_nvml("one_gpu")
    report = ip.run_line_magic("cudainfo", "")
    text = report.to_text()
    gpus_block = text[text.index("[GPUs]"):text.index("[Environment]")]
    flat = " ".join(gpus_block.split())  # sources may wrap
    page = report._repr_html_()
    titles = {html.unescape(label): html.unescape(src)
              for src, label in re.findall(r'<th title="([^"]*)">([^<]*)</th>', page)}
    sources = {key: (label, src) for key, label, src in GPU_COLUMNS}
    for key in PER_GPU_NUMBERS:
        label, src = sources[key]
        assert f"{label} {src}" in flat, key
        assert titles[label] == src, key
        assert f"<b>{html.escape(label)}</b>: {html.escape(src)}" in page, key
