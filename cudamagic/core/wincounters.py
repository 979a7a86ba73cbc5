"""Per-process GPU memory from Windows' own counters, where NVML (and so nvidia-smi) says N/A.

Under the WDDM driver model Windows, not the NVIDIA driver, manages GPU memory, and NVML reports
each process's ``usedGpuMemory`` as not available. Windows itself counts it: the performance-counter
set ``GPU Process Memory`` (what Task Manager's "Dedicated GPU memory" column shows) has one
instance per process and GPU adapter, named ``pid_<PID>_luid_<HIGH>_<LOW>_phys_<N>``, with the
counters

* ``Dedicated Usage``: bytes of the adapter's own memory (VRAM) the process holds;
* ``Shared Usage``: bytes of system RAM the adapter uses for the process.

They are read through pywin32's ``win32pdh`` (the Performance Data Helper API), imported only on
Windows by :class:`PdhCounterSource`. Everything else here is plain parsing, tested with a fake
source.

The seam: :func:`read_process_memory` asks the source set with :func:`set_source` (tests) or, on
    Windows,
a :class:`PdhCounterSource` made on first use. A source has ``read() -> {instance name: (dedicated
bytes, shared bytes)}`` and ``label``.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass, field

from . import platform
from .na import NA

COUNTER_SET = "GPU Process Memory"
DEDICATED = rf"\{COUNTER_SET}(*)\Dedicated Usage"
SHARED = rf"\{COUNTER_SET}(*)\Shared Usage"
#: What a reader is told the figures come from.
SOURCE_LABEL = 'Windows "GPU Process Memory" counters'

_INSTANCE = re.compile(r"^pid_(\d+)_luid_(0x[0-9a-fA-F]+)_(0x[0-9a-fA-F]+)_phys_(\d+)$")


@dataclass(frozen=True)
class ProcessGpuMemory:
    """One process's GPU memory as Windows counts it, summed over the GPU adapters it uses.

    Attributes:
        pid: process id.
        dedicated_bytes: bytes of GPU memory (VRAM) held (``Dedicated Usage``).
        shared_bytes: bytes of system RAM used by the GPU for it (``Shared Usage``).
        adapters: ``{"luid_<HIGH>_<LOW>_phys_<N>": (dedicated bytes, shared bytes)}``, one entry per
            adapter (a laptop's integrated GPU is a separate adapter).
    """

    pid: int
    dedicated_bytes: int
    shared_bytes: int
    adapters: dict = field(default_factory=dict)


def parse_instance(name: str):
    """Parse a GPU Process Memory counter instance name.

    ``"pid_10468_luid_0x00000000_0x0000D1E3_phys_0"`` -> ``(10468,
    "luid_0x00000000_0x0000D1E3_phys_0")``, or None for a name of another shape.
    """
    m = _INSTANCE.match(name.strip())
    if not m:
        return None
    return int(m.group(1)), f"luid_{m.group(2)}_{m.group(3)}_phys_{m.group(4)}"


def aggregate(values: dict) -> dict:
    """Counter values per instance -> :class:`ProcessGpuMemory` per pid.

    Args:
        values: ``{instance name: (dedicated bytes, shared bytes)}``; names of another shape are
            skipped.

    Returns:
        ``{pid: ProcessGpuMemory}``.
    """
    per_pid = {}
    for name, (dedicated, shared) in values.items():
        parsed = parse_instance(name)
        if parsed is None:
            continue
        pid, adapter = parsed
        d, s = per_pid.setdefault(pid, {}).get(adapter, (0, 0))
        per_pid[pid][adapter] = (d + int(dedicated), s + int(shared))
    return {
        pid: ProcessGpuMemory(
            pid, sum(v[0] for v in ads.values()), sum(v[1] for v in ads.values()), ads
        )
        for pid, ads in per_pid.items()
    }


class PdhCounterSource:
    r"""Reads Windows' GPU Process Memory counters.

    Reads ``\\GPU Process Memory(*)\\Dedicated Usage`` and ``Shared Usage`` with ``win32pdh``
    (Windows only).

    Raises:
        ImportError: pywin32 is not installed (``pip install pywin32``).
        pywintypes.error: the counter set does not exist (Windows older than 10 1709, or no WDDM 2
            driver).
    """

    label = SOURCE_LABEL

    def __init__(self):
        import win32pdh  # pywin32, Windows only

        self._pdh = win32pdh
        self._query = win32pdh.OpenQuery()
        # the English counter names work on every display language (Windows 10 and later)
        add = getattr(win32pdh, "AddEnglishCounter", win32pdh.AddCounter)
        self._dedicated = add(self._query, DEDICATED)
        self._shared = add(self._query, SHARED)

    def read(self) -> dict:
        """``{instance name: (dedicated bytes, shared bytes)}`` now (``PdhCollectQueryData``)."""
        pdh = self._pdh
        pdh.CollectQueryData(self._query)
        dedicated = pdh.GetFormattedCounterArray(self._dedicated, pdh.PDH_FMT_LARGE)
        shared = pdh.GetFormattedCounterArray(self._shared, pdh.PDH_FMT_LARGE)
        return {name: (int(v), int(shared.get(name, 0))) for name, v in dedicated.items()}

    def close(self):
        """Close the PDH query."""
        with contextlib.suppress(Exception):
            self._pdh.CloseQuery(self._query)


_lock = threading.Lock()
_state = {"source": None, "error": None}


def set_source(source) -> None:
    """Use ``source`` to read the counters from now on.

    Use ``source`` (an object with ``read()`` and ``label``) from now on; None goes back to the
    default (a :class:`PdhCounterSource` on Windows, none elsewhere). Tests install a fake source
    here.
    """
    with _lock:
        old = _state["source"]
        if old is not None and old is not source and hasattr(old, "close"):
            old.close()
        _state.update(source=source, error=None)


def _source():
    with _lock:
        if _state["source"] is not None or _state["error"] is not None:
            return _state["source"] or _state["error"]
        if not platform.is_windows():
            _state["error"] = NA(
                "the GPU Process Memory counters exist only on Windows", "not_supported"
            )
        else:
            try:
                _state["source"] = PdhCounterSource()
            except ImportError:
                _state["error"] = NA(
                    "reading the Windows GPU memory counters needs pywin32: `pip install pywin32`",
                    "no_binding",
                )
            except Exception as exc:  # pywintypes.error: no such counter set on this Windows
                _state["error"] = NA(
                    f"the Windows GPU Process Memory counters are not readable ({exc})", "error"
                )
        return _state["source"] or _state["error"]


def read_process_memory():
    """GPU memory of every process Windows counts, or NA.

    GPU memory of every process Windows counts: ``{pid: ProcessGpuMemory}``, or NA with the reason
    (not Windows, pywin32 missing, counters not readable). Never raises.
    """
    src = _source()
    if isinstance(src, NA):
        return src
    try:
        return aggregate(src.read())
    except Exception as exc:
        return NA(
            f"reading the Windows GPU Process Memory counters failed: {type(exc).__name__}: {exc}",
            "error",
        )


def source_label() -> str:
    """The label of the current source (for "GPU memory from ..." lines)."""
    src = _state["source"]
    return getattr(src, "label", SOURCE_LABEL) if src is not None else SOURCE_LABEL
