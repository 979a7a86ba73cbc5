"""GPU paths of %%cudamem / %cudamem through the real allocator reader.

GPU paths of %%cudamem / %cudamem through the real allocator reader (stats.TorchCudaStats) and
torch's own ``torch.cuda`` memory functions, on a fake caching allocator underneath them.

``FakeCudaStats`` models PyTorch's caching allocator counters for N devices: ``malloc``/``free``
move ``allocated`` (current, peak, cumulative, freed), reserved memory grows in 2 MiB segments and
only shrinks on ``empty_cache``; ``oom`` counts a retry and an OOM. It sits where the CUDA build's C
extension does (``torch._C._cuda_memoryStats``, ``_cuda_resetPeakMemoryStats``,
``_cuda_emptyCache``) and returns torch's real nested key shape (tests/torch_stats.py: every counter
it does not model is a distinct other number), so a reader that picks the wrong counter or the wrong
pool reads a wrong figure here. Cells drive it through the name ``fake`` in the user namespace, as a
real cell would drive torch.cuda.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from cudamagic.core.na import is_na
from cudamagic.mem import stats
from tests.torch_stats import nested_stats

MiB = 1 << 20
GiB = 1 << 30
SEG = 2 * MiB


class FakeCudaStats:
    def __init__(self, devices=2, initialized=True):
        self.init = initialized
        self.n = devices
        self.alloc = [0] * devices
        self.peak = [0] * devices
        self.total = [0] * devices
        self.reserved = [0] * devices
        self.peak_reserved = [0] * devices
        self.retries = [0] * devices
        self.ooms = [0] * devices
        self.calls = []

    def install(self, monkeypatch):
        """Put this allocator under the real ``torch.cuda`` functions and the real reader.

        Put this allocator under the real ``torch.cuda`` functions and the real reader (undone by
        monkeypatch).
        """
        import torch

        for mod in (torch.cuda, torch.cuda.memory):  # memory.py binds is_initialized at import
            monkeypatch.setattr(mod, "is_initialized", self.is_initialized)
        monkeypatch.setattr(torch.cuda, "device_count", self.device_count)
        monkeypatch.setattr(torch._C, "_cuda_memoryStats", self.memory_stats, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_resetPeakMemoryStats", self.reset_peak, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_emptyCache", self.empty_cache, raising=False)
        # the real reader, whatever ran before
        monkeypatch.setattr(stats, "SOURCE", stats.TorchCudaStats())
        return self

    # what torch.cuda calls
    def is_initialized(self):
        return self.init

    def device_count(self):
        self.calls.append(("device_count",))
        return self.n

    def memory_stats(self, d):
        """``torch._C._cuda_memoryStats(device)``.

        The nested dict of a CUDA build, all keys present.
        """
        self.calls.append(("read", d))
        return nested_stats(
            **{
                "allocated_bytes.all.current": self.alloc[d],
                "allocated_bytes.all.peak": self.peak[d],
                "allocated_bytes.all.allocated": self.total[d],
                "allocated_bytes.all.freed": self.total[d] - self.alloc[d],
                "reserved_bytes.all.current": self.reserved[d],
                "reserved_bytes.all.peak": self.peak_reserved[d],
                "num_alloc_retries": self.retries[d],
                "num_ooms": self.ooms[d],
            }
        )

    def reset_peak(self, d):
        self.calls.append(("reset_peak", d))
        self.peak[d] = self.alloc[d]
        self.peak_reserved[d] = self.reserved[d]

    def empty_cache(self):
        self.calls.append(("empty_cache",))
        for d in range(self.n):
            self.reserved[d] = -(-self.alloc[d] // SEG) * SEG

    # what a cell does
    def malloc(self, d, nbytes):
        self.init = True
        self.alloc[d] += nbytes
        self.total[d] += nbytes
        self.peak[d] = max(self.peak[d], self.alloc[d])
        need = -(-self.alloc[d] // SEG) * SEG
        self.reserved[d] = max(self.reserved[d], need)
        self.peak_reserved[d] = max(self.peak_reserved[d], self.reserved[d])

    def free(self, d, nbytes):
        self.alloc[d] -= nbytes

    def oom(self, d):
        self.retries[d] += 1
        self.ooms[d] += 1


@pytest.fixture
def fake(ip, monkeypatch):
    f = FakeCudaStats().install(monkeypatch)
    ip.user_ns["fake"] = f
    ip.user_ns_hidden["fake"] = f  # not a user variable
    yield f
    ip.user_ns.pop("fake", None)
    ip.user_ns_hidden.pop("fake", None)
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)


def run(ip, cell):
    return ip.run_cell(cell, store_history=True)


def test_cell_delta_peak_reserved_per_device(ip, fake):
    fake.malloc(0, 100 * MiB)
    rep = run(
        ip,
        "%%cudamem\nfake.malloc(0, 500 * 2**20)\nfake.free(0, 500 * 2**20)\nfake.malloc(0, 10 * "
        "2**20)",
    ).result
    g = rep.gpu("cuda:0")
    assert (g.allocated_before_bytes, g.allocated_after_bytes, g.allocated_delta_bytes) == (
        100 * MiB,
        110 * MiB,
        10 * MiB,
    )
    assert (g.peak_allocated_bytes, g.peak_exact, g.peak_over_start_bytes) == (
        600 * MiB,
        True,
        500 * MiB,
    )
    assert (g.reserved_before_bytes, g.reserved_after_bytes) == (100 * MiB, 600 * MiB)
    assert g.alloc_retries == 0 and g.ooms == 0
    other = rep.gpu("cuda:1")
    assert other.allocated_delta_bytes == 0 and other.peak_allocated_bytes == 0
    text = repr(rep)
    assert (
        "cuda:0" in text and "+10.0 MiB" in text and "600.0 MiB" in text and "left intact" in text
    )
    assert rep.gpu_status == "ok" and rep.exceeds(16 * MiB)


def test_peak_below_an_earlier_peak_is_a_bound_unless_reset(ip, fake):
    fake.malloc(0, 2 * GiB)
    fake.free(0, 2 * GiB)  # the user's max_memory_allocated is now 2 GiB
    rep = run(ip, "%%cudamem\nfake.malloc(0, 300 * 2**20)\nfake.free(0, 300 * 2**20)").result
    g = rep.gpu("cuda:0")
    # upper bound: before + allocated in cell
    assert (g.peak_allocated_bytes, g.peak_exact) == (
        300 * MiB,
        False,
    )
    assert "upper bound" in repr(rep) and "--reset-peak" in repr(rep)
    assert fake.peak[0] == 2 * GiB and ("reset_peak", 0) not in fake.calls  # user's peak untouched
    rep = run(
        ip, "%%cudamem --reset-peak\nfake.malloc(0, 300 * 2**20)\nfake.free(0, 300 * 2**20)"
    ).result
    g = rep.gpu("cuda:0")
    assert (g.peak_allocated_bytes, g.peak_exact) == (300 * MiB, True)
    assert ("reset_peak", 0) in fake.calls and rep.peak_reset
    assert "reset torch.cuda peak counters" in repr(rep)


def test_cuda_initialised_by_the_cell(ip, fake):
    fake.init = False
    rep = run(ip, "%%cudamem\nfake.malloc(1, 64 * 2**20)\nfake.oom(1)").result
    assert ("read", 0) in fake.calls  # read after the cell only
    g = rep.gpu("cuda:1")
    assert (
        g.allocated_before_bytes,
        g.allocated_delta_bytes,
        g.peak_allocated_bytes,
        g.peak_exact,
    ) == (0, 64 * MiB, 64 * MiB, True)
    # everything before the cell counts from zero: the counters started with the cell
    assert (g.reserved_before_bytes, g.reserved_after_bytes, g.reserved_delta_bytes) == (
        0,
        64 * MiB,
        64 * MiB,
    )
    assert (g.alloc_retries, g.ooms) == (1, 1)
    assert rep.gpu_status == "ok" and [x.device for x in rep.gpus] == ["cuda:0", "cuda:1"]


def test_no_reads_while_cuda_is_not_initialised(ip, fake):
    fake.init = False
    run(ip, "%%cudamem\nx = 1")
    run(ip, "%cudamem on")
    run(ip, "y = 2")
    run(ip, "%cudamem off")
    rep = run(ip, "%cudamem free").result
    assert fake.calls == []  # not even device_count, and no empty_cache
    assert not rep.empty_cache_called


def test_oom_in_cell_is_counted_and_reported(ip, fake, capsys):
    # earlier out-of-memory errors: the cumulative counters stand at 2 before the cell
    for _ in range(2):
        fake.oom(0)
    fake.retries[0] += 3  # and retries that ended well
    res = run(
        ip,
        "%%cudamem\nfake.malloc(0, 8 * 2**20)\nfake.oom(0)\n"
        "raise RuntimeError('CUDA out of memory. Tried to allocate 20.00 GiB')",
    )
    assert isinstance(res.error_in_exec, RuntimeError)
    rec = ip.run_line_magic("cudamem", "history")[-1]
    g = rec.gpu("cuda:0")
    # this cell's own, not the 3 OOMs / 6 retries since start
    assert (g.ooms, g.alloc_retries) == (
        1,
        1,
    )
    assert rec.error.startswith("RuntimeError: CUDA out of memory")
    assert "CUDA out of memory" in capsys.readouterr().out


def test_on_summary_uses_gpu_figures(ip, fake, capsys):
    run(ip, "%cudamem on --threshold 32MiB")
    capsys.readouterr()
    res = run(ip, "fake.malloc(0, 256 * 2**20)")
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"[cudamem] In[{res.execution_count}]")
    assert (
        "cuda:0 +256.0 MiB \u2192 256.0 MiB (peak 256.0 MiB, reserved 256.0 MiB)" in line
        and "\n" not in line
    )
    assert "cuda:1" not in line  # an untouched device is not listed
    run(ip, "fake.malloc(0, 1 * 2**20)")  # below the threshold
    assert "[cudamem]" not in capsys.readouterr().out
    run(ip, "%cudamem off")
    hist = ip.run_line_magic("cudamem", "history")
    assert [r.gpu("cuda:0").allocated_delta_bytes for r in hist][:2] == [256 * MiB, 1 * MiB]


def test_free_reports_gpu_bytes_freed_and_empties_the_cache(ip, fake):
    run(
        ip,
        "def step():\n    fake.malloc(0, 1024 * 2**20)\n    act = Act(1024 * 2**20)\n"
        "    raise RuntimeError('CUDA out of memory')\n"
        "class Act:\n    def __init__(self, n):\n        self.n = n\n    def __del__(self):\n"
        "        fake.free(0, self.n)\n",
    )
    res = run(ip, "step()")
    assert isinstance(res.error_in_exec, RuntimeError)
    del res
    assert fake.alloc[0] == 1024 * MiB
    rep = ip.run_line_magic("cudamem", "free")
    assert rep.empty_cache_called and ("empty_cache",) in fake.calls
    g = rep.gpus[0]
    assert g["device"] == "cuda:0" and g["allocated_freed_bytes"] == 1024 * MiB
    assert g["reserved_freed_bytes"] == 1024 * MiB and rep.gpu_allocated_freed_bytes == 1024 * MiB
    text = repr(rep)
    assert "1.0 GiB" in text and "empty_cache() called" in text
    assert "1.0 GiB" in rep._repr_html_()


def test_nvml_process_memory_is_reported(ip, fake, fake_nvml):
    from tests import fake_nvml as fm

    scenario = dict(
        fm.SCENARIOS["one_gpu"], gpus=[fm._gpu(0, processes=[(os.getpid(), 3 * GiB), (1, GiB)])]
    )
    fake_nvml(scenario)
    rep = run(ip, "%%cudamem\nfake.malloc(0, 2**20)").result
    assert rep.nvml_after == {"GPU 0": 3 * GiB}
    assert "process GPU memory (NVML): GPU 0: 3.0 GiB" in repr(rep)


def test_nvml_unavailable_is_na_with_reason(ip, fake, fake_nvml):
    fake_nvml("no_driver")
    rep = run(ip, "%%cudamem\nfake.malloc(0, 2**20)").result
    assert is_na(rep.nvml_after) and rep.nvml_after.code == "no_driver"
    assert re.search(r"process GPU memory \(NVML\): N/A \(.*libnvidia-ml", repr(rep))
    assert "cm-na" in rep._repr_html_()


def test_nvml_not_listing_this_process_is_na_with_reason_in_the_json(ip, fake, fake_nvml):
    from tests import fake_nvml as fm

    fake_nvml(dict(fm.SCENARIOS["one_gpu"], gpus=[fm._gpu(0, processes=[(os.getpid() + 1, GiB)])]))
    rep = run(ip, "%%cudamem\nfake.malloc(0, 2**20)").result
    assert is_na(rep.nvml_after) and rep.nvml_after.code == "not_listed"
    assert "process GPU memory (NVML): N/A (NVML lists no GPU memory for this process" in repr(rep)
    saved = json.loads(rep.to_json())["nvml_after"]
    assert saved == {"na": rep.nvml_after.reason, "code": "not_listed"}


def test_nvml_query_failing_is_na_with_the_cause_not_a_traceback(ip, fake, fake_nvml, monkeypatch):
    from cudamagic.core import nvml

    def broken(pid=None):
        raise RuntimeError("driver went away <mid-query>")

    fake_nvml("one_gpu")
    monkeypatch.setattr(nvml, "process_gpu_memory", broken)
    res = run(ip, "%%cudamem\nfake.malloc(0, 2**20)")
    assert res.error_in_exec is None and res.error_before_exec is None
    rep = res.result
    assert is_na(rep.nvml_after) and rep.nvml_after.code == "error"
    assert (
        "process GPU memory (NVML): N/A (NVML process query failed: driver went away <mid-query>)"
        in repr(rep)
    )
    assert "driver went away &lt;mid-query&gt;" in rep._repr_html_()
    assert json.loads(rep.to_json())["nvml_after"]["code"] == "error"


#: what ``torch.cuda.memory_stats`` raises under an allocator plugged in with
# : ``torch.cuda.memory.change_current_allocator`` (RAPIDS RMM's;
# torch/csrc/cuda/CUDAPluggableAllocator.cpp)
PLUGGABLE = (
    "CUDAPluggableAllocator does not yet support getDeviceStats. If you need it, please file an "
    "issue "
    "describing your use case."
)


@pytest.fixture
def pluggable(fake, monkeypatch):
    import torch

    def refuse(device):
        fake.calls.append(("read", device))
        raise RuntimeError(PLUGGABLE)

    monkeypatch.setattr(torch._C, "_cuda_memoryStats", refuse, raising=False)
    return fake


def assert_no_stats(status):
    assert is_na(status) and status.code == "no_stats"
    assert status.reason == (
        f"PyTorch's CUDA allocator gives no statistics (RuntimeError: {PLUGGABLE}); an allocator "
        "set with torch.cuda.memory.change_current_allocator (such as RMM's) may keep none; "
        "CPU figures below"
    )


@pytest.mark.parametrize("initialised_by_the_cell", [False, True])
def test_allocator_without_statistics_runs_the_cell_and_keeps_cpu_figures(
    ip, pluggable, initialised_by_the_cell
):
    pluggable.init = not initialised_by_the_cell
    res = run(ip, "%%cudamem\nfake.malloc(0, 2**20)\nran = 'yes'")
    assert res.error_in_exec is None and ip.user_ns["ran"] == "yes"  # the user's cell ran
    rep = res.result
    assert rep.gpus == [] and rep.cuda_initialized
    assert_no_stats(rep.gpu_status)
    assert ("read", 0) in pluggable.calls  # it was asked, and said no
    text = repr(rep)
    assert (
        "GPU: N/A (PyTorch's CUDA allocator gives no statistics (RuntimeError: CUDAPluggable"
        in text
    )
    assert "CPU RSS:" in text and "Traceback" not in text
    assert json.loads(rep.to_json())["gpu_status"]["code"] == "no_stats"


def test_allocator_without_statistics_under_cudamem_on_and_free(ip, pluggable, capsys):
    run(ip, "%cudamem on --threshold 1")
    # 64 MiB, written (bytearray() would be calloc'ed, untouched pages): RSS grows whatever the heap
    # held before
    run(ip, "fake.malloc(0, 2**20)\nblock = b'x' * (64 * 2**20)")
    run(ip, "%cudamem off")
    out = capsys.readouterr()
    # a record and its line, CPU only
    assert "measurement failed" not in out.err
    (rec,) = ip.run_line_magic("cudamem", "history")[-1:]
    from cudamagic.core import platform

    fd = platform._statm["fd"]
    seen = (  # what the RSS figures came from, should they not move
        rec.rss_before_bytes,
        rec.rss_after_bytes,
        os.readlink(f"/proc/self/fd/{fd}") if fd is not None else None,
    )
    assert "[cudamem] In[" in out.out, seen
    assert rec.kind == "auto" and rec.gpus == [] and rec.rss_delta_bytes > 0, seen
    assert_no_stats(rec.gpu_status)
    rep = ip.run_line_magic("cudamem", "free")
    assert rep.empty_cache_called and rep.gpus == []
    assert_no_stats(rep.gpu_status)
    ip.user_ns.pop("block", None)
