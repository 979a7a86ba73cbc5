"""Regenerate ``cudamagic/core/cuda_runtime_errors.py`` from a CUDA toolkit.

Names and codes come from ``enum cudaError`` in the toolkit's ``include/driver_types.h``; each text
is what ``cudaGetErrorString`` of the toolkit's ``libcudart`` returns for that code (no GPU or
driver is needed to ask). PyTorch prints that text after ``CUDA error: ``
(c10/cuda/CUDAException.cpp: c10_cuda_check_implementation).

Usage::

    python scripts/gen_cuda_errors.py [/usr/local/cuda]      # writes the module, prints how many
    codes
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys

OUT = os.path.join(os.path.dirname(__file__), "..", "cudamagic", "core", "cuda_runtime_errors.py")


def read_toolkit(root: str):
    """``(version, [(code, name, text), ...])`` for the toolkit at ``root``."""
    header = open(os.path.join(root, "include", "driver_types.h")).read()
    body = header[header.index("enum __device_builtin__ cudaError") :]
    body = body[: body.index("};")]
    libs = sorted(
        glob.glob(os.path.join(root, "lib64", "libcudart.so.*"))
        + glob.glob(os.path.join(root, "lib", "libcudart.so.*"))
    )
    lib = ctypes.CDLL(libs[0])
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaRuntimeGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    v = ctypes.c_int()
    lib.cudaRuntimeGetVersion(ctypes.byref(v))
    version = f"{v.value // 1000}.{v.value % 1000 // 10}"
    rows = []
    for name, code in re.findall(r"(cudaError\w+)\s*=\s*(\d+)", body):
        if (
            name == "cudaErrorApiFailureBase"
        ):  # a base value for API-failure codes, not an error of its own
            continue
        rows.append((int(code), name, lib.cudaGetErrorString(int(code)).decode()))
    return version, rows


def main(argv):
    root = (
        argv[1]
        if len(argv) > 1
        else os.path.realpath(
            "/usr/local/cuda"
            if os.path.isdir("/usr/local/cuda")
            else sorted(glob.glob("/usr/local/cuda-*"))[-1]
        )
    )
    version, rows = read_toolkit(root)
    lines = [
        '"""The CUDA runtime\'s error codes and texts, as data (generated: do not edit by hand).',
        "",
        f"Source: CUDA {version} toolkit. Names and codes: ``enum cudaError`` in "
        "``include/driver_types.h``; texts: what",
        f"``cudaGetErrorString(code)`` of ``libcudart`` {version} returns, which PyTorch prints "
        "after ``CUDA error: ``",
        "(c10/cuda/CUDAException.cpp: c10_cuda_check_implementation). Regenerate with",
        "``python scripts/gen_cuda_errors.py /usr/local/cuda-X.Y``; the families are in "
        ":mod:`.cudaerrors`.",
        '"""',
        "",
        f'CUDA_VERSION = "{version}"',
        "",
        "#: ``(code, enum name, cudaGetErrorString text)``, in enum order.",
        "RUNTIME_ERRORS: tuple = (",
    ]
    lines += [f"    ({code}, {name!r}, {text!r})," for code, name, text in rows]
    lines.append(")")
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(
        f"{len(rows)} runtime error codes from CUDA {version} ({root}) -> {os.path.normpath(OUT)}"
    )


if __name__ == "__main__":
    main(sys.argv)
