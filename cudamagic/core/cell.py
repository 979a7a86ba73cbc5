"""Running a cell magic's body the way IPython runs a cell.

As ``%%time`` runs its body, for every area that runs the user's cell itself (``%%cudamem``,
``%%torchprof``, ``%%autograd_graph``).

The body goes through IPython's input transformers (``shell.transform_cell``: ``%magics``, ``!cmd``)
and AST transformers (``shell.transform_ast``), and is compiled under a name registered in IPython's
line cache with the magic line as line 1, so tracebacks show ``Cell In[n], line L`` with the
notebook's numbering and the real source lines. A final expression is compiled apart and evaluated,
so its value can be displayed like a normal cell's. No IPython event is fired (the surrounding
``run_cell`` fires them once), and nothing is stored in ``Out``/``_``: the magic's own return value
is what IPython stores.

Only the shell object is used (passed in); IPython itself is imported by :func:`show_value` alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from types import CodeType
from typing import Any


@dataclass
class CellCode:
    """A compiled cell body.

    Attributes:
        filename: the name registered in IPython's line cache (shown as ``Cell In[n]`` in
            tracebacks).
        body: code of every statement but a final expression (``exec`` mode; may be empty).
        last: code of the final expression (``eval`` mode), or None when the cell does not end in
            one.
    """

    filename: str
    body: CodeType
    last: CodeType | None


@dataclass
class CellOutcome:
    """What running a :class:`CellCode` gave.

    Attributes:
        has_value: the cell ended in an expression and it was evaluated. value: its value (None
            otherwise).
        exception: the exception the user's code raised (the caller re-raises it untouched), or
            None.
    """

    has_value: bool = False
    value: Any = None
    exception: BaseException | None = None


def running_cell_number(shell) -> int:
    """``n`` of the ``In[n]`` being executed, for ``Cell In[n]`` in tracebacks and for reports.

    Read from the display hook's ``ExecutionResult`` of the running cell, which IPython 8 and 9 both
    set before the code runs (IPython 9 increments ``shell.execution_count`` before a cell runs,
    IPython 8 after it, so the counter alone is off by one on one of them). Outside a stored cell
    (``run_cell(store_history=False)``, a direct ``run_cell_magic``): ``shell.execution_count - 1``
    (at least 0), as the display hook counts.
    """
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    if type(count) is int:
        return count
    return max(shell.execution_count - 1, 0)


def compile_cell(shell, cell: str, header: str, number: int | None = None) -> CellCode:
    """Transform and compile ``cell`` as IPython would, the magic line ``header`` being line 1.

    Args:
        shell: the ``InteractiveShell``.
        cell: the cell body (without the magic line).
        header: the magic line (``"%%torchprof --top 5"``), line 1 of the cached source.
        number: ``In[n]`` of the cached source; default :func:`running_cell_number`.

    Returns:
        :class:`CellCode`.

    Raises:
        SyntaxError: the body does not parse; its line numbers count the magic line as line 1.
            IPython prints
            every frame of a SyntaxError (hidden or not): a caller re-raises
                ``exc.with_traceback(None)``.
    """
    header = header.rstrip("\n")
    transformed = shell.transform_cell(cell)
    number = running_cell_number(shell) if number is None else number
    filename = shell.compile.cache(f"{header}\n{transformed}", number, raw_code=f"{header}\n{cell}")
    # a leading newline: line numbers (of a SyntaxError too) count the magic line as line 1
    tree = shell.compile.ast_parse("\n" + transformed, filename=filename)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = shell.compile(ast.Module(tree.body, type_ignores=[]), filename, "exec")
    code_last = shell.compile(last, filename, "eval") if last is not None else None
    return CellCode(filename, body, code_last)


def run_code(code: CellCode, ns: dict) -> CellOutcome:
    """Run ``code`` in the namespace ``ns`` (globals and locals, as IPython does).

    Returns:
        :class:`CellOutcome` with the final expression's value.

    Raises:
        BaseException: whatever the user's code raises, untouched (this frame is hidden from
            IPython's tracebacks).
    """
    __tracebackhide__ = True  # IPython hides this frame in tracebacks
    exec(code.body, ns)
    if code.last is None:
        return CellOutcome()
    return CellOutcome(True, eval(code.last, ns))


def run_code_caught(code: CellCode, ns: dict) -> CellOutcome:
    """:func:`run_code`, with the user's exception returned, not raised.

    :func:`run_code`, with the user's exception returned in :attr:`CellOutcome.exception` instead of
    raised (for a magic that shows a result of the part that ran before re-raising it).
    """
    __tracebackhide__ = True
    try:
        return run_code(code, ns)
    except BaseException as exc:  # handed back to the caller, which re-raises it untouched
        return CellOutcome(exception=exc)


def show_value(cell: str, has_value: bool, value: Any) -> None:
    """Display a cell's final value as IPython would show it under the cell.

    Display a cell's final value as IPython would show it under the cell: nothing when there is
    none, when it is None, or when the cell's last line ends with ``;``. Not stored in ``Out``/``_``
    (a stored value would keep the user's tensors alive; the magic's return value is what IPython
    stores).
    """
    if not has_value or value is None:
        return
    from IPython.core.displayhook import DisplayHook
    from IPython.display import display

    if not DisplayHook.semicolon_at_end_of_expression(cell):
        display(value)
