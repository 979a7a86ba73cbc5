"""``%%cudafit``: the IPython front.

``%%cudafit``: the IPython front of the memory estimate (options in :mod:`.options`, the fake
run in :mod:`.run`, figures in :mod:`.estimate`, the target in :mod:`.target`).
"""

from __future__ import annotations

import ast
from dataclasses import replace

from IPython.core.error import UsageError
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import HasTraits, Int

from ..core.cell import compile_cell
from ..core.magic import AreaMagics
from ..core.manual import manual
from ..core.na import is_na


def first_line(cell: str, width: int = 60) -> str:
    """The cell's first non-blank line, clipped to ``width`` columns (the report's title)."""
    from ..core.fmt import clip

    return clip(next((line.strip() for line in cell.splitlines() if line.strip()), ""), width)


class FitSettings(HasTraits):
    """``%%cudafit`` settings, reachable as ``%config CudaMagics.<name>``."""

    cudafit_top_modules = Int(
        5, min=0, help="`%%cudafit`: rows in the table of modules by bytes at the peak (--top)."
    ).tag(config=True)


@magics_class
class FitMagics(AreaMagics):
    """``%%cudafit``."""

    @manual(FitSettings, "%%")
    @magic_arguments()
    @argument("--device", default="cuda:0", metavar="cuda:N", help="target GPU (CUDA ordinal).")
    @argument(
        "--device-memory",
        default=None,
        metavar="SIZE",
        help="target memory when this machine has not that GPU, e.g. 24GiB (assumed all free; "
        "B, KiB, MiB, GiB, KB, MB, GB).",
    )
    @argument(
        "--gpu",
        default=None,
        metavar="NAME",
        help='target GPU by name from a table, e.g. "RTX 4090".',
    )
    @argument(
        "--max-batch",
        default=None,
        metavar="NAMES",
        help="find the largest batch: comma-separated inputs whose leading dimension scales.",
    )
    @argument(
        "--dtype",
        choices=["bf16", "fp16"],
        default=None,
        help="run the step under torch.autocast with this dtype.",
    )
    @argument("--suggest", action="store_true", help="suggestions even when the step fits.")
    @argument(
        "--top",
        type=int,
        default=None,
        metavar="N",
        help="module rows (default: CudaMagics.cudafit_top_modules).",
    )
    @argument(
        "--verify",
        action="store_true",
        help="then run one real step on the GPU (at the --max-batch size) and show it beside the "
        "estimate; everything is put back after it (needs a GPU; resets the peak counters).",
    )
    @argument("-o", default=None, metavar="NAME", help="also store the result in variable NAME.")
    @cell_magic
    def cudafit(self, line="", cell=""):
        """Estimate whether a training step fits on the GPU, before it runs.

        The cell runs once on fake tensors (``FakeTensorMode``): no GPU or CPU memory for the
        data, your model, optimizer, tensors, ``.grad``, BatchNorm statistics and RNG state are
        left exactly as they were, assignments in the cell do not reach your namespace, and no
        CUDA context is created. Every object the cell names that holds tensors is copied as a
        fake twin (same shapes, dtypes, grads, optimizer state); the figures assume it all lives
        on the target GPU.

        It reports the peak of live tensors, the predicted ``torch.cuda.max_memory_allocated()``
        and ``max_memory_reserved()`` (PyTorch's caching allocator modelled: 512-byte blocks, 2 MiB
        small segments, 20 MiB / 2 MiB-rounded large segments), the cuBLAS workspaces and the
        CUDA context (each with its source), the process total ``nvidia-smi`` would show, the
        phase at the peak (forward, backward, optimizer step), what is live at the peak
        (parameters, gradients, optimizer state, activations saved for backward, temporaries) and
        the top modules. The verdict compares the total with the target's free memory: NVML's
        ``memory.free`` of ``--device`` (other processes counted), or ``--device-memory`` /
        ``--gpu`` on a machine without that GPU. When the step does not fit (or with
        ``--suggest``) each change is re-estimated: bf16 autocast, activation checkpointing of the
        biggest blocks, half the batch, SGD instead of Adam, expandable segments.

        Cells it cannot follow (reading a value: ``.item()``, ``if loss > 0``; value-dependent
        shapes: ``nonzero``, masks; custom C++/CUDA operators without a fake kernel) get a
        paragraph naming the operation and the line, with the figures of the part before it and
        no verdict. ``torch.compile``'d modules (and ``torch.compile`` calls in the cell) are
        estimated as their eager code, and the report says so; an optimizer that leaves
        ``foreach`` to PyTorch is estimated with the foreach implementation, PyTorch's choice for
        parameters on a GPU (noted as well).
        The result has ``.to_dict()``; numbers are in bytes (``peak_reserved_bytes``...).

        Examples:
        --------
        ::

            %%cudafit
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step(); opt.zero_grad()

            %%cudafit --gpu "RTX 4090" --max-batch x,y --dtype bf16 -o fit
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step(); opt.zero_grad()

            fit.peak_reserved_bytes, fit.max_batch.batch, fit.to_dict()

            %%cudafit --device-memory 24GiB --suggest
            loss = loss_fn(model(x), y)
            loss.backward()
        """
        __tracebackhide__ = True
        from . import options

        args = self.parse(self.cudafit, line, usage=options.USAGE, prefix="%%")
        opts = options.check(args, self.shell.user_ns)
        top = self.settings.cudafit_top_modules if args.top is None else opts.top
        result = self._estimate(line, cell, opts, top)
        if opts.out:
            self.shell.user_ns[opts.out] = result
        return result

    def _estimate(self, line, cell, opts, top):
        """Compile the cell, find the target, run the estimate."""
        __tracebackhide__ = True

        import torch

        from . import target
        from .estimate import DTYPES, Request, estimate
        from .result import CannotFollow

        try:
            code = compile_cell(self.shell, cell, f"%%cudafit {line}".rstrip())
        except SyntaxError as exc:
            raise exc.with_traceback(None) from None
        tree = ast.parse("\n" + self.shell.transform_cell(cell))
        initialized = torch.cuda.is_initialized()
        if opts.device_memory_bytes is not None:
            tgt = target.from_size(opts.device_memory_bytes)
        elif opts.gpu is not None:
            tgt = target.from_table(opts.gpu)
        else:
            held = torch.cuda.memory_reserved(opts.ordinal) if initialized else 0
            tgt = target.from_nvml(opts.ordinal, held)
        if opts.max_batch and is_na(tgt):
            raise UsageError(
                f"%%cudafit --max-batch needs a target GPU, and there is none here ({tgt.reason}). "
                'Give its memory or name, e.g. `%%cudafit --max-batch x,y --gpu "RTX 4090"`.'
            )
        req = Request(
            code,
            tree,
            self.shell.user_ns,
            tgt,
            cuda_initialized=initialized,
            dtype=DTYPES.get(opts.dtype),
            top=top,
            source=first_line(cell),
        )
        try:
            est = estimate(req, opts.max_batch, suggest=True if opts.suggest else None)
        except CannotFollow as exc:
            raise UsageError(f"%%cudafit: cannot estimate this cell: {exc.reason}.") from None
        if opts.verify and est.stopped is None:
            from .verify import verify

            scale = None
            if est.max_batch is not None and est.max_batch.batch > 0:
                m = est.max_batch
                ns = self.shell.user_ns
                scale = {n: int(ns[n].shape[0]) * m.batch // m.batch_now for n in m.names}
            est = replace(est, verified=verify(code, tree, self.shell.user_ns, opts.ordinal, scale))
        return est
