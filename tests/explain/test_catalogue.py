"""The catalogue of the CUDA / autograd error explainer (:mod:`cudamagic.explain.catalogue`).

Tier 1: the catalogue is complete data. Tier 2 (a real InteractiveShell with cudamagic
loaded): for each entry the cell really fails, the box is shown below the traceback, its
data names the cause, the fix and the user's own variables.

For every catalogue entry there is a test. Where PyTorch produces the error on a
CPU-only machine the cell triggers the real error; otherwise the cell raises the
exact message PyTorch's source produces, and the test names that source.
"""

from __future__ import annotations

import glob
import os
import re
import sys

import pytest
import torch

from cudamagic.explain.catalogue import CATALOGUE

from .failing import CUDA_SUFFIX, NEW_OOM, SETUP, fail, magics, notes


def test_catalogue_is_data_with_at_least_20_complete_entries():
    assert len(CATALOGUE) >= 20
    ids = [e.id for e in CATALOGUE]
    assert len(ids) == len(set(ids))
    for e in CATALOGUE:
        assert e.types and e.patterns and e.what and e.why and e.fix and e.source, e.id
        for pattern in e.patterns:
            re.compile(pattern)


def test_not_compiled_with_cuda_real(ip):
    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    expl, _ = fail(ip, "x = torch.zeros(2, device='cuda')")  # torch/cuda/__init__.py: _lazy_init
    assert expl.entry.id == "not-compiled-with-cuda"
    assert expl.context.facts["torch_cuda"] is None
    assert torch.__version__ in notes(expl)
    assert "reinstall PyTorch with CUDA" in expl.to_text()


def test_driver_too_old_decodes_version(ip):
    # c10/cuda/CUDAFunctions.cpp: device_count_impl (exact text)
    msg = (
        "The NVIDIA driver on your system is too old (found version 11040). Please update your GPU "
        "driver by "
        "downloading and installing a new version from the URL: "
        "http://www.nvidia.com/Download/index.aspx "
        "Alternatively, go to: https://pytorch.org to install a PyTorch version that has been "
        "compiled with "
        "your version of the CUDA driver."
    )
    expl, _ = fail(ip, f"raise RuntimeError({msg!r})")
    assert expl.entry.id == "driver-too-old"
    assert expl.context.facts["driver_cuda"] == "11.4"
    assert "CUDA up to 11.4" in notes(expl)
    assert "toolkit does not help" in expl.to_text()


def test_pin_cuda_tensor_names_the_loader(ip):
    # aten/src/ATen/native/Memory.cpp: _pin_memory -> "cannot pin '<type>' only dense CPU tensors
    # can be pinned". The dataset lives on the meta device here (no GPU); the context check is the
    # same (not on the CPU).
    ip.run_cell(SETUP)
    ip.run_cell(
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "train_loader = DataLoader(TensorDataset(torch.zeros(8, 2, device='meta')), "
        "pin_memory=True)"
    )
    expl, _ = fail(
        ip,
        "raise RuntimeError(\"cannot pin 'torch.cuda.FloatTensor' only dense CPU tensors can be "
        'pinned")',
    )
    assert expl.entry.id == "pin-cuda-tensor"
    assert expl.context.facts["tensor_type"] == "torch.cuda.FloatTensor"
    assert "train_loader" in expl.context.facts["culprits"]
    assert "non_blocking=True" in expl.to_text()


def test_pin_memory_without_accelerator_real(ip):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    expl, _ = fail(
        ip, "x = torch.empty(3).pin_memory()"
    )  # aten/src/ATen/DeviceAccelerator.cpp: getAccelerator
    assert expl.entry.id == "pin-no-accelerator"
    assert expl.context.facts["pin_calls"] == ["torch.empty(3).pin_memory()"]
    assert "torch.cuda.is_available()" in expl.to_text()


def test_error_801_names_workers(ip):
    # torch/csrc/generic/StorageSharing.cpp (pytorch#36037 text, Windows)
    ip.run_cell(SETUP)
    ip.run_cell(
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)"
    )
    expl, _ = fail(
        ip,
        "raise RuntimeError('cuda runtime error (801) : operation not supported at "
        "..\\\\torch/csrc/generic/StorageSharing.cpp:245')",
    )
    assert expl.entry.id == "cuda-801-workers"
    assert expl.context.facts["loaders_with_workers"] == ["loader"]
    assert "num_workers=0" in expl.to_text()


def test_oom_reports_numbers_and_biggest_tensors(ip):
    # c10/cuda/CUDACachingAllocator.cpp: DeviceCachingAllocator::malloc raises
    # torch.OutOfMemoryError
    ip.run_cell(SETUP)
    ip.run_cell("big_activations = torch.zeros(1024, 1024)\nsmall = torch.zeros(3)")
    expl, _ = fail(
        ip,
        f"def step():\n    local_batch = torch.zeros(512, 256)\n"
        f"    raise torch.OutOfMemoryError({NEW_OOM!r})\nstep()",
    )
    assert expl.entry.id == "cuda-oom" and expl.exc_type == "OutOfMemoryError"
    facts = expl.context.facts
    assert facts["requested_bytes"] == round(1.95 * 1024**3) and "reserved_bytes" in facts
    assert facts["biggest"][:2] == ["big_activations", "local_batch"]
    text = expl.to_text()
    assert "2.0 GiB" in text and "1.6 GiB free of 14.6 GiB" in text
    has_cudamem = "cudamem" in ip.magics_manager.magics["line"]
    assert facts["mentions_cudamem_free"] == has_cudamem
    assert ("%cudamem free" in text) == has_cudamem
    assert ("%cudamem free --out" in text) == has_cudamem  # Out/_ are only released when named
    assert "saved traceback" in text


def test_backward_twice_loop_names_carried_tensor(ip):
    code = (
        "w = torch.randn(3, requires_grad=True)\nh = torch.zeros(3)\n"
        "for step in range(3):\n    h = torch.tanh(h * w + 1)\n    h.sum().backward()"
    )
    expl, _ = fail(ip, code)
    assert expl.entry.id == "backward-twice"
    assert expl.context.facts["carried"] == "h"
    assert "h = h.detach()" in expl.context.fix
    assert "retain_graph=True" in expl.context.fix


def test_backward_twice_rerun_names_forward_cell(ip):
    ip.run_cell(SETUP, store_history=True)
    ip.run_cell(
        "w = torch.randn(3, requires_grad=True)\nloss = (w.sigmoid() * 2).sum()", store_history=True
    )
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
    expl, _ = fail(
        ip,
        "raise RuntimeError('Expected all tensors to be on the same device, but found at least two "
        "devices, cuda:0 and cpu!')",
    )
    assert expl.entry.id == "different-devices"
    assert expl.context.facts["devices"] == ["cpu", "cuda:0"]
    assert "model.to(device)" in expl.to_text()


# aten/src/ATen/native/Convolution.cpp, check_input_same_type_as_parameters:
#   "Input type (" << input.toString() << ") and weight type (" << weight.toString()
#   << ") should be the same"; the MKLDNN variant adds " or input should be a MKLDNN tensor and
#   weight is a dense tensor". torch/csrc/Exceptions.cpp (processErrorMsg) turns the C++ type names
#   (CUDAFloatType, CPUFloatType) into torch.cuda.FloatTensor and torch.FloatTensor.
_MKLDNN = " or input should be a MKLDNN tensor and weight is a dense tensor"


def test_input_and_weight_type_real_message_on_cpu(ip):
    """The real message, produced on the CPU: a float32 input to a float64 convolution."""
    ip.run_cell(SETUP)
    ip.run_cell("conv = nn.Conv2d(3, 8, 3, bias=False).double()\nx = torch.randn(2, 3, 32, 32)")
    expl, result = fail(ip, "y = conv(x)")
    message = str(result.error_in_exec)
    assert message == (
        "Input type (torch.FloatTensor) and weight type (torch.DoubleTensor) should be the same"
        + _MKLDNN
    )
    assert expl.entry.id == "dtype-mismatch"  # one device, two dtypes: not a device mismatch


@pytest.mark.parametrize("suffix", ["", _MKLDNN])
@pytest.mark.parametrize(
    "input_type, weight_type",
    [
        ("torch.FloatTensor", "torch.cuda.FloatTensor"),
        ("torch.cuda.FloatTensor", "torch.FloatTensor"),
        ("torch.cuda.HalfTensor", "torch.HalfTensor"),
    ],
)
def test_input_and_weight_type_on_two_devices(ip, input_type, weight_type, suffix):
    """The same message with a CUDA and a CPU tensor is the different-devices entry."""
    message = f"Input type ({input_type}) and weight type ({weight_type}) should be the same"
    expl, _ = fail(ip, f"raise RuntimeError({message + suffix!r})")
    assert expl.entry.id == "different-devices"
    assert "model.to(device)" in expl.to_text()


def test_no_kernel_image(ip, monkeypatch):
    # CUDA runtime cudaErrorNoKernelImageForDevice via c10/cuda/CUDAException.cpp:
    # c10_cuda_check_implementation
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_50", "sm_60"])
    msg = "CUDA error: no kernel image is available for execution on the device" + CUDA_SUFFIX
    expl, _ = fail(ip, f"raise torch.AcceleratorError({msg!r})")
    assert expl.entry.id == "no-kernel-image"
    assert expl.context.facts["arch_list"] == ["sm_50", "sm_60"]
    assert "contains kernels for: sm_50, sm_60." in notes(expl)
    assert "get_arch_list" in expl.to_text()


def test_device_side_assert_explains_launch_blocking(ip):
    # c10/cuda/CUDAException.cpp: c10_cuda_check_implementation (cudaErrorAssert)
    ip.run_cell(SETUP)
    ip.run_cell("labels = torch.tensor([0, 3, 10])")
    expl, _ = fail(
        ip,
        f"raise "
        f"torch.AcceleratorError({('CUDA error: device-side assert triggered' + CUDA_SUFFIX)!r})",
    )
    assert expl.entry.id == "device-side-assert"
    assert expl.context.facts["int_tensors"]["labels"] == (0, 10)
    text = expl.to_text()
    assert "CUDA_LAUNCH_BLOCKING=1" in text and "waits for completion" in text
    assert "Restart the kernel" in text


def test_index_out_of_range_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("logits = torch.randn(3, 4)\ntargets = torch.tensor([0, 1, 7])")
    expl, _ = fail(
        ip, "loss = F.cross_entropy(logits, targets)"
    )  # aten/src/ATen/native/LossNLL.cpp
    assert expl.entry.id == "index-out-of-range"
    assert expl.context.facts["target"] == 7
    assert expl.context.facts["int_tensors"]["targets"] == (0, 7)


def test_embedding_index_out_of_range_real(ip):
    ip.run_cell(SETUP)
    ip.run_cell("emb = nn.Embedding(5, 2)")
    expl, _ = fail(ip, "emb(torch.tensor([7]))")
    assert expl.entry.id == "index-out-of-range"
    assert "Embedding(5" in notes(expl)


def test_invalid_device_ordinal(ip, monkeypatch):
    # CUDA runtime cudaErrorInvalidDevice via C10_CUDA_CHECK (exact text)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    msg = "CUDA error: invalid device ordinal" + CUDA_SUFFIX
    expl, _ = fail(ip, f"dev = torch.device('cuda:3')\nraise torch.AcceleratorError({msg!r})")
    assert expl.entry.id == "invalid-device-ordinal"
    assert expl.context.facts["asked"] == [3]
    assert expl.context.facts["device_count"] == 2
    assert "sees 2 GPU(s); valid devices: cuda:0 .. cuda:1." in notes(expl)


def test_cublas_not_initialized(ip):
    # aten/src/ATen/cuda/CublasHandlePool.cpp: getCurrentCUDABlasHandle ->
    # TORCH_CUDABLAS_CHECK(cublasCreate)
    ip.run_cell(SETUP)
    ip.run_cell("weights = torch.zeros(256, 256)")
    expl, _ = fail(
        ip,
        "raise RuntimeError('CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
        "`cublasCreate(handle)`')",
    )
    assert expl.entry.id == "cublas-cudnn-init"
    assert "memory" in expl.entry.why
    assert "free_bytes" not in expl.context.facts  # no mem_get_info: it could create a context


def test_leaf_inplace_real(ip):
    expl, _ = fail(ip, "w = torch.randn(3, requires_grad=True)\nw.add_(1)")
    assert expl.entry.id == "leaf-inplace"
    assert expl.context.facts["tensor"] == "w"
    assert "torch.no_grad()" in expl.context.fix


def test_modified_inplace_real(ip):
    code = (
        "w = torch.randn(3, requires_grad=True)\nact = "
        "w.sigmoid()\nact.mul_(2)\nact.sum().backward()"
    )
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
    ip.run_cell(
        "import numpy as np\nmodel = nn.Linear(4, 3)\nfeatures = torch.from_numpy(np.ones((2, 4)))"
    )
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
    expl, _ = fail(
        ip,
        'raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with '
        "multiprocessing, you must use the 'spawn' start method\")",
    )
    assert expl.entry.id == "cuda-fork"
    assert "start_method" in expl.context.facts
    assert "multiprocessing_context='spawn'" in expl.to_text()


def test_dataloader_bus_error(ip):
    # torch/csrc/DataLoader.cpp: _error_if_any_worker_fails (exact text for SIGBUS)
    ip.run_cell(SETUP)
    ip.run_cell(
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "dl = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)"
    )
    expl, _ = fail(
        ip,
        'raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Bus error. It is '
        "possible that dataloader's workers are out of shared memory. Please try to raise your "
        'shared memory limit.")',
    )
    assert expl.entry.id == "dataloader-shm"
    assert expl.context.facts["loaders_with_workers"] == ["dl"]
    assert "--shm-size" in expl.to_text()
    if sys.platform.startswith("linux"):
        assert expl.context.facts["shm_total_bytes"] > 0


def test_numpy_conversion_real(ip):
    expl, _ = fail(ip, "w = torch.randn(3, requires_grad=True)\nw.numpy()")
    assert expl.entry.id == "numpy-conversion"
    assert "detach().cpu().numpy()" in expl.to_text()
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
    assert "drop_last=True" in expl.to_text()


def test_cuda_program_no_driver():
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.explain.match import explain

    exc = CudaProgramError(
        "the program exited with status 0 but left a CUDA error: "
        "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime"
    )
    expl = explain(exc, None)
    assert expl.entry.id == "cuda-program-no-driver"
    assert (
        explain(
            RuntimeError("CUDA driver version is insufficient for CUDA runtime version"), None
        ).entry.id
        == "driver-too-old"
    )  # PyTorch's own error keeps its entry


def test_every_entry_has_a_test():
    sources = "".join(
        open(p).read() for p in glob.glob(os.path.join(os.path.dirname(__file__), "test_*.py"))
    )
    tested = set(re.findall(r'entry\.id == "([\w-]+)"', sources))
    from .autograd_cases import CASES  # raised for real, each checked by test_autograd_engine

    tested |= {entry_id for entry_id, _ in CASES}
    assert {e.id for e in CATALOGUE} <= tested


def test_pin_note_prefers_the_failing_line(ip):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    expl, _ = fail(
        ip,
        "if False:\n    y = torch.zeros(2).pin_memory()\nelse:\n    batch = "
        "torch.ones(4).pin_memory()",
    )
    assert expl.context.facts["pin_calls"] == ["torch.ones(4).pin_memory()"]
