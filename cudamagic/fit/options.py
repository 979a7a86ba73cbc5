"""``%%cudafit`` options.

``%%cudafit`` options, checked before anything runs: the target GPU, the inputs to scale, the
autocast dtype. Every mistake is one ``UsageError`` that says what to type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from IPython.core.error import UsageError

from ..core.fmt import parse_bytes
from . import gpus

USAGE = (
    '%%cudafit [--device cuda:N | --device-memory 24GiB | --gpu "RTX 4090"] [--max-batch x,y] '
    "[--dtype bf16] [--suggest] [--top N] [--verify] [-o NAME]"
)


@dataclass(frozen=True)
class FitOptions:
    """Checked options.

    ``ordinal`` (CUDA ordinal), ``device_memory_bytes`` (or None), ``gpu`` (a
    :func:`.gpus.lookup` entry or None), ``max_batch`` (names), ``dtype`` (``"bf16"``/``"fp16"``
    or None), ``suggest``, ``top``, ``out`` (a variable name or None), ``verify``.
    """

    ordinal: int = 0
    device_memory_bytes: int | None = None
    gpu: tuple | None = None
    max_batch: tuple = ()
    dtype: str | None = None
    suggest: bool = False
    top: int = 5
    out: str | None = None
    verify: bool = False


def check(args, user_ns: dict) -> FitOptions:
    """The parsed arguments as :class:`FitOptions`.

    Raises:
        UsageError: a bad device, size, GPU name, dtype, name list, ``--top``, or ``--verify``
            without a GPU.
    """
    ordinal = device_ordinal(args.device)
    if args.device_memory is not None and args.gpu is not None:
        raise UsageError(
            "%%cudafit: give either --device-memory or --gpu, not both; e.g. "
            '`%%cudafit --gpu "RTX 4090"`.'
        )
    size = None if args.device_memory is None else device_memory(args.device_memory)
    entry = None
    if args.gpu is not None:
        entry = gpus.lookup(args.gpu)
        if entry is None:
            raise UsageError(
                f"%%cudafit: unknown GPU {args.gpu!r}; known: {', '.join(gpus.GPUS)}. Or give the "
                "memory: `%%cudafit --device-memory 24GiB`."
            )
    if args.top is not None and args.top < 0:
        raise UsageError(f"%%cudafit: --top must be 0 or more (got {args.top}); e.g. --top 5.")
    if args.o is not None and not args.o.isidentifier():
        raise UsageError(f"%%cudafit: -o takes a variable name (got {args.o!r}); e.g. -o fit.")
    if args.verify:
        verify_needs_gpu()
    return FitOptions(
        ordinal=ordinal,
        device_memory_bytes=size,
        gpu=entry,
        max_batch=batch_names(args.max_batch, user_ns) if args.max_batch else (),
        dtype=args.dtype,
        suggest=args.suggest,
        top=5 if args.top is None else args.top,
        out=args.o,
        verify=args.verify,
    )


def device_ordinal(text: str) -> int:
    """``cuda``/``cuda:N``/``N`` -> the CUDA ordinal N, else ``UsageError``."""
    m = re.fullmatch(r"\s*(?:cuda(?::(\d+))?|(\d+))\s*", str(text))
    if not m:
        raise UsageError(
            f"%%cudafit: --device takes a CUDA device like cuda:0 (got {text!r}); e.g. "
            "`%%cudafit --device cuda:1`."
        )
    return int(m.group(1) or m.group(2) or 0)


def device_memory(text: str) -> int:
    """``24GiB``, ``80GB``, ``16000000000`` -> bytes (more than 0), else ``UsageError``."""
    try:
        nbytes = parse_bytes(text)
    except ValueError as exc:
        raise UsageError(f"%%cudafit: --device-memory: {exc}; e.g. --device-memory 24GiB.") from exc
    if nbytes <= 0:
        raise UsageError(
            "%%cudafit: --device-memory must be more than 0; e.g. --device-memory 24GiB."
        )
    return nbytes


def batch_names(text: str, user_ns: dict) -> tuple:
    """``x,y`` -> ``("x", "y")``: tensors of the namespace with a leading dimension.

    Raises:
        UsageError: a name that is not such a tensor (saying how to name a batch the cell builds).
    """
    import torch

    names = tuple(n.strip() for n in str(text).split(",") if n.strip())
    for name in names:
        value = user_ns.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[0] == 0:
            raise UsageError(
                f"%%cudafit: --max-batch {name}: no tensor with a batch dimension named {name!r} "
                "in the namespace. Name the inputs the cell reads, e.g. `--max-batch x,y`; for a "
                "batch the cell takes from a DataLoader, run `x, y = next(iter(loader))` before "
                "and use x and y in the cell."
            )
    if not names:
        raise UsageError("%%cudafit: --max-batch needs names, e.g. `--max-batch x,y`.")
    return names


def verify_needs_gpu() -> None:
    """``--verify`` runs a real step on a GPU: ``UsageError`` when PyTorch sees none.

    ``torch.cuda.is_available()`` asks the driver for the device count; it creates no context.
    """
    import torch

    if torch.cuda.is_available():
        return
    where = (
        "this PyTorch has no CUDA" if not torch.backends.cuda.is_built() else "no GPU is visible"
    )
    raise UsageError(
        f"%%cudafit --verify runs one real step on a GPU, and {where}. Run the estimate without "
        "--verify here, and --verify (or `python scripts/gpu_check_cudafit.py`) on a GPU machine."
    )
