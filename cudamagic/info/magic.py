"""``%cudainfo``: the IPython front of the environment report (facts in :mod:`.facts`, text/HTML in
:mod:`.report`).
"""

from __future__ import annotations

import math

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, HasTraits, TraitError, validate

from ..core.magic import AreaMagics

USAGE = "%cudainfo [--json | -q]"


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
    """``%cudainfo`` (and ``%cudainfo;``, which displays nothing)."""

    def on_load(self) -> None:
        # `%cudainfo;`: IPython reads the `;` as part of the magic's name, so that name is
        # registered too.
        self.shell.magics_manager.register_function(self._cudainfo_quiet, "line", "cudainfo;")

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
    @line_magic
    def cudainfo(self, line=""):
        """Report the whole PyTorch / CUDA / driver / GPU picture, with findings.

        Examples:
        --------
        ::

            %cudainfo
            %cudainfo --json
            info = %cudainfo          # the report object; assignment shows nothing
            info.to_dict()["gpus"]    # nvidia-smi --query-gpu key names, raw NVML units
            %cudainfo -q              # collect silently; the report is in `_cudainfo`
            %cudainfo;                # the same

        Never creates a CUDA context, never raises on a machine without a GPU,
        driver, nvcc or NVML: what cannot be read shows as N/A with the reason.
        """
        stripped = line.rstrip()
        quiet = stripped.endswith(";")  # `%cudainfo ;` as in `expr;`: display nothing
        args = self.parse(self.cudainfo, stripped.rstrip(";"), USAGE)
        if args.json and args.quiet:
            raise UsageError(
                f"%cudainfo: --json prints the report and -q displays nothing; use one of them. "
                f"Usage: {USAGE}."
            )
        from .facts import collect

        report = collect(nvcc_timeout_s=self.settings.nvcc_timeout_s)
        if args.json:
            print(report.to_json())
            return None
        if args.quiet or quiet:
            self.shell.user_ns["_cudainfo"] = report
            return None
        return report

    def _cudainfo_quiet(self, line=""):
        """``%cudainfo;``: the report is collected and stored as ``_cudainfo``; nothing is displayed."""
        return self.cudainfo(line.rstrip() + " ;")
