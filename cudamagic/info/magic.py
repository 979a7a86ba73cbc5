"""``%cudainfo``: the IPython front of the environment report."""

from __future__ import annotations

import math

from IPython.core.magic import line_magic, magics_class, output_can_be_silenced
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, HasTraits, TraitError, validate

from ..core.magic import AreaMagics
from ..core.manual import manual
from .options import USAGE, check


class InfoSettings(HasTraits):
    """``%cudainfo`` settings, reachable as ``%config CudaMagics.<name>``."""

    nvcc_timeout_s = Float(
        5.0,
        min=0.1,
        max=600.0,
        help="Seconds (0.1 to 600) to wait for `nvcc -V` before reporting it as not available.",
    ).tag(config=True)

    @validate("nvcc_timeout_s")
    def _finite_timeout(self, proposal):
        value = proposal["value"]
        if not math.isfinite(value):
            raise TraitError(f"nvcc_timeout_s must be a finite number of seconds, not {value!r}")
        return value


@magics_class
class InfoMagics(AreaMagics):
    """``%cudainfo``."""

    @manual(InfoSettings)
    @magic_arguments()
    @argument(
        "--json",
        action="store_true",
        help="Print the report as JSON (nvidia-smi --query-gpu key names).",
    )
    @argument(
        "-q",
        "--quiet",
        action="store_true",
        help="Display nothing; the report is stored as `_cudainfo` in the user namespace.",
    )
    @output_can_be_silenced
    @line_magic
    def cudainfo(self, line=""):
        """Report the whole PyTorch / CUDA / driver / GPU picture, with findings.

        Never creates a CUDA context, never raises on a machine without a GPU,
        driver, nvcc or NVML: what cannot be read shows as N/A with the reason.

        Examples:
        --------
        ::

            %cudainfo
            %cudainfo --json
            info = %cudainfo          # the report object; assignment shows nothing
            info.to_dict()["gpus"]    # nvidia-smi --query-gpu key names, raw NVML units
            %cudainfo -q              # collect silently; the report is in `_cudainfo`
            %cudainfo ;               # the same, as a trailing `;` silences any IPython line
        """
        line = line.rstrip()
        silenced = line.endswith(";")  # IPython then displays nothing (@output_can_be_silenced)
        args = check(self.parse(self.cudainfo, line.removesuffix(";"), USAGE))
        from .facts import collect

        report = collect(nvcc_timeout_s=self.settings.nvcc_timeout_s)
        if args.json:
            print(report.to_json())
            return None
        if args.quiet or silenced:
            self.shell.user_ns["_cudainfo"] = report
            return None
        return report
