"""core/cell.py: a cell body compiled and run as IPython runs a cell.

core/cell.py: a magic's cell body compiled and run as IPython runs a cell, in a real
InteractiveShell.

A small cell magic ``%%bodyrun`` built only on :mod:`cudamagic.core.cell` (as ``%%cudamem``,
``%%torchprof`` and ``%%autograd_graph`` are) runs the cells; the assertions are on what the user
sees: real source lines and numbers in tracebacks, the final value shown like a normal cell's,
    ``_``/``Out`` as with those magics.
"""

from __future__ import annotations

import linecache
import re
from types import SimpleNamespace

import pytest

from cudamagic.core import cell as core_cell
from cudamagic.core.cell import (
    CellOutcome,
    compile_cell,
    run_code,
    run_code_caught,
    running_cell_number,
    show_value,
)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
OUR_CELL = re.compile(r"cudamagic[/\\]core[/\\]cell\.py")


class Marker:
    """A value the magic returns, so ``_``/``Out`` show what IPython stored."""

    def __repr__(self):
        return "<marker>"  # no address in the output, which tests search for values


@pytest.fixture
def bip(ip):
    """``ip`` with ``%%bodyrun``: compile, run, show the value, return a Marker."""
    marker = Marker()

    def bodyrun(line, cell):
        __tracebackhide__ = True
        try:
            code = compile_cell(ip, cell, f"%%bodyrun {line}".rstrip())
        except SyntaxError as exc:
            raise exc.with_traceback(None) from None
        outcome = run_code_caught(code, ip.user_ns)
        if outcome.exception is not None:
            raise outcome.exception
        show_value(cell, outcome.has_value, outcome.value)
        return marker

    ip.register_magic_function(bodyrun, "cell")
    ip.marker = marker
    yield ip
    ip.magics_manager.magics["cell"].pop("bodyrun", None)


def test_running_cell_number_on_ipython_8_and_9():
    def shell(count, running):
        return SimpleNamespace(
            execution_count=count,
            displayhook=SimpleNamespace(exec_result=SimpleNamespace(execution_count=running)),
        )

    assert running_cell_number(shell(8, 7)) == 7  # IPython 9: the counter is already incremented
    assert running_cell_number(shell(7, 7)) == 7  # IPython 8: incremented after the cell
    assert running_cell_number(shell(8, None)) == 7  # no stored cell running
    assert running_cell_number(shell(0, None)) == 0


def test_magic_line_is_line_1_of_the_cached_source(ip):
    code = compile_cell(ip, "a = 1\nb = a + 1\nb * 10", "%%bodyrun --x", number=41)
    lines = linecache.getlines(code.filename)
    assert lines[:2] == ["%%bodyrun --x\n", "a = 1\n"]
    assert code.last is not None and code.body.co_filename == code.filename
    outcome = run_code(code, ip.user_ns)
    assert (outcome.has_value, outcome.value, ip.user_ns["b"]) == (True, 20, 2)


def test_input_transformers_apply_and_a_cell_without_expression_has_no_value(ip):
    code = compile_cell(ip, "import os\nhere = !echo hi\n", "%%bodyrun")
    assert run_code(code, ip.user_ns) == CellOutcome()
    assert list(ip.user_ns["here"]) == ["hi"]


def test_syntax_error_counts_the_magic_line(ip):
    with pytest.raises(
        SyntaxError, match="incomplete input|never closed|unexpected EOF|invalid syntax"
    ) as info:
        compile_cell(ip, "x = 1\ny = (\n", "%%bodyrun")
    assert info.value.lineno == 3


def test_caught_run_returns_the_exception_and_keeps_the_variables_set_before(ip):
    code = compile_cell(ip, "kept = 5\nraise KeyError('k')\n", "%%bodyrun")
    outcome = run_code_caught(code, ip.user_ns)
    assert isinstance(outcome.exception, KeyError) and not outcome.has_value
    assert ip.user_ns["kept"] == 5
    with pytest.raises(KeyError, match="k"):
        run_code(code, ip.user_ns)


def test_user_error_shows_real_source_line_and_number_without_our_frames(bip, capsys):
    res = bip.run_cell("%%bodyrun\nfirst = 1\n\nraise ValueError('boom <b>')\n", store_history=True)
    assert isinstance(res.error_in_exec, ValueError) and bip.user_ns["first"] == 1
    out = ANSI.sub("", capsys.readouterr().out)
    assert f"Cell In[{res.execution_count}], line 4" in out
    assert "raise ValueError('boom <b>')" in out
    assert not OUR_CELL.search(out)


def test_syntax_error_points_at_the_cells_line(bip, capsys):
    res = bip.run_cell("%%bodyrun\nx = 1\ny = (\n", store_history=True)
    assert isinstance(res.error_in_exec, SyntaxError) and res.error_in_exec.lineno == 3
    out = ANSI.sub("", capsys.readouterr().out)
    assert f"Cell In[{res.execution_count}], line 3" in out
    assert "compilerop.py" not in out and not OUR_CELL.search(out)


def test_value_displays_like_a_cell_and_out_holds_the_magics_result(bip, capsys):
    res = bip.run_cell("%%bodyrun\nv = 6\nv * 7", store_history=True)
    assert "42" in capsys.readouterr().out
    assert res.result is bip.marker
    assert bip.user_ns["_"] is bip.marker and bip.user_ns["Out"][res.execution_count] is bip.marker
    assert 42 not in [v for v in bip.user_ns["Out"].values() if isinstance(v, int)]


@pytest.mark.parametrize(
    "cell, shown",
    [("6 * 7;", False), ("None", False), ("x = 42", False), ("6 * 7", True), ("s = 'a;'\ns", True)],
)
def test_show_value_follows_semicolon_and_none(bip, capsys, cell, shown):
    bip.run_cell(f"%%bodyrun\n{cell}", store_history=True)
    lines = capsys.readouterr().out.splitlines()
    assert "<marker>" in lines[-1]  # the magic's own result, shown as Out
    assert any(line in ("42", "'a;'") for line in lines[:-1]) == shown


def test_module_has_no_ipython_import_at_top():
    src = open(core_cell.__file__, encoding="utf-8").read()
    top = src.split("def ", 1)[0]
    assert "import IPython" not in top and "from IPython" not in top
