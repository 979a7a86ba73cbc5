"""Exceptions that fail a ``%%cuda`` cell (so Run All and nbclient stop).

All are ``RuntimeError`` subclasses, so the error explainer matches CUDA runtime messages they
carry, and all are shown as their message alone (``_render_traceback_``): the cell's code failed,
and cudamagic's own frames would only hide that.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnostic:
    """One compiler message, located in the notebook.

    Attributes:
        file: ``"cell"`` or a saved header's name (``"vec.cuh"``).
        line: 1-based line in that file (0: no line, e.g. a missing library function) (a header's
            line equals the line of the cell body that saved it).
        cell_line: 1-based line in the notebook cell as shown (the ``%%cuda`` line is line 1), in
            the cell that ran (``file == "cell"``) or in the cell that saved the header.
        severity: ``"error"``, ``"fatal error"``, ``"warning"``, ``"link error"``.
        message: the compiler's text after the severity.
        source: the offending source line (stripped of its newline), or ``""``.
    """

    file: str
    line: int
    cell_line: int
    severity: str
    message: str
    source: str

    def where(self) -> str:
        """``cell line 6``, ``vec.cuh line 3 (cell line 4 of ...)``, or ``""`` (no line)."""
        if self.line == 0:
            return ""
        if self.file == "cell":
            return f"cell line {self.cell_line}"
        saved_by = f"cell line {self.cell_line} of the `%%cuda --save {self.file}` cell"
        return f"{self.file} line {self.line} ({saved_by})"

    def text(self) -> str:
        """The message as shown: where, severity, message, and the source line under it."""
        where = self.where()
        head = (f"{where}: " if where else "") + f"{self.severity}: {self.message}"
        return head + (f"\n    {self.cell_line:>4} | {self.source}" if self.source else "")


class _ShownAsMessage(RuntimeError):
    """A cell failure that IPython shows as ``Name: message`` with no traceback."""

    def _render_traceback_(self) -> list:
        """The lines IPython shows for this exception instead of a traceback.

        ``InteractiveShell.showtraceback`` calls this hook; ipykernel sends the lines as the error
        output's ``traceback``, its ``ename`` and ``evalue`` stay the class name and the message,
        so nbclient still stops at the cell.
        """
        return [f"{type(self).__name__}: {self}"]


class CudaCompileError(_ShownAsMessage):
    """nvcc or the host compiler rejected the cell.

    Attributes:
        diagnostics: list of :class:`Diagnostic` (errors first, in compiler order).
        log: the compiler's whole output, with locations rewritten to cell lines.
    """

    def __init__(self, message: str, diagnostics, log: str):
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.log = log


class CudaLinkError(CudaCompileError):
    """The cell compiled but did not link: it uses functions that nothing defines.

    Attributes:
        symbols: the missing symbols, demangled (``["helper(int)", "ns::scale(float, int)"]``).
        diagnostics: one :class:`Diagnostic` per symbol, at the cell line that uses it (else
            declares it).
    """

    def __init__(self, message: str, symbols, diagnostics, log: str):
        super().__init__(message, diagnostics, log)
        self.symbols = list(symbols)


class CudaProgramError(_ShownAsMessage):
    """The compiled program failed: a non-zero exit status, a signal, a time-out or a CUDA error.

    Attributes:
        returncode: the exit status (negative: killed by that signal, also when ``--timeout`` killed
            it).
        cuda_error: ``"cudaErrorInsufficientDriver"``-style name of a CUDA error seen, or ``""``.
        timed_out: True when ``--timeout`` killed it.
        watched: the output lines that matched ``run_program``'s ``watch`` pattern.
    """

    def __init__(
        self, message: str, returncode=None, cuda_error: str = "", timed_out: bool = False
    ):
        super().__init__(message)
        self.returncode = returncode
        self.cuda_error = cuda_error
        self.timed_out = timed_out
        self.watched: list = []


class CudaUsageError(Exception):
    """A mistake the user can fix (a flag, a missing tool); ``%%cuda`` shows it as a UsageError."""
