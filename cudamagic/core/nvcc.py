"""The CUDA compiler: finding ``nvcc`` and asking it its version, for every magic.

``%cudainfo`` reports the nvcc that ``%%cuda`` compiles with: both call :func:`find_nvcc`, which
looks in ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin`` (set by the Windows installer), PATH, the Windows
installer's default folders, and NVIDIA's ``nvidia-cuda-nvcc`` pip wheel
(``site-packages/nvidia/<package>/bin/nvcc``).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess

from . import platform
from .na import NA, is_na

#: The reason :func:`find_nvcc` gives when there is none.
NOT_INSTALLED = "not installed; not needed to run PyTorch (only to compile CUDA extensions)"

#: Bytes of ``nvcc -V`` output kept; the rest is discarded.
OUTPUT_LIMIT_BYTES = 64 * 1024

_info_cache: dict = {}


def _runnable(path: str) -> str | None:
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _version_key(folder: str) -> tuple:
    """``v12.10`` -> ``(12, 10)``, so 12.10 sorts after 12.6; unparseable names sort first."""
    m = re.match(r"v?(\d+)(?:\.(\d+))?", os.path.basename(folder.rstrip("\\/")))
    return (int(m[1]), int(m[2] or 0)) if m else (-1, -1)


def windows_toolkits(env=None) -> list:
    r"""Windows: the installer's ``CUDA\vX.Y`` folders, newest first; ``[]`` elsewhere.

    Args:
        env: the environment to read ``ProgramFiles`` from (default ``os.environ``).
    """
    if not platform.is_windows():
        return []
    env = os.environ if env is None else env
    program_files = env.get("ProgramFiles") or r"C:\Program Files"
    root = os.path.join(program_files, "NVIDIA GPU Computing Toolkit", "CUDA")
    folders = [d for d in glob.glob(os.path.join(root, "v*")) if os.path.isdir(d)]
    return sorted(folders, key=_version_key, reverse=True)


def wheel_folders() -> list:
    """The ``bin`` folders of NVIDIA's pip wheels (``site-packages/nvidia/*/bin``)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [f for root in roots for f in sorted(glob.glob(os.path.join(root, "*", "bin")))]


def find_nvcc(env=None) -> str | NA:
    """Path of nvcc (``nvcc.exe`` on Windows), or NA with the reason.

    Args:
        env: the environment to read ``CUDA_HOME``, ``CUDA_PATH`` and ``PATH`` from (default
            ``os.environ``).
    """
    env = os.environ if env is None else env
    name = platform.executable_name("nvcc")
    homes = [env.get(var) for var in ("CUDA_HOME", "CUDA_PATH")]
    for home in filter(None, homes):
        found = _runnable(os.path.join(home, "bin", name))
        if found:
            return found
    found = shutil.which(name, path=env.get("PATH"))
    if found:
        return found
    folders = [os.path.join(d, "bin") for d in windows_toolkits(env)] + wheel_folders()
    for folder in folders:
        found = _runnable(os.path.join(folder, name))
        if found:
            return found
    return NA(NOT_INSTALLED, "not_installed")


def parse_nvcc_version(text):
    """``'... release 13.0, V13.0.88'`` -> ``{"release": "13.0", "build": "13.0.88"}``, or NA."""
    if not isinstance(text, str):
        return NA("nvcc printed no text", "error")
    m = re.search(r"release\s+(\d+\.\d+)\s*,\s*V(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return {"release": m.group(1), "build": m.group(2)}
    m = re.search(r"release\s+(\d+\.\d+)", text)
    if m:
        return {"release": m.group(1), "build": NA("no V<build> in nvcc output", "error")}
    snippet = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
    return NA(f"unrecognised `nvcc -V` output: {snippet!r}", "error")


def nvcc_info(path=None, timeout_s: float = 5.0) -> dict:
    """Run ``<path> -V`` and parse it.

    Answers are cached per (path, mtime, size); a time-out is not, so a later call with a longer
    limit tries again. The process tree is killed on time-out.

    Args:
        path: nvcc's path, or NA (passed through); None: :func:`find_nvcc`.
        timeout_s: seconds ``nvcc -V`` may take.

    Returns:
        ``{"path", "release", "build"}``; each may be NA (not installed, timed out, failed).
    """
    path = find_nvcc() if path is None else path
    if is_na(path):
        return {"path": path, "release": path, "build": path}
    try:
        st = os.stat(path)
    except OSError as exc:
        na = NA(f"cannot stat {path}: {exc}", "error")
        return {"path": path, "release": na, "build": na}
    key = (path, st.st_mtime_ns, st.st_size)
    if key in _info_cache:
        return dict(_info_cache[key])
    try:
        code, text = platform.run_capped([path, "-V"], timeout_s, OUTPUT_LIMIT_BYTES)
    except subprocess.TimeoutExpired:
        na = NA(
            f"`{path} -V` did not answer within {timeout_s:g} s "
            "(raise %config CudaMagics.nvcc_timeout_s to wait longer)",
            "timeout",
        )
        return {"path": path, "release": na, "build": na}
    except OSError as exc:
        parsed = NA(f"cannot run {path}: {exc}", "error")
    else:
        first = text.strip().splitlines()[0][:120] if text.strip() else "no output"
        failed = NA(f"`{path} -V` failed with exit status {code}: {first}", "error")
        parsed = parse_nvcc_version(text) if code == 0 else failed
    result = {"path": path, **(parsed if not is_na(parsed) else {"release": parsed})}
    result.setdefault("build", parsed)
    _info_cache[key] = result
    return dict(result)


def cuda_home_problem(env) -> tuple | None:
    """``(variable, what is wrong)`` when ``CUDA_HOME``/``CUDA_PATH`` has no runnable nvcc.

    Args:
        env: the environment to read the two variables from.
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
