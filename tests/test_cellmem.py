"""Tier 1 tests of cudamagic.cellmem: the peak arithmetic, the tensors scan, the torch.cuda gate and
the frame clearing, with no IPython shell."""

from __future__ import annotations

import sys
import weakref

import pytest
import torch

from cudamagic.mem import cellmem
from cudamagic.mem.cellmem import GpuStats, in_cell_peak
from cudamagic.core.na import is_na

MiB = 1 << 20


def stats(alloc, peak, total, reserved=0, device=0, retries=0, ooms=0):
    return GpuStats(device, alloc, peak, total, reserved, reserved, retries, ooms)


# ---- in-cell peak without resetting the user's counters ----------------------------

def test_peak_is_exact_when_the_cell_sets_a_new_high():
    before = stats(100 * MiB, 150 * MiB, 1000 * MiB)
    after = stats(120 * MiB, 400 * MiB, 1300 * MiB)
    assert in_cell_peak(before, after) == (400 * MiB, True)


def test_peak_is_an_upper_bound_below_an_earlier_peak():
    # earlier peak 1 GiB; the cell allocates 300 MiB in total and frees it again
    before = stats(100 * MiB, 1024 * MiB, 5000 * MiB)
    after = stats(100 * MiB, 1024 * MiB, 5300 * MiB)
    peak, exact = in_cell_peak(before, after)
    assert (peak, exact) == (400 * MiB, False)
    # the bound is capped by the earlier peak
    after_big = stats(100 * MiB, 1024 * MiB, 9000 * MiB)
    assert in_cell_peak(before, after_big) == (1024 * MiB, False)


def test_peak_is_exact_when_the_cell_allocates_nothing():
    before = stats(500 * MiB, 900 * MiB, 5000 * MiB)
    after = stats(200 * MiB, 900 * MiB, 5000 * MiB)  # only frees
    assert in_cell_peak(before, after) == (500 * MiB, True)


def test_peak_when_cuda_was_initialised_by_the_cell_and_after_a_reset():
    after = stats(10 * MiB, 70 * MiB, 80 * MiB)
    assert in_cell_peak(None, after) == (70 * MiB, True)
    before = stats(100 * MiB, 1024 * MiB, 5000 * MiB)
    after = stats(100 * MiB, 100 * MiB, 5000 * MiB)
    assert in_cell_peak(before, after, peak_reset=True) == (100 * MiB, True)


def test_parse_bytes():
    assert cellmem.parse_bytes("64MiB") == 64 * MiB
    assert cellmem.parse_bytes("1.5GB") == 1_500_000_000
    assert cellmem.parse_bytes("4096") == 4096
    with pytest.raises(ValueError):
        cellmem.parse_bytes("lots")


# ---- the gate: never import torch, never touch CUDA unless initialised -------------

def test_real_source_does_not_import_torch_or_create_a_context(monkeypatch):
    src = cellmem.TorchCudaStats()
    was_initialized = torch.cuda.is_initialized()
    monkeypatch.delitem(sys.modules, "torch")
    assert src.initialized() is False
    assert "torch" not in sys.modules
    monkeypatch.setitem(sys.modules, "torch", torch)
    snap = cellmem.take_snapshot(src)
    assert snap.cuda_initialized is was_initialized
    assert torch.cuda.is_initialized() is was_initialized  # reading never initialises CUDA
    if not was_initialized:
        assert snap.gpus == {}


def test_snapshot_reads_nothing_from_an_uninitialised_source(monkeypatch):
    class Uninit:
        def initialized(self):
            return False

        def __getattr__(self, name):
            raise AssertionError(f"{name} called although CUDA is not initialised")

    snap = cellmem.take_snapshot(Uninit())
    assert snap.gpus == {} and not snap.cuda_initialized
    assert snap.rss_bytes > 0


def test_rss_matches_psutil_and_follows_allocation():
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process()
    assert abs(cellmem.rss_bytes() - proc.memory_info().rss) < 4 * MiB
    before = cellmem.rss_bytes()
    # 64 MiB, written: above glibc's largest mmap threshold (32 MiB), so it is fresh memory even when
    # earlier tests left freed, still-resident heap behind (a 16 MiB block could reuse it: flaky)
    block = torch.ones(64 * MiB // 4)
    assert cellmem.rss_bytes() - before > 32 * MiB
    del block


# ---- the tensors scan ----------------------------------------------------------------

def test_scan_names_module_paths_grads_containers_optimizer_and_out():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(net.parameters())
    net(torch.randn(3, 8)).sum().backward()
    opt.step()
    big = torch.zeros(1000, 100)
    view = big[:10]  # a view keeps the whole storage: listed once, under the first name
    ns = {"net": net, "opt": opt, "big": big, "view": view, "pair": (torch.ones(7), {"k": torch.ones(5)}),
          "_hidden": torch.ones(10_000), "Out": {3: torch.ones(33)}, "n": 3}
    rows = cellmem.scan_tensors(ns, hidden={})
    names = {r.name: r for r in rows}
    assert rows[0].name == "big" and rows[0].bytes == 400_000 and rows[0].shape == (1000, 100)
    assert "view" not in names  # same storage as big
    for expected in ("net.0.weight", "net.0.weight.grad", "net.1.running_mean", "pair[0]", "pair[1]['k']",
                     "Out[3]", "opt.state[0]['exp_avg']"):
        assert expected in names, (expected, sorted(names))
    assert names["net.0.weight"].shape == (4, 8) and names["net.0.weight"].dtype == "torch.float32"
    # optimizer state is numbered like opt.state_dict()["state"]: parameters in param_groups order
    assert names["opt.state[0]['exp_avg']"].shape == (4, 8) and names["opt.state[1]['exp_avg_sq']"].shape == (4,)
    assert not any(n.startswith("_") for n in names)  # _-names (IPython's _, _1, _i...) are not user variables
    assert [r.bytes for r in rows] == sorted((r.bytes for r in rows), reverse=True)


def test_scan_marks_storages_new_since_before():
    a = torch.ones(100)
    ns = {"a": a}
    keys = cellmem.storage_keys(ns)
    ns["b"] = torch.ones(200)
    rows = {r.name: r for r in cellmem.scan_tensors(ns, before_keys=keys)}
    assert rows["b"].new and not rows["a"].new


def test_scan_without_torch_imported_is_empty(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    assert cellmem.scan_tensors({"x": 1}) == []


# ---- frame clearing --------------------------------------------------------------------

def test_clear_frames_drops_locals_even_after_f_locals_was_read():
    def inner():
        big = torch.ones(1000)  # noqa: F841
        raise RuntimeError("boom")

    try:
        inner()
    except RuntimeError as exc:
        err = exc
    tb = err.__traceback__
    frame = tb.tb_next.tb_frame
    big_ref = weakref.ref(frame.f_locals["big"])  # reading f_locals creates the 3.11 snapshot dict
    module_ns = {"keep": 1}
    cellmem._clear_frames(tb)
    assert big_ref() is None
    assert module_ns == {"keep": 1}


def test_report_renders_na_and_escapes_errors():
    before = cellmem.Snapshot(0.0, {}, False, 100)
    after = cellmem.Snapshot(0.5, {}, False, 300)
    rep = cellmem.build_report(before, after, cell=4, source="%%cudamem\nx = 1\n", error="ValueError: <b>bad</b>",
                               kind="cell")
    assert is_na(rep.gpu_status) and rep.rss_delta_bytes == 200 and rep.source == "x = 1"
    html = rep._repr_html_()
    assert "&lt;b&gt;bad&lt;/b&gt;" in html and "<b>bad</b>" not in html
    assert "In[4]" in repr(rep) and "not initialised" in repr(rep)
    assert rep.to_dict()["gpu_status"]["code"] == "not_initialized"


# ---- text width, cell numbering, bounded history (review fixes) ----------------------------

def _wide_report(error="RuntimeError: " + "CUDA out of memory. Tried to allocate 20.00 GiB " * 4):
    """A report with everything that makes text wide: 2 GPUs, a bound peak, OOMs, a long error,
    an NVML reason, long module paths and a 5-d shape."""
    before = cellmem.Snapshot(0.0, {0: stats(1000 * MiB, 9000 * MiB, 10**12, 9000 * MiB),
                                    1: stats(0, 0, 0, device=1)}, True, 100 * MiB)
    after = cellmem.Snapshot(0.5, {0: stats(1020 * MiB, 9000 * MiB, 10**12 + 5000 * MiB, 9000 * MiB, retries=3, ooms=2),
                                   1: stats(900 * MiB, 1000 * MiB, 1000 * MiB, 1024 * MiB, device=1)}, True, 300 * MiB)
    name = "encoder_with_a_long_name.layers.11.self_attention_block.output_projection.weight.grad"
    rows = [cellmem.TensorRow(name, (64, 3, 224, 224, 2), "torch.float32", "cuda:1", 999 * MiB, True),
            cellmem.TensorRow("d['key\nwith a newline']", (3,), "torch.float32", "cpu", 12)]
    nvml = cellmem.NA("NVML library libnvidia-ml.so.1 not found: no NVIDIA driver is installed on this "
                      "machine (or its library is not on the loader path)", "no_library")
    return cellmem.build_report(before, after, cell=1234, source="x = " + "y" * 300, error=error, kind="cell",
                                nvml_before=nvml, nvml_after=nvml, tensors=rows, tensors_total=2)


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
    cpu = cellmem.build_report(cellmem.Snapshot(0.0, {}, False, 1), cellmem.Snapshot(1.0, {}, False, 2), cell=2,
                               source="z", error=None, kind="cell")
    assert _widest(repr(cpu)) <= 100  # the long 'CUDA is not initialised' reason is wrapped
    hist = cellmem.MemHistory([rep, cpu, _wide_report(error=None)])
    assert _widest(repr(hist)) <= 100, repr(hist)
    assert "RuntimeError" in repr(hist)
    # the HTML keeps every column and the whole text
    html = rep._repr_html_()
    assert "retries" in html and "OOMs" in html and "(upper bound)" in html


def test_one_changed_device_gives_one_summary_line():
    before = cellmem.Snapshot(0.0, {0: stats(0, 0, 0), 1: stats(100 * MiB, 900 * MiB, 900 * MiB, 1024 * MiB, 1)},
                              True, 1)
    after = cellmem.Snapshot(12.5, {0: stats(0, 0, 0), 1: stats(612 * MiB, 900 * MiB, 1412 * MiB, 1024 * MiB, 1)},
                             True, 1)
    rep = cellmem.build_report(before, after, cell=123, source="x", error="OutOfMemoryError: CUDA", kind="auto")
    assert rep.summary_line() == ("[cudamem] In[123] 12.50 s  cuda:1 +512.0 MiB -> 612.0 MiB (peak 612.0 MiB, "
                                  "reserved 1.0 GiB)\n    error: OutOfMemoryError")
    rep.error = None
    assert "\n" not in rep.summary_line()


def test_free_report_fits_in_100_columns():
    holders = [cellmem.Holder("variable", "v" * 80, 5 * MiB, ("cpu",), "--var " + "v" * 80)]
    rep = cellmem.FreeReport(released=["sys.last_type", "sys.last_value", "sys.last_traceback", "InteractiveTB.tb",
                                       "Out[12]", "__", "last_execution_result.result"], gpus=[],
                             gpu_status=cellmem._NO_CUDA, empty_cache_called=False, cpu_tensor_bytes_freed=0,
                             tensor_bytes_freed=0, rss_before_bytes=1, rss_after_bytes=1, gc_collected=3,
                             holders=holders)
    assert _widest(repr(rep)) <= 100, repr(rep)


class _Result:
    def __init__(self, n):
        self.execution_count = n


class _Hook:
    def __init__(self, n):
        self.exec_result = _Result(n) if n is not None else None


class _Shell:
    def __init__(self, counter, running):
        self.execution_count = counter
        self.displayhook = _Hook(running)


def test_running_cell_number_on_ipython_8_and_9():
    assert cellmem.running_cell_number(_Shell(8, 7)) == 7  # IPython 9: counter already incremented
    assert cellmem.running_cell_number(_Shell(7, 7)) == 7  # IPython 8: incremented after the cell
    assert cellmem.running_cell_number(_Shell(8, None)) == 7  # no running stored cell


def test_history_keeps_the_last_max_records_and_counts_the_dropped():
    limit = [3]
    hist = cellmem.MemHistory(max_records=lambda: limit[0])
    for n in range(5):
        hist.append(cellmem.build_report(cellmem.Snapshot(0.0, {}, False, 1), cellmem.Snapshot(0.0, {}, False, 1),
                                         cell=n, source="x", error=None, kind="auto"))
    assert [r.cell for r in hist] == [2, 3, 4] and hist.dropped == 2
    assert "2 older dropped" in repr(hist) and "cudamem_history_cells = 3" in repr(hist)
    limit[0] = 1
    hist.append(hist[-1])
    assert len(hist) == 1 and hist.dropped == 5
    snap = hist.snapshot()
    hist.clear()
    assert len(snap) == 1 and snap.dropped == 5 and hist.dropped == 0
