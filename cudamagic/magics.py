"""The IPython front of cudamagic: one thin method per magic.

``CudaMagics`` parses arguments (``IPython.core.magic_arguments``), calls plain
functions in the modules below, and returns objects that render as HTML in a
notebook and as text in a terminal. Defaults live in ``config=True`` traits, so
``%config CudaMagics.<name> = value`` and ``ipython_config.py`` both work.

Each feature that owns a thread, an event callback or an exception hook
registers a cleanup with :meth:`CudaMagics.add_cleanup`; ``%unload_ext cudamagic``
runs them all and removes the magics.
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, Float, Int, Unicode

_ACTIVE = None  # the CudaMagics instance registered on the running shell


@magics_class
class CudaMagics(Magics):
    """Magics for PyTorch + CUDA: ``%cudainfo``, ``%gpuwatch``, ``%%autograd_graph``,
    ``%%cudamem``/``%cudamem`` and ``%cudaexplain``."""

    # ---- configuration traits (units in the names) --------------------------------
    nvcc_timeout_s = Float(
        5.0, config=True, help="Seconds to wait for `nvcc -V` before reporting it as not available."
    ).tag(config=True)

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        self._cleanups = []

    # ---- lifecycle --------------------------------------------------------------
    def add_cleanup(self, func):
        """Register ``func()`` to run on ``%unload_ext cudamagic`` (in reverse order)."""
        self._cleanups.append(func)
        return func

    def shutdown(self):
        """Run every registered cleanup; errors are collected, not raised one by one."""
        errors = []
        while self._cleanups:
            func = self._cleanups.pop()
            try:
                func()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)
        if errors:
            raise errors[0]

    # ==== %cudainfo (issue 2) =======================================================
    @magic_arguments()
    @argument("--json", action="store_true", help="Print the report as JSON (nvidia-smi --query-gpu key names).")
    @argument("-q", "--quiet", action="store_true", help="Return the report object without displaying it.")
    @line_magic
    def cudainfo(self, line=""):
        """Report the whole PyTorch / CUDA / driver / GPU picture, with findings.

        Examples
        --------
        ::

            %cudainfo
            %cudainfo --json
            info = %cudainfo -q
            info.to_dict()["gpus"]
        """
        args = parse_argstring(self.cudainfo, line)
        from .envinfo import collect
        report = collect(nvcc_timeout_s=self.nvcc_timeout_s)
        if args.json:
            print(report.to_json())
            return None
        if args.quiet:
            return report
        return report

    # ==== %gpuwatch (issue 3) =======================================================

    # ==== %%autograd_graph (issue 4) ================================================

    # ==== %%cudamem / %cudamem (issue 5) ============================================

    # ==== %cudaexplain and the error explainer (issue 6) ============================


def load(ipython):
    """Register the magics on ``ipython`` (idempotent: a second load replaces the first)."""
    global _ACTIVE
    if _ACTIVE is not None:
        unload(_ACTIVE.shell)
    magics = CudaMagics(shell=ipython)
    ipython.register_magics(magics)
    _ACTIVE = magics
    return magics


def unload(ipython):
    """Stop threads, remove callbacks and unregister every magic of ours."""
    global _ACTIVE
    magics, _ACTIVE = _ACTIVE, None
    if magics is None:
        return
    try:
        magics.shutdown()
    finally:
        registry = ipython.magics_manager.magics
        for kind in ("line", "cell"):
            for name, func in list(registry[kind].items()):
                if getattr(func, "__self__", None) is magics:
                    del registry[kind][name]
        ipython.magics_manager.registry.pop(type(magics).__name__, None)
