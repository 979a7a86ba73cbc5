"""``%cudaexplain`` and the box below a failing cell: the explainer's IPython front."""

from __future__ import annotations

import contextlib
import sys

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from IPython.display import display
from traitlets import Bool, HasTraits

from ..core.magic import AreaMagics
from ..core.manual import manual
from .options import catalogue_entry
from .result import CatalogueView, Explanation, NoMatch

USAGE = "%cudaexplain [--list] [ENTRY]"


class ExplainSettings(HasTraits):
    """Explainer settings, reachable as ``%config CudaMagics.<name>``."""

    explain_errors = Bool(
        True,
        help="Show a box below the traceback of a failing cell when the error is a known CUDA / "
        "autograd case (what happened, why, the fix). The traceback itself is never changed.",
    ).tag(config=True)


@magics_class
class ExplainMagics(AreaMagics):
    """``%cudaexplain``, and the ``post_run_cell`` callback that shows the box."""

    def on_load(self) -> None:
        """Register the ``post_run_cell`` callback that shows the box; removed on ``%unload_ext``.

        ``post_run_cell`` rather than ``set_custom_exc``: it runs after IPython has shown the
        traceback (so the box lands below it, in the same cell output), it leaves IPython's
        exception display alone, it does not take the shell's single custom-exception slot
        (another extension's handler keeps working, and ours runs after it), and it works the
        same in the terminal and in ipykernel.
        """
        #: The :class:`~cudamagic.explain.result.Explanation` shown after the last failing cell,
        #: or None. Holds strings and numbers only (no exception, traceback or frame).
        self.last_explanation = None
        callback = self._explain_after_cell
        self.shell.events.register("post_run_cell", callback)

        def remove():
            with contextlib.suppress(ValueError):
                self.shell.events.unregister("post_run_cell", callback)

        self.add_cleanup(remove)

    def _explain_after_cell(self, result):
        """``post_run_cell`` callback: display the explanation of the cell's error, if any."""
        self.last_explanation = None
        exc = result.error_in_exec
        if exc is None or not self.settings.explain_errors or isinstance(exc, UsageError):
            return
        try:
            from .match import explain
            from .scene import scene_from_shell

            explanation = explain(exc, scene_from_shell(self.shell, exc))
        except Exception:  # the explainer must never add an error of its own to a failing cell
            return
        finally:
            exc = None
        if explanation is not None:
            self.last_explanation = explanation
            display(explanation)

    @manual(ExplainSettings)
    @magic_arguments()
    @argument(
        "entry",
        nargs="?",
        default=None,
        type=catalogue_entry,
        metavar="ENTRY",
        help="A catalogue id (see --list) to show that entry without an error.",
    )
    @argument(
        "--list", action="store_true", dest="list_", help="Show the catalogue of known errors."
    )
    @line_magic
    def cudaexplain(self, line=""):
        """Explain the last error in plain words: what happened, why, and the fix.

        After ``%load_ext cudamagic`` a known CUDA / autograd error already gets its box below
        the traceback; ``%cudaexplain`` shows it again (or explains the last error when
        ``CudaMagics.explain_errors`` is False). The last error is IPython's ``sys.last_value``.

        Examples:
        --------
        ::

            %cudaexplain
            %cudaexplain --list
            %cudaexplain cuda-oom
            %config CudaMagics.explain_errors = False
        """
        args = self.parse(self.cudaexplain, line, USAGE)
        from .catalogue import CATALOGUE
        from .match import explain
        from .scene import scene_from_shell

        if args.list_:
            return CatalogueView(CATALOGUE)
        if args.entry:
            entry = args.entry
            return Explanation(entry=entry, exc_type="(catalogue entry)", message=entry.title)
        exc = getattr(sys, "last_value", None)  # set by IPython after the first error only
        if exc is None:
            raise UsageError(
                "No error to explain yet: run the failing cell first, then `%cudaexplain`."
            )
        if isinstance(exc, UsageError):  # a magic's own usage message: it already says what to type
            raise UsageError(
                "The last error was a magic's usage message, not an error of your code: "
                "follow what it says."
            )
        explanation = explain(exc, scene_from_shell(self.shell, exc))
        if explanation is None:
            message = (str(exc).strip().splitlines() or [""])[0][:300]
            return NoMatch(type(exc).__name__, message)
        return explanation
