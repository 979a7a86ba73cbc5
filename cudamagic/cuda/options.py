"""Checks for ``%%cuda`` options: each raises a plain ``UsageError`` that says what to type."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from IPython.core.error import UsageError

from ..core.platform import split_command_line

USAGE = (
    '%%cuda [--arch sm_XY] [--timeout S] [--args "A B"] [--save NAME.cuh] [--torch NAMES] '
    '[--profile ncu|nsys] [--nvcc-flags "..."] [--skip-without nvcc|gpu]'
)

_ARCH_RE = re.compile(r"^(?:sm_|compute_)?(?P<major>\d{1,2})\.?(?P<minor>\d)(?P<suffix>[af]?)$")
_SAVE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\.(?:cuh|h|hpp|hh|inl)$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class CudaOptions:
    """Checked ``%%cuda`` options.

    Attributes:
        arch: ``"90"``, ``"90a"``, ... (compute capability digits, major then minor) or None (the
            GPU's own).
        timeout_s: seconds the program may run before its whole process tree is killed; None: no
            limit.
        timeout_from: where ``timeout_s`` came from: ``"--timeout"`` (typed in the cell) or
            ``"config"`` (``CudaMagics.cuda_timeout_s``, set with ``%config``), so a time-out
            message can say what to change.
        args: program arguments (argv[1:]), split like the platform's shell would (Windows keeps
            backslashes).
        save: header name to save the cell as (``vec.cuh``) or None.
        torch: function names to bind from a PyTorch extension built from the cell; empty: a plain
            program.
        profile: ``"ncu"``, ``"nsys"`` or None.
        nvcc_flags: extra nvcc arguments.
        skip_without: ``"nvcc"`` or ``"gpu"``: when that is missing, the cell says so and is skipped
            instead of failing (for notebooks shared between machines with and without a CUDA
            toolkit or GPU); None: fail.
    """

    arch: str | None = None
    timeout_s: float | None = None
    timeout_from: str = "--timeout"
    args: tuple = ()
    save: str | None = None
    torch: tuple = ()
    profile: str | None = None
    nvcc_flags: tuple = field(default_factory=tuple)
    skip_without: str | None = None


def parse_arch(text: str) -> str:
    """``sm_90`` / ``compute_90`` / ``9.0`` / ``90`` / ``sm_90a`` -> ``"90"`` / ``"90a"``.

    Raises:
        UsageError: anything else.
    """
    m = _ARCH_RE.match(text.strip())
    if not m:
        raise UsageError(
            f"%%cuda: --arch {text!r} is not a GPU architecture. Write it as nvcc does, e.g. "
            "--arch sm_90 (compute capability 9.0) or --arch sm_86; `nvcc --list-gpu-code` lists "
            "what your nvcc can build."
        )
    return f"{m['major']}{m['minor']}{m['suffix']}"


def check(args, default_timeout_s: float = 0.0) -> CudaOptions:
    """Turn parsed ``magic_arguments`` into :class:`CudaOptions`.

    Raises:
        UsageError: a bad value (negative or infinite timeout, malformed arch, header name, or
            names).
    """
    if args.timeout is not None:
        if not math.isfinite(args.timeout) or args.timeout < 0:
            raise UsageError(
                f"%%cuda: --timeout must be a positive number of seconds, or 0 for no limit, not "
                f"{args.timeout!r}; e.g. --timeout 30."
            )
        timeout, timeout_from = (
            args.timeout or None,
            "--timeout",
        )  # 0: no limit, even where a default is set
    else:
        timeout, timeout_from = default_timeout_s or None, "config"
    arch = parse_arch(args.arch) if args.arch else None
    try:
        prog_args = tuple(split_command_line(args.args)) if args.args else ()
        flags = tuple(split_command_line(args.nvcc_flags)) if args.nvcc_flags else ()
    except ValueError as exc:
        raise UsageError(
            f"%%cuda: cannot split --args/--nvcc-flags into words ({exc}); close every quote, "
            "e.g. --args \"1024 'a b'\"."
        ) from None
    save = args.save
    if save is not None and not _SAVE_RE.match(save):
        raise UsageError(
            f"%%cuda: --save {save!r} is not a header name. Use a plain file name ending in .cuh "
            'or .h with no folder, e.g. --save vec.cuh, then #include "vec.cuh" in later cells.'
        )
    names = ()
    if args.torch is not None:
        names = tuple(n.strip() for n in args.torch.split(",") if n.strip())
        bad = [n for n in names if not _IDENT_RE.match(n)]
        if bad or not names:
            raise UsageError(
                f"%%cuda: --torch {args.torch!r}: give the C++ function names to bind, separated "
                "by commas, e.g. --torch add_one,scale."
            )
    if save and (names or args.profile):
        raise UsageError(
            "%%cuda: --save only stores the cell as a header; use it alone (with no --torch or "
            "--profile), then #include the header from another %%cuda cell."
        )
    if names and (args.profile or prog_args):
        raise UsageError(
            "%%cuda: --torch builds a PyTorch extension, which is called from Python, not run: "
            "drop --args/--profile, or drop --torch to run the cell as a program."
        )
    if args.profile is not None and args.profile not in ("ncu", "nsys"):
        raise UsageError(
            f"%%cuda: --profile {args.profile!r}: choose ncu (Nsight Compute) or nsys "
            "(Nsight Systems)."
        )
    skip = args.skip_without
    if skip is not None and skip not in ("nvcc", "gpu"):
        raise UsageError(
            f"%%cuda: --skip-without {skip!r}: choose nvcc (skip the cell where no CUDA compiler "
            "is installed) or gpu (skip it also where no NVIDIA GPU is visible)."
        )
    return CudaOptions(
        arch=arch,
        timeout_s=timeout,
        timeout_from=timeout_from,
        args=prog_args,
        save=save,
        torch=names,
        profile=args.profile,
        nvcc_flags=flags,
        skip_without=skip,
    )
