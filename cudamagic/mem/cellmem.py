"""Per-cell memory: what a cell did to GPU (and CPU) memory, and getting memory back.

This module holds the logic behind ``%%cudamem`` and ``%cudamem on|off|history|free``.
It imports nothing of IPython: functions that need the shell receive it.

Where the numbers come from
---------------------------
* **GPU**: PyTorch's caching allocator, through :class:`TorchCudaStats`, which reads
  ``torch.cuda.memory_stats_as_nested_dict(device)`` (the same counters as
  ``torch.cuda.memory_stats()``: ``allocated_bytes.all.current``/``.peak``/``.allocated``,
  ``reserved_bytes.all.current``, ``num_alloc_retries``, ``num_ooms``). It is read
  **only** when ``torch`` is already in ``sys.modules`` and ``torch.cuda.is_initialized()``
  is true, so measuring never imports torch and never creates a CUDA context. Devices are
  CUDA ordinals (``cuda:0`` ...), the numbering of ``torch.cuda``.
* **Process GPU memory as NVML sees it** (CUDA context + non-PyTorch allocations):
  :func:`cudamagic.nvml.process_gpu_memory`, keyed by 0-based NVML index (``nvidia-smi`` order,
  which may differ from CUDA ordinals). Read only when CUDA is initialised in this process.
* **CPU**: the process resident set size in bytes (``/proc/self/statm`` on Linux, the figure
  ``psutil.Process().memory_info().rss`` reports; psutil elsewhere).

How the in-cell peak is measured (and what it does to ``max_memory_allocated``)
--------------------------------------------------------------------------------
By default nothing is reset: the user's own ``torch.cuda.max_memory_allocated()`` /
``memory_stats()["allocated_bytes.all.peak"]`` readings stay intact. The in-cell peak is
derived from the allocator's counters read before and after the cell:

* if the global peak rose during the cell, the new global peak *is* the in-cell peak (exact);
* if CUDA was first initialised by the cell, the counters started at zero (exact);
* if the cell allocated nothing (cumulative ``allocated_bytes.all.allocated`` unchanged),
  the peak is the allocation at the start (exact);
* otherwise the cell stayed below an earlier peak, and the counters only bound it:
  ``max(before, after) <= peak <= min(earlier peak, before + bytes allocated in the cell)``.
  The report gives the upper bound, marked as a bound (``peak_exact=False``).

``%%cudamem --reset-peak`` gets an exact figure in every case by calling
``torch.cuda.reset_peak_memory_stats(device)`` before the cell; that **does** reset the
user's ``max_memory_allocated`` (and every other ``.peak`` counter) for those devices,
and the report says so. There is no way to read an exact in-cell peak below an earlier
peak without that reset: PyTorch keeps one peak counter per device.

No polling thread is used and ``torch.cuda.empty_cache()`` is called only by
``%cudamem free`` (an explicit request).
"""

from __future__ import annotations

import ast
import gc
import inspect
import itertools
import json
import os
import re
import sys
import textwrap
import time
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from ..core.fmt import NO_MATH, TEXT_WIDTH, esc, format_bytes, html_table, na_cell_html, text_table
from ..core.na import NA, is_na, jsonable

MiB = 1 << 20

#: How many items of a list/tuple/dict are looked into when scanning for tensors.
_CONTAINER_ITEMS = 64
#: How deep containers are followed (a module or optimizer counts as one level).
_SCAN_DEPTH = 3


def _plain(obj):
    """Dataclasses/lists/tuples/dicts -> plain dicts and lists (no copying of leaves, unlike ``asdict``,
    which deep-copies and cannot copy the immutable NA)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


# ---- the torch.cuda seam ----------------------------------------------------------

@dataclass(frozen=True)
class GpuStats:
    """One reading of PyTorch's caching allocator for one device.

    All sizes are bytes. ``allocated_total_bytes`` is the cumulative number of bytes ever
    allocated (``allocated_bytes.all.allocated``); it only grows and lets us tell whether a
    cell allocated at all. ``num_alloc_retries`` (cudaMalloc retried after freeing the cache)
    and ``num_ooms`` (out-of-memory errors raised) are cumulative counts.
    """

    device: int
    allocated_bytes: int
    peak_allocated_bytes: int
    allocated_total_bytes: int
    reserved_bytes: int
    peak_reserved_bytes: int
    num_alloc_retries: int
    num_ooms: int


class TorchCudaStats:
    """The real source of allocator statistics: ``torch.cuda``, read without side effects.

    Tests replace it with a fake through :func:`set_stats_source` (the single seam for GPU
    memory statistics). Every method is safe on a machine without torch, CUDA or a GPU.
    """

    def initialized(self) -> bool:
        """True when torch is already imported and ``torch.cuda.is_initialized()``.

        Never imports torch and never initialises CUDA.
        """
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        try:
            return bool(torch.cuda.is_initialized())
        except Exception:
            return False

    def device_count(self) -> int:
        """Number of visible CUDA devices (``torch.cuda.device_count()``); call only when initialised."""
        return int(sys.modules["torch"].cuda.device_count())

    def read(self, device: int) -> GpuStats:
        """Allocator counters of CUDA ordinal ``device`` (``torch.cuda.memory_stats_as_nested_dict``).

        Call only when :meth:`initialized` is true. Reading creates no context on any device.
        """
        nested = sys.modules["torch"].cuda.memory_stats_as_nested_dict(device)
        alloc = nested.get("allocated_bytes", {}).get("all", {})
        resv = nested.get("reserved_bytes", {}).get("all", {})
        return GpuStats(
            device=device,
            allocated_bytes=int(alloc.get("current", 0)),
            peak_allocated_bytes=int(alloc.get("peak", 0)),
            allocated_total_bytes=int(alloc.get("allocated", 0)),
            reserved_bytes=int(resv.get("current", 0)),
            peak_reserved_bytes=int(resv.get("peak", 0)),
            num_alloc_retries=int(nested.get("num_alloc_retries", 0)),
            num_ooms=int(nested.get("num_ooms", 0)),
        )

    def reset_peak(self, device: int) -> None:
        """``torch.cuda.reset_peak_memory_stats(device)``: resets the user's peak counters too."""
        sys.modules["torch"].cuda.reset_peak_memory_stats(device)

    def empty_cache(self) -> None:
        """``torch.cuda.empty_cache()``: return cached, unused blocks to the driver (all devices)."""
        sys.modules["torch"].cuda.empty_cache()


_source: Any = TorchCudaStats()


def stats_source():
    """The current allocator-statistics source (a :class:`TorchCudaStats` unless a test replaced it)."""
    return _source


def set_stats_source(source) -> Any:
    """Replace the allocator-statistics source; returns the previous one (tests only).

    ``source`` needs the methods of :class:`TorchCudaStats`: ``initialized()``,
    ``device_count()``, ``read(device) -> GpuStats``, ``reset_peak(device)``, ``empty_cache()``.
    """
    global _source
    previous, _source = _source, source
    return previous


# ---- snapshots --------------------------------------------------------------------

_process = None
_statm = {"pid": None, "fd": None, "page": 0}


def _rss_statm():
    """RSS from ``/proc/self/statm`` through a kept-open descriptor (Linux; about 2 us, no open()
    per call); ``None`` where that file does not exist. Reopened after a fork."""
    pid = os.getpid()
    if _statm["pid"] != pid:
        _statm["pid"] = pid
        if _statm["fd"] is not None:  # inherited from the parent: it reads the parent's figures
            try:
                os.close(_statm["fd"])
            except OSError:
                pass
        try:
            _statm["fd"] = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
            _statm["page"] = os.sysconf("SC_PAGE_SIZE")
        except (OSError, AttributeError, ValueError):
            _statm["fd"] = None
    if _statm["fd"] is None:
        return None
    try:
        return int(os.pread(_statm["fd"], 256, 0).split()[1]) * _statm["page"]
    except (OSError, IndexError, ValueError):
        _statm["fd"] = None
        return None


def rss_bytes():
    """Resident set size of this process in bytes, or NA.

    Linux: ``/proc/self/statm`` (resident pages x page size, what ``psutil.Process().memory_info().rss``
    reports) read through a kept-open descriptor; elsewhere ``psutil``; NA if neither works.
    """
    global _process
    rss = _rss_statm()
    if rss is not None:
        return rss
    if _process is None:
        try:
            import psutil
        except ImportError as exc:
            return NA(f"psutil is not installed ({exc}); `pip install psutil`", "no_binding")
        _process = psutil.Process(os.getpid())
    try:
        return int(_process.memory_info().rss)
    except Exception as exc:  # pragma: no cover - psutil failure on an odd platform
        return NA(f"psutil could not read RSS: {exc}", "error")


@dataclass
class Snapshot:
    """Memory state at one instant.

    Attributes:
        time_s: ``time.perf_counter()`` seconds.
        gpus: ``{cuda ordinal: GpuStats}``; empty when CUDA is not initialised.
        cuda_initialized: whether CUDA was initialised in this process at that instant.
        rss_bytes: process RSS in bytes, or NA.
        peak_reset: True when ``--reset-peak`` reset the peak counters right after reading.
    """

    time_s: float
    gpus: dict
    cuda_initialized: bool
    rss_bytes: Any
    peak_reset: bool = False


def take_snapshot(source=None) -> Snapshot:
    """Read allocator counters (only if CUDA is initialised) and RSS. Never creates a context."""
    source = source or _source
    gpus = {}
    init = source.initialized()
    if init:
        for d in range(source.device_count()):
            gpus[d] = source.read(d)
    return Snapshot(time.perf_counter(), gpus, init, rss_bytes())


# ---- one cell's measurement -------------------------------------------------------

@dataclass
class GpuCellStats:
    """What one cell did on one CUDA device. Sizes in bytes, counts are per-cell differences.

    ``allocated_before_bytes`` is 0 when CUDA was initialised by the cell. ``peak_allocated_bytes``
    is the highest allocation during the cell (exact when ``peak_exact``, else an upper bound,
    see the module docstring); ``peak_over_start_bytes = peak - before``.
    """

    device: str
    allocated_before_bytes: int
    allocated_after_bytes: int
    allocated_delta_bytes: int
    peak_allocated_bytes: int
    peak_over_start_bytes: int
    peak_exact: bool
    reserved_before_bytes: int
    reserved_after_bytes: int
    reserved_delta_bytes: int
    alloc_retries: int
    ooms: int


def in_cell_peak(before: GpuStats | None, after: GpuStats, peak_reset: bool = False):
    """The peak allocation during a cell from counters read before and after it.

    Args:
        before: reading before the cell, or ``None`` if CUDA was initialised by the cell.
        after: reading after the cell.
        peak_reset: the peak counters were reset right after ``before`` was read.

    Returns:
        ``(peak_bytes, exact)``: the exact peak, or (``exact=False``) an upper bound
        ``min(before.peak, before.current + bytes allocated in the cell)``.
    """
    if before is None:
        return after.peak_allocated_bytes, True
    if peak_reset or after.peak_allocated_bytes > before.peak_allocated_bytes:
        return max(after.peak_allocated_bytes, before.allocated_bytes), True
    allocated_in_cell = after.allocated_total_bytes - before.allocated_total_bytes
    if allocated_in_cell <= 0:
        return before.allocated_bytes, True
    upper = min(before.peak_allocated_bytes, before.allocated_bytes + allocated_in_cell)
    lower = max(before.allocated_bytes, after.allocated_bytes)
    return max(upper, lower), upper <= lower


def gpu_cell_stats(before: Snapshot, after: Snapshot) -> list:
    """Per-device :class:`GpuCellStats` between two snapshots (devices seen after the cell)."""
    rows = []
    for d, a in sorted(after.gpus.items()):
        b = before.gpus.get(d)
        peak, exact = in_cell_peak(b, a, before.peak_reset)
        ab = b.allocated_bytes if b else 0
        rb = b.reserved_bytes if b else 0
        rows.append(GpuCellStats(
            device=f"cuda:{d}",
            allocated_before_bytes=ab,
            allocated_after_bytes=a.allocated_bytes,
            allocated_delta_bytes=a.allocated_bytes - ab,
            peak_allocated_bytes=peak,
            peak_over_start_bytes=peak - ab,
            peak_exact=exact,
            reserved_before_bytes=rb,
            reserved_after_bytes=a.reserved_bytes,
            reserved_delta_bytes=a.reserved_bytes - rb,
            alloc_retries=a.num_alloc_retries - (b.num_alloc_retries if b else 0),
            ooms=a.num_ooms - (b.num_ooms if b else 0),
        ))
    return rows


def nvml_process_memory():
    """This process's GPU memory as NVML sees it: ``{"GPU <nvml index>": bytes-or-NA}``, or NA.

    Uses :func:`cudamagic.nvml.process_gpu_memory` (includes the CUDA context and
    allocations made outside PyTorch).
    """
    from ..core import nvml

    err = nvml.init()
    if err is not None:
        return err
    try:
        per = nvml.process_gpu_memory(os.getpid())
    except Exception as exc:  # the nvml module promises NA, never raises; be safe anyway
        return NA(f"NVML process query failed: {exc}", "error")
    if not per:
        return NA("NVML lists no GPU memory for this process (or cannot list processes here)", "not_listed")
    return {f"GPU {i}": v for i, v in sorted(per.items())}


# ---- tensors reachable from the namespace ------------------------------------------

@dataclass(frozen=True)
class TensorRow:
    """One tensor storage reachable from the user namespace.

    Attributes:
        name: how to reach it: ``x``, ``model.fc.weight``, ``model.fc.weight.grad``,
            ``opt.state[0]['exp_avg']``, ``batch[1]``, ``d['k']`` or ``Out[7]``.
        shape: tensor shape as a tuple of ints.
        dtype: e.g. ``'torch.float32'``.
        device: e.g. ``'cpu'``, ``'cuda:0'``.
        bytes: size of the whole underlying storage in bytes (what the name keeps alive;
            a view of a large tensor keeps the large storage).
        new: True when the storage was not reachable before the cell (``%%cudamem`` only).
    """

    name: str
    shape: tuple
    dtype: str
    device: str
    bytes: int
    new: bool = False


def _storage_key_and_bytes(t):
    """``((device, data_ptr), nbytes)`` of a tensor's storage; falls back to the tensor's own size."""
    try:
        st = t.untyped_storage()
        return (str(t.device), st.data_ptr()), int(st.nbytes())
    except Exception:  # sparse, nested, meta or other storage-less tensors
        return (str(t.device), "id", id(t)), int(t.numel() * t.element_size())


def _user_roots(user_ns: dict, hidden: dict | None):
    """(name, object) pairs worth scanning: visible user variables, then ``Out[n]`` entries."""
    hidden = hidden or {}
    for name, obj in list(user_ns.items()):
        if name.startswith("_") or name in ("In", "Out", "exit", "quit", "get_ipython"):
            continue
        if name in hidden and hidden[name] is obj:
            continue
        yield name, obj
    out = user_ns.get("Out")
    if isinstance(out, dict):
        for n, obj in list(out.items()):
            yield f"Out[{n}]", obj


def iter_tensors(roots, torch):
    """Yield ``(name, tensor)`` for every tensor reachable from ``roots`` (``(name, obj)`` pairs).

    Follows ``torch.nn.Module`` parameters and buffers (``model.layer.weight``), parameter and
    leaf-tensor ``.grad``, optimizer state (``opt.state[3]['exp_avg']``, numbered like
    ``opt.state_dict()['state']``: parameters in ``param_groups`` order) and lists, tuples and
    dicts (first 64 items, 3 levels deep). Types are tested with ``type()``, so lazy proxies in the
    namespace are never asked for their ``__class__``. Never calls anything that allocates.
    """
    Tensor = torch.Tensor
    Module = torch.nn.Module
    Optimizer = torch.optim.Optimizer
    skip = (str, bytes, int, float, complex, bool, type)

    def tensor_and_grad(name, t):
        yield name, t
        if t.is_leaf and t.requires_grad and t.grad is not None:
            yield f"{name}.grad", t.grad

    def optimizer_state(name, opt):
        index = {}
        for group in opt.param_groups:
            for p in group.get("params", ()):
                index.setdefault(id(p), len(index))
        for p, state in list(opt.state.items()):
            if type(state) is not dict:
                continue
            i = index.get(id(p), "?")
            for k, v in state.items():
                if issubclass(type(v), Tensor):
                    yield f"{name}.state[{i}][{k!r}]", v

    def walk(name, obj, depth):
        t = type(obj)
        if issubclass(t, Tensor):
            yield from tensor_and_grad(name, obj)
            return
        if depth >= _SCAN_DEPTH or obj is None or issubclass(t, skip):
            return
        if issubclass(t, Module):
            for pname, p in obj.named_parameters():
                yield from tensor_and_grad(f"{name}.{pname}", p)
            for bname, b in obj.named_buffers():
                yield f"{name}.{bname}", b
            return
        if issubclass(t, Optimizer):
            yield from optimizer_state(name, obj)
            return
        if issubclass(t, (list, tuple)):
            for i, v in enumerate(obj[:_CONTAINER_ITEMS]):
                yield from walk(f"{name}[{i}]", v, depth + 1)
        elif issubclass(t, dict):
            try:
                items = list(itertools.islice(obj.items(), _CONTAINER_ITEMS))
            except RuntimeError:  # changed size while we looked (another thread)
                return
            for k, v in items:
                yield from walk(f"{name}[{k!r}]", v, depth + 1)

    for name, obj in roots:
        yield from walk(name, obj, 0)


def scan_tensors(user_ns: dict, hidden: dict | None = None, before_keys=None) -> list:
    """Every tensor storage reachable from the user namespace, largest first, one row per storage.

    Args:
        user_ns: the shell's namespace (``shell.user_ns``); ``Out`` is read from it.
        hidden: ``shell.user_ns_hidden``: names IPython itself put there are skipped.
        before_keys: storage keys reachable before the cell (from :func:`storage_keys`); rows
            whose storage is not in it get ``new=True``. ``None``: nothing is marked new.

    Returns:
        list of :class:`TensorRow` sorted by ``bytes`` descending (the first name that reaches a
        storage wins: user variables before ``Out``). Empty when torch is not imported.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    rows = {}
    for name, t in iter_tensors(_user_roots(user_ns, hidden), torch):
        key, nbytes = _storage_key_and_bytes(t)
        if nbytes <= 0 or key in rows:
            continue
        rows[key] = TensorRow(name, tuple(t.shape), str(t.dtype), str(t.device), nbytes,
                              new=before_keys is not None and key not in before_keys)
    return sorted(rows.values(), key=lambda r: -r.bytes)


def storage_keys(user_ns: dict, hidden: dict | None = None) -> set:
    """Storage keys of the tensors reachable from the namespace (see :func:`scan_tensors`)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return set()
    return {_storage_key_and_bytes(t)[0] for _, t in iter_tensors(_user_roots(user_ns, hidden), torch)}


# ---- text within TEXT_WIDTH columns ---------------------------------------------------

def _wrap(text: str, indent: int = 2, width: int = TEXT_WIDTH) -> str:
    """``text`` wrapped to ``width`` columns, continuation lines indented by ``indent`` spaces."""
    return "\n".join(textwrap.wrap(str(text), width=width, subsequent_indent=" " * indent,
                                   break_long_words=True, break_on_hyphens=False)) or str(text)


def _clip(text: str, width: int) -> str:
    text = str(text)
    return text if len(text) <= width else text[: max(1, width - 1)] + "\u2026"


def _fit_table(headers, rows, shrink, width: int = TEXT_WIDTH, min_width: int = 8) -> str:
    """:func:`text_table` within ``width`` columns: cells of the columns in ``shrink`` (indices, in
    order) are clipped with an ellipsis, each down to ``min_width`` at most, until the table fits.
    Newlines and tabs in cells (names from outside) are shown escaped, so a row stays one line."""
    rows = [[str(c).replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") for c in r]
            for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for col in shrink:
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess <= 0:
            break
        new = max(min_width, len(headers[col]), widths[col] - excess)
        if new < widths[col]:
            widths[col] = new
            for r in rows:
                r[col] = _clip(r[col], new)
    return text_table(headers, rows)


# ---- the report of one cell ---------------------------------------------------------

def _signed(n) -> str:
    if is_na(n):
        return str(n)
    return ("+" if n > 0 else "") + format_bytes(n)


def _first_line(text: str, width: int = 60) -> str:
    for line in (text or "").splitlines():
        line = line.strip()
        if line and not line.startswith("%%cudamem"):
            return line if len(line) <= width else line[: width - 1] + "\u2026"
    return ""


@dataclass
class CellMemReport:
    """What one cell did to memory. Renders as HTML (notebook) and text (terminal).

    Attributes:
        cell: execution count (``In[n]``) of the measured cell.
        source: first line of the cell, for tables.
        wall_s: wall-clock seconds of the cell.
        error: ``"TypeName: message"`` when the cell raised, else ``None``.
        cuda_initialized: CUDA initialised in this process after the cell.
        gpus: list of :class:`GpuCellStats` (empty without CUDA; see ``gpu_status``).
        gpu_status: ``"ok"`` or NA saying why there are no GPU figures.
        peak_reset: ``--reset-peak`` was used (the user's ``max_memory_allocated`` was reset).
        nvml_before / nvml_after: ``{"GPU <nvml index>": bytes}`` or NA (process memory per NVML).
        rss_before_bytes / rss_after_bytes / rss_delta_bytes: process RSS in bytes (or NA).
        tensors: largest :class:`TensorRow` s reachable after the cell (``new`` = left by this cell).
        tensors_total: number of tensor storages reachable after the cell.
        kind: ``"cell"`` for ``%%cudamem``, ``"auto"`` for ``%cudamem on``.
    """

    cell: int
    source: str
    wall_s: float
    error: str | None
    cuda_initialized: bool
    gpus: list
    gpu_status: Any
    peak_reset: bool = False
    nvml_before: Any = None
    nvml_after: Any = None
    rss_before_bytes: Any = None
    rss_after_bytes: Any = None
    rss_delta_bytes: Any = None
    tensors: list = field(default_factory=list)
    tensors_total: int = 0
    kind: str = "cell"

    # -- data --
    def to_dict(self) -> dict:
        """Plain data (NA values become ``{"na": reason, "code": code}``)."""
        return jsonable(_plain(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), indent=2)

    def gpu(self, device: str = "cuda:0") -> GpuCellStats:
        """The :class:`GpuCellStats` of ``device`` (``'cuda:0'``); ``KeyError`` if not measured."""
        for g in self.gpus:
            if g.device == device:
                return g
        raise KeyError(device)

    def exceeds(self, threshold_bytes: int) -> bool:
        """True when the cell changed GPU memory (allocated, peak over start or reserved) by more
        than ``threshold_bytes``; with no GPU figures, when RSS changed by more than that."""
        if self.gpus:
            return any(max(abs(g.allocated_delta_bytes), g.peak_over_start_bytes,
                           abs(g.reserved_delta_bytes)) > threshold_bytes for g in self.gpus)
        return not is_na(self.rss_delta_bytes) and self.rss_delta_bytes is not None \
            and abs(self.rss_delta_bytes) > threshold_bytes

    def _changed_gpus(self):
        """Devices whose allocated, peak-over-start or reserved figure moved during the cell (all
        devices holding memory when none moved)."""
        moved = [g for g in self.gpus if g.allocated_delta_bytes or g.peak_over_start_bytes
                 or g.reserved_delta_bytes]
        return moved or [g for g in self.gpus if g.allocated_before_bytes or g.allocated_after_bytes
                         or g.reserved_after_bytes or g.peak_allocated_bytes]

    def summary_line(self) -> str:
        """What ``%cudamem on`` prints: cell, wall time, then per device that changed
        ``cuda:0 +<allocated delta> -> <allocated after> (peak <in-cell peak>, reserved <after>)``
        (``<=`` marks a peak that is an upper bound), or the CPU RSS delta without CUDA, and the
        error type. Parts that do not fit in :data:`cudamagic.render.TEXT_WIDTH` columns go on
        indented continuation lines."""
        parts = [f"[cudamem] In[{self.cell}] {self.wall_s:.2f} s"]
        for g in self._changed_gpus():
            peak = ("" if g.peak_exact else "<=") + format_bytes(g.peak_allocated_bytes)
            parts.append(f"{g.device} {_signed(g.allocated_delta_bytes)} -> "
                         f"{format_bytes(g.allocated_after_bytes)} (peak {peak}, "
                         f"reserved {format_bytes(g.reserved_after_bytes)}"
                         + (f", {g.ooms} OOM" if g.ooms else "") + ")")
        if not self.gpus:
            parts.append(f"CPU RSS {_signed(self.rss_delta_bytes)} -> {format_bytes(self.rss_after_bytes)}"
                         " (no CUDA in use)")
        if self.error:
            parts.append(f"error: {self.error.split(':')[0]}")
        lines = [parts[0]]
        for part in parts[1:]:
            if len(lines[-1]) + 2 + len(part) <= TEXT_WIDTH:
                lines[-1] += "  " + part
            else:
                lines.append(_clip("    " + part, TEXT_WIDTH))
        return "\n".join(lines)

    # -- text --
    def _gpu_rows(self, text=False):
        for g in self.gpus:
            if text:
                peak = ("" if g.peak_exact else "<=") + format_bytes(g.peak_allocated_bytes)
            else:
                peak = format_bytes(g.peak_allocated_bytes) + ("" if g.peak_exact else " (upper bound)")
            row = [g.device, format_bytes(g.allocated_before_bytes), format_bytes(g.allocated_after_bytes),
                   _signed(g.allocated_delta_bytes), peak, format_bytes(g.reserved_before_bytes),
                   format_bytes(g.reserved_after_bytes)]
            yield row if text else row + [g.alloc_retries, g.ooms]

    _GPU_HEADERS = ["device", "allocated before", "after", "delta", "peak in cell", "reserved before",
                    "after", "retries", "OOMs"]

    def _retries_text(self) -> str:
        busy = [f"{g.device}: {g.alloc_retries} allocator retries, {g.ooms} OOMs" for g in self.gpus
                if g.alloc_retries or g.ooms]
        return "during the cell: " + ("; ".join(busy) if busy else "no allocator retries, no OOMs")

    _T_HEADERS = ["name", "shape", "dtype", "device", "bytes", "new"]

    def _tensor_rows(self):
        for t in self.tensors:
            yield [t.name, "x".join(map(str, t.shape)) or "()", t.dtype.replace("torch.", ""), t.device,
                   format_bytes(t.bytes), "new" if t.new else ""]

    def _nvml_text(self, value):
        if value is None:
            return "not read"
        if is_na(value):
            return value.describe()
        return ", ".join(f"{k}: {format_bytes(v) if not is_na(v) else v.describe()}" for k, v in value.items())

    def _peak_note(self) -> str:
        if self.peak_reset:
            return ("peak: exact; --reset-peak reset torch.cuda peak counters "
                    "(max_memory_allocated) for these devices")
        if any(not g.peak_exact for g in self.gpus):
            return ("peak: upper bound (the cell stayed below an earlier peak; the user's "
                    "max_memory_allocated is left intact; use --reset-peak for an exact figure)")
        return "peak: exact; max_memory_allocated left intact"

    def _tensors_title(self) -> str:
        if not self.tensors_total:
            return "no tensors reachable from the namespace"
        if not self.tensors:
            return (f"{self.tensors_total} tensor storages reachable from the namespace "
                    "(table hidden: --top 0)")
        return (f"largest tensors reachable from the namespace ({len(self.tensors)} of "
                f"{self.tensors_total}; new = left by this cell)")

    def __repr__(self) -> str:
        """The report as text, no line wider than :data:`cudamagic.render.TEXT_WIDTH` columns."""
        lines = [_wrap(f"%%cudamem In[{self.cell}]  wall {self.wall_s:.3f} s"
                       + (f"  (cell raised {self.error})" if self.error else ""))]
        if self.gpus:
            lines.append("GPU (PyTorch caching allocator):")
            lines.append(_fit_table(self._GPU_HEADERS[:7], self._gpu_rows(text=True), shrink=()))
            lines.append(_wrap(self._retries_text()))
            lines.append(_wrap(self._peak_note()))
        else:
            lines.append(_wrap(f"GPU: {self.gpu_status.describe() if is_na(self.gpu_status) else self.gpu_status}"))
        if self.nvml_after is not None:
            lines.append(_wrap(f"process GPU memory (NVML): {self._nvml_text(self.nvml_after)}"))
        lines.append(f"CPU RSS: {format_bytes(self.rss_before_bytes)} -> {format_bytes(self.rss_after_bytes)} "
                     f"({_signed(self.rss_delta_bytes)})")
        if self.kind == "cell":
            title = self._tensors_title()
            lines.append(_wrap(title + (":" if self.tensors else "")))
            if self.tensors:
                lines.append(_fit_table(self._T_HEADERS, self._tensor_rows(), shrink=(0, 1)))
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    def _repr_html_(self) -> str:
        return f'<div class="{NO_MATH}">' + self._html_body() + "</div>"

    def _html_body(self) -> str:
        parts = [f"<div class='cm-cellmem'><b>%%cudamem In[{self.cell}]</b> wall {self.wall_s:.3f} s"]
        if self.error:
            parts.append(f" <span class='cm-error'>(cell raised {esc(self.error)})</span>")
        if self.gpus:
            rows = [[esc(c) for c in r] for r in self._gpu_rows()]
            parts.append(html_table(self._GPU_HEADERS, rows))
            parts.append(f"<div><small>{esc(self._peak_note())}</small></div>")
        else:
            parts.append(f"<div>GPU: {na_cell_html(self.gpu_status)}</div>")
        if self.nvml_after is not None:
            if is_na(self.nvml_after):
                parts.append(f"<div>process GPU memory (NVML): {na_cell_html(self.nvml_after)}</div>")
            else:
                parts.append(f"<div>process GPU memory (NVML): {esc(self._nvml_text(self.nvml_after))}</div>")
        parts.append(f"<div>CPU RSS: {esc(format_bytes(self.rss_before_bytes))} &rarr; "
                     f"{esc(format_bytes(self.rss_after_bytes))} ({esc(_signed(self.rss_delta_bytes))})</div>")
        if self.kind == "cell":
            parts.append(f"<div>{esc(self._tensors_title())}</div>")
            if self.tensors:
                parts.append(html_table(self._T_HEADERS, [[esc(c) for c in r] for r in self._tensor_rows()]))
        parts.append("</div>")
        return "".join(parts)


_NO_CUDA = NA("CUDA is not initialised in this process (no CUDA tensor or call yet), so PyTorch's "
              "allocator has nothing to report; CPU figures below", "not_initialized")


def build_report(before: Snapshot, after: Snapshot, *, cell: int, source: str, error, kind: str,
                 nvml_before=None, nvml_after=None, tensors=(), tensors_total=0) -> CellMemReport:
    """Assemble a :class:`CellMemReport` from two snapshots (no I/O)."""
    rb, ra = before.rss_bytes, after.rss_bytes
    delta = NA("RSS not readable", "no_binding") if is_na(rb) or is_na(ra) else ra - rb
    return CellMemReport(
        cell=cell, source=_first_line(source), wall_s=after.time_s - before.time_s,
        error=error, cuda_initialized=after.cuda_initialized,
        gpus=gpu_cell_stats(before, after),
        gpu_status="ok" if after.cuda_initialized else _NO_CUDA,
        peak_reset=before.peak_reset, nvml_before=nvml_before, nvml_after=nvml_after,
        rss_before_bytes=rb, rss_after_bytes=ra, rss_delta_bytes=delta,
        tensors=list(tensors), tensors_total=tensors_total, kind=kind,
    )


def _error_text(exc) -> str:
    msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}".rstrip(": ")
    return text if len(text) <= 200 else text[:199] + "\u2026"


# ---- running a cell like %%time, measured ------------------------------------------

@dataclass
class CellRun:
    """Outcome of :func:`run_measured`: the report (``None`` when the cell did not parse), the cell's
    exception (or ``None``), whether the cell ended in an expression, and that expression's value
    (``None`` otherwise)."""

    report: CellMemReport | None
    exception: BaseException | None
    has_value: bool
    value: Any


def running_cell_number(shell) -> int:
    """``n`` of the ``In[n]`` being executed.

    Read from the display hook's ``ExecutionResult`` of the running cell, which IPython 8 and 9 both
    set before the code runs (IPython 9 increments ``shell.execution_count`` before a cell runs,
    IPython 8 after it, so the counter alone is off by one on one of them). Outside a stored cell
    (``run_cell(store_history=False)``, a direct ``run_cell_magic``): ``shell.execution_count - 1``.
    """
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    if type(count) is int:
        return count
    return shell.execution_count - 1


def run_measured(shell, cell: str, *, header: str = "%%cudamem", cell_number: int | None = None,
                 top: int = 10, reset_peak: bool = False, source=None) -> CellRun:
    """Run ``cell`` in ``shell.user_ns`` as ``%%time`` does, measuring memory around it.

    The cell is transformed (``shell.transform_cell``), its AST transformed (``shell.transform_ast``)
    and compiled under a name registered in IPython's line cache with the ``%%cudamem`` line as line 1,
    so tracebacks show ``Cell In[n]`` and the real source lines with the notebook's numbering.
    No IPython events are fired (the surrounding ``run_cell`` fires them once). A final expression
    is evaluated and returned in :attr:`CellRun.value`, not stored anywhere by us (a stored value
    would keep tensors alive).

    Args:
        shell: the ``InteractiveShell``.
        cell: cell body (without the ``%%cudamem`` line).
        header: the magic line, shown as line 1 of the cached source.
        cell_number: ``In[n]`` for the report; default :func:`running_cell_number`.
        top: how many tensor rows to keep in the report.
        reset_peak: reset torch.cuda peak counters before the cell for an exact peak (this
            resets the user's ``max_memory_allocated`` on those devices).
        source: allocator-statistics source (tests); default the module's.

    Returns:
        :class:`CellRun`. The cell's exception is returned, not raised: the caller re-raises it.
        A cell that does not parse is not run: ``report`` is ``None`` and ``exception`` the
        ``SyntaxError`` (with the cell's line numbers, ``%%cudamem`` being line 1).
    """
    __tracebackhide__ = True
    source = source or _source
    number = running_cell_number(shell) if cell_number is None else cell_number
    transformed = shell.transform_cell(cell)
    text = header.rstrip("\n") + "\n" + transformed
    filename = shell.compile.cache(text, number, raw_code=header.rstrip("\n") + "\n" + cell)
    try:
        tree = shell.compile.ast_parse("\n" + transformed, filename=filename)
        tree = shell.transform_ast(tree)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        code = shell.compile(ast.Module(tree.body, type_ignores=[]), filename, "exec")
        code_last = shell.compile(last, filename, "eval") if last is not None else None
    except SyntaxError as exc:
        # IPython prints every frame of a SyntaxError raised while running code (the hidden-frame
        # marker does not apply to it): hand it back without our parser frames; the cell did not run.
        return CellRun(None, exc.with_traceback(None), False, None)

    hidden = getattr(shell, "user_ns_hidden", None)
    before_keys = storage_keys(shell.user_ns, hidden)
    before = take_snapshot(source)
    nvml_before = nvml_process_memory() if before.cuda_initialized else None
    if reset_peak and before.cuda_initialized:
        for d in before.gpus:
            source.reset_peak(d)
        before.peak_reset = True
    before.time_s = time.perf_counter()
    exc = None
    value = None
    try:
        exec(code, shell.user_ns)
        if code_last is not None:
            value = eval(code_last, shell.user_ns)
    except BaseException as e:  # noqa: BLE001 - returned to the caller, which re-raises it untouched
        exc = e
    after = take_snapshot(source)
    nvml_after = nvml_process_memory() if after.cuda_initialized else None
    rows = scan_tensors(shell.user_ns, hidden, before_keys)
    report = build_report(before, after, cell=number, source=cell,
                          error=_error_text(exc) if exc is not None else None, kind="cell",
                          nvml_before=nvml_before, nvml_after=nvml_after,
                          tensors=rows[:max(0, top)], tensors_total=len(rows))
    return CellRun(report, exc, code_last is not None, value)


# ---- history ------------------------------------------------------------------------

class MemHistory:
    """The measured cells of this session (``%%cudamem`` cells and, while ``on``, every cell).

    ``records`` is a list of :class:`CellMemReport` (tensor rows hold names and sizes only, never
    tensors), oldest first. At most ``max_records`` are kept (an int, a callable returning one, read
    at each append, or ``None``: no limit); older ones are dropped and counted in ``dropped``, so a
    long session with ``%cudamem on`` does not grow without bound. ``to_json()`` / ``to_list()``
    for scripts; renders as a table.
    """

    def __init__(self, records=None, max_records=None, dropped: int = 0):
        self.records = list(records or [])
        self.max_records = max_records
        self.dropped = dropped
        self._trim()

    def limit(self) -> int | None:
        """The current maximum number of records (``None``: no limit)."""
        limit = self.max_records() if callable(self.max_records) else self.max_records
        return None if limit is None else max(0, int(limit))

    def _trim(self) -> None:
        limit = self.limit()
        if limit is not None and len(self.records) > limit:
            excess = len(self.records) - limit
            del self.records[:excess]
            self.dropped += excess

    def append(self, report: CellMemReport) -> None:
        """Add one measured cell (dropping the oldest beyond ``max_records``)."""
        self.records.append(report)
        self._trim()

    def clear(self) -> None:
        """Forget all records."""
        self.records.clear()
        self.dropped = 0

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, i):
        return self.records[i]

    def snapshot(self) -> "MemHistory":
        """A copy that does not grow with later cells."""
        return MemHistory(self.records, self.limit(), self.dropped)

    def to_list(self) -> list:
        """One dict per record (:meth:`CellMemReport.to_dict`)."""
        return [r.to_dict() for r in self.records]

    def to_json(self) -> str:
        """:meth:`to_list` as JSON."""
        return json.dumps(self.to_list(), indent=2)

    _HEADERS = ["cell", "how", "wall s", "device", "allocated delta", "peak in cell", "reserved after",
                "RSS delta", "error", "source"]
    _TEXT_HEADERS = ["cell", "how", "wall s", "device", "alloc delta", "peak", "reserved", "RSS delta",
                     "error", "source"]

    def _rows(self, text=False):
        for r in self.records:
            gpus = r._changed_gpus() or r.gpus[:1]
            how = ("%%" if text else "%%cudamem") if r.kind == "cell" else "on"
            common = [r.cell, how, f"{r.wall_s:.3f}"]
            tail = [_signed(r.rss_delta_bytes), (r.error or "").split(":")[0], r.source]
            if not gpus:
                yield common + ["cpu", "", "", ""] + tail
            for g in gpus:
                peak = ("" if g.peak_exact else "<=") + format_bytes(g.peak_allocated_bytes)
                yield common + [g.device, _signed(g.allocated_delta_bytes), peak,
                                format_bytes(g.reserved_after_bytes)] + tail

    def _title(self) -> str:
        more = (f"; {self.dropped} older dropped, CudaMagics.cudamem_history_cells = {self.limit()}"
                if self.dropped else "")
        n = len(self.records)
        return f"cudamem history ({n} cell{'' if n == 1 else 's'}{more})"

    def __repr__(self) -> str:
        if not self.records:
            return "cudamem history: no cells measured yet (`%cudamem on`, or `%%cudamem` on a cell)"
        headers, rows = self._TEXT_HEADERS, list(self._rows(text=True))
        if not any(r.gpus for r in self.records):  # CPU only: no empty GPU columns
            keep = [i for i, h in enumerate(headers) if h not in ("alloc delta", "peak", "reserved")]
            headers, rows = [headers[i] for i in keep], [[row[i] for i in keep] for row in rows]
        shrink = (headers.index("error"), headers.index("source"))
        return _wrap(self._title()) + "\n" + _fit_table(headers, rows, shrink=shrink, min_width=12)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    def _repr_html_(self) -> str:
        return f'<div class="{NO_MATH}">' + self._html_body() + "</div>"

    def _html_body(self) -> str:
        if not self.records:
            return "<div>cudamem history: no cells measured yet</div>"
        rows = [[esc(c) for c in r] for r in self._rows()]
        return f"<div><b>{esc(self._title())}</b></div>" + html_table(self._HEADERS, rows)


# ---- %cudamem on: the event callbacks ------------------------------------------------

class CellMemMonitor:
    """``pre_run_cell``/``post_run_cell`` callbacks that measure every cell (``%cudamem on``).

    Per cell it reads the allocator counters (only when CUDA is initialised) and RSS before and
    after; no tensor scan, no NVML, no thread. A record goes to ``history``; a one-line summary is
    printed when :meth:`CellMemReport.exceeds` ``threshold_bytes()``. A callback never raises into
    the kernel: a failure is kept in ``last_error`` and reported once on stderr.

    Args:
        shell: the ``InteractiveShell`` (its ``events`` are used).
        history: the :class:`MemHistory` to append to.
        threshold_bytes: callable returning the current threshold in bytes (read per cell, so
            ``%config CudaMagics.cudamem_threshold_bytes`` applies at once).
        source: allocator-statistics source; default the module's current one (read per cell).
        out: callable used to print the summary line (default ``print``).
    """

    def __init__(self, shell, history: MemHistory, threshold_bytes, source=None, out=print):
        self.shell = shell
        self.history = history
        self.threshold_bytes = threshold_bytes
        self._source = source
        self._out = out
        self._before = None
        self._raw = ""
        self._skip = False
        self.active = False
        self.last_error = None

    def start(self) -> None:
        """Register both callbacks (idempotent)."""
        if not self.active:
            self.shell.events.register("pre_run_cell", self.pre_run_cell)
            self.shell.events.register("post_run_cell", self.post_run_cell)
            self.active = True

    def stop(self) -> None:
        """Remove both callbacks (idempotent)."""
        for name, cb in (("pre_run_cell", self.pre_run_cell), ("post_run_cell", self.post_run_cell)):
            try:
                self.shell.events.unregister(name, cb)
            except ValueError:
                pass
        self.active = False
        self._before = None

    def skip_current_cell(self) -> None:
        """The running cell is measured by ``%%cudamem`` itself: do not record it twice."""
        self._skip = True

    def pre_run_cell(self, info=None) -> None:
        """IPython ``pre_run_cell`` callback: snapshot before the cell."""
        try:
            self._skip = False
            self._raw = getattr(info, "raw_cell", "") or ""
            self._before = take_snapshot(self._source or _source)
        except Exception as exc:  # never into the kernel
            self._fail(exc)

    def post_run_cell(self, result=None) -> None:
        """IPython ``post_run_cell`` callback: snapshot after, record, maybe print one line."""
        before, self._before = self._before, None
        if before is None or self._skip:
            self._skip = False
            return
        try:
            after = take_snapshot(self._source or _source)
            count = getattr(result, "execution_count", None)
            err = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
            report = build_report(before, after, cell=count if count is not None else -1, source=self._raw,
                                  error=_error_text(err) if err is not None else None, kind="auto")
            self.history.append(report)
            if report.exceeds(int(self.threshold_bytes())):
                self._out(report.summary_line())
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc) -> None:
        first = self.last_error is None
        self.last_error = exc
        if first:
            print(f"[cudamem] measurement failed and was skipped: {type(exc).__name__}: {exc}", file=sys.stderr)


# ---- %cudamem free -------------------------------------------------------------------

class FreeUsageError(LookupError):
    """A ``%cudamem free`` flag names something that does not exist (the magic turns it into a UsageError)."""


@dataclass(frozen=True)
class Holder:
    """Something in the session that still keeps tensors alive.

    Attributes:
        kind: ``"output cache"`` (``Out[n]``/``_n``), ``"last output"`` (``_``/``__``/``___``) or ``"variable"``.
        name: ``Out[7]``, ``_``, ``model`` ...
        bytes: tensor storage bytes reachable from it (unique storages).
        devices: devices of those storages, e.g. ``('cuda:0',)``.
        release: the flag that releases it: ``--out 7``, ``--out``, ``--var model``.
    """

    kind: str
    name: str
    bytes: int
    devices: tuple
    release: str


def _tensor_census(torch) -> dict:
    """``{storage key: nbytes}`` over every tensor object alive in Python (``gc.get_objects``)."""
    Tensor = torch.Tensor
    out = {}
    objs = gc.get_objects()
    try:
        for o in objs:
            if issubclass(type(o), Tensor):  # type(): never triggers a lazy proxy's __class__
                key, nbytes = _storage_key_and_bytes(o)
                out[key] = nbytes
    finally:
        del objs
    return out


def _holder_bytes(name, obj, torch):
    seen = {}
    for _, t in iter_tensors([(name, obj)], torch):
        key, nbytes = _storage_key_and_bytes(t)
        seen[key] = nbytes
    devices = tuple(sorted({k[0] for k in seen}))
    return sum(seen.values()), devices


def find_holders(user_ns: dict, hidden: dict | None = None, min_var_bytes: int = 1 * MiB, limit: int = 10) -> list:
    """What else keeps tensors alive: ``Out[n]`` entries, ``_``/``__``/``___``, large variables.

    Args:
        user_ns: ``shell.user_ns``.
        hidden: ``shell.user_ns_hidden``.
        min_var_bytes: variables holding fewer tensor bytes than this are not listed.
        limit: at most this many variables (largest first).

    Returns:
        list of :class:`Holder` (output cache first, then variables by size). Empty without torch.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    holders = []
    out = user_ns.get("Out")
    if isinstance(out, dict):
        for n, obj in list(out.items()):
            b, devs = _holder_bytes(f"Out[{n}]", obj, torch)
            if b:
                holders.append(Holder("output cache", f"Out[{n}]", b, devs, f"--out {n}"))
    for u in ("_", "__", "___"):
        obj = user_ns.get(u)
        b, devs = _holder_bytes(u, obj, torch)
        if b:
            holders.append(Holder("last output", u, b, devs, "--out"))
    variables = []
    for name, obj in _user_roots(user_ns, hidden):
        if name.startswith("Out["):
            continue
        b, devs = _holder_bytes(name, obj, torch)
        if b >= min_var_bytes:
            variables.append(Holder("variable", name, b, devs, f"--var {name}"))
    variables.sort(key=lambda h: -h.bytes)
    return holders + variables[:limit]


def _clear_frames(tb) -> None:
    """``frame.clear()`` on every frame of ``tb`` (skipping frames still running).

    On Python < 3.13, once anything read ``frame.f_locals`` (IPython's traceback formatter does),
    the frame keeps a snapshot dict of its locals that ``frame.clear()`` does not drop; for function
    frames (``CO_OPTIMIZED``, whose ``f_locals`` is only that snapshot) the dict is emptied after the
    frame is cleared.
    Module and class-body frames, whose ``f_locals`` is a real namespace, are never emptied.
    """
    while tb is not None:
        frame, tb = tb.tb_frame, tb.tb_next
        try:
            frame.clear()
        except RuntimeError:  # the frame is still executing: leave it alone
            continue
        if frame.f_code.co_flags & inspect.CO_OPTIMIZED:
            try:
                snapshot = frame.f_locals
            except Exception:  # pragma: no cover - odd frame
                continue
            if type(snapshot) is dict and snapshot is not frame.f_globals:
                snapshot.clear()


def _clear_traceback(shell) -> list:
    """Drop the saved traceback and the locals of its frames. Returns what was released (names)."""
    released = []
    excs = []
    for attr in ("last_exc", "last_value"):
        v = getattr(sys, attr, None)
        if isinstance(v, BaseException):
            excs.append(v)
    tbs = [getattr(sys, "last_traceback", None)]
    itb = getattr(shell, "InteractiveTB", None)
    tbs.append(getattr(itb, "tb", None))
    tbs.append(getattr(shell, "_last_traceback", None))
    seen = set()
    while excs:  # the exception, and the exceptions chained to it
        e = excs.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        tbs.append(e.__traceback__)
        excs.extend(x for x in (e.__context__, e.__cause__) if x is not None)
    for tb in tbs:
        if tb is not None and hasattr(tb, "tb_frame"):
            _clear_frames(tb)
    for attr in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attr):
            delattr(sys, attr)
            released.append(f"sys.{attr}")
    if itb is not None and getattr(itb, "tb", None) is not None:
        itb.tb = None
        released.append("InteractiveTB.tb")
    if getattr(shell, "_last_traceback", None) is not None:
        shell._last_traceback = None
        released.append("shell._last_traceback")
    return released


def _release_out(shell, numbers) -> list:
    """Remove ``Out[n]`` (every entry holding tensors when ``numbers`` is empty) and all of IPython's
    other references to those values: ``_n`` (in ``user_ns`` and ``user_ns_hidden``), ``_``/``__``/``___``
    (in both namespaces and the display hook's own copies) and the previous cell's
    ``last_execution_result.result``. With no numbers, ``_``/``__``/``___`` holding tensors are released
    too. Returns the names released."""
    user_ns = shell.user_ns
    hidden = getattr(shell, "user_ns_hidden", None)
    if hidden is None:
        hidden = {}
    hook = getattr(shell, "displayhook", None)
    torch = sys.modules.get("torch")
    out = user_ns.get("Out")
    released = []
    if not isinstance(out, dict):
        return released

    def holds_tensors(obj):
        return torch is not None and not isinstance(obj, str) and bool(_holder_bytes("", obj, torch)[0])

    targets = list(numbers) if numbers else [n for n, obj in list(out.items()) if holds_tensors(obj)]
    gone = []
    for n in targets:
        obj = out.pop(n, None)
        gone.append(obj)
        released.append(f"Out[{n}]")
        for ns in (user_ns, hidden):
            if f"_{n}" in ns and ns[f"_{n}"] is obj:
                del ns[f"_{n}"]

    def release(obj):
        return any(obj is g for g in gone) or (not numbers and holds_tensors(obj))

    for u in ("_", "__", "___"):
        hit = False
        for ns in (user_ns, hidden):
            if u in ns and release(ns[u]):
                ns[u] = ""
                hit = True
        if hook is not None and release(getattr(hook, u, "")):
            setattr(hook, u, "")
            hit = True
        if hit:
            released.append(u)
    last = getattr(shell, "last_execution_result", None)
    if last is not None and getattr(last, "result", None) is not None and release(last.result):
        last.result = None
        released.append("last_execution_result.result")
    return released


@dataclass
class FreeReport:
    """What ``%cudamem free`` released and what still holds memory.

    Attributes:
        released: names released (``sys.last_traceback``, ``Out[7]``, ``_``, ``model`` ...).
        gpus: per CUDA device ``{"device", "allocated_before_bytes", "allocated_after_bytes",
            "allocated_freed_bytes", "reserved_before_bytes", "reserved_after_bytes", "reserved_freed_bytes"}``.
        gpu_status: ``"ok"`` or NA (why no GPU figures).
        empty_cache_called: whether ``torch.cuda.empty_cache()`` ran (only when CUDA was initialised).
        cpu_tensor_bytes_freed: bytes of CPU tensor storages that were alive in Python before and are
            gone after (found by scanning all live tensor objects); 0 without torch.
        tensor_bytes_freed: the same for every device.
        rss_before_bytes / rss_after_bytes: process RSS (the allocator may keep freed memory, so RSS
            can drop less than the tensors freed).
        gc_collected: objects collected by ``gc.collect()``.
        holders: list of :class:`Holder` that still keep tensors alive, with the flag to release each.
    """

    released: list
    gpus: list
    gpu_status: Any
    empty_cache_called: bool
    cpu_tensor_bytes_freed: int
    tensor_bytes_freed: int
    rss_before_bytes: Any
    rss_after_bytes: Any
    gc_collected: int
    holders: list

    @property
    def gpu_allocated_freed_bytes(self) -> int:
        """Allocated bytes freed, summed over devices."""
        return sum(g["allocated_freed_bytes"] for g in self.gpus)

    @property
    def gpu_reserved_freed_bytes(self) -> int:
        """Reserved bytes returned to the driver, summed over devices."""
        return sum(g["reserved_freed_bytes"] for g in self.gpus)

    def to_dict(self) -> dict:
        """Plain data."""
        return jsonable(_plain(self))

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON."""
        return json.dumps(self.to_dict(), indent=2)

    def _holder_rows(self):
        for h in self.holders:
            yield [h.kind, h.name, format_bytes(h.bytes), ", ".join(h.devices), f"%cudamem free {h.release}"]

    _H_HEADERS = ["holder", "name", "tensor bytes", "devices", "to release"]
    _G_HEADERS = ["device", "allocated before", "after", "freed", "reserved before", "after", "returned"]

    def _gpu_rows(self):
        for g in self.gpus:
            yield [g["device"], format_bytes(g["allocated_before_bytes"]), format_bytes(g["allocated_after_bytes"]),
                   format_bytes(g["allocated_freed_bytes"]), format_bytes(g["reserved_before_bytes"]),
                   format_bytes(g["reserved_after_bytes"]), format_bytes(g["reserved_freed_bytes"])]

    def _released_text(self) -> str:
        return ", ".join(self.released) if self.released else "nothing (no saved traceback, nothing named)"

    def __repr__(self) -> str:
        """The report as text, no line wider than :data:`cudamagic.render.TEXT_WIDTH` columns."""
        lines = [_wrap(f"%cudamem free: released {self._released_text()}; gc collected {self.gc_collected} objects")]
        if self.gpus:
            lines.append(_fit_table(self._G_HEADERS, self._gpu_rows(), shrink=()))
            lines.append("torch.cuda.empty_cache() called" if self.empty_cache_called else "")
        else:
            lines.append(_wrap(f"GPU: {self.gpu_status.describe() if is_na(self.gpu_status) else self.gpu_status}"))
        lines.append(_wrap(f"tensor storage freed: {format_bytes(self.tensor_bytes_freed)} "
                           f"(CPU {format_bytes(self.cpu_tensor_bytes_freed)}); RSS {format_bytes(self.rss_before_bytes)}"
                           f" -> {format_bytes(self.rss_after_bytes)}"))
        if self.holders:
            lines.append("still holding tensors (released only when you name them):")
            lines.append(_fit_table(self._H_HEADERS, self._holder_rows(), shrink=(1, 4), min_width=12))
        else:
            lines.append("nothing else in the namespace or output cache holds tensors")
        return "\n".join(x for x in lines if x)

    def _repr_pretty_(self, p, cycle):
        p.text(repr(self))

    def _repr_html_(self) -> str:
        return f'<div class="{NO_MATH}">' + self._html_body() + "</div>"

    def _html_body(self) -> str:
        parts = [f"<div class='cm-free'><b>%cudamem free</b>: released {esc(self._released_text())}; "
                 f"gc collected {self.gc_collected} objects</div>"]
        if self.gpus:
            parts.append(html_table(self._G_HEADERS, [[esc(c) for c in r] for r in self._gpu_rows()]))
            if self.empty_cache_called:
                parts.append("<div><small>torch.cuda.empty_cache() called</small></div>")
        else:
            parts.append(f"<div>GPU: {na_cell_html(self.gpu_status)}</div>")
        parts.append(f"<div>tensor storage freed: {esc(format_bytes(self.tensor_bytes_freed))} (CPU "
                     f"{esc(format_bytes(self.cpu_tensor_bytes_freed))}); RSS {esc(format_bytes(self.rss_before_bytes))}"
                     f" &rarr; {esc(format_bytes(self.rss_after_bytes))}</div>")
        if self.holders:
            parts.append("<div>still holding tensors (released only when you name them):</div>")
            parts.append(html_table(self._H_HEADERS, [[esc(c) for c in r] for r in self._holder_rows()]))
        return "".join(parts)


def free_memory(shell, *, out=None, variables=(), source=None) -> FreeReport:
    """Release what is safe to release, collect, empty the CUDA cache and report the bytes freed.

    Always released: the last traceback (``sys.last_traceback``/``last_value``/``last_type``/
    ``last_exc``, IPython's ``InteractiveTB.tb``, ``shell._last_traceback``) and the locals of its
    frames (``frame.clear()``; ``%debug`` can no longer inspect that error). Then ``gc.collect()``,
    and ``torch.cuda.empty_cache()`` only when CUDA is initialised.

    Released only when named: ``out`` (``[]`` = every ``Out[n]`` holding tensors plus ``_``/``__``/
    ``___``; ``[7, 9]`` = those entries) and ``variables`` (names deleted from the namespace).

    Args:
        shell: the ``InteractiveShell``.
        out: ``None`` (keep the output cache), ``[]`` or a list of ``Out`` numbers (ints).
        variables: names of user variables to delete.
        source: allocator-statistics source (tests).

    Returns:
        :class:`FreeReport`.

    Raises:
        FreeUsageError: a named ``Out`` entry or variable does not exist (nothing is released then).
    """
    source = source or _source
    user_ns = shell.user_ns
    hidden = getattr(shell, "user_ns_hidden", None)
    variables = list(dict.fromkeys(variables))  # a name given twice is deleted once
    if out is not None:
        out = list(dict.fromkeys(out))
    outd = user_ns.get("Out") if isinstance(user_ns.get("Out"), dict) else {}
    missing_out = [n for n in (out or []) if n not in outd]
    if missing_out:
        have = ", ".join(str(n) for n in sorted(outd)) or "none"
        raise FreeUsageError(f"Out[{missing_out[0]}] is not in the output cache (entries: {have})")
    for name in variables:
        if name not in user_ns:
            raise FreeUsageError(f"no variable named {name!r} in the namespace")

    torch = sys.modules.get("torch")
    before = take_snapshot(source)
    census_before = _tensor_census(torch) if torch is not None else {}
    released = _clear_traceback(shell)
    if out is not None:
        released += _release_out(shell, out)
    for name in variables:
        del user_ns[name]
        released.append(name)
    collected = gc.collect()
    emptied = False
    if source.initialized():
        source.empty_cache()
        emptied = True
    after = take_snapshot(source)
    census_after = _tensor_census(torch) if torch is not None else {}
    gone = {k: b for k, b in census_before.items() if k not in census_after}
    gpus = []
    for d, a in sorted(after.gpus.items()):
        b = before.gpus.get(d)
        ab = b.allocated_bytes if b else 0
        rb = b.reserved_bytes if b else 0
        gpus.append({"device": f"cuda:{d}", "allocated_before_bytes": ab, "allocated_after_bytes": a.allocated_bytes,
                     "allocated_freed_bytes": ab - a.allocated_bytes, "reserved_before_bytes": rb,
                     "reserved_after_bytes": a.reserved_bytes, "reserved_freed_bytes": rb - a.reserved_bytes})
    return FreeReport(
        released=released, gpus=gpus, gpu_status="ok" if after.cuda_initialized else _NO_CUDA,
        empty_cache_called=emptied,
        cpu_tensor_bytes_freed=sum(b for k, b in gone.items() if k[0] == "cpu"),
        tensor_bytes_freed=sum(gone.values()),
        rss_before_bytes=before.rss_bytes, rss_after_bytes=after.rss_bytes,
        gc_collected=collected, holders=find_holders(user_ns, hidden),
    )


# ---- small parsing helper --------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_bytes(text: str) -> int:
    """``'64MiB'`` -> 67108864, ``'1.5GB'`` -> 1500000000, ``'4096'`` -> 4096.

    Raises:
        ValueError: not a size (the magic turns it into a UsageError).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (write e.g. 64MiB, 1GiB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
