"""The toolchain ``%%cuda`` compiles with: which nvcc, which version, which GPU architectures, and
whether
the driver can run what this nvcc builds. No CUDA context is ever created: the GPU's compute
    capability and
the driver's CUDA version come from NVML (:mod:`cudamagic.core.nvml`).
"""

from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass

from IPython.core.error import UsageError

from ..core.na import is_na
from ..core.platform import nvcc_in_folder, run_capped
from ..info.nvcc import find_nvcc as _find_nvcc_env
from ..info.nvcc import nvcc_info

NO_NVCC = (
    "%%cuda: no nvcc (the CUDA compiler) was found: not in $CUDA_HOME/bin, $CUDA_PATH/bin, on PATH or as "
    "NVIDIA's pip wheel. Install it into this kernel's environment with `%pip install "
    '"cudamagic[cuda]"` (NVIDIA\'s nvidia-cuda-nvcc wheel), or install the CUDA toolkit '
    "(https://developer.nvidia.com/cuda-downloads) and set CUDA_HOME to its folder, then run the cell again."
)


def wheel_nvcc() -> str | None:
    """``nvcc`` (``nvcc.exe``) shipped by NVIDIA's ``nvidia-cuda-nvcc`` wheel
    (``site-packages/nvidia/*/bin/``), or None.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return None
    for root in list(getattr(spec, "submodule_search_locations", None) or []):
        for folder in sorted(glob.glob(os.path.join(root, "*", "bin"))):
            cand = nvcc_in_folder(folder)
            if cand:
                return cand
    return None


def find_nvcc() -> str:
    """Path of nvcc: ``$CUDA_HOME``/``$CUDA_PATH``, PATH (as ``%cudainfo`` finds it), then the pip
    wheel.

    Raises:
        UsageError: none found; the message says how to get one.
    """
    path = _find_nvcc_env()
    if is_na(path):
        path = wheel_nvcc()
    if not path:
        raise UsageError(NO_NVCC)
    return path


@dataclass(frozen=True)
class Toolkit:
    """One nvcc: ``path``, ``release`` (``"13.0"``), ``build`` (``"13.0.88"``), ``archs``: the
    architectures it can target (``("75", "80", ..., "121")``, from ``nvcc --list-gpu-arch``).
    """

    path: str
    release: str
    build: str
    archs: tuple

    @property
    def major(self) -> int:
        return int(self.release.split(".")[0])

    @property
    def version(self) -> tuple:
        return tuple(int(p) for p in self.release.split(".")[:2])


_archs_cache: dict = {}


def _list_archs(path: str, timeout_s: float) -> tuple:
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _archs_cache:
        try:
            _, out = run_capped([path, "--list-gpu-arch"], timeout_s)
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        _archs_cache[key] = tuple(
            sorted({w.split("_", 1)[1] for w in out.split() if w.startswith("compute_")}, key=int)
        )
    return _archs_cache[key]


def _disk_key(path: str) -> dict | None:
    """What identifies this nvcc on disk: its path, the file it resolves to, that file's size and mtime."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return {"path": path, "real": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _disk_file(cache_dir: str, ident: dict) -> str:
    import hashlib
    import json

    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return os.path.join(cache_dir, "toolkit", digest + ".json")


def _read_disk(cache_dir: str, ident: dict) -> Toolkit | None:
    import json

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
    import json
    import uuid

    target = _disk_file(cache_dir, ident)
    tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(
                {"ident": ident, "release": tk.release, "build": tk.build, "archs": list(tk.archs)},
                f,
            )
        os.replace(tmp, target)
    except OSError:  # a read-only cache folder only costs the two nvcc calls next time
        try:
            os.remove(tmp)
        except OSError:
            pass


def toolkit(timeout_s: float = 10.0, cache_dir: str | None = None) -> Toolkit:
    """The nvcc to use, its version and the architectures it builds.

    nvcc's answers to ``nvcc -V`` and ``nvcc --list-gpu-arch`` are kept in memory and on disk under
    ``cache_dir/toolkit/`` (default: the ``%%cuda`` build cache, ``~/.cache/cudamagic/cuda``), keyed
    by nvcc's path and the size and modification time of the file it resolves to, so a new kernel
    asks nvcc nothing until the toolkit changes.

    Args:
        timeout_s: seconds each nvcc query may take. cache_dir: the build cache folder (None: the
            default).

    Raises:
        UsageError: no nvcc, or it does not answer ``nvcc -V``.
    """
    path = find_nvcc()
    if cache_dir is None:
        from .build import default_root

        cache_dir = default_root()
    ident = _disk_key(path)
    if ident is not None:
        cached = _read_disk(cache_dir, ident)
        if cached is not None:
            return cached
    info = nvcc_info(path, timeout_s=timeout_s)
    if is_na(info["release"]):
        raise UsageError(
            f"%%cuda: {path} did not report its version ({info['release'].reason}). Check the "
            "installation (`nvcc -V` in a terminal) or point CUDA_HOME at a working toolkit."
        )
    build = info["build"] if not is_na(info["build"]) else info["release"]
    tk = Toolkit(path, info["release"], str(build), _list_archs(path, timeout_s))
    if ident is not None and tk.archs:  # an answer worth keeping: both queries succeeded
        _write_disk(cache_dir, ident, tk)
    return tk


def gpu_archs() -> tuple:
    """Compute capabilities of the visible GPUs as nvcc digits (``("90",)``), from NVML without a
    CUDA context (``nvmlDeviceGetCudaComputeCapability``); empty when NVML or the driver is absent.
    """
    from ..core import nvml

    count = nvml.device_count()
    if is_na(count):
        return ()
    out = []
    for i in range(int(count)):
        cc = nvml.device(i).get("compute_cap")
        if not is_na(cc):
            major, minor = str(cc).split(".")
            if f"{major}{minor}" not in out:
                out.append(f"{major}{minor}")
    return tuple(out)


def driver_cuda():
    """The newest CUDA the driver supports as ``(major, minor)`` (``nvmlSystemGetCudaDriverVersion``), or None."""
    from ..core import nvml

    info = nvml.system_info()
    raw = info.cuda_driver_version_raw
    if is_na(raw) or raw is None:
        return None
    raw = int(raw)
    return (raw // 1000, raw % 1000 // 10)


def choose_archs(tk: Toolkit, arch: str | None) -> tuple:
    """Architectures to build for: ``arch`` (``--arch``) or the GPUs' own; ``()`` means nvcc's
    default (no GPU).

    Raises:
        UsageError: this nvcc cannot target the GPU (too old or too new for it), or the driver's
            CUDA is an older major version than the toolkit's (the program would fail with "driver
            version is insufficient"). A driver of the same major version but an older minor runs
            the code we build (CUDA minor-version compatibility: we embed the GPU's own SASS).
    """
    archs = (arch,) if arch else gpu_archs()
    if tk.archs:
        for a in archs:
            digits = a.rstrip("af")
            if digits not in tk.archs:
                lo, hi = tk.archs[0], tk.archs[-1]
                side = "too old" if int(digits) < int(lo) else "too new"
                what = "--arch" if arch else "This GPU"
                raise UsageError(
                    f"%%cuda: {what} sm_{a} (compute capability {digits[:-1]}.{digits[-1]}) is {side} for nvcc "
                    f"{tk.release} at {tk.path}, which builds sm_{lo} to sm_{hi}. "
                    + (
                        "Install an older CUDA toolkit (CUDA 12.x still builds sm_50 to sm_70 GPUs) and set "
                        "CUDA_HOME to it."
                        if side == "too old"
                        else "Install a newer CUDA toolkit (or `%pip install -U nvidia-cuda-nvcc`) and set CUDA_HOME "
                        "to it."
                    )
                    + (" Or pass a supported --arch." if not arch else "")
                )
    drv = driver_cuda()
    if archs and drv is not None and drv[0] < tk.major:
        raise UsageError(
            f"%%cuda: the NVIDIA driver supports CUDA up to {drv[0]}.{drv[1]}, older than nvcc {tk.release}: the "
            'program would fail at run time with "CUDA driver version is insufficient for CUDA runtime '
            f'version". Update the driver, or use a CUDA {drv[0]}.x toolkit (set CUDA_HOME to it).'
        )
    return archs


def gencode_flags(archs) -> list:
    """``-gencode arch=compute_XX,code=[sm_XX,compute_XX]`` per architecture (SASS for the GPU plus PTX)."""
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=[sm_{a},compute_{a}]"]
    return flags
