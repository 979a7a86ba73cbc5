"""Counting the memory of one step run on fake tensors.

Counting the memory of one step run on fake tensors: every tensor storage the step creates, when it
is freed, which phase and module created it and what it is (parameter, gradient, optimizer state,
activation saved for backward, temporary).

:class:`StorageTracker` is a ``TorchDispatchMode`` entered above a ``FakeTensorMode``: it sees each
ATen op after autograd, records the storages of the op's outputs, and learns of each free from a
weakref finalizer on the storage. Nothing is allocated for real (the storages are fake); the byte
counts are the storages' ``nbytes()``, as the CUDA caching allocator is asked for them. The
allocation/free order is kept (:attr:`StorageTracker.events`) for the allocator model in
:mod:`.allocator`.

No IPython import; torch is imported by the caller (this module is only imported once torch is).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

#: category names, highest priority first (a storage that is both a parameter and saved for
#: backward is a parameter).
CATEGORIES = (
    "parameters",
    "buffers",
    "inputs",
    "gradients",
    "optimizer state",
    "activations",
    "temporaries",
)
#: ATen operators that call cuBLAS on a GPU (each calling thread gets a cuBLAS workspace).
BLAS_OPS = {
    "mm",
    "addmm",
    "bmm",
    "baddbmm",
    "addbmm",
    "mv",
    "addmv",
    "dot",
    "addr",
    "_addmm_activation",
}

#: LSTM/GRU workspace probes (see :func:`kernel_sizes`): largest batch probed as is, and the two
#: batches of the line for larger ones.
RNN_PROBE_BATCH = 16
RNN_PROBE_BATCHES = (8, 16)

#: the CUDA caching allocator's smallest block (kMinBlockSize in c10/cuda/CUDACachingAllocator.cpp):
#: every request is rounded up to a multiple of it.
MIN_BLOCK_BYTES = 512


def cuda_block_bytes(nbytes: int) -> int:
    """``nbytes`` rounded up as the CUDA caching allocator rounds a request (512-byte steps)."""
    return -(-nbytes // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


@dataclass
class StorageRecord:
    """One storage's life.

    Attributes:
        nbytes: the storage's size in bytes.
        alloc_seq: its allocation's position in the event order.
        free_seq: its release's position in the event order (None while alive).
        phase: ``before the cell``, ``forward``, ``backward`` or ``optimizer step``.
        module: the qualified name of the innermost module running when it was made
            (``model.layer1.0.conv1``), or "".
        category: one of :data:`CATEGORIES`. line: the cell's line (1-based, magic line = 1) that
            made it, or 0.
    """

    nbytes: int
    alloc_seq: int
    phase: str
    module: str
    category: str = "temporaries"
    line: int = 0
    free_seq: int | None = None

    def set_category(self, category: str) -> None:
        """Keep the higher-priority category of the current one and ``category``."""
        if CATEGORIES.index(category) < CATEGORIES.index(self.category):
            self.category = category


#: Device types whose tensors the fake run makes on the CPU: ``cuda`` (a differentiable op on a
#: fake cuda tensor aborts CPU-only builds) and ``meta`` (the twins of meta tensors are CPU fakes).
MAPPED_DEVICES = ("cuda", "meta")


def _device_type(device) -> str | None:
    if isinstance(device, str):
        return device.split(":")[0]
    return device.type if isinstance(device, torch.device) else None


def is_cuda(device) -> bool:
    """True for a ``cuda`` device given as a string or ``torch.device``."""
    return _device_type(device) == "cuda"


def _cpu(value):
    return torch.device("cpu") if _device_type(value) in MAPPED_DEVICES else value


class StorageTracker(TorchDispatchMode):
    """Live-storage accounting of the ops run under it (see the module docstring).

    Args:
        module_names: ``{id(module): qualified name}`` of the modules whose forward should be
            attributed (the twins of the user's modules).
        cell_filename: the compiled cell's file name, to find the cell line that made a storage.

    Attributes:
        records: every :class:`StorageRecord`, in allocation order. events: ``(+1|-1, record)`` in
            order. live_bytes / peak_bytes: sum of ``nbytes`` of live storages now / at most.
        live_block_bytes / peak_block_bytes: the same with each storage rounded as the CUDA
            allocator rounds it (:func:`cuda_block_bytes`). peak_block_seq: the event index of
            that peak. phase: the phase now. saw_cuda: a cuda device was asked for (and mapped to
            the CPU).
    """

    def __init__(self, module_names: dict, cell_filename: str = ""):
        super().__init__()
        self.module_names = module_names
        self.cell_filename = cell_filename
        self.records: list = []
        self.events: list = []
        self._by_storage: dict = {}  # id(storage) -> record, while alive
        self.live_bytes = self.peak_bytes = 0
        self.live_block_bytes = self.peak_block_bytes = 0
        self.peak_block_seq = -1
        self.phase = "forward"
        self.saw_cuda = False
        self.notes: list = []  # what the report should say about the run
        self.conv_ran = False  # a convolution ran (cuDNN on a GPU)
        self.blas_phases: set = set()  # phases that ran a cuBLAS operator (mm, addmm, bmm...)
        self._modules: list = []  # names of the modules whose forward is running

    # ---- storages ------------------------------------------------------------------------

    def record_existing(self, tensor, category: str, module: str = "") -> None:
        """Count a tensor that exists before the cell (a parameter, buffer, input, grad, state)."""
        rec = self._record(tensor, "before the cell", module)
        if rec is not None:
            rec.set_category(category)

    def record_of(self, tensor):
        """The live :class:`StorageRecord` of ``tensor``'s storage, or None."""
        try:
            return self._by_storage.get(id(tensor.untyped_storage()))
        except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, nested)
            return None

    def mark(self, tensor, category: str) -> None:
        """Give ``tensor``'s storage ``category`` (when it ranks higher than its current one)."""
        rec = self.record_of(tensor)
        if rec is not None:
            rec.set_category(category)

    def _record(self, tensor, phase: str, module: str, nbytes: int | None = None):
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        key = id(storage)
        rec = self._by_storage.get(key)
        if rec is not None:
            return rec
        size = int(storage.nbytes()) if nbytes is None else max(nbytes, int(storage.nbytes()))
        rec = StorageRecord(size, len(self.events), phase, module)
        rec.line = self.cell_line()
        self.records.append(rec)
        self._by_storage[key] = rec
        self.events.append((1, rec))
        self.live_bytes += rec.nbytes
        self.live_block_bytes += cuda_block_bytes(rec.nbytes)
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        if self.live_block_bytes > self.peak_block_bytes:
            self.peak_block_bytes = self.live_block_bytes
            self.peak_block_seq = len(self.events) - 1
        weakref.finalize(storage, self._freed, key, rec)
        return rec

    def _freed(self, key, rec) -> None:
        if self._by_storage.get(key) is rec:
            del self._by_storage[key]
        if rec.free_seq is None:
            rec.free_seq = len(self.events)
            self.events.append((-1, rec))
            self.live_bytes -= rec.nbytes
            self.live_block_bytes -= cuda_block_bytes(rec.nbytes)

    def cell_line(self) -> int:
        """The line of the cell running now (the innermost frame of the cell's file), or 0."""
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.cell_filename:
                return frame.f_lineno
            frame = frame.f_back
        return 0

    def live_at_peak(self) -> list:
        """The records alive at the peak of :attr:`peak_block_bytes`."""
        seq = self.peak_block_seq
        return [
            r
            for r in self.records
            if r.alloc_seq <= seq and (r.free_seq is None or r.free_seq > seq)
        ]

    def records_by_seq(self, seq: int) -> StorageRecord:
        """The record of event ``seq``."""
        return self.events[seq][1]

    def detach(self) -> None:
        """Stop listening for frees (the fakes may outlive the tracker)."""
        for rec in self.records:
            if rec.free_seq is None:
                rec.free_seq = len(self.events)
        self._by_storage.clear()

    # ---- phases and modules ----------------------------------------------------------------

    def push_module(self, module) -> None:
        """Forward of ``module`` starts (a global forward pre-hook)."""
        self._modules.append(self.module_names.get(id(module), ""))

    def pop_module(self) -> None:
        """Forward of the innermost module ended."""
        if self._modules:
            self._modules.pop()

    def current_module(self) -> str:
        """The innermost named module whose forward is running, or ""."""
        return next((name for name in reversed(self._modules) if name), "")

    def current_phase(self) -> str:
        """``backward`` inside the autograd engine, else :attr:`phase`."""
        if torch._C._current_autograd_node() is not None:
            return "backward"
        return self.phase

    # ---- the dispatch hook ------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        """Run ``func`` (cuda devices mapped to the CPU) and record the storages of its outputs."""
        kwargs = kwargs or {}
        if "device" in kwargs and _device_type(kwargs["device"]) in MAPPED_DEVICES:
            self.saw_cuda = self.saw_cuda or is_cuda(kwargs["device"])
            kwargs = dict(kwargs, device=torch.device("cpu"))
        out = func(*args, **kwargs)
        if func is torch.ops.aten.set_.source_Storage or func.__name__.startswith("resize_"):
            return out  # the storage is the caller's: counted where it was made
        phase = self.current_phase()
        module = self.current_module() if phase == "forward" else ""
        if func.__name__.startswith("convolution"):
            self.conv_ran = True
        if func.__name__.split(".")[0] in BLAS_OPS:
            self.blas_phases.add(phase)
        sizes = kernel_sizes(func, args, kwargs, out)
        for i, t in enumerate(tree_flatten(out)[0]):
            if isinstance(t, torch.Tensor):
                self._record(t, phase, module, sizes.get(i))
        return out


def kernel_sizes(func, args, kwargs, out) -> dict:
    """``{output index: bytes}`` where a kernel's real output storage outgrows its fake twin's.

    - ``aten.mse_loss`` with a reduction: the ATen kernel returns the reduced loss in the storage
      of the unreduced one (``input.numel()`` elements), measured on PyTorch 2.13.
    - ``aten.mkldnn_rnn_layer`` (LSTM/GRU on the CPU, training): oneDNN's workspace, which the fake
      kernel leaves empty; real calls on zeros on the CPU give it: at the batch itself up to
      :data:`RNN_PROBE_BATCH`, else at two batches and on the line through them (it grows
      linearly with the batch), so a probe never allocates more than a batch of 16 does.
    """
    name = func.__name__
    if name == "mse_loss.default" and (args[2] if len(args) > 2 else 1) != 0:
        inp = args[0]
        return {0: inp.numel() * inp.element_size()}
    if name == "mkldnn_rnn_layer.default" and out[3].numel() == 0:
        batch = args[5].shape[0]  # hx_: (batch, hidden)
        if args[0].dim() != 3 or args[0].shape[1] != batch:
            return {}  # not the (seq, batch, features) layout the probe knows: no probe
        if batch <= RNN_PROBE_BATCH:
            return {3: _rnn_workspace_bytes(func, args, batch)}
        half, full = (_rnn_workspace_bytes(func, args, b) for b in RNN_PROBE_BATCHES)
        step = (full - half) / (RNN_PROBE_BATCHES[1] - RNN_PROBE_BATCHES[0])
        return {3: int(full + step * (batch - RNN_PROBE_BATCHES[1]))}
    return {}


def map_cuda_args(args, kwargs):
    """``Tensor.to`` / ``Tensor.cuda`` arguments with every cuda or meta device made the CPU."""
    return tree_map(_cpu, list(args)), {k: _cpu(v) for k, v in kwargs.items()}


def _rnn_workspace_bytes(func, args, batch: int) -> int:
    """Bytes of oneDNN's RNN workspace for ``args`` with the batch set to ``batch``.

    A real call on zeros on the CPU, outside every mode.
    """
    from torch.utils._python_dispatch import _disable_current_modes

    inp = args[0]  # (seq, batch, features) here, whatever the module's batch_first
    shape = (inp.shape[0], batch, inp.shape[2])
    with _disable_current_modes():
        real = list(args)
        real[0] = torch.zeros(shape, dtype=inp.dtype)
        for k in (1, 2, 3, 4):
            real[k] = torch.zeros(args[k].shape, dtype=args[k].dtype)
        for k in (5, 6):
            real[k] = torch.zeros((batch, *args[k].shape[1:]), dtype=args[k].dtype)
        ws = func(*real)[3]
    return ws.numel() * ws.element_size()
