"""The catalogue of known CUDA / autograd errors, as data.

One :class:`~cudamagic.explain.result.Entry` per known failure: the exception type(s) PyTorch
raises, message patterns copied from PyTorch's own source, what happened, why, the fix, and the
context function (from :mod:`.context`) that turns the generic explanation into one about the
user's own variables. Matching is in :mod:`.match`.
"""

from __future__ import annotations

import re
from dataclasses import replace

from . import cudaerrors
from .context.autograd import (
    ctx_backward_twice,
    ctx_hook_changed,
    ctx_invalid_gradient,
    ctx_leaf_inplace,
    ctx_no_grad,
    ctx_scalar,
    ctx_version_counter,
)
from .context.cuda import (
    ctx_arch,
    ctx_cuda_family,
    ctx_driver_old,
    ctx_not_compiled,
    ctx_ordinal,
    ctx_program_driver,
)
from .context.dataloader import (
    ctx_801,
    ctx_fork,
    ctx_no_accelerator,
    ctx_pin_cuda,
    ctx_shm,
    ctx_spawn_main,
    ctx_worker_exited,
    forked_workers,
    spawned_workers,
)
from .context.memory import ctx_gpu_memory, ctx_oom
from .context.tensors import (
    ctx_broadcast,
    ctx_devices,
    ctx_dtype,
    ctx_float_targets,
    ctx_index_tensors,
    ctx_matmul,
    ctx_numpy,
    ctx_result_cast,
    ctx_targets,
)
from .result import Entry

_CUDA_SUFFIX = (
    "CUDA reports kernel errors asynchronously, so the line in the traceback may be later than the one "
    "that failed."
)


#: torch/utils/data/dataloader.py (``pid(s) ...``) and torch/csrc/DataLoader.cpp (``pid N ... with
#: exit code``)
_WORKER_EXITED = r"DataLoader worker \(pid(?:\(s\))? [\d, ]+\) exited unexpectedly"


CATALOGUE: tuple = (
    Entry(
        id="not-compiled-with-cuda",
        title="This PyTorch has no CUDA support",
        types=("AssertionError",),
        patterns=(r"Torch not compiled with CUDA enabled",),
        what="You asked for a CUDA device, but the installed PyTorch is a CPU-only build.",
        why=(
            "CPU-only wheels (versions ending in +cpu, or the default wheel on some platforms) contain no CUDA "
            "code at all. This says nothing about your GPU or driver: they may be perfectly fine."
        ),
        fix=(
            "On a machine with an NVIDIA GPU, reinstall PyTorch with CUDA in the kernel's environment: "
            "`%pip install --force-reinstall torch==<your version> --index-url "
            "https://download.pytorch.org/whl/cuXYZ`, with a cuXYZ your PyTorch version has wheels for "
            "and your driver supports (`%cudainfo` gives the exact command), then restart the kernel."
        ),
        source="torch/cuda/__init__.py: _lazy_init",
        context=ctx_not_compiled,
    ),
    Entry(
        id="cuda-program-no-driver",
        title="A %%cuda program found no usable NVIDIA driver",
        types=("CudaProgramError",),
        patterns=(
            r"cudaErrorInsufficientDriver|CUDA driver version is insufficient",
            r"cudaErrorNoDevice|no CUDA-capable device",
        ),
        what="The program compiled, but its first CUDA call (here the kernel launch) could not reach a GPU.",
        why=(
            "Host code runs anywhere; device code needs the NVIDIA kernel driver (libcuda) and a GPU. Without a "
            "driver the CUDA runtime reports 'driver version is insufficient' (cudaErrorInsufficientDriver); with "
            "a driver older than the toolkit that compiled the program it reports the same."
        ),
        fix=(
            "Run the notebook on a machine with an NVIDIA GPU and driver (`%cudainfo` shows what this one has), or "
            "update the driver to one that supports the toolkit's CUDA version."
        ),
        source="CUDA runtime: cudaErrorInsufficientDriver (35), cudaErrorNoDevice (100); cudamagic/cuda/run.py",
        context=ctx_program_driver,
    ),
    Entry(
        id="driver-too-old",
        title="NVIDIA driver too old for this PyTorch build",
        types=("RuntimeError", "AssertionError"),
        patterns=(
            r"NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)",
            r"CUDA driver version is insufficient for CUDA runtime version",
        ),
        what="PyTorch could not start CUDA because the driver supports an older CUDA than PyTorch was built for.",
        why=(
            "Each PyTorch wheel is built against one CUDA version and needs a driver at least that new. The "
            "driver's version number encodes the newest CUDA it supports (11040 = CUDA 11.4). Installing a CUDA "
            "toolkit does not help: the wheel ships its own CUDA runtime; only the driver matters."
        ),
        fix=(
            "Update the NVIDIA driver, or install a PyTorch wheel built for the CUDA version your driver supports "
            "(https://pytorch.org/get-started/previous-versions/)."
        ),
        source="c10/cuda/CUDAFunctions.cpp: device_count_impl (cudaErrorInsufficientDriver)",
        context=ctx_driver_old,
    ),
    Entry(
        id="pin-cuda-tensor",
        title="Pinning a tensor that is already on the GPU",
        types=("RuntimeError",),
        patterns=(r"cannot pin '(?P<type>[\w.]+)' only dense CPU tensors can be pinned",),
        what="`pin_memory` was asked to pin a tensor that is not a CPU tensor.",
        why=(
            "Pinned (page-locked) memory is a CPU-side buffer that makes copies to the GPU faster. A tensor "
            "already on the GPU has nothing to pin. Usually the dataset was moved to the GPU and then wrapped in a "
            "DataLoader(..., pin_memory=True)."
        ),
        fix=(
            "Keep the dataset on the CPU, keep pin_memory=True, and move each batch inside the loop with "
            "`x = x.to(device, non_blocking=True)`; or, if the data must stay on the GPU, drop pin_memory."
        ),
        source="aten/src/ATen/native/Memory.cpp: _pin_memory",
        context=ctx_pin_cuda,
    ),
    Entry(
        id="pin-no-accelerator",
        title="Pinning memory on a machine without a GPU",
        types=("RuntimeError",),
        patterns=(r"Cannot access accelerator device when none is available",),
        what="PyTorch needed a GPU (or other accelerator) for this call, and this kernel has none.",
        why=(
            "`tensor.pin_memory()` (and torch.accelerator calls) allocate through the accelerator's driver: page-"
            "locked memory only exists to speed up copies to a GPU. On a CPU-only build or machine there is no "
            "accelerator to ask. (DataLoader's pin_memory=True only warns in that case; a direct .pin_memory() "
            "raises.)"
        ),
        fix=(
            "Pin only when a GPU is there: `x = x.pin_memory() if torch.cuda.is_available() else x`, or use "
            "`DataLoader(..., pin_memory=torch.cuda.is_available())`."
        ),
        source="aten/src/ATen/DeviceAccelerator.cpp: getAccelerator(checked=true)",
        context=ctx_no_accelerator,
    ),
    Entry(
        id="cuda-801-workers",
        title="CUDA error 801 with DataLoader workers (Windows)",
        types=("RuntimeError",),
        patterns=(
            r"cuda runtime error \(801\)",
            r"operation not supported.*StorageSharing",
            r"CUDA error: operation not supported(?=\n| \(|$)",
        ),
        what="A CUDA tensor was sent between processes, and CUDA refused (error 801: operation not supported).",
        why=(
            "With num_workers > 0 the DataLoader runs your Dataset in worker processes and ships each batch back "
            "through shared memory. On Windows, CUDA tensors cannot be shared between processes, so a Dataset "
            "that returns CUDA tensors fails there (on Linux, vGPUs show the same error)."
        ),
        fix=(
            "Return CPU tensors from the Dataset (no `.cuda()`/`.to(device)` in `__getitem__` or in the dataset "
            "tensors), move each batch to the GPU in the training loop, and use pin_memory=True for speed; or set "
            "num_workers=0."
        ),
        localise=(
            "Set `num_workers=0`: if the error goes away, the workers are the cause. Then look for `.cuda()`, "
            "`.to('cuda')` or `device='cuda'` in the Dataset (`__init__`, `__getitem__`) and in collate_fn, "
            "and move it into the training loop (`x = x.to('cuda')` after the batch arrives): on Windows "
            "(WDDM) CUDA IPC is not supported, so no CUDA tensor can pass between processes."
        ),
        source="torch/csrc/StorageSharing.cpp: THPStorage_shareCuda (cudaIpcGetMemHandle)",
        context=ctx_801,
    ),
    Entry(
        id="spawn-main",
        title="Spawned workers cannot import notebook code",
        types=("AttributeError", "PicklingError", "RuntimeError"),
        patterns=(
            r"Can't get attribute '(?P<name>[^']+)' on <module '__(?:mp_)?main__'",
            r"Can't pickle <(?:class|function) '__main__\.(?P<name>[^']+)'>",
            _WORKER_EXITED,
        ),
        what=(
            "DataLoader workers (or a multiprocessing Pool) were started with the spawn method and could not load "
            "a Dataset, function or class defined in the notebook."
        ),
        why=(
            "spawn (the default on Windows and macOS) starts each worker as a fresh Python that imports your objects "
            "by module and name. Whatever a notebook cell defines lives in the module __main__, which a fresh "
            "worker does not have: it fails with \"Can't get attribute ... on <module '__main__'>\" (shown in the "
            'terminal that started Jupyter), and the notebook sees only "DataLoader worker exited unexpectedly". '
            "Linux forks workers by default, so the same notebook works there."
        ),
        fix=(
            "Put the Dataset class (and any collate_fn / worker_init_fn) in a .py file next to the notebook and "
            "import it (`from mydata import MyDataset`), or use `num_workers=0` in the notebook."
        ),
        source="Lib/pickle.py: Unpickler.find_class / Pickler.save_global; torch/utils/data/dataloader.py: "
        "_MultiProcessingDataLoaderIter._try_get_data",
        context=ctx_spawn_main,
        applies=spawned_workers,
    ),  # "exited unexpectedly" only when the workers are spawned
    Entry(
        id="worker-exited",
        title="A forked DataLoader worker died",
        types=("RuntimeError",),
        patterns=(_WORKER_EXITED,),
        what="A DataLoader worker process (started with fork) died before it delivered its batch.",
        why=(
            "Forked workers inherit everything the notebook defined, so they can load your Dataset. A worker that "
            "dies anyway usually ran out of shared memory: workers hand batches over through /dev/shm, which in a "
            "container is often tiny (Docker's default --shm-size is 64 MiB); or it was killed (by the kernel's "
            "OOM killer when memory runs out: signal 'Killed') or crashed in its own code or in native code. The "
            "worker's own error is lost; the notebook sees only that it exited."
        ),
        fix=(
            "Check shared memory with `!df -h /dev/shm`; give the container more (`docker run --shm-size=8g` or "
            "`--ipc=host`) or lower num_workers / batch size. Run once with `num_workers=0` to see the worker's real "
            "error in the cell. If the worker was killed, check `!dmesg | grep -i 'killed process'` for the OOM "
            "killer and use fewer workers."
        ),
        localise=(
            "`num_workers=0` runs the Dataset in the notebook's own process, so the real exception and its "
            "traceback appear in the cell; `!df -h /dev/shm` shows the size and use of shared memory."
        ),
        source="torch/utils/data/dataloader.py: _MultiProcessingDataLoaderIter._try_get_data; torch/csrc/DataLoader.cpp: "
        "_error_if_any_worker_fails",
        context=ctx_worker_exited,
        applies=forked_workers,
    ),
    Entry(
        id="cuda-oom",
        title="CUDA out of memory",
        types=("OutOfMemoryError", "RuntimeError"),
        patterns=(r"(?:CUDA|HIP) out of memory\. Tried to allocate", r"CUDA error: out of memory"),
        what="The GPU did not have enough free memory for the next allocation.",
        why=(
            "Everything still referenced stays on the GPU: your variables, the model and optimizer state, and "
            "in a notebook also the output cache (`_`, `Out[n]`) and the saved traceback of the last error "
            "(sys.last_traceback), which keeps the failing function's tensors alive. That is why memory often "
            "'never comes back' after an OOM until they are cleared."
        ),
        fix="Free memory you no longer need, then retry with a smaller batch.",
        source="c10/cuda/CUDACachingAllocator.cpp: DeviceCachingAllocator::malloc (torch.OutOfMemoryError)",
        context=ctx_oom,
    ),
    Entry(
        id="backward-twice",
        title="Backward through the graph a second time",
        types=("RuntimeError",),
        patterns=(r"Trying to backward through the graph a second time",),
        what="`.backward()` ran through part of a graph whose saved tensors an earlier backward already freed.",
        why=(
            "To save memory, backward frees the intermediate values of the graph it went through. Two common "
            "causes: a tensor carried across loop iterations (an RNN hidden state `h`, a running total) links "
            "each step's graph to the previous one; or a cell that only calls `loss.backward()` is re-run without "
            "re-running the cell that computed `loss`."
        ),
        fix=(
            "Detach what you carry between iterations (`h = h.detach()`), or recompute the forward pass before "
            "each backward. Prefer this to retain_graph=True, which keeps every graph alive."
        ),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack (ERR_BACKWARD_TWICE)",
        context=ctx_backward_twice,
        family="autograd-engine",
    ),
    Entry(
        id="no-grad",
        title="Tensor does not require grad",
        types=("RuntimeError",),
        patterns=(r"element \d+ of tensors does not require grad and does not have a grad_fn",),
        what="`.backward()` was called on a tensor that autograd did not track.",
        why=(
            "Autograd only records operations on tensors that require grad. The tensor you call backward on was "
            "computed under `torch.no_grad()` or `torch.inference_mode()`, from `.detach()`ed data, via `.item()` "
            "or NumPy, or from a model whose parameters all have requires_grad=False."
        ),
        fix=(
            "Compute the loss outside `torch.no_grad()`/`inference_mode()` and without `.detach()`/`.item()`/"
            "NumPy, from a model whose parameters require grad (`any(p.requires_grad for p in "
            "model.parameters())`)."
        ),
        source="torch/csrc/autograd/engine.cpp / python_engine.cpp: run_backward",
        context=ctx_no_grad,
        family="autograd-engine",
    ),
    Entry(
        id="grad-not-scalar",
        title="Backward on a non-scalar tensor",
        types=("RuntimeError",),
        patterns=(r"grad can be implicitly created only for scalar outputs",),
        what="`.backward()` without an argument needs a single number, and this tensor has several elements.",
        why=(
            "The gradient of a vector is a matrix (a Jacobian); backward needs a scalar loss, or an explicit "
            "upstream gradient with the tensor's shape."
        ),
        fix="Reduce to a scalar first (`.sum()` or `.mean()`), or call `t.backward(gradient)` with a tensor of t's shape.",
        source="torch/autograd/__init__.py: _make_grads",
        context=ctx_scalar,
        family="autograd-engine",
    ),
    Entry(
        id="different-devices",
        title="Tensors on different devices",
        types=("RuntimeError",),
        patterns=(
            r"Expected all tensors to be on the same device, but (?:found at least two devices, "
            r"(?P<d1>[\w:]+) and (?P<d2>[\w:]+)|got)",
            r"Tensor on device (?P<d3>[\w:]+) is not on the expected device (?P<d4>[\w:]+)",
            r"Input type \(torch\.(?:cuda\.)?\w+\) and weight type \(torch\.cuda\.\w+\) should be the same",
            r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.\w+\) should be the same",
        ),
        what="One operation got tensors that live on different devices (for example the GPU and the CPU).",
        why=(
            "PyTorch never moves data implicitly. `model.to(device)` moves parameters, but inputs, targets and "
            "tensors created inside forward (`torch.zeros(...)` without device=) stay on the CPU."
        ),
        fix=(
            "Pick one `device` and move everything to it: `model.to(device)`, `x, y = x.to(device), y.to(device)`, "
            "and create new tensors with `device=x.device`."
        ),
        source="aten/src/ATen/core/op_registration/adaption.cpp: common_device_check_failure; "
        "aten/src/ATen/TensorIterator.cpp",
        context=ctx_devices,
    ),
    Entry(
        id="no-kernel-image",
        title="No kernel for this GPU's architecture",
        types=("RuntimeError",),
        patterns=(r"no kernel image is available for execution on the device",),
        what="This PyTorch build has no compiled code for your GPU's compute capability.",
        why=(
            "Wheels include kernels for a list of architectures (torch.cuda.get_arch_list()). A GPU newer than the "
            "wheel (e.g. sm_120 with an old wheel) or older than it supports (e.g. sm_35 with a recent wheel) has "
            "no kernels to run."
        ),
        fix=(
            "Install a PyTorch wheel whose arch list includes your GPU: a newer release (and CUDA version) for new "
            "GPUs, an older release for old ones. `%cudainfo` shows both sides."
        ),
        source="CUDA runtime cudaErrorNoKernelImageForDevice via C10_CUDA_CHECK (c10/cuda/CUDAException.h)",
        context=ctx_arch,
    ),
    Entry(
        id="device-side-assert",
        title="CUDA device-side assert",
        types=("RuntimeError",),
        patterns=(r"device-side assert triggered",),
        what="A check inside a GPU kernel failed: almost always an index out of range.",
        why=(
            "Typical causes: a class label >= number of classes (or negative) in cross_entropy/nll_loss, an "
            "index >= num_embeddings in nn.Embedding, bad indices in gather/index_select, or BCE inputs outside "
            "[0, 1]. "
            + _CUDA_SUFFIX
            + " After a device-side assert the CUDA context is unusable: every later "
            "CUDA call fails until the kernel restarts."
        ),
        fix=(
            "Restart the kernel. To find the failing line, set `CUDA_LAUNCH_BLOCKING=1` before CUDA starts "
            "(`import os; os.environ['CUDA_LAUNCH_BLOCKING'] = '1'` as the first cell): every kernel launch then "
            "waits for completion, so the error is raised at the real operation (slower; for debugging only). Or "
            "run the same step on the CPU, which names the bad index."
        ),
        source="c10/cuda/CUDAException.cpp: c10_cuda_check_implementation (cudaErrorAssert)",
        context=ctx_index_tensors,
    ),
    Entry(
        id="index-out-of-range",
        title="Index or class label out of range",
        types=("IndexError", "RuntimeError"),
        patterns=(r"Target (?P<target>-?\d+) is out of bounds", r"index out of range in self"),
        what="A class label or an embedding index is outside the valid range.",
        why=(
            "cross_entropy/nll_loss need labels in 0..C-1 for C output classes; nn.Embedding(n, d) accepts indices "
            "0..n-1. Labels numbered from 1, or a vocabulary larger than the embedding, cause this (on the GPU the "
            "same mistake shows up as a 'device-side assert')."
        ),
        fix=(
            "Check `labels.min()`, `labels.max()` against the number of classes / num_embeddings: remap labels to "
            "0..C-1 or make the output layer / embedding larger."
        ),
        source="aten/src/ATen/native/LossNLL.cpp: nll_loss_out_frame; aten/src/ATen/native/Embedding.cpp (index_select)",
        context=ctx_index_tensors,
    ),
    Entry(
        id="invalid-device-ordinal",
        title="Invalid CUDA device ordinal",
        types=("RuntimeError", "AssertionError"),
        patterns=(r"invalid device ordinal", r"^Invalid device id$"),
        what="The code asked for a GPU number that does not exist in this process.",
        why=(
            "CUDA ordinals count from 0 and only over the GPUs this process can see: with "
            "CUDA_VISIBLE_DEVICES=2 the only GPU is cuda:0. Code written for a multi-GPU machine often asks for "
            "cuda:1."
        ),
        fix="Use `cuda:0` (or `torch.device('cuda')`), or check `torch.cuda.device_count()` and CUDA_VISIBLE_DEVICES.",
        source="CUDA runtime cudaErrorInvalidDevice via C10_CUDA_CHECK; torch/cuda/__init__.py: get_device_properties",
        context=ctx_ordinal,
    ),
    Entry(
        id="cublas-cudnn-init",
        title="cuBLAS / cuDNN could not start",
        types=("RuntimeError",),
        patterns=(
            r"CUBLAS_STATUS_NOT_INITIALIZED",
            r"CUBLAS_STATUS_ALLOC_FAILED",
            r"CUDNN_STATUS_NOT_INITIALIZED",
            r"CUDNN_STATUS_ALLOC_FAILED",
        ),
        what="The CUDA math library (cuBLAS or cuDNN) failed to create its handle.",
        why=(
            "Creating a handle allocates GPU workspace; the usual cause is that GPU memory is already full (your "
            "own tensors, another notebook, another process). Less often: a broken or mismatched CUDA install, or "
            "an earlier CUDA error that left the context unusable."
        ),
        fix=(
            "Free GPU memory (see `nvidia-smi` / `%gpuwatch` for other processes, `del` big tensors, restart other "
            "kernels) and restart this kernel; if memory is free, reinstall PyTorch for your driver."
        ),
        source="aten/src/ATen/cuda/CublasHandlePool.cpp: getCurrentCUDABlasHandle; aten/src/ATen/cudnn/Handle.cpp",
        context=ctx_gpu_memory,
    ),
    Entry(
        id="leaf-inplace",
        title="In-place change of a leaf that requires grad",
        types=("RuntimeError",),
        patterns=(
            r"a (?:view of a )?leaf Variable that requires grad (?:is being|has been) used in an in-place "
            r"operation",
        ),
        what="A tensor that autograd must differentiate against (a parameter / requires_grad leaf) was changed in place.",
        why=(
            "Gradients are computed with respect to leaves; changing a leaf in place while tracking would lose "
            "the value the gradient refers to. Typical cases: initialising weights with `w.normal_()` or updating "
            "them with `w -= lr * w.grad` outside `torch.no_grad()`."
        ),
        fix="Do manual initialisation and updates under `with torch.no_grad():`, or use an optimizer.",
        source="torch/csrc/autograd/VariableTypeUtils.h: check_inplace",
        context=ctx_leaf_inplace,
        family="autograd-engine",
    ),
    Entry(
        id="modified-inplace",
        title="A tensor needed for backward was modified in place",
        types=("RuntimeError",),
        patterns=(
            r"one of the variables needed for gradient computation has been modified by an inplace "
            r"operation: \[(?P<ttype>[\w.]+) \[(?P<shape>[\d, ]*)\]\](?:, which is output (?P<output>\d+) of "
            r"(?P<op>\w+),)? is at version (?P<version>\d+); expected version (?P<expected>\d+)",
            r"one of the variables needed for gradient computation has been modified by an inplace operation",
        ),
        what="Backward needed a value saved in the forward pass, but that tensor was overwritten in place afterwards.",
        why=(
            "Operations save their inputs or outputs for backward (nn.Linear its weight, sigmoid its output, mul its "
            "inputs). Every in-place change bumps the tensor's version counter (shared with its views), and autograd "
            "refuses to use a value that changed since it was saved. Two usual causes: an in-place op (`x += 1`, "
            "`x.relu_()`, `nn.ReLU(inplace=True)`, `x[idx] = ...`), or `optimizer.step()` updating the weights "
            "between a forward pass and a second backward through it (GAN training, two losses on one forward)."
        ),
        fix=(
            "Find what changed it. An in-place op: write it out of place (`y = y * 2`, `torch.relu(x)`). An "
            "`optimizer.step()`: call every backward through that forward before the step, or run the forward again "
            "after it. `torch.autograd.set_detect_anomaly(True)` shows the forward line that saved the tensor."
        ),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack",
        context=ctx_version_counter,
        family="autograd-engine",
    ),
    Entry(
        id="invalid-gradient",
        title="A custom Function's backward returned a wrong gradient",
        types=("RuntimeError",),
        patterns=(
            r"Function (?P<fn>\w+) returned an invalid gradient at index (?P<index>\d+) - got "
            r"\[(?P<got>[\d, ]*)\] but expected shape compatible with \[(?P<expected>[\d, ]*)\]",
            r"Function (?P<fn>\w+) returned an invalid gradient at index (?P<index>\d+) - expected device "
            r"(?P<exp_dev>\S+) but got (?P<got_dev>\S+)",
            r"[Ff]unction (?P<fn2>\w+) returned an incorrect number of gradients \(expected (?P<n_expected>\d+), "
            r"got (?P<n_got>\d+)\)",
            r"Function (?P<fn>\w+) returned an invalid gradient at index (?P<index>\d+)",
            r"Expected isFloatingType\(grad\.scalar_type\(\)\) \|\| \(input_is_complex == grad_is_complex\)",
        ),
        what=(
            "The backward of a custom autograd Function (or of an extension's op) returned a gradient that does not "
            "fit the input it belongs to: wrong shape, device, real/complex type, or number of gradients."
        ),
        why=(
            "The engine checks each gradient against the input it is for: same shape (or one that can be summed to "
            "it), same device, and one gradient per forward input. A backward that forgets to undo a broadcast or "
            "an expand in the forward returns the larger shape."
        ),
        fix=(
            "Return exactly one gradient per forward input, each with that input's shape (sum over the dimensions "
            "the forward broadcast: `grad.sum(dim=...)`, `grad.sum_to_size(x.shape)`), device and dtype; `None` for "
            "inputs that need none. `torch.autograd.gradcheck` tests a Function's backward."
        ),
        source="torch/csrc/autograd/engine.cpp: validate_outputs; torch/csrc/autograd/python_function.cpp "
        "(incorrect number of gradients)",
        context=ctx_invalid_gradient,
        family="autograd-engine",
    ),
    Entry(
        id="hook-changed-gradient",
        title="A gradient hook changed the gradient's size or type",
        types=("RuntimeError",),
        patterns=(r"hook '(?P<hook>[^']+)' has changed the (?P<what>size|type) of value",),
        what="A hook registered with `register_hook` returned a gradient of another shape or dtype than it got.",
        why=(
            "A tensor hook may replace the gradient, but the replacement must have the same shape and dtype: the "
            "engine passes it on to the ops that expect exactly that."
        ),
        fix="Return a tensor shaped and typed like the hook's argument, or `None` to keep the gradient unchanged.",
        source="torch/csrc/autograd/python_hook.cpp: check_single_result",
        context=ctx_hook_changed,
        family="autograd-engine",
    ),
    Entry(
        id="view-inplace",
        title="In-place change of a view autograd cannot track",
        types=("RuntimeError",),
        patterns=(
            r"Output \d+ of \w+ is a view and is being modified inplace",
            r"A view was created in no_grad mode and is being modified inplace with grad mode enabled",
        ),
        what="A view (a slice, `unbind`/`split`/`chunk` output, or a custom Function's output) was changed in place.",
        why=(
            "Changing a view in place must also rewrite the graph of its base. Autograd cannot do that for views "
            "from functions that return several views (unbind, split, chunk), for views returned by a custom "
            "Function, or for views created under no_grad and changed with grad enabled."
        ),
        fix=(
            "Use the out-of-place form (`y = y * 2` instead of `y.mul_(2)`), or `.clone()` the view before "
            "changing it; for no_grad views, do both the view and the in-place change in the same mode."
        ),
        source="torch/csrc/autograd/variable.cpp: handle_view_on_rebase",
        family="autograd-engine",
    ),
    Entry(
        id="once-differentiable",
        title="Double backward through a once-differentiable Function",
        types=("RuntimeError",),
        patterns=(
            r"trying to differentiate twice a function that was marked with @once_differentiable",
        ),
        what="A second-order gradient (create_graph=True) went through a custom Function whose backward is marked @once_differentiable.",
        why="@once_differentiable runs the backward without recording a graph, so it cannot be differentiated again.",
        fix=(
            "Write the backward with differentiable torch operations and drop @once_differentiable, or implement "
            "the Function's double backward; or avoid create_graph=True through it."
        ),
        source="torch/autograd/function.py: once_differentiable (DelayedError)",
        family="autograd-engine",
    ),
    Entry(
        id="grad-output-shape",
        title="The gradient passed to backward has the wrong shape",
        types=("RuntimeError",),
        patterns=(
            r"Mismatch in shape: grad_output\[(?P<i>\d+)\] has a shape of torch\.Size\(\[(?P<g>[\d, ]*)\]\) "
            r"and output\[\d+\] has a shape of torch\.Size\(\[(?P<o>[\d, ]*)\]\)",
        ),
        what="`t.backward(gradient)` / `torch.autograd.grad(..., grad_outputs=...)` got a gradient shaped unlike the tensor.",
        why="The upstream gradient stands for d(loss)/d(t): it must have exactly the shape of t.",
        fix="Pass a gradient of t's shape (`torch.ones_like(t)`), or reduce t to a scalar first (`t.sum().backward()`).",
        source="torch/autograd/__init__.py: _make_grads",
        family="autograd-engine",
    ),
    Entry(
        id="unused-input",
        title="A tensor asked for a gradient is not in the graph",
        types=("RuntimeError",),
        patterns=(
            r"The differentiated Tensor at index (?P<index>\d+) appears to not have been used in the graph",
            r"One of the differentiated Tensors does not require grad",
        ),
        what="`torch.autograd.grad` was asked for the gradient with respect to a tensor the output does not depend on.",
        why=(
            "Its gradient would be None: the output was computed without it (or from a copy / detached version of "
            "it, or it does not require grad)."
        ),
        fix=(
            "Pass only inputs the output is computed from, or `allow_unused=True` (and `materialize_grads=True` for "
            "zeros instead of None)."
        ),
        source="torch/csrc/autograd/python_engine.cpp: THPEngine_run_backward",
        family="autograd-engine",
    ),
    Entry(
        id="inference-tensor",
        title="An inference-mode tensor used with autograd",
        types=("RuntimeError",),
        patterns=(
            r"Inference tensors cannot be saved for backward",
            r"Inplace update to inference tensor outside InferenceMode is not allowed",
        ),
        what="A tensor created under `torch.inference_mode()` was used in a computation autograd records.",
        why="Inference tensors have no version counter, so autograd can neither save them nor track in-place changes.",
        fix="Create it under `torch.no_grad()` instead, or use `t.clone()` of it outside inference mode.",
        source="c10/core/TensorImpl.h / torch/csrc/autograd/saved_variable.cpp (inference tensors)",
        family="autograd-engine",
    ),
    Entry(
        id="requires-grad-flag",
        title="requires_grad cannot be set on this tensor",
        types=("RuntimeError",),
        patterns=(
            r"you can only change requires_grad flags of leaf variables",
            r"only Tensors of floating point dtype can require gradients",
        ),
        what="`requires_grad` was changed on a computed tensor, or set on an integer / bool tensor.",
        why=(
            "Only leaves (tensors you created) have their own requires_grad flag, and only floating-point and "
            "complex tensors carry gradients."
        ),
        fix="Use `t.detach()` for a non-tracked copy of a computed tensor; make the tensor float (`t.float()`) to track it.",
        source="torch/csrc/autograd/python_variable.cpp: THPVariable_set_requires_grad",
        family="autograd-engine",
    ),
    Entry(
        id="matmul-shapes",
        title="Matrix shapes cannot be multiplied",
        types=("RuntimeError",),
        patterns=(
            r"mat1 and mat2 shapes cannot be multiplied \((?P<a0>\d+)x(?P<a1>\d+) and (?P<b0>\d+)x(?P<b1>\d+)\)",
        ),
        what="A matrix product got operands whose inner sizes differ.",
        why=(
            "For A @ B the columns of A must equal the rows of B. In nn.Linear(in, out) the input's last dimension "
            "must be `in`; after convolutions it is easy to get the flattened size wrong."
        ),
        fix="Make the input's last dimension equal the layer's in_features (or change in_features; nn.LazyLinear infers it).",
        source="aten/src/ATen/native/LinearAlgebra.cpp: addmm_impl_cpu_ / TORCH_META_FUNC(addmm)",
        context=ctx_matmul,
    ),
    Entry(
        id="dtype-mismatch",
        title="Mixed dtypes (float32 vs float64 ...)",
        types=("RuntimeError", "ValueError"),
        patterns=(
            r"expected scalar type (?P<x>Float|Double|Half|BFloat16) but found (?P<y>\w+)",
            r"(?:mat1 and mat2|self and mat2) must have the same dtype, but got (?P<x2>\w+) and (?P<y2>\w+)",
            r"Input type \((?P<x3>\w+)\) and (?:bias|weight) type \((?P<y3>\w+)\) should be the same",
            r"Input type \(torch\.(?P<x4>\w+)\) and weight type \(torch\.(?P<y4>\w+)\) should be the same",
            r"RNN input dtype \([\w.]+\) does not match weight dtype",
            r"expected both vectors to have same dtype, but found \w+ and \w+",
            r"expected m1 and m2 to have the same dtype, but got: (?P<x5>\w+) != (?P<y5>\w+)",
            r"input tensors must have the same dtype, but got \w+",
        ),
        what="An operation got tensors of different floating-point types (typically float64 data into a float32 model).",
        why=(
            "PyTorch models are float32 by default, but NumPy arrays are float64, and `torch.from_numpy` / "
            "`torch.tensor(array)` keep float64. Matrix products and layers do not convert for you."
        ),
        fix="Convert the data to the model's dtype (`x = x.float()`), or the model to the data's (`model.double()`).",
        source="aten/src/ATen/native/LinearAlgebra.cpp: TORCH_META_FUNC(addmm) (mat1 and mat2 must have the "
        "same dtype), TORCH_META_FUNC(mm) (expected m1 and m2 to have the same dtype), addmv; "
        "aten/src/ATen/native/Convolution.cpp: check_input_same_type_as_parameters",
        context=ctx_dtype,
    ),
    Entry(
        id="target-dtype-long",
        title="Class labels must be integers (Long)",
        types=("RuntimeError",),
        patterns=(
            r"expected target dtype to be Long or Byte, but got (?P<t>\w+)",
            r"expected scalar type Long but found (?P<t2>\w+)",
            r"Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int",
        ),
        what="A loss or embedding that needs integer class indices got floating-point values.",
        why=(
            "cross_entropy / nll_loss with class labels, and nn.Embedding, index with the targets: they must be "
            "int64 (Long). Labels built with torch.tensor([0., 1.]) or from a float array are float."
        ),
        fix="Convert the labels (or embedding indices) to int64: `y = y.long()`.",
        source="aten/src/ATen/native/LossNLL.cpp: nll_loss_forward_out_cpu_template; "
        "aten/src/ATen/native/Embedding.cpp: checkScalarTypes",
        context=ctx_targets,
    ),
    Entry(
        id="target-dtype-float",
        title="Regression / BCE targets must be float",
        types=("RuntimeError",),
        patterns=(
            r"Found dtype (?P<found>Long|Int|Bool|Byte) but expected (?P<exp>Float|Double|Half)",
        ),
        what="A loss that compares real numbers (MSE, BCE, L1) got integer targets.",
        why=(
            "Losses like mse_loss and binary_cross_entropy need targets of the same floating dtype as the "
            "prediction; integer labels (from torch.tensor([0, 1, 1])) do not convert by themselves."
        ),
        fix="Convert the targets: `y = y.float()`.",
        source="torch/csrc/autograd/engine.cpp: validate_outputs / aten binary_cross_entropy dtype check",
        context=ctx_float_targets,
    ),
    Entry(
        id="result-type-cast",
        title="A float result cannot be stored in an integer tensor",
        types=("RuntimeError",),
        patterns=(
            r"result type (?P<result>\w+) can't be cast to the desired output type (?P<output>\w+)",
        ),
        what="An operation produced floating-point values that had to be written into an integer tensor.",
        why=(
            "An in-place operation (`x += 0.5`, `x.mul_(0.9)`, `out=`) keeps the dtype of the tensor it writes "
            "into, and PyTorch will not silently truncate floats to integers. BCEWithLogitsLoss with integer "
            "targets (labels from torch.tensor([0, 1, 1])) fails the same way: it computes in the targets' dtype."
        ),
        fix=(
            "Make the integer tensor float first (`y = y.float()` for BCE targets), or write the result to a new "
            "tensor (`x = x + 0.5`) instead of in place."
        ),
        source="aten/src/ATen/TensorIterator.cpp: TensorIteratorBase::compute_types (canCast check)",
        context=ctx_result_cast,
    ),
    Entry(
        id="cuda-fork",
        title="CUDA in a forked subprocess",
        types=("RuntimeError",),
        patterns=(r"Cannot re-initialize CUDA in forked subprocess",),
        what="A child process created with fork (DataLoader workers, multiprocessing) tried to use CUDA.",
        why=(
            "CUDA cannot be used in a process forked from one where CUDA was already initialised. DataLoader "
            "workers are forked on Linux; moving data to the GPU inside the Dataset (or collate_fn) does this."
        ),
        fix=(
            "Keep CUDA work in the main process: return CPU tensors from the Dataset and move batches in the training "
            "loop. If workers really need CUDA, use `DataLoader(..., multiprocessing_context='spawn')` (in a notebook "
            "the Dataset class must then live in an importable .py file)."
        ),
        source="torch/cuda/__init__.py: _lazy_init (_is_in_bad_fork)",
        context=ctx_fork,
    ),
    Entry(
        id="dataloader-shm",
        title="DataLoader worker killed: shared memory too small",
        types=("RuntimeError",),
        patterns=(
            r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
            r"dataloader's workers are out of shared memory",
            r"unable to (?:write to file|open shared memory object|allocate shared memory)",
        ),
        what="A DataLoader worker crashed with a bus error while passing a batch to the main process.",
        why=(
            "Workers hand batches over through shared memory (/dev/shm). Containers often have a tiny /dev/shm "
            "(Docker's default is 64 MiB), which large batches or many workers exhaust."
        ),
        fix=(
            "Give the container more shared memory (`docker run --shm-size=8g` or `--ipc=host`; in Kubernetes an "
            "emptyDir with medium: Memory on /dev/shm), or lower num_workers / batch size, or "
            "`torch.multiprocessing.set_sharing_strategy('file_system')`."
        ),
        source="torch/csrc/DataLoader.cpp: handler_SIGBUS / _error_if_any_worker_fails",
        context=ctx_shm,
    ),
    Entry(
        id="numpy-conversion",
        title="Converting a tensor to NumPy",
        types=("RuntimeError", "TypeError"),
        patterns=(
            r"Can't call numpy\(\) on Tensor that requires grad",
            r"can't convert (?P<device>[\w:]+) device type tensor to numpy",
        ),
        what="`.numpy()` was called on a tensor that tracks gradients or lives off the CPU.",
        why=(
            "A NumPy array shares the tensor's CPU memory and knows nothing of autograd, so PyTorch refuses to hand "
            "out a tracked tensor or GPU memory."
        ),
        fix="Use `t.detach().cpu().numpy()` (detach from the graph, copy to the CPU, then convert).",
        source="torch/csrc/utils/tensor_numpy.cpp: tensor_to_numpy",
        context=ctx_numpy,
    ),
    Entry(
        id="broadcast-size",
        title="Tensor sizes do not match",
        types=("RuntimeError",),
        patterns=(
            r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) at "
            r"non-singleton dimension (?P<dim>\d+)",
        ),
        what="An element-wise operation got tensors whose shapes cannot be broadcast together.",
        why=(
            "Element-wise ops line shapes up from the right; each dimension must be equal or 1. Frequent causes: a "
            "prediction of shape [N, 1] against targets of shape [N], or a batch whose last element is smaller."
        ),
        fix="Print both shapes and reshape one (`pred.squeeze(1)`, `y.unsqueeze(1)`, `.view(...)`).",
        source="aten/src/ATen/ExpandUtils.cpp: infer_size_impl",
        context=ctx_broadcast,
    ),
    Entry(
        id="batchnorm-one-sample",
        title="BatchNorm with a batch of one",
        types=("ValueError",),
        patterns=(r"Expected more than 1 value per channel when training",),
        what="A BatchNorm layer in training mode got a batch with a single sample.",
        why=(
            "Training-mode BatchNorm normalises with the batch's own mean and variance, which one sample cannot "
            "provide. A last DataLoader batch of size 1 often causes it."
        ),
        fix="Use `model.eval()` for single-sample inference, or `DataLoader(..., drop_last=True)` for training.",
        source="torch/nn/functional.py: _verify_batch_size",
        context=None,
    ),
)


#: The family of each specific CUDA entry above (the families themselves are data in
#: :mod:`.cudaerrors`).
_SPECIFIC_FAMILY = {
    "cuda-program-no-driver": "cuda-driver",
    "driver-too-old": "cuda-driver",
    "cuda-801-workers": "cuda-peer",
    "cuda-oom": "cuda-oom",
    "no-kernel-image": "cuda-arch",
    "device-side-assert": "cuda-illegal-access",
    "invalid-device-ordinal": "cuda-invalid-call",
    "cublas-cudnn-init": "cuda-oom",
}


def _family_entry(family):
    return Entry(
        id=family.id,
        title=family.title,
        types=("RuntimeError",),
        patterns=cudaerrors.family_patterns(family.id),
        what=family.what,
        why=family.why,
        fix=family.fix,
        localise=family.localise,
        family=family.id,
        source=(
            "CUDA runtime codes of this family (cudaerrors.RUNTIME_FAMILY, texts from cudaGetErrorString, CUDA "
            f"{cudaerrors.CUDA_VERSION}) via c10/cuda/CUDAException.cpp; library statuses via ATen/cuda/Exceptions.h"
            " (TORCH_CUDABLAS_CHECK, TORCH_CUDASPARSE_CHECK, AT_CUDNN_CHECK), ATen/native/cuda/CuFFTUtils.h "
            "(CUFFT_CHECK), torch/csrc/distributed/c10d/NCCLUtils.hpp (C10D_NCCL_CHECK)"
        ),
        context=ctx_cuda_family,
    )


def _with_family(entry):
    family = _SPECIFIC_FAMILY.get(entry.id)
    if family is None:
        return entry
    extra = cudaerrors.family_patterns(family) if entry.id == family else ()  # "cuda-oom" is both
    # statuses another specific entry explains better (cuBLAS / cuDNN handle creation) stay with it
    others = [
        q for e in CATALOGUE if e.id != entry.id and e.id in _SPECIFIC_FAMILY for q in e.patterns
    ]
    extra = tuple(p for p in extra if not any(re.search(q, p) for q in others))
    # an entry's own localise fits its case better than its family's (801 in DataLoader workers is
    # not NCCL)
    return replace(
        entry,
        family=family,
        localise=entry.localise or cudaerrors.FAMILIES[family].localise,
        patterns=entry.patterns + extra,
    )


#: The specific entries first (their text is about the exact case), then one entry per CUDA error
#: family.
CATALOGUE = tuple(_with_family(e) for e in CATALOGUE) + tuple(
    _family_entry(f) for f in cudaerrors.FAMILIES.values() if f.id not in _SPECIFIC_FAMILY
)
