"""``%%cuda``: the IPython front (toolchain in :mod:`.toolchain`, compiling and the cache in
:mod:`.build`, running in :mod:`.run`, PyTorch extensions in :mod:`.torchext`, option checks in :mod:`.options`).
"""

from __future__ import annotations

import math

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, HasTraits, Int, TraitError, Unicode, validate

from ..core.magic import AreaMagics
from .options import USAGE


class CudaSettings(HasTraits):
    """``%%cuda`` settings, reachable as ``%config CudaMagics.<name>``."""

    cuda_cache_dir = Unicode(
        "",
        help="Folder of %%cuda's build cache; empty: $XDG_CACHE_HOME/cudamagic/cuda (~/.cache/cudamagic/cuda).",
    ).tag(config=True)
    cuda_cache_max_bytes = Int(
        2 * 1024**3,
        min=0,
        help="Bytes the %%cuda build cache may hold; least recently used builds are removed beyond it.",
    ).tag(config=True)
    cuda_timeout_s = Float(
        0.0,
        min=0.0,
        help="Seconds a %%cuda program may run before it is killed when the cell gives no --timeout; 0: no limit "
        "(a cell's --timeout 0 also turns a limit set here off).",
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


class Saved:
    """``%%cuda --save NAME``'s result: ``name`` and ``path`` of the header."""

    def __init__(self, name: str, path: str):
        self.name, self.path = name, path

    def __repr__(self):
        return f'saved {self.name}: #include "{self.name}" in later %%cuda cells'

    def _repr_html_(self):
        from ..core import style
        from ..core.fmt import esc

        return style.page(
            f"{style.badge('saved', 'ok')} <code>{esc(self.name)}</code>: <code>#include "
            f'"{esc(self.name)}"</code> in later <code>%%cuda</code> cells',
            "cuda",
        )


class Skipped:
    """``%%cuda --skip-without``'s result where the cell was not run: ``reason``."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self):
        return f"skipped: {self.reason}"

    def _repr_html_(self):
        from ..core import style
        from ..core.fmt import esc

        return style.page(f"{style.badge('skipped', 'info')} {esc(self.reason)}", "cuda")


class TorchBuild:
    """``%%cuda --torch``'s result: ``names`` bound in the namespace, ``module``, ``cached`` (no
    build ran), ``elapsed_s``.
    """

    def __init__(self, names, module, cached: bool, elapsed_s: float):
        self.names, self.module, self.cached, self.elapsed_s = (
            tuple(names),
            module,
            cached,
            elapsed_s,
        )

    def __repr__(self):
        how = "loaded from the cache" if self.cached else f"built in {self.elapsed_s:.1f} s"
        return f"{', '.join(self.names)}: PyTorch extension {how}; callable in this namespace"

    def _repr_html_(self):
        from ..core import style
        from ..core.fmt import esc

        how = "loaded from the cache" if self.cached else f"built in {self.elapsed_s:.1f} s"
        names = ", ".join(f"<code>{esc(n)}</code>" for n in self.names)
        return style.page(
            f"{style.badge('built', 'ok')} {names}: PyTorch extension {esc(how)}; callable in this "
            "namespace",
            "cuda",
        )


@magics_class
class CudaCellMagics(AreaMagics):
    """``%%cuda`` (a cell of CUDA C++) and ``%cuda --clear-cache``."""

    # : What the last ``%%cuda`` cell did: ``{"kind", "path", "cached", "archs", "compile_s",
    # "run_s"}``.
    last: dict | None = None
    _ws = None

    def _workspace(self):
        from .build import Workspace, default_root

        root = self.settings.cuda_cache_dir or default_root()
        if self._ws is None or self._ws.root != root:
            self._ws = Workspace(root)
            ws = self._ws
            self.add_cleanup(ws.remove_saved)
        return self._ws

    @magic_arguments()
    @argument(
        "--arch",
        default=None,
        help="GPU architecture to build for (sm_90, sm_86, ...); default: the GPU's own.",
    )
    @argument(
        "--timeout",
        type=float,
        default=None,
        help="Seconds the program may run; then it and all its child processes are killed. 0: no "
        "limit (also where CudaMagics.cuda_timeout_s sets one).",
    )
    @argument(
        "--args", default=None, help='Arguments for the program, quoted as one: --args "1024 16".'
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
        "--nvcc-flags", default=None, dest="nvcc_flags", help="Extra nvcc flags, quoted as one."
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
        help="(%%cuda line magic only) remove every cached build.",
    )
    @line_cell_magic
    def cuda(self, line="", cell=None):
        """Compile a cell of CUDA C++ for this GPU and run it, streaming its output; or build it as
        a PyTorch extension.

        The cell is compiled with nvcc (found in $CUDA_HOME, $CUDA_PATH, PATH or the `cuda` extra's
        wheel) as `-gencode arch=compute_XX,code=[sm_XX,compute_XX]` for the GPU's compute
        capability, read from NVML
        without creating a CUDA context. Builds are cached by content: an unchanged cell does not
            call nvcc.
        The program's stdout and stderr appear line by line as it prints; --timeout and a kernel
        interrupt kill it with all its children. A compile error (located at the cell's own lines,
        including lines of --save'd headers), a link error (each missing symbol demangled, at the
        line that uses it), a non-zero exit, a signal or a CUDA error (also one the program prints
        and then returns 0) fails the cell with an exception. --skip-without nvcc|gpu skips the
        cell, saying why, where that is missing.

        Examples:
        --------
        ::

            %%cuda
            #include <cstdio>
            __global__ void hello() { printf("block %d thread %d\\n", blockIdx.x, threadIdx.x); }
            int main() { hello<<<2, 2>>>(); cudaDeviceSynchronize(); }

            %%cuda --arch sm_90 --timeout 30 --args "1024 16"
            %%cuda --save vec.cuh            # later cells: #include "vec.cuh"
            %%cuda --torch add_one,scale     # then add_one(t) in Python
            %%cuda --skip-without nvcc       # a shared notebook: skipped, with the reason, where
            nvcc is missing %cuda --clear-cache
            %config CudaMagics.cuda_timeout_s = 60
        """
        __tracebackhide__ = True  # noqa: F841 - a failing cell shows the compiler's or program's error
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
        from .options import check

        opts = check(args, self.settings.cuda_timeout_s)
        if not cell.strip():
            raise UsageError(
                "%%cuda: the cell is empty; put CUDA C++ below the %%cuda line (a main() to run it, "
                "or functions with --torch NAMES)."
            )
        from .cell import run_cell
        from .errors import CudaCompileError, CudaProgramError

        self.last = {}
        try:
            return run_cell(
                cell, opts, self._workspace(), self.settings, self.shell.user_ns, self.last
            )
        except (CudaCompileError, CudaProgramError) as exc:
            # the cell's code failed, not ours: IPython shows only the message
            # (errors._ShownAsMessage); outside IPython (sys.excepthook, %tb) the traceback starts
            # here rather than deep in the build
            raise exc.with_traceback(None) from None

    def _clear(self):
        from ..core.fmt import format_bytes
        from .build import clear

        ws = self._workspace()
        count, size = clear(ws.root)
        print(
            f"%cuda: removed {count} cached build{'s' if count != 1 else ''} ({format_bytes(size)}) from "
            f"{ws.root}."
        )
