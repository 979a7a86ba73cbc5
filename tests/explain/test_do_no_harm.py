"""Issue 12, do no harm: the explainer and ``%%cudamem`` never force a synchronisation, never create a CUDA
context and never reset the user's counters unless asked.

The calls that would do harm are replaced by recorders on the real ``torch.cuda`` module (``init``,
``_lazy_init``, ``synchronize``, ``current_device``, ``set_device``, ``mem_get_info``, ``empty_cache`` and the
``reset_*`` counters); every failing cell of the explainer's families and every form of ``%%cudamem`` then runs in
a real InteractiveShell, once with CUDA not initialised (this machine) and once with CUDA "initialised" (the
allocator-statistics reads answered by stand-ins, as on a GPU machine where the user has used CUDA).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cudamagic.explain import cudaerrors  # noqa: E402
from cudamagic.explain.cuda_runtime_errors import RUNTIME_ERRORS  # noqa: E402

from .autograd_cases import CASES  # noqa: E402
from .failing import CUDA_SUFFIX, NEW_OOM, fail  # noqa: E402
from .test_autograd_engine import E08, E09  # noqa: E402

HARMFUL = ("init", "_lazy_init", "synchronize", "current_device", "set_device", "mem_get_info", "empty_cache",
           "reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
           "reset_max_memory_cached", "ipc_collect")


@pytest.fixture
def recorder(monkeypatch):
    """Replace the harmful ``torch.cuda`` calls by recorders; returns the list of calls made."""
    calls = []
    for name in HARMFUL:
        if hasattr(torch.cuda, name):
            def record(*args, _name=name, **kwargs):
                calls.append((_name, args, kwargs))
            monkeypatch.setattr(torch.cuda, name, record)
    return calls


@pytest.fixture
def cuda_initialised(monkeypatch):
    """CUDA looks initialised with one GPU: the reads a GPU machine answers are answered by stand-ins."""
    reads = []
    stats = {"allocated_bytes": {"all": {"current": 3 << 20, "peak": 5 << 20, "allocated": 9 << 20}},
             "reserved_bytes": {"all": {"current": 8 << 20, "peak": 8 << 20}}, "num_alloc_retries": 0,
             "num_ooms": 0}

    def read(name, value):
        def f(*args, **kwargs):
            reads.append((name, args))
            return value
        return f

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", read("device_count", 1))
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", read("memory_stats_as_nested_dict", stats))
    monkeypatch.setattr(torch.cuda, "memory_allocated", read("memory_allocated", 3 << 20))
    monkeypatch.setattr(torch.cuda, "memory_reserved", read("memory_reserved", 8 << 20))
    monkeypatch.setattr(torch.cuda, "get_device_capability", read("get_device_capability", (9, 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", read("get_device_name", "NVIDIA H100"))
    monkeypatch.setattr(torch.cuda, "get_arch_list", read("get_arch_list", ["sm_80", "sm_90"]))
    return reads


def _runtime(name):
    code, name, text = next(r for r in RUNTIME_ERRORS if r[1] == name)
    return f"raise torch.AcceleratorError({cudaerrors.runtime_message(name, text)!r})"


#: One failing cell per context function of the CUDA side, plus the field cases.
CUDA_CELLS = (
    [(fid, next(f"import torch.distributed\nraise {k}({m!r})" for fam, kind, m, _ in cudaerrors.messages()
                for k in [{"AcceleratorError": "torch.AcceleratorError", "RuntimeError": "RuntimeError",
                           "DistBackendError": "torch.distributed.DistBackendError"}[kind]] if fam == fid))
     for fid in cudaerrors.FAMILIES]
    + [("cuda-oom", f"raise torch.OutOfMemoryError({NEW_OOM!r})"),
       ("cublas-cudnn-init", "raise RuntimeError('CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
                             "`cublasCreate(handle)`')"),
       ("no-kernel-image", f"raise RuntimeError({'CUDA error: no kernel image is available for execution on the device' + CUDA_SUFFIX!r})"),
       ("invalid-device-ordinal", _runtime("cudaErrorInvalidDevice")),
       ("device-side-assert", _runtime("cudaErrorAssert")),
       ("cuda-async", "emb = torch.nn.Embedding(10, 2)\ntokens = torch.tensor([1, 12])\n"
                      "raise RuntimeError('CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm(h)`')")]
)
AUTOGRAD_CELLS = [(i, c) for i, c in CASES] + [("invalid-gradient", E08), ("modified-inplace", E09)]


def _explain_all(ip, cells):
    ip.run_cell("import torch, torch.nn as nn")
    shown = []
    for entry_id, code in cells:
        expl, _ = fail(ip, code)
        shown.append((entry_id, expl.entry.id if expl else None))
        ip.run_line_magic("cudaexplain", "")  # the magic too
    return shown


def test_explainer_makes_no_harmful_cuda_call_without_cuda(ip, recorder):
    assert not torch.cuda.is_initialized()
    shown = _explain_all(ip, CUDA_CELLS + AUTOGRAD_CELLS)
    assert all(got is not None for _, got in shown)
    assert recorder == []
    assert not torch.cuda.is_initialized()


def test_explainer_makes_no_harmful_cuda_call_with_cuda_initialised(ip, recorder, cuda_initialised):
    shown = _explain_all(ip, CUDA_CELLS + AUTOGRAD_CELLS)
    assert all(got is not None for _, got in shown)
    assert recorder == []
    # it did read the allocator counters and device properties, each by explicit ordinal
    names = {name for name, _ in cuda_initialised}
    assert {"memory_allocated", "get_device_capability"} <= names
    assert all(args == (0,) for name, args in cuda_initialised if name in ("memory_allocated", "get_device_capability"))


def test_explainer_leaves_user_objects_unchanged(ip):
    """Context is read from the live objects without changing them: versions, values, grads, RNG."""
    ip.run_cell("import torch, torch.nn as nn\ntorch.manual_seed(0)")
    fail(ip, E09)
    ns = ip.user_ns
    before = {n: (p._version, p.detach().clone(), None if p.grad is None else p.grad.clone())
              for n, p in ns["netD"].named_parameters()}
    rng = torch.get_rng_state()
    ip.run_line_magic("cudaexplain", "")
    for n, p in ns["netD"].named_parameters():
        version, value, grad = before[n]
        assert p._version == version and torch.equal(p, value)
        assert (grad is None and p.grad is None) or torch.equal(grad, p.grad)
    assert torch.equal(rng, torch.get_rng_state())


def test_cudamem_makes_no_harmful_cuda_call_without_cuda(ip, recorder):
    ip.run_cell_magic("cudamem", "", "import torch\nx = torch.ones(1000)")
    ip.run_line_magic("cudamem", "on")
    ip.run_cell("y = torch.ones(100)")
    ip.run_line_magic("cudamem", "off")
    ip.run_line_magic("cudamem", "history")
    assert recorder == []
    assert not torch.cuda.is_initialized()


def test_cudamem_resets_counters_only_when_asked(ip, recorder, cuda_initialised):
    report = ip.run_cell_magic("cudamem", "", "import torch\nx = torch.ones(1000)")
    assert report is not None
    ip.run_line_magic("cudamem", "on")
    ip.run_cell("y = torch.ones(100)")
    ip.run_line_magic("cudamem", "off")
    assert recorder == []  # measured without a reset, a sync or a context
    assert ("memory_stats_as_nested_dict", (0,)) in cuda_initialised
    ip.run_cell_magic("cudamem", "--reset-peak", "z = torch.ones(10)")
    assert [name for name, *_ in recorder] == ["reset_peak_memory_stats"]  # asked for: exactly that, once
    assert recorder[0][1] == (0,)
