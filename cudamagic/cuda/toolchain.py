"""The toolchain ``%%cuda`` compiles with: nvcc, its version and architectures, the host compiler.

No CUDA context is created: the GPU's compute capability and the driver's CUDA version come from
NVML (:mod:`cudamagic.core.nvml`). Problems raise :class:`.errors.CudaUsageError`.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass

from ..core import nvcc, nvml, platform
from ..core.na import is_na
from .cache import cache_key, default_root
from .errors import CudaUsageError

_CCBIN = ("-ccbin", "--compiler-bindir")


def require_nvcc() -> str:
    """Path of nvcc, as ``%cudainfo`` finds it.

    Raises:
        CudaUsageError: none found; the message says how to get one.
    """
    path = nvcc.find_nvcc()
    if is_na(path):
        raise CudaUsageError(
            "%%cuda: no nvcc (the CUDA compiler) in $CUDA_HOME, $CUDA_PATH, PATH or NVIDIA's pip "
            "wheel; run `%pip install nvidia-cuda-nvcc nvidia-cuda-runtime`."
        )
    return path


@dataclass(frozen=True)
class Toolkit:
    """One nvcc.

    Attributes:
        path: nvcc's path.
        release: ``"13.0"``.
        build: ``"13.0.88"``.
        archs: the architectures it can target (``("75", ..., "121")``, ``--list-gpu-arch``).
    """

    path: str
    release: str
    build: str
    archs: tuple

    @property
    def major(self) -> int:
        """The CUDA major version."""
        return int(self.release.split(".")[0])


def _list_archs(path: str, timeout_s: float) -> tuple:
    try:
        _, out = platform.run_capped([path, "--list-gpu-arch"], timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    digits = {w.split("_", 1)[1] for w in out.split() if w.startswith("compute_")}
    return tuple(sorted(digits, key=int))


def _disk_key(path: str) -> dict | None:
    """What identifies this nvcc on disk: its path, the file it resolves to, its size and mtime."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": path, "real": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _disk_file(cache_dir: str, ident: dict) -> str:
    return os.path.join(cache_dir, "toolkit", cache_key(**ident)[:32] + ".json")


def _read_disk(cache_dir: str, ident: dict) -> Toolkit | None:
    try:
        with open(_disk_file(cache_dir, ident), encoding="utf-8") as f:
            data = json.load(f)
        if data.get("ident") != ident:
            return None
        return Toolkit(
            ident["path"], str(data["release"]), str(data["build"]), tuple(data["archs"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_disk(cache_dir: str, ident: dict, tk: Toolkit) -> None:
    target = _disk_file(cache_dir, ident)
    tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    data = {"ident": ident, "release": tk.release, "build": tk.build, "archs": list(tk.archs)}
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, target)
    except OSError:  # a read-only cache folder only costs the two nvcc calls next time
        with contextlib.suppress(OSError):
            os.remove(tmp)


def toolkit(timeout_s: float = 10.0, cache_dir: str | None = None) -> Toolkit:
    """The nvcc to use, its version and the architectures it builds.

    nvcc's answers are kept on disk under ``cache_dir/toolkit/``, keyed by nvcc's path, size and
    modification time, so a new kernel asks nvcc nothing until the toolkit changes.

    Args:
        timeout_s: seconds each nvcc query may take.
        cache_dir: the build cache folder (None: :func:`.cache.default_root`).

    Raises:
        CudaUsageError: no nvcc, or it does not answer ``nvcc -V``.
    """
    path = require_nvcc()
    cache_dir = default_root() if cache_dir is None else cache_dir
    ident = _disk_key(path)
    cached = _read_disk(cache_dir, ident) if ident is not None else None
    if cached is not None:
        return cached
    info = nvcc.nvcc_info(path, timeout_s=timeout_s)
    if is_na(info["release"]):
        raise CudaUsageError(
            f"%%cuda: {path} did not report its version ({info['release'].reason}); "
            "point CUDA_HOME at a working toolkit."
        )
    build = info["build"] if not is_na(info["build"]) else info["release"]
    tk = Toolkit(path, info["release"], str(build), _list_archs(path, timeout_s))
    if ident is not None and tk.archs:  # an answer worth keeping: both queries succeeded
        _write_disk(cache_dir, ident, tk)
    return tk


def gpu_archs() -> tuple:
    """Compute capabilities of the visible GPUs as nvcc digits (``("90",)``); empty without NVML.

    Read with ``nvmlDeviceGetCudaComputeCapability``, without a CUDA context.
    """
    count = nvml.device_count()
    if is_na(count):
        return ()
    out = []
    for i in range(int(count)):
        cc = nvml.device(i).get("compute_cap")
        if not is_na(cc):
            digits = str(cc).replace(".", "")
            if digits not in out:
                out.append(digits)
    return tuple(out)


def driver_cuda() -> tuple | None:
    """The newest CUDA the driver supports, ``(major, minor)``, or None.

    Read with ``nvmlSystemGetCudaDriverVersion``.
    """
    raw = nvml.system_info().cuda_driver_version_raw
    if is_na(raw) or raw is None:
        return None
    return (int(raw) // 1000, int(raw) % 1000 // 10)


def choose_archs(tk: Toolkit, arch: str | None) -> tuple:
    """Architectures to build for: ``arch`` (``--arch``) or the GPUs' own; ``()``: nvcc's default.

    Args:
        tk: the toolkit.
        arch: the ``--arch`` digits (``"90"``), or None.

    Raises:
        CudaUsageError: this nvcc cannot target the GPU, or the driver's CUDA major version is
            older than the toolkit's (the program would fail with "driver version is
            insufficient"). An older minor version runs what we build (we embed the GPU's SASS).
    """
    archs = (arch,) if arch else gpu_archs()
    for a in archs if tk.archs else ():
        digits = a.rstrip("af")
        if digits in tk.archs:
            continue
        lo, hi = tk.archs[0], tk.archs[-1]
        side = "too old" if int(digits) < int(lo) else "too new"
        what = "--arch" if arch else "This GPU"
        fix = "an older" if side == "too old" else "a newer"
        raise CudaUsageError(
            f"%%cuda: {what} sm_{a} (compute capability {digits[:-1]}.{digits[-1]}) is {side} "
            f"for nvcc {tk.release} at {tk.path}, which builds sm_{lo} to sm_{hi}; "
            f"set CUDA_HOME to {fix} CUDA toolkit."
        )
    drv = driver_cuda()
    if archs and drv is not None and drv[0] < tk.major:
        raise CudaUsageError(
            f"%%cuda: the NVIDIA driver supports CUDA up to {drv[0]}.{drv[1]}, older than nvcc "
            f"{tk.release}; update the driver or set CUDA_HOME to a CUDA {drv[0]}.x toolkit."
        )
    return archs


def gencode_flags(archs) -> list:
    """``-gencode arch=compute_XX,code=[sm_XX,compute_XX]`` per architecture (SASS plus PTX)."""
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=[sm_{a},compute_{a}]"]
    return flags


def msvc_compilers(env=None) -> list:
    """Windows: every 64-bit ``cl.exe`` of Visual Studio in Program Files, newest first.

    Args:
        env: the environment to read ``ProgramFiles`` from (default ``os.environ``).
    """
    if not platform.is_windows():
        return []
    env = os.environ if env is None else env
    tail = ("Microsoft Visual Studio", "*", "*", "VC", "Tools", "MSVC", "*", "bin")
    found = []
    for base in filter(None, (env.get("ProgramFiles"), env.get("ProgramFiles(x86)"))):
        found += glob.glob(os.path.join(base, *tail, "Hostx64", "x64", "cl.exe"))
    return sorted(found, reverse=True)


def _vcvars_for(cl: str) -> str:
    r"""``...\VC\Tools\MSVC\<v>\bin\Hostx64\x64\cl.exe`` -> that edition's vcvars64.bat."""
    vc = cl
    for _ in range(7):  # up from cl.exe to ...\VC
        vc = os.path.dirname(vc)
    return os.path.join(vc, "Auxiliary", "Build", "vcvars64.bat")


def host_compiler_problem(nvcc_flags=(), env=None, torch: bool = False) -> str | None:
    """Why the host (CPU) code cannot be compiled here, or None.

    Windows: nvcc needs MSVC's ``cl.exe`` on PATH unless ``-ccbin`` is among ``nvcc_flags``.
    Elsewhere nvcc finds gcc itself; PyTorch's extension build needs ``$CXX`` (``c++``).

    Args:
        nvcc_flags: the extra nvcc flags of the cell.
        env: the environment to read ``PATH`` and ``CXX`` from (default ``os.environ``).
        torch: for ``--torch`` (PyTorch's extension build) rather than nvcc.
    """
    env = os.environ if env is None else env
    if not platform.is_windows():
        cxx = env.get("CXX", "c++")
        if not torch or shutil.which(cxx, path=env.get("PATH")):
            return None
        return f"%%cuda --torch: no C++ compiler ({cxx!r}) on PATH; install g++ or set CXX."
    if any(f in _CCBIN or f.startswith(tuple(c + "=" for c in _CCBIN)) for f in nvcc_flags):
        return None
    if shutil.which("cl.exe", path=env.get("PATH")):
        return None
    installed = msvc_compilers(env)
    if not installed:
        return (
            "%%cuda: no Microsoft C++ compiler (cl.exe) is installed; run `winget install "
            'Microsoft.VisualStudio.2022.BuildTools --override "--add '
            'Microsoft.VisualStudio.Workload.VCTools --includeRecommended --passive"`, then start '
            'Jupyter from the "x64 Native Tools Command Prompt for VS".'
        )
    cl = installed[0]
    ccbin = "" if torch else f", or pass --nvcc-flags \"-ccbin '{os.path.dirname(cl)}'\""
    return (
        f"%%cuda: cl.exe is not on PATH (Visual Studio's is installed at {cl}); run "
        f'`"{_vcvars_for(cl)}"` before starting Jupyter{ccbin}.'
    )
