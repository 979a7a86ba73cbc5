"""PyTorch's CUDA wheel indexes per release, and the install command picked from them.

Used by ``%cudainfo``'s findings and by the error explainer, so that both name an index that has
wheels for the installed PyTorch (never ``cu121`` for torch 2.13, which has none there).

Sources:
- :data:`TORCH_CUDA_WHEELS`: the "Release Compatibility Matrix" of PyTorch's ``RELEASE.md``
  (https://github.com/pytorch/pytorch/blob/main/RELEASE.md, the edition listing 2.13 and 2.14),
  stable and experimental CUDA columns; both are published at
  ``https://download.pytorch.org/whl/cuXYZ``.
- :data:`WHEEL_ARCHS`: the same file's "PyTorch CUDA Support Matrix" (12.6: Maxwell to Hopper;
  13.0 and 13.2: Turing to Blackwell 12.0 with PTX) and ``torch.cuda.get_arch_list()`` of the
  published builds (cu118: sm_37 to sm_90; cu121/cu124: sm_50 to sm_90; cu128: sm_75 to sm_120).
- :data:`MIN_DRIVER`: NVIDIA's CUDA release notes (minor version compatibility).
"""

from __future__ import annotations

import re

#: torch release (major, minor) -> CUDA versions with wheels on ``download.pytorch.org/whl/cuXYZ``.
#: From 2.1 (October 2023); a newer torch than the last row is taken to have the last row's.
TORCH_CUDA_WHEELS = {
    (2, 1): ((11, 8), (12, 1)),
    (2, 2): ((11, 8), (12, 1)),
    (2, 3): ((11, 8), (12, 1)),
    (2, 4): ((11, 8), (12, 1), (12, 4)),
    (2, 5): ((11, 8), (12, 1), (12, 4)),
    (2, 6): ((11, 8), (12, 4), (12, 6)),
    (2, 7): ((11, 8), (12, 6), (12, 8)),
    (2, 8): ((12, 6), (12, 8), (12, 9)),
    (2, 9): ((12, 6), (12, 8), (13, 0)),
    (2, 10): ((12, 6), (12, 8), (13, 0)),
    (2, 11): ((12, 6), (12, 8), (13, 0)),
    (2, 12): ((12, 6), (13, 0), (13, 2)),
    (2, 13): ((12, 6), (13, 0), (13, 2)),
}

#: wheel CUDA version -> (oldest, newest) compute capability its kernels cover (Linux x86).
#: The newest one's major runs every minor above it (cubins run on later minors of a major).
WHEEL_ARCHS = {
    (11, 8): ((3, 7), (9, 0)),
    (12, 1): ((5, 0), (9, 0)),
    (12, 4): ((5, 0), (9, 0)),
    (12, 6): ((5, 0), (9, 0)),
    (12, 8): ((7, 5), (12, 0)),
    (12, 9): ((7, 5), (12, 0)),
    (13, 0): ((7, 5), (12, 0)),
    (13, 2): ((7, 5), (12, 0)),
}

#: Minimum Linux driver for each CUDA major (CUDA minor version compatibility).
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

#: Every CUDA version some release in the table has wheels for, oldest first.
WHEEL_CUDA = sorted({c for row in TORCH_CUDA_WHEELS.values() for c in row})

INDEX_URL = "https://download.pytorch.org/whl/"


def tag(cuda) -> str:
    """``(12, 6)`` -> ``'cu126'``, the index's name."""
    return f"cu{cuda[0]}{cuda[1]}"


def parse_version_tuple(text):
    """``'12.1.105'`` or ``'2.13.0+cpu'`` -> ``(12, 1)``; None when unreadable (None, NA, text)."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(text))
    return (int(m[1]), int(m[2])) if m else None


def wheel_cudas(version) -> tuple:
    """The CUDA versions with wheels for torch ``version`` (``'2.13.0'``); ``()`` if older than 2.1.

    A release newer than the table's last row is taken to have the last row's (the table lags).
    """
    rel = parse_version_tuple(version)
    if rel is None or rel < min(TORCH_CUDA_WHEELS):
        return ()
    return TORCH_CUDA_WHEELS.get(rel) or TORCH_CUDA_WHEELS[max(TORCH_CUDA_WHEELS)]


def pip_command(pin: str, cuda) -> str:
    """The install command: ``pip install --force-reinstall torch==2.13.0 --index-url .../cu126``.

    Args:
        pin: the torch version to pin (``'2.13.0'``, or ``'2.7.*'`` for another release).
        cuda: (major, minor) of the wheel's CUDA.
    """
    return f"pip install --force-reinstall torch=={pin} --index-url {INDEX_URL}{tag(cuda)}"


def base_version(version: str) -> str:
    """``'2.13.0+cpu'`` -> ``'2.13.0'`` (pip's local label dropped)."""
    return str(version).split("+", 1)[0].strip()


def _driver_tuple(text):
    """``'450.80.02'`` -> ``(450, 80, 2)``; None if unreadable."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)*)\s*", text) if isinstance(text, str) else None
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def wheel_runs_on_driver(wheel, driver_cuda, driver_version=None) -> bool:
    """True if a PyTorch wheel built for CUDA ``wheel`` (major, minor) runs on this driver.

    A driver runs every CUDA release up to the one it reports (``driver_cuda``, from
    ``nvmlSystemGetCudaDriverVersion``). A newer minor of the same major runs only through CUDA
    minor version compatibility, which needs the driver to be at least :data:`MIN_DRIVER` of that
    major (``driver_version`` as ``nvidia-smi`` prints it, e.g. ``'450.66'``); with an unknown
    ``driver_version`` that is not assumed.
    """
    if driver_cuda is None:
        return False
    if wheel <= driver_cuda:
        return True
    if wheel[0] != driver_cuda[0] or wheel[0] not in MIN_DRIVER:
        return False
    have, need = _driver_tuple(driver_version), _driver_tuple(MIN_DRIVER[wheel[0]])
    return have is not None and have >= need


def best_for_driver(driver_cuda, driver_version=None, cudas=None):
    """The wheel CUDA to recommend for a driver supporting CUDA ``driver_cuda`` (major, minor).

    Among ``cudas`` (default: every one in :data:`WHEEL_CUDA`): the newest not newer than the
    driver's CUDA within its major; else the oldest newer minor of that major, which runs through
    minor version compatibility when ``driver_version`` reaches :data:`MIN_DRIVER`; else the newest
    older one. Returns (major, minor), or None when none runs on the driver.
    """
    if driver_cuda is None:
        return None
    pool = WHEEL_CUDA if cudas is None else cudas
    runs = [w for w in pool if wheel_runs_on_driver(w, driver_cuda, driver_version)]
    same_major_native = [w for w in runs if w <= driver_cuda and w[0] == driver_cuda[0]]
    by_minor_compat = [w for w in runs if w > driver_cuda]
    if same_major_native:
        return max(same_major_native)
    if by_minor_compat:
        return min(by_minor_compat)
    return max(runs, default=None)


def pick_for_driver(version, driver_cuda, driver_version=None):
    """``(pin, cuda)`` of the wheel to install for torch ``version`` on this driver, or None.

    The installed release first (pinned to the installed version); when none of its wheels runs on
    the driver, the newest older release that has one (pinned as ``'2.7.*'``).
    """
    mine = best_for_driver(driver_cuda, driver_version, wheel_cudas(version))
    if mine is not None:
        return base_version(version), mine
    rel = parse_version_tuple(version)
    for older in sorted(TORCH_CUDA_WHEELS, reverse=True):
        if rel is not None and older >= rel:
            continue
        got = best_for_driver(driver_cuda, driver_version, TORCH_CUDA_WHEELS[older])
        if got is not None:
            return f"{older[0]}.{older[1]}.*", got
    return None


def covers(cuda, cc) -> bool:
    """True if the wheels for CUDA ``cuda`` have kernels for compute capability ``cc`` ((8, 6))."""
    low, high = WHEEL_ARCHS.get(cuda, ((99, 0), (0, 0)))
    return low <= cc and (cc <= high or cc[0] == high[0])


def pick_for_arch(cc, version, driver_cuda=None, driver_version=None):
    """``(pin, cuda)`` of a wheel with kernels for compute capability ``cc``, or None.

    The installed release first (pinned to the installed version), preferring a wheel this driver
    runs, then the lowest CUDA; else the oldest newer release that covers ``cc`` (a GPU newer than
    the release), else the newest older one (a GPU its release dropped), pinned as ``'2.7.*'``.
    """

    def best(cudas):
        ok = [c for c in cudas if covers(c, cc)]
        runs = [c for c in ok if wheel_runs_on_driver(c, driver_cuda, driver_version)]
        return min(runs or ok, default=None)

    mine = best(wheel_cudas(version))
    if mine is not None:
        return base_version(version), mine
    rel = parse_version_tuple(version) or max(TORCH_CUDA_WHEELS)
    newer = sorted(r for r in TORCH_CUDA_WHEELS if r > rel)
    older = sorted((r for r in TORCH_CUDA_WHEELS if r < rel), reverse=True)
    for other in newer + older:
        got = best(TORCH_CUDA_WHEELS[other])
        if got is not None:
            return f"{other[0]}.{other[1]}.*", got
    return None
