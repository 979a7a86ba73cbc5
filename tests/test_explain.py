"""Issue 6: the CUDA / autograd error explainer.

Tier 1 (plain functions: message parsing, source analysis) and tier 2 (a real
InteractiveShell with cudamagic loaded: the cell really fails, the box is shown
below the traceback, its data names the cause, the fix and the user's own
variables).

For every catalogue entry there is a test. Where PyTorch produces the error on a
CPU-only machine the cell triggers the real error; otherwise the cell raises the
exact message PyTorch's source produces, and the test names that source.
"""

from __future__ import annotations

import re
import sys

import pytest

torch = pytest.importorskip("torch")

from cudamagic.explain import match as ex  # noqa: E402

SETUP = "import torch, torch.nn as nn, torch.nn.functional as F"
BOX = "cudamagic explains"
CUDA_SUFFIX = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
               "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
               "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def magics():
    from cudamagic import extension as m

    return m.current().magics["explain"]


def fail(ip, code):
    """Run ``code`` as a cell (it must fail); return the explanation shown (or None) and the result."""
    ip.run_cell(SETUP, store_history=True)
    result = ip.run_cell(code, store_history=True)
    assert result.error_in_exec is not None, "the cell was expected to fail"
    return magics().last_explanation, result


def notes(expl) -> str:
    return "\n".join(expl.context.notes)


# ------------------------------------------------------------------ tier 1: plain functions


def test_catalogue_is_data_with_at_least_20_complete_entries():
    assert len(ex.CATALOGUE) >= 20
    ids = [e.id for e in ex.CATALOGUE]
    assert len(ids) == len(set(ids))
    for e in ex.CATALOGUE:
        assert e.types and e.patterns and e.what and e.why and e.fix and e.source, e.id
        for pattern in e.patterns:
            re.compile(pattern)
    reports = {r for e in ex.CATALOGUE for r in e.reports}
    assert {"F17", "F19", "F20", "F21", "F22", "F23", "F24", "F25"} <= reports


NEW_OOM = ("CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total capacity of 14.57 GiB of which "
           "1.58 GiB is free. Process 2493055 has 12.02 GiB memory in use. Including non-PyTorch memory, this "
           "process has 966.00 MiB memory in use. Of the allocated memory 734.07 MiB is allocated by PyTorch, and "
           "33.93 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
           "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
           "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
OLD_OOM = ("CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB already "
           "allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch) If reserved memory is >> allocated "
           "memory try setting max_split_size_mb to avoid fragmentation.")


def test_parse_oom_current_and_old_formats():
    MiB, GiB = 1024 ** 2, 1024 ** 3
    new = ex.parse_oom(NEW_OOM)
    assert new["requested_bytes"] == round(1.95 * GiB)
    assert new["gpu"] == 0 and new["total_bytes"] == round(14.57 * GiB) and new["free_bytes"] == round(1.58 * GiB)
    assert new["allocated_bytes"] == round(734.07 * MiB)
    assert new["reserved_bytes"] == round(734.07 * MiB) + round(33.93 * MiB)
    assert new["process_bytes"] == round(966 * MiB)
    old = ex.parse_oom(OLD_OOM)
    assert old["requested_bytes"] == 36 * MiB and old["free_bytes"] == round(47.06 * MiB)
    assert old["reserved_bytes"] == 188 * MiB and old["allocated_bytes"] == round(130.35 * MiB)
    assert ex.parse_oom("CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 8.00 GiB "
                        "of which 0 bytes is free.")["free_bytes"] == 0


def test_decode_cuda_version():
    assert ex.decode_cuda_version(11040) == "11.4"
    assert ex.decode_cuda_version(12010) == "12.1"


def test_source_analysis_helpers():
    src = "for x in xs:\n    out, h = rnn(x, h)\n    total += out.sum()\n    h.sum().backward()\n"
    assert ex.carried_names(src) == ["h", "total"] or set(ex.carried_names(src)) == {"h", "total"}
    assert ("h.sum()", "h") in ex.backward_calls(src)
    uses = ex.inplace_uses("w.add_(1)\nx += 2\ny[0] = 3\nnn.init.normal_(v)\nz = z + 1\n")
    assert {u[0] for u in uses} == {"w", "x", "y", "v"}
    assert ex.backward_calls("%time loss.backward()\n") == []  # a magic line is not Python; no crash


def test_unmatched_exception_gives_none():
    assert ex.explain(ZeroDivisionError("division by zero")) is None
    assert ex.explain(RuntimeError("something unrelated")) is None


def test_chained_exception_is_explained():
    try:
        try:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        except RuntimeError as inner:
            raise ValueError("training step failed") from inner
    except ValueError as outer:
        assert ex.explain(outer).entry.id == "grad-not-scalar"


# ------------------------------------------------------------------ tier 2: every entry, in a real shell


def test_not_compiled_with_cuda_real(ip):
    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    expl, _ = fail(ip, "x = torch.zeros(2, device='cuda')")  # torch/cuda/__init__.py: _lazy_init
    assert expl.entry.id == "not-compiled-with-cuda"
    assert expl.context.facts["torch_cuda"] is None
    assert torch.__version__ in notes(expl)
    assert "Reinstall PyTorch with CUDA" in expl.text()


def test_driver_too_old_decodes_version(ip):
    # c10/cuda/CUDAFunctions.cpp: device_count_impl (exact text)
    msg = ("The NVIDIA driver on your system is too old (found version 11040). Please update your GPU driver by "
           "downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx "
           "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with "
           "your version of the CUDA driver.")
    expl, _ = fail(ip, f"raise RuntimeError({msg!r})")
    assert expl.entry.id == "driver-too-old"
    assert expl.context.facts["driver_cuda"] == "11.4"
    assert "CUDA up to 11.4" in notes(expl)
    assert "toolkit does not help" in expl.text()


def test_pin_cuda_tensor_names_the_loader(ip):
    # aten/src/ATen/native/Memory.cpp: _pin_memory -> "cannot pin '<type>' only dense CPU tensors can be pinned".
    # The dataset lives on the meta device here (no GPU); the context check is the same (not on the CPU).
    ip.run_cell(SETUP)
    ip.run_cell("from torch.utils.data import DataLoader, TensorDataset\n"
                "train_loader = DataLoader(TensorDataset(torch.zeros(8, 2, device='meta')), pin_memory=True)")
    expl, _ = fail(ip, "raise RuntimeError(\"cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be pinned\")")
    assert expl.entry.id == "pin-cuda-tensor"
    assert expl.context.facts["tensor_type"] == "torch.cuda.FloatTensor"
    assert "train_loader" in expl.context.facts["culprits"]
    assert "non_blocking=True" in expl.text()


def test_pin_memory_without_accelerator_real(ip):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    expl, _ = fail(ip, "x = torch.empty(3).pin_memory()")  # aten/src/ATen/DeviceAccelerator.cpp: getAccelerator
    assert expl.entry.id == "pin-no-accelerator"
    assert expl.context.facts["pin_calls"] == ["torch.empty(3).pin_memory()"]
    assert "torch.cuda.is_available()" in expl.text()


def test_error_801_names_workers(ip):
    # torch/csrc/generic/StorageSharing.cpp (pytorch#36037 text, Windows)
    ip.run_cell(SETUP)
    ip.run_cell("from torch.utils.data import DataLoader, TensorDataset\n"
                "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)")
    expl, _ = fail(ip, "raise RuntimeError('cuda runtime error (801) : operation not supported at "
                       "..\\\\torch/csrc/generic/StorageSharing.cpp:245')")
    assert expl.entry.id == "cuda-801-workers"
    assert expl.context.facts["loaders_with_workers"] == ["loader"]
    assert "num_workers=0" in expl.text()


def test_oom_reports_numbers_and_biggest_tensors(ip):
    # c10/cuda/CUDACachingAllocator.cpp: DeviceCachingAllocator::malloc raises torch.OutOfMemoryError
    ip.run_cell(SETUP)
    ip.run_cell("big_activations = torch.zeros(1024, 1024)\nsmall = torch.zeros(3)")
    expl, _ = fail(ip, f"def step():\n    local_batch = torch.zeros(512, 256)\n"
                       f"    raise torch.OutOfMemoryError({NEW_OOM!r})\nstep()")
    assert expl.entry.id == "cuda-oom" and expl.exc_type == "OutOfMemoryError"
    facts = expl.context.facts
    assert facts["requested_bytes"] == round(1.95 * 1024 ** 3) and "reserved_bytes" in facts
    assert facts["biggest"][:2] == ["big_activations", "local_batch"]
    text = expl.text()
    assert "2.0 GiB" in text and "1.6 GiB free of 14.6 GiB" in text
    has_cudamem = "cudamem" in ip.magics_manager.magics["line"]
    assert facts["mentions_cudamem_free"] == has_cudamem
    assert ("%cudamem free" in text) == has_cudamem
    assert ("%cudamem free --out" in text) == has_cudamem  # Out/_ are only released when named
    assert "saved traceback" in text


def test_backward_twice_loop_names_carried_tensor(ip):
    code = ("w = torch.randn(3, requires_grad=True)\nh = torch.zeros(3)\n"
            "for step in range(3):\n    h = torch.tanh(h * w + 1)\n    h.sum().backward()")
    expl, _ = fail(ip, code)
    assert expl.entry.id == "backward-twice"
    assert expl.context.facts["carried"] == "h"
    assert "h = h.detach()" in expl.context.fix
    assert "retain_graph=True" in expl.context.fix


def test_backward_twice_rerun_names_forward_cell(ip):
    ip.run_cell(SETUP, store_history=True)
    ip.run_cell("w = torch.randn(3, requires_grad=True)\nloss = (w.sigmoid() * 2).sum()", store_history=True)
    forward_cell = ip.execution_count - 1
    assert ip.run_cell("loss.backward()", store_history=True).error_in_exec is None
    result = ip.run_cell("loss.backward()", store_history=True)
    expl = magics().last_explanation
    assert result.error_in_exec is not None and expl.entry.id == "backward-twice"
    assert expl.context.facts["rerun_cell"] == forward_cell
    assert f"In[{forward_cell}]" in expl.context.fix


def test_no_grad_points_at_no_grad_block(ip):
    ip.run_cell(SETUP)
    ip.run_cell("model = nn.Linear(4, 1)\nx = torch.randn(8, 4)")
    expl, _ = fail(ip, "with torch.no_grad():\n    loss = model(x).pow(2).mean()\nloss.backward()")
    assert expl.entry.id == "no-grad"
    facts = expl.context.facts
    assert facts["tensor"] == "loss" and facts["requires_grad"] is False
    assert facts["params_total"] == 2 and facts["params_requiring_grad"] == 2
    assert any("no_grad" in s for s in facts["signs"])
    assert "`loss.requires_grad` is False" in notes(expl)


def test_no_grad_frozen_model(ip):
    ip.run_cell(SETUP)
    ip.run_cell("model = nn.Linear(4, 1).requires_grad_(False)")
    expl, _ = fail(ip, "out = model(torch.randn(2, 4)).sum()\nout.backward()")
    assert expl.entry.id == "no-grad"
    assert expl.context.facts["params_requiring_grad"] == 0
    assert "None of the 2 parameters" in notes(expl)


def test_grad_not_scalar_real(ip):
    expl, _ = fail(ip, "w = torch.randn(3, requires_grad=True)\npred = w * 2\npred.backward()")
    assert expl.entry.id == "grad-not-scalar"
    assert expl.context.facts == {"tensor": "pred", "shape": (3,)}
    assert "pred.mean().backward()" in expl.context.fix


def test_different_devices_real_meta(ip):
    # a real device mismatch on a CPU machine: cpu + meta (aten/src/ATen/TensorIterator.cpp)
    ip.run_cell(SETUP)
    ip.run_cell("a = torch.randn(3)\nb = torch.randn(3, device='meta')")
    expl, _ = fail(ip, "c = a + b")
    assert expl.entry.id == "different-devices"
    by_device = expl.context.facts["by_device"]
    assert "a" in by_device["cpu"] and "b" in by_device["meta"]


def test_different_devices_cuda_message(ip):
    # aten/src/ATen/core/op_registration/adaption.cpp: common_device_check_failure (exact text)
    expl, _ = fail(ip, "raise RuntimeError('Expected all tensors to be on the same device, but found at least two "
                       "devices, cuda:0 and cpu!')")
    assert expl.entry.id == "different-devices"
    assert expl.context.facts["devices"] == ["cpu", "cuda:0"]
    assert "model.to(device)" in expl.text()


def test_no_kernel_image(ip):
    # CUDA runtime cudaErrorNoKernelImageForDevice via c10/cuda/CUDAException.cpp: c10_cuda_check_implementation
    expl, _ = fail(ip, f"raise torch.AcceleratorError({('CUDA error: no kernel image is available for execution on the device' + CUDA_SUFFIX)!r})")
    assert expl.entry.id == "no-kernel-image"
    assert expl.context.facts["arch_list"] == torch.cuda.get_arch_list()
    assert "get_arch_list" in expl.text()


def test_device_side_assert_explains_launch_blocking(ip):
    # c10/cuda/CUDAException.cpp: c10_cuda_check_implementation (cudaErrorAssert)
    ip.run_cell(SETUP)
    ip.run_cell("labels = torch.tensor([0, 3, 10])")
    expl, _ = fail(ip, f"raise torch.AcceleratorError({('CUDA error: device-side assert triggered' + CUDA_SUFFIX)!r})")
    assert expl.entry.id == "device-side-assert"
    assert expl.context.facts["int_tensors"]["labels"] == (0, 10)
    text = expl.text()
    assert "CUDA_LAUNCH_BLOCKING=1" in text and "waits for completion" in text
    assert "Restart the kernel" in text


def test_index_out_of_range_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("logits = torch.randn(3, 4)\ntargets = torch.tensor([0, 1, 7])")
    expl, _ = fail(ip, "loss = F.cross_entropy(logits, targets)")  # aten/src/ATen/native/LossNLL.cpp
    assert expl.entry.id == "index-out-of-range"
    assert expl.context.facts["target"] == 7
    assert expl.context.facts["int_tensors"]["targets"] == (0, 7)


def test_embedding_index_out_of_range_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("emb = nn.Embedding(5, 2)")
    expl, _ = fail(ip, "emb(torch.tensor([7]))")
    assert expl.entry.id == "index-out-of-range"
    assert "Embedding(5" in notes(expl)


def test_invalid_device_ordinal(ip):
    # CUDA runtime cudaErrorInvalidDevice via C10_CUDA_CHECK (exact text)
    msg = "CUDA error: invalid device ordinal" + CUDA_SUFFIX
    expl, _ = fail(ip, f"dev = torch.device('cuda:3')\nraise torch.AcceleratorError({msg!r})")
    assert expl.entry.id == "invalid-device-ordinal"
    assert expl.context.facts["asked"] == [3]
    assert expl.context.facts["device_count"] == torch.cuda.device_count()


def test_cublas_not_initialized(ip):
    # aten/src/ATen/cuda/CublasHandlePool.cpp: getCurrentCUDABlasHandle -> TORCH_CUDABLAS_CHECK(cublasCreate)
    ip.run_cell(SETUP)
    ip.run_cell("weights = torch.zeros(256, 256)")
    expl, _ = fail(ip, "raise RuntimeError('CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
                       "`cublasCreate(handle)`')")
    assert expl.entry.id == "cublas-cudnn-init"
    assert "memory" in expl.entry.why
    assert torch.cuda.is_initialized() or "free_bytes" not in expl.context.facts  # no CUDA context created


def test_leaf_inplace_real(ip):
    expl, _ = fail(ip, "w = torch.randn(3, requires_grad=True)\nw.add_(1)")
    assert expl.entry.id == "leaf-inplace"
    assert expl.context.facts["tensor"] == "w"
    assert "torch.no_grad()" in expl.context.fix


def test_modified_inplace_real(ip):
    code = "w = torch.randn(3, requires_grad=True)\nact = w.sigmoid()\nact.mul_(2)\nact.sum().backward()"
    expl, _ = fail(ip, code)
    assert expl.entry.id == "modified-inplace"
    facts = expl.context.facts
    assert facts["op"] in ("Sigmoid", "SigmoidBackward0")  # the name differs across torch releases
    assert facts["tensor_type"] == "torch.FloatTensor"
    assert facts["shape"] == (3,) and "act" in facts["suspects"]
    assert "act = act * 2" in expl.context.fix


def test_matmul_shapes_names_module_and_input(ip):
    ip.run_cell(SETUP)
    ip.run_cell("model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())\nbatch = torch.randn(2, 5)")
    expl, _ = fail(ip, "out = model(batch)")  # aten/src/ATen/native/LinearAlgebra.cpp: addmm
    assert expl.entry.id == "matmul-shapes"
    facts = expl.context.facts
    assert facts["left"] == (2, 5) and facts["right"] == (4, 3)
    assert facts["module"] == "model.0" and facts["input"] == "batch"
    assert "nn.Linear(5, 3)" in expl.context.fix


def test_dtype_mismatch_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("import numpy as np\nmodel = nn.Linear(4, 3)\nfeatures = torch.from_numpy(np.ones((2, 4)))")
    expl, _ = fail(ip, "model(features)")
    assert expl.entry.id == "dtype-mismatch"
    assert expl.context.facts["float64"] == ["features"]
    assert expl.context.facts["model_dtype"]["model"] == "float32"
    assert "features = features.float()" in expl.context.fix


def test_conv_dtype_mismatch_real(ip):
    expl, _ = fail(ip, "nn.Conv2d(1, 2, 3)(torch.randn(1, 1, 5, 5).double())")
    assert expl.entry.id == "dtype-mismatch"


def test_long_targets_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("logits = torch.randn(3, 4)\ny = torch.tensor([0., 1., 2.])")
    expl, _ = fail(ip, "F.cross_entropy(logits, y)")  # aten/src/ATen/native/LossNLL.cpp
    assert expl.entry.id == "target-dtype-long"
    assert expl.context.facts["targets"] == ["y"] and "y = y.long()" in expl.context.fix


def test_float_targets_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("probs = torch.rand(3)\ntarget = torch.tensor([0, 1, 1])")
    expl, _ = fail(ip, "F.binary_cross_entropy(probs, target)")
    assert expl.entry.id == "target-dtype-float"
    assert "target" in expl.context.facts["targets"]


def test_fork_reinit(ip):
    # torch/cuda/__init__.py: _lazy_init (exact text)
    expl, _ = fail(ip, "raise RuntimeError(\"Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
                       "multiprocessing, you must use the 'spawn' start method\")")
    assert expl.entry.id == "cuda-fork"
    assert "start_method" in expl.context.facts
    assert "multiprocessing_context='spawn'" in expl.text()


def test_dataloader_bus_error(ip):
    # torch/csrc/DataLoader.cpp: _error_if_any_worker_fails (exact text for SIGBUS)
    ip.run_cell(SETUP)
    ip.run_cell("from torch.utils.data import DataLoader, TensorDataset\n"
                "dl = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)")
    expl, _ = fail(ip, "raise RuntimeError(\"DataLoader worker (pid 4242) is killed by signal: Bus error. It is "
                       "possible that dataloader's workers are out of shared memory. Please try to raise your "
                       "shared memory limit.\")")
    assert expl.entry.id == "dataloader-shm"
    assert expl.context.facts["loaders_with_workers"] == ["dl"]
    assert "--shm-size" in expl.text()
    if sys.platform.startswith("linux"):
        assert expl.context.facts["shm_total_bytes"] > 0


def test_numpy_conversion_real(ip):
    expl, _ = fail(ip, "w = torch.randn(3, requires_grad=True)\nw.numpy()")
    assert expl.entry.id == "numpy-conversion"
    assert "detach().cpu().numpy()" in expl.text()
    expl, _ = fail(ip, "torch.randn(3, device='meta').numpy()")
    assert expl.entry.id == "numpy-conversion"


def test_broadcast_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("pred = torch.randn(3)\ntruth = torch.randn(4)")
    expl, _ = fail(ip, "pred - truth")
    assert expl.entry.id == "broadcast-size"
    assert expl.context.facts["sizes"] == (3, 4)
    assert "`pred` [3]" in notes(expl) and "`truth` [4]" in notes(expl)


def test_batchnorm_one_sample_real(ip):
    expl, _ = fail(ip, "nn.BatchNorm1d(3)(torch.randn(1, 3))")
    assert expl.entry.id == "batchnorm-one-sample"
    assert "drop_last=True" in expl.text()


def test_cuda_program_no_driver():
    from cudamagic.cuda.errors import CudaProgramError

    exc = CudaProgramError("the program exited with status 0 but left a CUDA error: CUDA error: "
                           "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime")
    expl = ex.explain(exc, None)
    assert expl.entry.id == "cuda-program-no-driver"
    assert ex.explain(RuntimeError("CUDA driver version is insufficient for CUDA runtime version"),
                      None).entry.id == "driver-too-old"  # PyTorch's own error keeps its entry


def test_every_entry_has_a_test():
    tested = set(re.findall(r'entry\.id == "([\w-]+)"', open(__file__).read()))
    assert {e.id for e in ex.CATALOGUE} <= tested


def test_pin_note_prefers_the_failing_line(ip):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    expl, _ = fail(ip, "if False:\n    y = torch.zeros(2).pin_memory()\nelse:\n    batch = torch.ones(4).pin_memory()")
    assert expl.context.facts["pin_calls"] == ["torch.ones(4).pin_memory()"]


# ------------------------------------------------------------------ context names what is on the failing line
# (review of issue 6: a variable that merely exists in the namespace must not be named as the cause)


def test_long_targets_name_the_argument_not_a_namespace_guess(ip):
    ip.run_cell(SETUP)
    ip.run_cell("logits = torch.randn(4, 5)\ny = torch.randn(4).sum().detach()\ntarget = torch.tensor([0., 1, 2, 3])")
    expl, _ = fail(ip, "F.nll_loss(logits, target)")  # aten/src/ATen/native/LossNLL.cpp
    assert expl.entry.id == "target-dtype-long"
    assert expl.context.facts["targets"] == ["target"]
    assert "target = target.long()" in expl.context.fix and "`y`" not in notes(expl)
    # a target that is an expression: no variable is blamed, the expression is quoted
    expl, _ = fail(ip, "crit = nn.CrossEntropyLoss()\ncrit(logits, torch.tensor([0.5, 1., 2., 3.]))")
    assert expl.context.facts["targets"] == [] and "`y`" not in notes(expl)
    assert expl.context.facts["expressions"] == ["torch.tensor([0.5, 1.0, 2.0, 3.0])"]


def test_embedding_float_indices_names_the_indices(ip):
    ip.run_cell(SETUP)
    ip.run_cell("emb = nn.Embedding(10, 3)\nlabels = torch.tensor([1., 2.])\nids = torch.tensor([1., 2.])")
    expl, _ = fail(ip, "emb(ids)")  # aten/src/ATen/native/Embedding.cpp: checkScalarTypes
    assert expl.entry.id == "target-dtype-long"
    assert expl.context.facts["targets"] == ["ids"] and "ids = ids.long()" in expl.context.fix


def test_float_targets_name_only_the_argument(ip):
    ip.run_cell(SETUP)
    ip.run_cell("probs = torch.rand(3)\nsteps = torch.tensor([7, 8])\nlab = torch.tensor([0, 1, 1])")
    expl, _ = fail(ip, "F.binary_cross_entropy(probs, lab)")
    assert expl.entry.id == "target-dtype-float"
    assert expl.context.facts["targets"] == ["lab"] and "steps" not in notes(expl)


def test_result_type_cast_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("scores = torch.randn(4)\nlab = torch.tensor([1, 0, 1, 0])")
    # aten/src/ATen/TensorIterator.cpp: compute_types (BCEWithLogits computes in the target's dtype)
    expl, _ = fail(ip, "nn.BCEWithLogitsLoss()(scores, lab)")
    assert expl.entry.id == "result-type-cast"
    assert expl.context.facts["targets"] == ["lab"] and "lab = lab.float()" in expl.context.fix
    expl, _ = fail(ip, "counts = torch.zeros(3, dtype=torch.long)\ncounts += torch.rand(3)")
    assert expl.entry.id == "result-type-cast" and expl.context.facts["inplace"] == ["counts"]


def test_dtype_mismatch_plain_matmul_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("import numpy as np\nunrelated = torch.zeros(2, dtype=torch.float64)\n"
                "a = torch.randn(2, 3)\nb = torch.from_numpy(np.ones((3, 2)))")
    expl, _ = fail(ip, "a @ b")  # LinearAlgebra.cpp: "expected m1 and m2 to have the same dtype"
    assert expl.entry.id == "dtype-mismatch"
    assert expl.context.facts["float64"] == ["b"] and "unrelated" not in notes(expl)
    assert expl.context.facts["tensor_dtype"] == {"a": "float32", "b": "float64"}
    assert "b = b.float()" in expl.context.fix
    expl, _ = fail(ip, "torch.mv(a, torch.ones(3, dtype=torch.float64))")  # addmv
    assert expl.entry.id == "dtype-mismatch"


def test_no_grad_counts_only_the_models_involved(ip):
    ip.run_cell(SETUP)
    ip.run_cell("other = nn.Linear(3, 3)\np = nn.Linear(3, 1).requires_grad_(False)\nx = torch.randn(2, 3)")
    expl, _ = fail(ip, "p(x).sum().backward()")
    assert expl.entry.id == "no-grad"
    assert expl.context.facts["models"] == {"p": (2, 0)}
    assert "None of the 2 parameters of `p`" in notes(expl) and "other" not in notes(expl)


def test_no_grad_does_not_blame_an_unrelated_model(ip):
    ip.run_cell(SETUP)
    ip.run_cell("lin = nn.Linear(3, 1)")
    expl, _ = fail(ip, "def f():\n    h = torch.zeros(2)\n    h.sum().backward()\nf()")
    assert expl.entry.id == "no-grad" and expl.context.facts["tensor"] == "h"
    assert expl.context.facts["models"] == {} and "lin" not in notes(expl)
    assert "`h` is a leaf" in notes(expl)


def test_no_grad_names_the_cell_that_computed_the_loss(ip):
    ip.run_cell(SETUP, store_history=True)
    ip.run_cell("model = nn.Linear(4, 1)\nx = torch.randn(8, 4)", store_history=True)
    ip.run_cell("with torch.no_grad():\n    loss = model(x).mean()", store_history=True)
    forward_cell = ip.execution_count - 1
    ip.run_cell("stale = torch.ones(1).detach()", store_history=True)
    expl, _ = fail(ip, "loss.backward()")
    assert expl.context.facts["assigned_in"] == forward_cell
    assert expl.context.facts["signs"] == ["a `with torch.no_grad():` block"]  # not the later `.detach()`
    assert "if `loss` comes from `model`" in notes(expl)


def test_broadcast_lists_only_tensors_on_the_failing_line(ip):
    ip.run_cell(SETUP)
    ip.run_cell("x = torch.randn(5, 4)\nhidden = torch.zeros(1, 3)")
    expl, _ = fail(ip, "torch.randn(3) + torch.randn(4)")
    assert expl.entry.id == "broadcast-size"
    assert expl.context.facts["tensors"] == [] and "`x`" not in notes(expl) and "hidden" not in notes(expl)


def test_matmul_names_both_operands_and_uses_the_input_name(ip):
    ip.run_cell(SETUP)
    ip.run_cell("decoy = torch.randn(2, 3)\nleft = torch.randn(2, 3)\nright = torch.randn(4, 5)")
    expl, _ = fail(ip, "left @ right")
    assert expl.entry.id == "matmul-shapes"
    assert expl.context.facts["input"] == "left" and expl.context.facts["right_name"] == "right"
    ip.run_cell("lin = nn.Linear(7, 2)\nbig = torch.randn(3, 9)")
    expl, _ = fail(ip, "lin(big)")
    assert "big.view(big.size(0), -1)" in expl.context.fix


def test_index_out_of_range_uses_the_failing_line(ip):
    ip.run_cell(SETUP)
    ip.run_cell("steps = torch.arange(100)\nlogits = torch.randn(2, 3)\nlabels = torch.tensor([0, 5])")
    expl, _ = fail(ip, "F.nll_loss(logits, labels)")  # LossNLL.cpp: "Target 5 is out of bounds."
    assert expl.entry.id == "index-out-of-range"
    assert expl.context.facts["int_tensors"] == {"labels": (0, 5)}
    assert expl.context.facts["classes"] == {"logits": 3} and "steps" not in notes(expl)


def test_interrupt_while_handling_a_known_error_gets_no_box(ip):
    expl, result = fail(ip, "try:\n    torch.randn(2, 3) @ torch.randn(4, 5)\nexcept RuntimeError:\n"
                            "    raise KeyboardInterrupt")
    assert isinstance(result.error_in_exec, KeyboardInterrupt) and expl is None
    try:
        try:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        except RuntimeError:
            raise SystemExit(1)
    except SystemExit as exc:
        assert ex.explain(exc) is None


def test_failing_line_helpers():
    assert ex._line_names("for xb, yb in loader:") == ["xb", "yb", "loader"]
    assert ex._line_names("loss = crit(model(x),") == ["loss", "crit", "model", "x"]
    assert ex.call_arguments("loss = crit(model(x), y)")[0] == ("crit", ["model(x)", "y"], {})
