"""``%%cuda``: the IPython front.

The cell's work is in :mod:`.cell` (toolchain in :mod:`.toolchain`, compiling in :mod:`.build`, the
cache in :mod:`.cache`, running in :mod:`.run`, PyTorch extensions in :mod:`.torchext`); option
checks in :mod:`.options`, results in :mod:`.result`.
"""

from __future__ import annotations

import math

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, HasTraits, Int, TraitError, Unicode, validate

from ..core.fmt import format_bytes, plural
from ..core.magic import AreaMagics
from ..core.manual import manual
from .cache import Workspace, clear, default_root
from .cell import run_cell
from .errors import CudaCompileError, CudaProgramError, CudaUsageError
from .options import USAGE, check
from .result import ProgramRun


class CudaSettings(HasTraits):
    """``%%cuda`` settings, reachable as ``%config CudaMagics.<name>``."""

    cuda_cache_dir = Unicode(
        "",
        help="Folder of %%cuda's build cache; empty: $XDG_CACHE_HOME/cudamagic/cuda "
        "(~/.cache/cudamagic/cuda).",
    ).tag(config=True)
    cuda_cache_max_bytes = Int(
        2 * 1024**3,
        min=0,
        help="Bytes the %%cuda build cache may hold; least recently used builds are removed "
        "beyond it.",
    ).tag(config=True)
    cuda_timeout_s = Float(
        0.0,
        min=0.0,
        help="Seconds a %%cuda program may run before it is killed when the cell gives no "
        "--timeout; 0: no limit (a cell's --timeout 0 also turns a limit set here off).",
    ).tag(config=True)
    cuda_nvcc_flags = Unicode(
        "", help="Extra nvcc flags for every %%cuda cell, e.g. '-O3 -lineinfo'."
    ).tag(config=True)

    @validate("cuda_timeout_s")
    def _finite_cuda_timeout(self, proposal):
        if not math.isfinite(proposal["value"]):
            raise TraitError(
                f"cuda_timeout_s must be a finite number of seconds, not {proposal['value']!r}"
            )
        return proposal["value"]


@magics_class
class CudaCellMagics(AreaMagics):
    """``%%cuda`` (a cell of CUDA C++) and ``%cuda --clear-cache``.

    Attributes:
        last: the :mod:`.result` object of the last cell that succeeded, or None.
    """

    def on_load(self) -> None:
        """Start with no result and no workspace."""
        self.last = None
        self._ws = None

    def _workspace(self) -> Workspace:
        """The workspace of the cache folder set now (a new one when the setting changed)."""
        root = self.settings.cuda_cache_dir or default_root()
        if self._ws is None or self._ws.root != root:
            self._ws = Workspace(root)
            self.add_cleanup(self._ws.remove_saved)
        return self._ws

    @manual(CudaSettings, "%% %", line_only={"--clear-cache"})
    @magic_arguments()
    @argument(
        "--arch",
        default=None,
        metavar="sm_XY",
        help="GPU architecture to build for (sm_90, sm_86, ...) (default: the GPU's own).",
    )
    @argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Seconds the program may run; then it and all its child processes are killed. 0: no "
        "limit, also where a setting sets one (default: CudaMagics.cuda_timeout_s).",
    )
    @argument(
        "--args",
        default=None,
        metavar='"ARGS"',
        help='Arguments for the program, quoted as one: --args "1024 16".',
    )
    @argument(
        "--save",
        default=None,
        metavar="NAME.cuh",
        help="Save the cell as a header that later %%%%cuda cells can #include (not compiled).",
    )
    @argument(
        "--torch",
        default=None,
        metavar="NAMES",
        help="Build the cell as a PyTorch extension and bind these comma-separated functions.",
    )
    @argument(
        "--profile",
        default=None,
        metavar="ncu|nsys",
        help="Run the program under Nsight Compute or Systems.",
    )
    @argument(
        "--nvcc-flags",
        default=None,
        dest="nvcc_flags",
        metavar='"FLAGS"',
        help="Extra nvcc flags, quoted as one (added to CudaMagics.cuda_nvcc_flags).",
    )
    @argument(
        "--skip-without",
        default=None,
        dest="skip_without",
        metavar="nvcc|gpu",
        help="Where nvcc (or a GPU) is missing, say so and skip the cell instead of failing it.",
    )
    @argument(
        "--clear-cache",
        action="store_true",
        dest="clear_cache",
        help="(%%cuda line magic only) remove every cached build (CudaMagics.cuda_cache_dir).",
    )
    @line_cell_magic
    def cuda(self, line="", cell=None):
        r"""Compile a cell of CUDA C++ for this GPU and run it, or build a PyTorch extension.

        nvcc (from $CUDA_HOME, $CUDA_PATH, PATH or NVIDIA's pip wheel) builds the cell for the
        GPU's compute capability, read from NVML without a CUDA context. Builds are cached by
        content: an unchanged cell does not call nvcc. The program's output appears line by line;
        --timeout and a kernel interrupt kill it with all its children. A compile or link error
        (at the cell's own lines), a non-zero exit, a signal or a CUDA error fails the cell.

        Examples:
        --------
        A program (``--arch``, ``--timeout`` and ``--args`` are optional); a header that later
        cells ``#include "vec.cuh"``; a PyTorch extension (then ``add_one(t)`` in Python); a cell
        skipped, with the reason, where nvcc is missing; the build cache emptied::

            %%cuda --arch sm_90 --timeout 30 --args "1024 16"
            #include <cstdio>
            __global__ void hello() { printf("thread %d\n", threadIdx.x); }
            int main() { hello<<<1, 4>>>(); cudaDeviceSynchronize(); }

            %%cuda --save vec.cuh
            %%cuda --torch add_one,scale
            %%cuda --skip-without nvcc
            %cuda --clear-cache
        """
        # a failing cell shows the compiler's or program's error, not this frame
        __tracebackhide__ = True  # noqa: F841
        args = self.parse(self.cuda, line, USAGE, prefix="%%" if cell is not None else "%")
        if cell is None:
            if not args.clear_cache:
                raise UsageError(
                    "%cuda (one %) only takes --clear-cache. To compile code, start a cell with "
                    f"%%cuda (two %) and put the code below it. Usage: {USAGE}."
                )
            return self._clear()
        if args.clear_cache:
            raise UsageError(
                "%%cuda: --clear-cache is a line magic: run `%cuda --clear-cache` on its own line."
            )
        opts = check(args, self.settings.cuda_timeout_s)
        if not cell.strip():
            raise UsageError(
                "%%cuda: the cell is empty; put CUDA C++ below the %%cuda line (a main() to run "
                "it, or functions with --torch NAMES)."
            )
        try:
            self.last = result = run_cell(
                cell, opts, self._workspace(), self.settings, self.shell.user_ns
            )
        except CudaUsageError as exc:
            raise UsageError(str(exc)) from None
        except (CudaCompileError, CudaProgramError) as exc:
            # the cell's code failed, not ours: IPython shows only the message; elsewhere
            # (sys.excepthook, %tb) the traceback starts here rather than deep in the build
            raise exc.with_traceback(None) from None
        return None if isinstance(result, ProgramRun) else result

    def _clear(self) -> None:
        ws = self._workspace()
        count, size = clear(ws.root)
        builds = plural(count, "cached build")
        print(f"%cuda: removed {builds} ({format_bytes(size)}) from {ws.root}.")
