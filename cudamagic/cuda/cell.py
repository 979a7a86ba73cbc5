"""One ``%%cuda`` cell from start to end: save, build a PyTorch extension, or compile and run."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time

from ..core import nvcc
from ..core.na import is_na
from ..core.platform import split_command_line
from ..core.progress import ProgressLine
from . import build, toolchain
from .errors import CudaProgramError, CudaUsageError
from .result import ProgramRun, Saved, Skipped, TorchBuild
from .run import run_program
from .torchext import build_extension, check_prereqs

_PERM_RE = re.compile(r"ERR_NVGPUCTRPERM")
#: What to do about Nsight Compute's ERR_NVGPUCTRPERM (no access to the GPU performance counters).
PERM_HELP = (
    "Nsight Compute may not read the GPU performance counters (ERR_NVGPUCTRPERM); run as root, "
    "set `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
    "(https://developer.nvidia.com/ERR_NVGPUCTRPERM), or use --profile nsys."
)


_TOOLS = {"ncu": "Nsight Compute (ncu)", "nsys": "Nsight Systems (nsys)"}


def run_cell(cell: str, opts, ws, settings, user_ns: dict):
    """Do what ``opts`` asks with the cell body ``cell``.

    Args:
        cell: the cell's text below the ``%%cuda`` line.
        opts: the checked :class:`.options.CudaOptions`.
        ws: the :class:`.cache.Workspace`.
        settings: the ``CudaMagics`` configurable.
        user_ns: the user's namespace (``--torch`` binds its functions there).

    Returns:
        A :class:`.result.Saved`, :class:`.result.Skipped`, :class:`.result.TorchBuild` or
        :class:`.result.ProgramRun`.

    Raises:
        CudaUsageError: missing tools, an impossible architecture, a stale build lock.
        CudaCompileError, CudaProgramError: the cell's code failed (see :mod:`.errors`).
    """
    __tracebackhide__ = True  # noqa: F841
    if opts.save:
        return Saved(opts.save, ws.save(opts.save, cell))
    why = missing(opts.skip_without) if opts.skip_without else ""
    if why:
        return Skipped(why)
    if opts.torch:
        return _torch(cell, opts, ws, settings, user_ns)
    return _program(cell, opts, ws, settings)


def _torch(cell: str, opts, ws, settings, user_ns: dict) -> TorchBuild:
    tk = check_prereqs(cell, lambda: toolchain.toolkit(cache_dir=ws.root))
    archs = toolchain.choose_archs(tk, opts.arch) if tk else ()
    start = time.monotonic()
    with ProgressLine("%%cuda", "cuda", "PyTorch extension build", terminal=True) as progress:
        module, cached = build_extension(
            cell, opts.torch, ws, archs, tk, progress, settings.cuda_cache_max_bytes
        )
    for name in opts.torch:
        user_ns[name] = getattr(module, name)
    return TorchBuild(opts.torch, module, cached, archs, time.monotonic() - start)


def _program(cell: str, opts, ws, settings) -> ProgramRun:
    __tracebackhide__ = True  # noqa: F841
    tk = toolchain.toolkit(cache_dir=ws.root)
    # host-only code (no kernel, no CUDA call) runs anywhere: no architecture, no driver check
    device = opts.arch or build.has_device_code(cell)
    archs = toolchain.choose_archs(tk, opts.arch) if device else ()
    flags = tuple(split_command_line(settings.cuda_nvcc_flags)) + opts.nvcc_flags
    profiler = _profiler(opts.profile)
    start = time.monotonic()
    with ProgressLine("%%cuda", "cuda", "nvcc build", terminal=True) as progress:
        exe, cached, warnings = build.compile_program(
            cell, tk, archs, flags, ws, progress, settings.cuda_cache_max_bytes
        )
    compile_s = time.monotonic() - start
    if warnings:
        print(warnings, file=sys.stderr)
    argv = [exe, *opts.args]
    report = tempfile.mkdtemp(prefix="cudamagic-profile-") if profiler else None
    if opts.profile == "ncu":
        argv = [profiler, *argv]
    elif opts.profile == "nsys":
        out = os.path.join(report, "report")
        argv = [profiler, "profile", "--stats=true", "-o", out, *argv]
    watch = _PERM_RE if profiler else None
    try:
        result = run_program(argv, opts.timeout_s, watch=watch, timeout_from=opts.timeout_from)
    except CudaProgramError as exc:
        if exc.watched:
            print(PERM_HELP, file=sys.stderr)
        raise
    finally:
        if report:
            shutil.rmtree(report, ignore_errors=True)
    if result.watched:
        print(PERM_HELP, file=sys.stderr)
    return ProgramRun(exe, cached, archs, compile_s, result.elapsed_s)


def missing(what: str) -> str:
    """Why a ``--skip-without nvcc|gpu`` cell cannot run here, or ``""``.

    Args:
        what: ``"nvcc"`` (no nvcc) or ``"gpu"`` (also no GPU that NVML sees; no CUDA context).
    """
    if is_na(nvcc.find_nvcc()):
        return (
            "this cell needs nvcc (the CUDA compiler), and none was found; "
            "`%pip install nvidia-cuda-nvcc nvidia-cuda-runtime` installs one"
        )
    if what == "gpu" and not toolchain.gpu_archs():
        return "this cell needs an NVIDIA GPU, and NVML sees none here (`%cudainfo` says why)"
    return ""


def _profiler(kind):
    if kind is None:
        return None
    path = shutil.which(kind)
    if path is None:
        raise CudaUsageError(
            f"%%cuda --profile {kind}: {_TOOLS[kind]} is not on PATH; add the CUDA toolkit's "
            "Nsight folder to PATH."
        )
    return path
