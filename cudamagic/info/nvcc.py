"""The CUDA toolkit's compiler: finding ``nvcc``, running ``nvcc -V`` safely (time limit and capped
output through :func:`cudamagic.core.platform.run_capped`, cached answer) and checking ``CUDA_HOME``/``CUDA_PATH``.
"""

from __future__ import annotations

import os
import subprocess

from ..core import platform
from ..core.na import NA, is_na
from .versions import parse_nvcc_version

_nvcc_cache = {}


def find_nvcc(env=None):
    """Path of ``nvcc``: ``$CUDA_HOME/bin/nvcc``, ``$CUDA_PATH/bin/nvcc``, then PATH, then (Windows)
    the CUDA installer's default folders (:func:`cudamagic.core.platform.find_nvcc`); NA if none.
    """
    found = platform.find_nvcc(env)
    if found:
        return found
    return NA(
        "not installed; not needed to run PyTorch (only to compile CUDA extensions)",
        "not_installed",
    )


_NVCC_OUTPUT_LIMIT = 64 * 1024  # bytes of `nvcc -V` output kept; the rest is discarded


def nvcc_info(path=None, timeout_s: float = 5.0) -> dict:
    """Run ``<path> -V`` (time limit ``timeout_s`` seconds) and parse it.

    Successful and unparseable answers are cached per (path, mtime, size); a time-out is not, so a
    later call with a longer limit tries again. Output beyond 64 KiB is discarded and the whole
    process tree is killed on time-out.

    Returns ``{"path", "release", "build"}``; each may be NA (not installed, timed out, failed,
    garbage).
    """
    path = find_nvcc() if path is None else path
    if is_na(path):
        return {"path": path, "release": path, "build": path}
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError as exc:
        na = NA(f"cannot stat {path}: {exc}", "error")
        return {"path": path, "release": na, "build": na}
    if key in _nvcc_cache:
        return dict(_nvcc_cache[key])
    cache = True
    try:
        code, text = platform.run_capped([path, "-V"], timeout_s, limit_bytes=_NVCC_OUTPUT_LIMIT)
        if code != 0:
            first = text.strip().splitlines()[0][:120] if text.strip() else "no output"
            parsed = NA(f"`{path} -V` failed with exit status {code}: {first}", "error")
        else:
            parsed = parse_nvcc_version(text)
    except subprocess.TimeoutExpired:
        parsed = NA(
            f"`{path} -V` did not answer within {timeout_s:g} s "
            "(raise %config CudaMagics.nvcc_timeout_s to wait longer)",
            "timeout",
        )
        cache = False
    except OSError as exc:
        parsed = NA(f"cannot run {path}: {exc}", "error")
    if is_na(parsed):
        result = {"path": path, "release": parsed, "build": parsed}
    else:
        result = {"path": path, **parsed}
    if cache:
        _nvcc_cache[key] = result
    return dict(result)


def cuda_home_problem(env):
    """NA-free check of ``CUDA_HOME``/``CUDA_PATH``: a message when one is set but has no runnable
    ``bin/nvcc`` (``torch.utils.cpp_extension`` builds with ``CUDA_HOME``), else None.
    """
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if not home:
            continue
        if not os.path.isdir(home):
            return var, f"{var}={home} does not exist"
        nvcc = os.path.join(home, "bin", "nvcc")
        if not os.path.isfile(nvcc):
            return var, f"{var}={home} has no bin/nvcc"
        if not os.access(nvcc, os.X_OK):
            return var, f"{nvcc} is not executable"
    return None
