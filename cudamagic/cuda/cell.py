"""One ``%%cuda`` cell from start to end: save, build a PyTorch extension, or compile and run a program."""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time

from IPython.core.error import UsageError

from ..core.platform import split_command_line
from . import build, toolchain
from .errors import CudaProgramError
from .progress import Progress

_PERM_RE = re.compile(r"ERR_NVGPUCTRPERM")
# : What to do about Nsight Compute's ERR_NVGPUCTRPERM (no permission for the GPU performance
# counters).
PERM_HELP = (
    "Nsight Compute could not read the GPU performance counters (ERR_NVGPUCTRPERM): by default only "
    "root may. Run the kernel as root, or have an administrator set the driver option "
    "`options nvidia NVreg_RestrictProfilingToAdminUsers=0` (see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM), or use --profile nsys, which needs no counters."
)


def run_cell(cell: str, opts, ws, settings, user_ns: dict, last: dict):
    """Do what ``opts`` asks with the cell body ``cell``; fill ``last`` with what happened.

    Returns:
        :class:`.magic.Saved`, :class:`.magic.TorchBuild`, :class:`.magic.Skipped`
        (``--skip-without`` and that is missing), or None after a program ran.

    Raises:
        UsageError: missing tools, an impossible architecture, a stale build lock.
        CudaCompileError, CudaProgramError: the cell's code failed (see :mod:`.errors`).
    """
    __tracebackhide__ = True  # noqa: F841
    from .magic import Saved, TorchBuild

    if opts.save:
        path = ws.save(opts.save, cell)
        last.update(kind="save", path=path)
        return Saved(opts.save, path)
    if opts.skip_without:
        why = missing(opts.skip_without)
        if why:
            from .magic import Skipped

            last.update(kind="skipped", reason=why)
            return Skipped(why)
    if opts.torch:
        from .torchext import build_extension, check_prereqs

        tk = check_prereqs(cell, lambda: toolchain.toolkit(cache_dir=ws.root))
        archs = toolchain.choose_archs(tk, opts.arch) if tk else ()
        start = time.monotonic()
        with Progress("PyTorch extension build") as progress:
            module, cached = build_extension(
                cell, opts.torch, ws, archs, tk, progress, settings.cuda_cache_max_bytes
            )
        for name in opts.torch:
            user_ns[name] = getattr(module, name)
        last.update(kind="torch", cached=cached, archs=archs, compile_s=time.monotonic() - start)
        return TorchBuild(opts.torch, module, cached, time.monotonic() - start)

    tk = toolchain.toolkit(cache_dir=ws.root)
    # host-only code (no kernel, no CUDA call) runs on any machine: no architecture, no driver check
    archs = (
        toolchain.choose_archs(tk, opts.arch) if opts.arch or build.has_device_code(cell) else ()
    )
    flags = (
        tuple(split_command_line(settings.cuda_nvcc_flags)) + opts.nvcc_flags
        if settings.cuda_nvcc_flags
        else opts.nvcc_flags
    )
    profiler = _profiler(opts.profile)
    start = time.monotonic()
    with Progress("nvcc build") as progress:
        exe, cached, warnings = build.compile_program(
            cell, tk, archs, flags, ws, progress, settings.cuda_cache_max_bytes
        )
    compile_s = time.monotonic() - start
    last.update(kind="program", path=exe, cached=cached, archs=archs, compile_s=compile_s)
    if warnings:
        print(warnings, file=sys.stderr)
    argv = [exe, *opts.args]
    report = None
    if profiler:
        report = tempfile.mkdtemp(prefix="cudamagic-profile-")
        argv = (
            [profiler, *argv]
            if opts.profile == "ncu"
            else [profiler, "profile", "--stats=true", "-o", os.path.join(report, "report"), *argv]
        )
    from .run import run_program

    try:
        result = run_program(
            argv,
            opts.timeout_s,
            watch=_PERM_RE if profiler else None,
            timeout_from=opts.timeout_from,
        )
    except CudaProgramError as exc:
        if getattr(exc, "watched", None):
            print(PERM_HELP, file=sys.stderr)
        raise
    finally:
        if report:
            shutil.rmtree(report, ignore_errors=True)
    if result.watched:
        print(PERM_HELP, file=sys.stderr)
    last.update(run_s=result.elapsed_s)
    return None


def missing(what: str) -> str:
    """Why a ``--skip-without nvcc|gpu`` cell cannot run here, or ``""``: no nvcc; for ``gpu`` also
    no GPU that NVML sees (no CUDA context is created).
    """
    try:
        toolchain.find_nvcc()
    except UsageError:
        return (
            "this cell needs nvcc (the CUDA compiler), and none was found in $CUDA_HOME, $CUDA_PATH, on PATH "
            'or as NVIDIA\'s pip wheel (`%pip install "cudamagic[cuda]"` installs one)'
        )
    if what == "gpu" and not toolchain.gpu_archs():
        return "this cell needs an NVIDIA GPU, and NVML sees none here (`%cudainfo` says why)"
    return ""


def _profiler(kind):
    if kind is None:
        return None
    path = shutil.which(kind)
    if path is None:
        tool = "Nsight Compute (ncu)" if kind == "ncu" else "Nsight Systems (nsys)"
        raise UsageError(
            f"%%cuda --profile {kind}: {tool} is not on PATH. It comes with the CUDA toolkit "
            "(`apt-get install cuda-nsight-compute-13-0` / `cuda-nsight-systems-13-0`) or from "
            "https://developer.nvidia.com/nsight-compute; add its folder to PATH, then run the cell again."
        )
    return path
