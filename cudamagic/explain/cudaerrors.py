r"""CUDA error families, as data.

Which family every CUDA runtime error and every status of the CUDA libraries that PyTorch surfaces
belongs to, and each family's explanation, fix and way to localise it. Each family becomes one
catalogue entry (:mod:`.catalogue`); the specific entries (device-side assert, no kernel image, out
of memory, invalid ordinal, ...) carry the family they belong to.

Sources, and the text PyTorch wraps around each:

- CUDA runtime: every code of ``enum cudaError`` with its ``cudaGetErrorString`` text, generated
  from the CUDA toolkit into :mod:`cudamagic.core.cuda_runtime_errors` (``scripts/gen_cuda_errors.py``). PyTorch
  raises ``torch.AcceleratorError`` with ``"CUDA error: <text>\nSearch for `<name>' in ..."``
  (c10/cuda/CUDAException.cpp, c10/cuda/CUDAMiscFunctions.cpp); PyTorch < 2.0 printed
  ``"cuda runtime error (<code>) : <text>"``.
- cuBLAS: ``cublasStatus_t`` (cublas_api.h), printed by name:
  ``"CUDA error: CUBLAS_STATUS_X when calling `cublas...(...)`"`` (ATen/cuda/Exceptions.h).
- cuSPARSE: ``cusparseStatus_t`` (cusparse.h), printed as ``cusparseGetErrorString``'s text:
  ``"CUDA error: <text> when calling `cusparse...(...)`"`` (ATen/cuda/Exceptions.h). Reported texts:
  "kernel launch failure" (pytorch#94966), "internal error" (pytorch#68323), "insufficient
  resources" (rusty1s/pytorch_sparse#314). Only the texts listed here match, so an unknown text gets
  no box rather than a wrong one.
- cuDNN: ``cudnnStatus_t`` (cudnn_graph.h in cuDNN 9, cudnn_ops_infer.h in 8), printed by name:
  ``"cuDNN error: CUDNN_STATUS_X"`` (ATen/cuda/Exceptions.h); cuDNN 9's sub-codes
  (``CUDNN_STATUS_BAD_PARAM_NULL_POINTER``...) match through their parent's prefix. Matching uses
  names only; the numeric values are for reference.
- cuFFT: ``cufftResult`` (cufft.h), printed by name: ``"cuFFT error: CUFFT_X"``
  (ATen/native/cuda/CuFFTUtils.h).
- NCCL: ``ncclResult_t`` (nccl.h); PyTorch raises ``torch.distributed.DistBackendError`` with
  ``"NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version X\n<detail>"``
  (torch/csrc/distributed/c10d/NCCLUtils.hpp).
- cuRAND: PyTorch checks no ``curandStatus_t`` (its kernels use cuRAND's device-side Philox), so
  :data:`CURAND_STATUSES` lists them for extensions, with ``surfaced=False``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.cuda_runtime_errors import CUDA_VERSION, RUNTIME_ERRORS

_BLOCKING = (
    "set `CUDA_LAUNCH_BLOCKING=1` before CUDA starts (`import os; os.environ['CUDA_LAUNCH_BLOCKING'] = '1'` "
    "as the first cell of a fresh kernel): every launch then waits, so the traceback points at the "
    "operation that failed"
)
_CPU = "run the same cell on the CPU (`model.cpu()`, `x.cpu()`), where the failing operation raises a readable error"
_SANITIZER = (
    "run the script under `compute-sanitizer python script.py` (part of the CUDA toolkit), which names the "
    "kernel and the out-of-bounds address"
)


@dataclass(frozen=True)
class Family:
    """One family of CUDA errors.

    Attributes:
        id: the catalogue entry id (``"cuda-illegal-access"``).
        title, what, why, fix: the explanation in plain words.
        localise: how to find the operation that really failed.
        restart: True when the CUDA context is unusable afterwards (a "sticky" error: only a new
            process helps).
    """

    id: str
    title: str
    what: str
    why: str
    fix: str
    localise: str
    restart: bool


FAMILIES: dict = {
    f.id: f
    for f in (
        Family(
            "cuda-async",
            "A GPU kernel failed earlier and the error surfaced here",
            what=(
                "A CUDA library call (or the runtime) reported that work already queued on the GPU failed; the line "
                "in the traceback is where PyTorch noticed, not necessarily where it went wrong."
            ),
            why=(
                "GPU work runs asynchronously: a kernel that fails (most often an index out of range, e.g. a token id "
                ">= num_embeddings or a class label >= the number of classes) is reported by the next call that checks, "
                "very often a cuBLAS/cuDNN call such as the first nn.Linear after an embedding. Less often: a PyTorch "
                "wheel that does not match the GPU, or a matrix shape or dtype the library cannot handle."
            ),
            fix=(
                "Restart the kernel (the CUDA context is unusable after this), then find the real failing operation and "
                "fix its input (typically clamp or remap the indices / labels into range)."
            ),
            localise=f"To find it: {_BLOCKING}; or {_CPU}; or {_SANITIZER}.",
            restart=True,
        ),
        Family(
            "cuda-illegal-access",
            "A kernel accessed memory it must not",
            what="A GPU kernel read or wrote outside its buffers (or failed a bounds check inside the kernel).",
            why=(
                "Almost always an index out of range (gather/scatter/index_select/embedding indices, labels), a tensor "
                "used after its memory was freed (custom CUDA/Triton code, non_blocking copies of freed tensors), or a "
                "bug in a custom kernel. The error is reported asynchronously, so the traceback's line may be later."
            ),
            fix="Restart the kernel (the CUDA context is unusable after this), then fix the out-of-range index or the kernel.",
            localise=f"To find it: {_BLOCKING}; or {_CPU}; or {_SANITIZER}.",
            restart=True,
        ),
        Family(
            "cuda-launch",
            "A kernel launch failed or timed out",
            what="A GPU kernel could not be launched with the requested configuration, or was killed while running.",
            why=(
                "'unspecified launch failure' is a kernel that crashed (like a segfault: often an out-of-range access); "
                "'the launch timed out' means the display watchdog killed a kernel that ran too long on a GPU that also "
                "drives a screen; invalid configurations come from grid/block sizes a custom kernel computed wrongly "
                "(e.g. zero-sized or too many blocks)."
            ),
            fix=(
                "Restart the kernel. For a timeout, run on a GPU without a display (or disable the watchdog, e.g. TDR on "
                "Windows) and split the work into smaller batches; for a bad configuration check the custom kernel's "
                "launch parameters with the tensor sizes that failed (empty tensors included)."
            ),
            localise=f"To find it: {_BLOCKING}; or {_SANITIZER}; or {_CPU}.",
            restart=True,
        ),
        Family(
            "cuda-hardware",
            "A GPU hardware fault",
            what="The GPU reported a hardware-level error (uncorrectable ECC memory error, NVLink error, or a fault it contained).",
            why=(
                "These come from the device itself: failing memory, an overheating or under-powered GPU, a loose or "
                "faulty link. 'unknown error' is often the GPU falling off the bus (Xid 79) or a driver crash."
            ),
            fix=(
                "Restart the kernel; if it repeats, check `nvidia-smi -q -d ECC,TEMPERATURE,POWER` and the kernel log "
                "(`dmesg | grep -i xid`), reset or drain the GPU (administrator), and report it to whoever runs the machine."
            ),
            localise=(
                "Not in your code: `nvidia-smi -q` (ECC counters, retired pages), `dmesg` Xid messages and "
                "`%gpuwatch` (GPU lost, temperature, power) show the device's side."
            ),
            restart=True,
        ),
        Family(
            "cuda-resources",
            "A kernel asked for more GPU resources than exist",
            what="The GPU could not provide the registers, shared memory, clients or other resources the operation needs.",
            why=(
                "'too many resources requested for launch' is a kernel using too many registers or too much shared "
                "memory per block (often a custom or JIT-compiled kernel with a large block size, or a debug build); "
                "exclusive-process mode or MPS limits leave no slot for this process."
            ),
            fix=(
                "Launch the custom kernel with fewer threads per block (or fewer registers: `__launch_bounds__`, "
                "`-maxrregcount`); for a busy / exclusive GPU use another GPU or stop the process holding it."
            ),
            localise=f"To find it: {_BLOCKING}; `nvidia-smi` shows the compute mode and the processes on the GPU.",
            restart=False,
        ),
        Family(
            "cuda-driver",
            "NVIDIA driver and CUDA toolkit do not match",
            what="CUDA could not start, or a call needs a newer driver than the one installed.",
            why=(
                "Each PyTorch wheel ships its CUDA runtime and needs a driver at least as new; containers need the "
                "driver of the host mounted (the NVIDIA container toolkit), and a 'stub library' means the real "
                "libcuda.so was not found. Mixed installs (driver updated without a reboot, two CUDA runtimes loaded) "
                "give the same errors."
            ),
            fix=(
                "Install a driver that supports this PyTorch's CUDA version (or a PyTorch wheel built for an older CUDA; "
                "`%cudainfo` shows both), reboot after a driver update, and in containers run with `--gpus all`."
            ),
            localise="`%cudainfo` and `nvidia-smi` show the driver's CUDA version next to PyTorch's `torch.version.cuda`.",
            restart=True,
        ),
        Family(
            "cuda-arch",
            "No code for this GPU's architecture",
            what="The kernel image (or PTX) in this build does not run on this GPU's architecture.",
            why=(
                "Wheels and extensions contain kernels for a list of compute capabilities (`torch.cuda.get_arch_list()`); "
                "a GPU newer or older than that list, a custom extension built for another GPU (TORCH_CUDA_ARCH_LIST), "
                "or PTX that the installed driver's JIT cannot compile has no runnable kernel."
            ),
            fix=(
                "Install a PyTorch (and extensions) built for your GPU's compute capability, or rebuild the extension "
                "with `TORCH_CUDA_ARCH_LIST` including it; update the driver if the PTX is newer than it."
            ),
            localise="`%cudainfo` shows the GPU's compute capability and the build's arch list side by side.",
            restart=False,
        ),
        Family(
            "cuda-peer",
            "Sharing memory between GPUs or processes failed",
            what="A copy or a communication between two GPUs (peer access, NCCL) or two processes (CUDA IPC) failed.",
            why=(
                "Peer-to-peer access needs GPUs on a common PCIe root / NVLink and a platform that allows it (not on "
                "Windows / WSL, many VMs and vGPUs); CUDA tensors cannot be shared between processes on Windows; NCCL "
                "reports a peer that exited, a network error, or a CUDA error on one rank."
            ),
            fix=(
                "Disable peer access (`NCCL_P2P_DISABLE=1` for NCCL), copy through the CPU, keep DataLoader datasets on "
                "the CPU (num_workers > 0), and for NCCL look at the first rank that failed (`NCCL_DEBUG=INFO`)."
            ),
            localise=(
                "`nvidia-smi topo -m` shows which GPUs can talk directly; `NCCL_DEBUG=INFO` logs the rank and "
                "call that failed; `TORCH_DISTRIBUTED_DEBUG=DETAIL` checks collective calls."
            ),
            restart=False,
        ),
        Family(
            "cuda-oom",
            "Out of GPU memory",
            what="The GPU (or a CUDA library creating its handle or workspace) did not get the memory it asked for.",
            why=(
                "Everything still referenced stays on the GPU: your variables, the model, optimizer state, the output "
                "cache and the last traceback; other processes share the same GPU; a library workspace (cuBLAS, cuDNN, "
                "cuFFT plans) needs memory on top of your tensors."
            ),
            fix="Free memory you no longer need (`del`, `%cudamem free`), stop other processes on the GPU, retry with a smaller batch.",
            localise="`%cudamem` shows what the cell allocated and the peak; `%gpuwatch` shows other processes' memory.",
            restart=False,
        ),
        Family(
            "cuda-invalid-call",
            "A CUDA call got an invalid argument or state",
            what=(
                "A CUDA runtime or library function rejected its arguments or the current state (an invalid value, "
                "handle or pointer, an unsupported parameter combination, or an operation during CUDA graph capture)."
            ),
            why=(
                "These are reported by the call itself (not asynchronously). From plain PyTorch code they mean an input "
                "the library cannot handle (an unusual shape, stride, dtype or size, a tensor on another device, too "
                "large a dimension) or a bug in a custom extension; during `torch.cuda.graph` capture, an operation that "
                "syncs or allocates is not allowed."
            ),
            fix=(
                "Check the shapes, dtypes, devices and contiguity of the tensors on the failing line (`.contiguous()`, "
                "a supported dtype, smaller sizes); in CUDA graph capture, move syncing calls (`.item()`, `print`) out of "
                "the captured region. If plain PyTorch ops on ordinary tensors fail, report it to PyTorch."
            ),
            localise=f"The failing line is the right one here; to be sure, {_BLOCKING}; or {_CPU}.",
            restart=False,
        ),
        Family(
            "cuda-system",
            "The operating system or the CUDA service refused",
            what=(
                "The operating system, the MPS daemon or the CUDA service refused the operation (permission, licence, "
                "missing file or library, profiler state)."
            ),
            why=(
                "Containers and shared machines restrict devices and permissions; MPS (multi-process service) must be "
                "running and have room for this client; a shared library or a module file CUDA needs may be missing."
            ),
            fix=(
                "Check device permissions (`ls -l /dev/nvidia*`), that the MPS daemon is running (or stop using MPS), "
                "the licence (vGPU / Grid) and that the CUDA libraries are installed; ask the machine's administrator."
            ),
            localise="`nvidia-smi` and the system log (`journalctl -k`, `dmesg`) name the refused operation.",
            restart=False,
        ),
    )
}

#: Family of every CUDA runtime error (enum name -> family id); every name of
#: :data:`RUNTIME_ERRORS` is here.
RUNTIME_FAMILY: dict = {}


def _assign(family, names):
    for name in names.split():
        RUNTIME_FAMILY["cudaError" + name] = family


_assign(
    "cuda-async",
    "PriorLaunchFailure ExternalDevice ContextIsDestroyed StreamCaptureInvalidated "
    "TensorMemoryLeak",
)
_assign(
    "cuda-illegal-access",
    "IllegalAddress MisalignedAddress InvalidAddressSpace InvalidPc IllegalInstruction "
    "HardwareStackError Assert",
)
_assign(
    "cuda-launch",
    "LaunchFailure LaunchTimeout InvalidConfiguration MissingConfiguration LaunchMaxDepthExceeded "
    "LaunchFileScopedTex LaunchFileScopedSurf SyncDepthExceeded LaunchPendingCountExceeded "
    "LaunchIncompatibleTexturing CooperativeLaunchTooLarge InvalidClusterSize Timeout "
    "InvalidDeviceFunction FunctionNotLoaded",
)
_assign("cuda-hardware", "ECCUncorrectable NvlinkUncorrectable Contained Unknown")
_assign(
    "cuda-resources",
    "LaunchOutOfResources DevicesUnavailable DeviceAlreadyInUse MpsMaxClientsReached "
    "MpsMaxConnectionsReached InvalidResourceConfiguration",
)
_assign(
    "cuda-driver",
    "InsufficientDriver CallRequiresNewerDriver StubLibrary SystemDriverMismatch "
    "CompatNotSupportedOnDevice InitializationError CudartUnloading StartupFailure "
    "JitCompilerNotFound UnsupportedPtxVersion JitCompilationDisabled NoDevice SystemNotReady "
    "DeviceUninitialized IncompatibleDriverContext",
)
_assign(
    "cuda-arch",
    "NoKernelImageForDevice InvalidKernelImage InvalidSource InvalidPtx UnsupportedLimit "
    "CdpNotSupported CdpVersionMismatch UnsupportedDevSideSync UnsupportedExecAffinity",
)
_assign(
    "cuda-peer",
    "PeerAccessUnsupported PeerAccessAlreadyEnabled PeerAccessNotEnabled TooManyPeers NotSupported",
)
_assign("cuda-oom", "MemoryAllocation MemoryValueTooLarge")
_assign(
    "cuda-invalid-call",
    "InvalidValue InvalidPitchValue InvalidSymbol InvalidHostPointer InvalidDevicePointer "
    "InvalidTexture InvalidTextureBinding InvalidChannelDescriptor InvalidMemcpyDirection "
    "AddressOfConstant TextureFetchFailed TextureNotBound SynchronizationError "
    "InvalidFilterSetting InvalidNormSetting MixedDeviceExecution NotYetImplemented "
    "InvalidSurface DuplicateVariableName DuplicateTextureName DuplicateSurfaceName "
    "InvalidDevice InvalidResourceHandle IllegalState LossyQuery NotReady "
    "SetOnActiveProcess HostMemoryAlreadyRegistered HostMemoryNotRegistered "
    "StreamCaptureUnsupported StreamCaptureMerge StreamCaptureUnmatched StreamCaptureUnjoined "
    "StreamCaptureIsolation StreamCaptureImplicit CapturedEvent StreamCaptureWrongThread "
    "GraphExecUpdateFailure InvalidResourceType MapBufferObjectFailed "
    "UnmapBufferObjectFailed ArrayIsMapped AlreadyMapped AlreadyAcquired NotMapped "
    "NotMappedAsArray NotMappedAsPointer InvalidGraphicsContext SymbolNotFound",
)
_assign(
    "cuda-system",
    "NotPermitted OperatingSystem MpsConnectionFailed MpsRpcFailure MpsServerNotReady "
    "MpsClientTerminated DeviceNotLicensed SoftwareValidityNotEstablished ProfilerDisabled "
    "ProfilerNotInitialized ProfilerAlreadyStarted ProfilerAlreadyStopped FileNotFound "
    "SharedObjectSymbolNotFound SharedObjectInitFailed",
)


@dataclass(frozen=True)
class LibraryStatus:
    """A status of a CUDA library as PyTorch surfaces it.

    Attributes:
        library: ``"cuBLAS"``, ``"cuSPARSE"``, ``"cuDNN"``, ``"cuFFT"``, ``"NCCL"`` or ``"cuRAND"``.
        status: the enum name (``"CUBLAS_STATUS_EXECUTION_FAILED"``).
        value: its numeric value in the library's header.
        text: what PyTorch puts in the message (the enum name, or the library's error string).
        family: a key of :data:`FAMILIES`.
        surfaced: False for statuses PyTorch never raises (cuRAND).
    """

    library: str
    status: str
    value: int
    text: str
    family: str
    surfaced: bool = True


def _statuses(library, rows, surfaced=True):
    return tuple(LibraryStatus(library, s, v, t or s, f, surfaced) for s, v, t, f in rows)


CUBLAS_STATUSES = _statuses(
    "cuBLAS",
    (
        ("CUBLAS_STATUS_NOT_INITIALIZED", 1, "", "cuda-oom"),
        ("CUBLAS_STATUS_ALLOC_FAILED", 3, "", "cuda-oom"),
        ("CUBLAS_STATUS_INVALID_VALUE", 7, "", "cuda-invalid-call"),
        ("CUBLAS_STATUS_ARCH_MISMATCH", 8, "", "cuda-arch"),
        ("CUBLAS_STATUS_MAPPING_ERROR", 11, "", "cuda-invalid-call"),
        ("CUBLAS_STATUS_EXECUTION_FAILED", 13, "", "cuda-async"),
        ("CUBLAS_STATUS_INTERNAL_ERROR", 14, "", "cuda-async"),
        ("CUBLAS_STATUS_NOT_SUPPORTED", 15, "", "cuda-invalid-call"),
        ("CUBLAS_STATUS_LICENSE_ERROR", 16, "", "cuda-system"),
    ),
)

CUSPARSE_STATUSES = _statuses(
    "cuSPARSE",
    (
        ("CUSPARSE_STATUS_NOT_INITIALIZED", 1, "initialization error", "cuda-oom"),
        ("CUSPARSE_STATUS_ALLOC_FAILED", 2, "out of memory", "cuda-oom"),
        ("CUSPARSE_STATUS_INVALID_VALUE", 3, "invalid value", "cuda-invalid-call"),
        ("CUSPARSE_STATUS_ARCH_MISMATCH", 4, "architecture mismatch", "cuda-arch"),
        ("CUSPARSE_STATUS_MAPPING_ERROR", 5, "mapping error", "cuda-invalid-call"),
        ("CUSPARSE_STATUS_EXECUTION_FAILED", 6, "kernel launch failure", "cuda-async"),
        ("CUSPARSE_STATUS_INTERNAL_ERROR", 7, "internal error", "cuda-async"),
        (
            "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
            8,
            "matrix type not supported",
            "cuda-invalid-call",
        ),
        ("CUSPARSE_STATUS_ZERO_PIVOT", 9, "zero pivot", "cuda-invalid-call"),
        ("CUSPARSE_STATUS_NOT_SUPPORTED", 10, "operation not supported", "cuda-invalid-call"),
        ("CUSPARSE_STATUS_INSUFFICIENT_RESOURCES", 11, "insufficient resources", "cuda-resources"),
    ),
)

CUDNN_STATUSES = _statuses(
    "cuDNN",
    (
        ("CUDNN_STATUS_NOT_INITIALIZED", 1001, "", "cuda-oom"),
        ("CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH", 1002, "", "cuda-driver"),
        ("CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH", 1003, "", "cuda-driver"),
        ("CUDNN_STATUS_DEPRECATED", 1004, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_LICENSE_ERROR", 1005, "", "cuda-system"),
        ("CUDNN_STATUS_RUNTIME_IN_PROGRESS", 1006, "", "cuda-async"),
        ("CUDNN_STATUS_RUNTIME_FP_OVERFLOW", 1007, "", "cuda-async"),
        ("CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED", 1008, "", "cuda-driver"),
        ("CUDNN_STATUS_BAD_PARAM", 2000, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_BAD_PARAM_NULL_POINTER", 2002, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH", 2008, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_NOT_SUPPORTED", 3000, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH", 3007, "", "cuda-arch"),
        ("CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING", 3008, "", "cuda-driver"),
        ("CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT", 3006, "", "cuda-resources"),
        ("CUDNN_STATUS_INTERNAL_ERROR", 4000, "", "cuda-async"),
        ("CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED", 4004, "", "cuda-oom"),
        ("CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED", 4003, "", "cuda-oom"),
        ("CUDNN_STATUS_EXECUTION_FAILED", 5000, "", "cuda-async"),
        ("CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER", 5001, "", "cuda-async"),
        ("CUDNN_STATUS_EXECUTION_FAILED_CUBLAS", 5002, "", "cuda-async"),
        ("CUDNN_STATUS_EXECUTION_FAILED_CUDART", 5003, "", "cuda-async"),
        # cuDNN 8 values (cudnn_ops_infer.h), still printed by PyTorch builds against cuDNN 8
        ("CUDNN_STATUS_ALLOC_FAILED", 2, "", "cuda-oom"),
        ("CUDNN_STATUS_ARCH_MISMATCH", 6, "", "cuda-arch"),
        ("CUDNN_STATUS_MAPPING_ERROR", 7, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_INVALID_VALUE", 8, "", "cuda-invalid-call"),
        ("CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING", 11, "", "cuda-driver"),
        ("CUDNN_STATUS_VERSION_MISMATCH", 13, "", "cuda-driver"),
    ),
)

CUFFT_STATUSES = _statuses(
    "cuFFT",
    (
        ("CUFFT_INVALID_PLAN", 1, "", "cuda-invalid-call"),
        ("CUFFT_ALLOC_FAILED", 2, "", "cuda-oom"),
        ("CUFFT_INVALID_TYPE", 3, "", "cuda-invalid-call"),
        ("CUFFT_INVALID_VALUE", 4, "", "cuda-invalid-call"),
        ("CUFFT_INTERNAL_ERROR", 5, "", "cuda-async"),
        ("CUFFT_EXEC_FAILED", 6, "", "cuda-async"),
        ("CUFFT_SETUP_FAILED", 7, "", "cuda-driver"),
        ("CUFFT_INVALID_SIZE", 8, "", "cuda-invalid-call"),
        ("CUFFT_UNALIGNED_DATA", 9, "", "cuda-invalid-call"),
        ("CUFFT_INCOMPLETE_PARAMETER_LIST", 10, "", "cuda-invalid-call"),
        ("CUFFT_INVALID_DEVICE", 11, "", "cuda-invalid-call"),
        ("CUFFT_PARSE_ERROR", 12, "", "cuda-invalid-call"),
        ("CUFFT_NO_WORKSPACE", 13, "", "cuda-oom"),
        ("CUFFT_NOT_IMPLEMENTED", 14, "", "cuda-invalid-call"),
        ("CUFFT_LICENSE_ERROR", 15, "", "cuda-system"),
        ("CUFFT_NOT_SUPPORTED", 16, "", "cuda-invalid-call"),
    ),
)

#: NCCL: ``ncclGetErrorString`` texts (PyTorch puts them after ``NCCL error in: <file>:<line>, ``).
NCCL_STATUSES = _statuses(
    "NCCL",
    (
        (
            "ncclUnhandledCudaError",
            1,
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
            "cuda-async",
        ),
        (
            "ncclSystemError",
            2,
            "unhandled system error (run with NCCL_DEBUG=INFO for details)",
            "cuda-peer",
        ),
        (
            "ncclInternalError",
            3,
            "internal error - please report this issue to the NCCL developers",
            "cuda-peer",
        ),
        (
            "ncclInvalidArgument",
            4,
            "invalid argument (run with NCCL_DEBUG=WARN for details)",
            "cuda-invalid-call",
        ),
        (
            "ncclInvalidUsage",
            5,
            "invalid usage (run with NCCL_DEBUG=WARN for details)",
            "cuda-invalid-call",
        ),
        ("ncclRemoteError", 6, "remote process exited or there was a network error", "cuda-peer"),
    ),
)

#: cuRAND host statuses (curand.h): PyTorch never surfaces them (see the module docstring).
CURAND_STATUSES = _statuses(
    "cuRAND",
    (
        ("CURAND_STATUS_VERSION_MISMATCH", 100, "", "cuda-driver"),
        ("CURAND_STATUS_NOT_INITIALIZED", 101, "", "cuda-invalid-call"),
        ("CURAND_STATUS_ALLOCATION_FAILED", 102, "", "cuda-oom"),
        ("CURAND_STATUS_TYPE_ERROR", 103, "", "cuda-invalid-call"),
        ("CURAND_STATUS_OUT_OF_RANGE", 104, "", "cuda-invalid-call"),
        ("CURAND_STATUS_LENGTH_NOT_MULTIPLE", 105, "", "cuda-invalid-call"),
        ("CURAND_STATUS_DOUBLE_PRECISION_REQUIRED", 106, "", "cuda-arch"),
        ("CURAND_STATUS_LAUNCH_FAILURE", 201, "", "cuda-launch"),
        ("CURAND_STATUS_PREEXISTING_FAILURE", 202, "", "cuda-async"),
        ("CURAND_STATUS_INITIALIZATION_FAILED", 203, "", "cuda-driver"),
        ("CURAND_STATUS_ARCH_MISMATCH", 204, "", "cuda-arch"),
        ("CURAND_STATUS_INTERNAL_ERROR", 999, "", "cuda-async"),
    ),
    surfaced=False,
)

LIBRARY_STATUSES: tuple = (
    CUBLAS_STATUSES + CUSPARSE_STATUSES + CUDNN_STATUSES + CUFFT_STATUSES + NCCL_STATUSES
)

_DOCS = "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html"
ASYNC_SUFFIX = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
    "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def runtime_message(name: str, text: str) -> str:
    """The message PyTorch 2.x raises for a CUDA runtime error (c10_cuda_check_implementation)."""
    help_text = (
        "\nGPU device may be out of range, do you have enough GPUs?"
        if name == "cudaErrorInvalidDevice"
        else f"\nSearch for `{name}' in {_DOCS} for more information."
    )
    return "CUDA error: " + text + help_text + ASYNC_SUFFIX


def library_message(s: LibraryStatus) -> str:
    """The message PyTorch raises for a library status (the call is a representative one)."""
    if s.library == "cuBLAS":
        return (
            f"CUDA error: {s.text} when calling `cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, "
            "&beta, c, ldc)`"
        )
    if s.library == "cuSPARSE":
        return f"CUDA error: {s.text} when calling `cusparseSpMM_bufferSize( handle, opA, opB, &alpha, descA)`"
    if s.library == "cuDNN":
        return f"cuDNN error: {s.text}"
    if s.library == "cuFFT":
        return f"cuFFT error: {s.text}"
    if s.library == "NCCL":
        detail = {
            "ncclUnhandledCudaError": "Call to CUDA function failed.",
            "ncclSystemError": "System call (e.g. socket, malloc) or external library call failed or device error. ",
            "ncclInternalError": "Internal check failed.",
            "ncclInvalidArgument": "Invalid value for an argument.",
            "ncclInvalidUsage": "This usually reflects invalid usage of NCCL library.",
            "ncclRemoteError": "A call failed possibly due to a network error or a remote process exiting "
            "prematurely.",
        }[s.status]
        return (
            f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, {s.text}, NCCL version 2.27.5"
            f"\n{s.status}: {detail}"
        )
    raise KeyError(s.library)


def family_of_message(message: str):
    """``(family id, facts dict)`` for a CUDA error message, or ``(None, {})``.

    The facts name what the message identifies: ``code`` and ``name`` for a runtime error,
        ``library`` and
    ``status`` for a library status, ``call`` for the library function PyTorch named.
    """
    found = re.search(r"Search for `(cudaError\w+)'", message)
    if found and found.group(1) in RUNTIME_FAMILY:
        name = found.group(1)
        return RUNTIME_FAMILY[name], {
            "name": name,
            "code": _RUNTIME_BY_NAME[name][0],
            "library": "CUDA runtime",
        }
    found = re.search(r"cuda runtime error \((\d+)\)", message)
    if found and int(found.group(1)) in _RUNTIME_BY_CODE:
        code, name, _ = _RUNTIME_BY_CODE[int(found.group(1))]
        return RUNTIME_FAMILY[name], {"name": name, "code": code, "library": "CUDA runtime"}
    call = re.search(r"when calling `(\w+)", message)
    facts = {"call": call.group(1)} if call else {}
    for s in LIBRARY_STATUSES:
        if s.library in ("cuBLAS", "cuDNN", "cuFFT"):
            hit = re.search(r"\b" + s.status + r"(?:_\w+)?\b", message)
            if hit and (hit.group(0) == s.status or _parent_status(hit.group(0)) is s):
                return s.family, {**facts, "library": s.library, "status": hit.group(0)}
        elif s.library == "cuSPARSE":
            if re.search(r"CUDA error: " + re.escape(s.text) + r" when calling `cusparse", message):
                return s.family, {**facts, "library": s.library, "status": s.status}
        elif s.library == "NCCL" and re.search(
            r"NCCL error in: .*?, " + re.escape(s.text), message
        ):
            return s.family, {**facts, "library": s.library, "status": s.status}
    found = re.search(r"CUDA error: (.+?)(?:\n| \(|$| when calling)", message)
    if found and found.group(1) in _RUNTIME_BY_TEXT:
        code, name, _ = _RUNTIME_BY_TEXT[found.group(1)]
        return RUNTIME_FAMILY[name], {
            **facts,
            "name": name,
            "code": code,
            "library": "CUDA runtime",
        }
    return None, {}


def _parent_status(status: str):
    """A cuDNN 9 sub-code (``CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH``) -> the longest known status it extends."""
    if any(s.status == status for s in LIBRARY_STATUSES):
        return None
    parents = [s for s in LIBRARY_STATUSES if status.startswith(s.status + "_")]
    return max(parents, key=lambda s: len(s.status), default=None)


_RUNTIME_BY_NAME = {row[1]: row for row in RUNTIME_ERRORS}
_RUNTIME_BY_CODE = {row[0]: row for row in RUNTIME_ERRORS}
_RUNTIME_BY_TEXT = {}
for _row in RUNTIME_ERRORS:  # two codes share "device kernel image is invalid": both are cuda-arch
    _RUNTIME_BY_TEXT.setdefault(_row[2], _row)


def family_patterns(family: str) -> tuple:
    """Regular expressions matching every message of ``family`` (for the catalogue entry)."""
    names = [n for n, f in RUNTIME_FAMILY.items() if f == family]
    codes = [str(_RUNTIME_BY_NAME[n][0]) for n in names if n in _RUNTIME_BY_NAME]
    texts = sorted(
        {_RUNTIME_BY_NAME[n][2] for n in names if n in _RUNTIME_BY_NAME}, key=len, reverse=True
    )
    out = []
    if names:
        out.extend(
            (
                r"Search for `(?:" + "|".join(names) + r")'",
                r"cuda runtime error \((?:" + "|".join(codes) + r")\)",
                r"CUDA error: (?:" + "|".join(re.escape(t) for t in texts) + r")(?=\n| \(|$)",
            )
        )
    for s in LIBRARY_STATUSES:
        if s.family != family:
            continue
        if s.library in ("cuBLAS", "cuDNN", "cuFFT"):
            others = [o.status for o in LIBRARY_STATUSES if o.status.startswith(s.status + "_")]
            guard = "".join(f"(?!{o[len(s.status) :]}\\b)" for o in others)
            out.append(r"\b" + s.status + guard + r"(?:_\w+)?\b")
        elif s.library == "cuSPARSE":
            out.append(r"CUDA error: " + re.escape(s.text) + r" when calling `cusparse")
        elif s.library == "NCCL":
            out.append(r"NCCL error in: .*?, " + re.escape(s.text))
    return tuple(out)


def messages():
    """Every message PyTorch can raise for the errors above.

    ``(family, exception type name, message, source)``.

    ``exception type name`` is ``"AcceleratorError"`` (runtime errors, torch >= 2.8; a
    RuntimeError), ``"RuntimeError"`` (library statuses) or ``"DistBackendError"`` (NCCL).
    """
    for _code, name, text in RUNTIME_ERRORS:
        yield (
            RUNTIME_FAMILY[name],
            "AcceleratorError",
            runtime_message(name, text),
            f"CUDA {CUDA_VERSION} {name}",
        )
    for s in LIBRARY_STATUSES:
        kind = "DistBackendError" if s.library == "NCCL" else "RuntimeError"
        yield s.family, kind, library_message(s), f"{s.library} {s.status}"
