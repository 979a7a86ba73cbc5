"""How a failing ``%%cuda`` cell is told (fast: no nvcc).

How a failing ``%%cuda`` cell is told (fast: no nvcc; what `make mutation` runs for
cudamagic/cuda/errors.py): compiler messages captured from nvcc 13.0, located and shown at cell
lines; programs that fail (real processes: exit status, signal, printed CUDA error, time-out) carry
what happened; IPython shows the message alone.
"""

from __future__ import annotations

import os
import sys

import pytest

from cudamagic.cuda.build import rewrite
from cudamagic.cuda.cache import Workspace
from cudamagic.cuda.errors import CudaCompileError, CudaProgramError, Diagnostic
from cudamagic.cuda.run import run_program

# `nvcc -I {saved} -o prog {cell}` of CELL, which includes the saved header HEADER
CELL = '#include "vec.cuh"\nint main() {\n  int unused = 1;\n  return add(1, 2) + nope;\n}\n'
HEADER = "// vector helpers\ninline int add(int a, int b) {\n  return a + b + missing;\n}\n"
NVCC_LOG = """{saved}/vec.cuh(3): error: identifier "missing" is undefined
    return a + b + missing;
                   ^

{cell}(4): error: identifier "nope" is undefined
    return add(1, 2) + nope;
                       ^

2 errors detected in the compilation of "{cell}".
"""


def test_compiler_errors_are_shown_at_cell_lines_with_their_source(tmp_path):
    ws = Workspace(str(tmp_path / "cache"))
    ws.save("vec.cuh", HEADER)
    cell = str(tmp_path / "cudamagic-cell-1" / "cell.cu")
    text, diags = rewrite(
        NVCC_LOG.format(saved=ws.saved_dir, cell=cell), {cell: 0}, ws, CELL.splitlines()
    )
    header, own = diags
    assert header == Diagnostic(
        file="vec.cuh",
        line=3,
        cell_line=4,
        severity="error",
        message='identifier "missing" is undefined',
        source="  return a + b + missing;",
    )
    assert header.text() == (
        "vec.cuh line 3 (cell line 4 of the `%%cuda --save vec.cuh` cell): error: identifier "
        '"missing" is undefined\n       4 |   return a + b + missing;'
    )
    assert own.text() == (
        'cell line 5: error: identifier "nope" is undefined\n       5 |   return add(1, 2) + nope;'
    )
    assert "cell line 5: error" in text and cell not in text
    exc = CudaCompileError("nvcc failed (exit status 2) with 2 errors", diags, text)
    assert (exc.diagnostics, exc.log, str(exc)) == (
        diags,
        text,
        "nvcc failed (exit status 2) with 2 errors",
    )


@pytest.mark.parametrize(
    "diag,shown",
    [
        (
            Diagnostic(
                "cell", 12, 13, "warning", 'variable "n" was declared but never referenced', ""
            ),
            'cell line 13: warning: variable "n" was declared but never referenced',
        ),
        (
            Diagnostic("cell", 1, 2, "error", 'expected a ";"', "int a = 1 }"),
            'cell line 2: error: expected a ";"\n       2 | int a = 1 }',
        ),
        (
            Diagnostic("cell", 1234, 1235, "error", "x", "y"),
            "cell line 1235: error: x\n    1235 | y",
        ),
        (
            Diagnostic("cell", 0, 0, "link error", "`cuInit` is not defined anywhere", ""),
            "link error: `cuInit` is not defined anywhere",
        ),
        (
            Diagnostic("m.cuh", 0, 0, "link error", "`f` is not defined anywhere", ""),
            "link error: `f` is not defined anywhere",
        ),
    ],
)
def test_diagnostic_text(diag, shown):
    assert diag.text() == shown


def _sh(script: str) -> list:
    return ["/bin/sh", "-c", script]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell programs")
@pytest.mark.parametrize(
    "script,timeout_s,expect",
    [
        (
            "echo 'bad input' >&2; exit 3",
            None,
            {"returncode": 3, "cuda_error": "", "timed_out": False},
        ),
        ("kill -SEGV $$", None, {"returncode": -11, "cuda_error": "", "timed_out": False}),
        (
            "echo 'CUDA error: out of memory'; exit 0",
            None,
            {"returncode": 0, "cuda_error": "CUDA error: out of memory", "timed_out": False},
        ),
        (
            "echo 'CUDA error: out of memory'; exit 4",
            None,
            {"returncode": 4, "cuda_error": "CUDA error: out of memory", "timed_out": False},
        ),
        ("sleep 30", 0.3, {"cuda_error": "", "timed_out": True}),
    ],
)
def test_failed_program_says_what_happened(script, timeout_s, expect, capfd):
    with pytest.raises(CudaProgramError, match=r"^the program ") as info:
        run_program(_sh(script), timeout_s)
    exc = info.value
    assert {k: getattr(exc, k) for k in expect} == expect
    if exc.timed_out:
        assert exc.returncode is not None and exc.returncode != 0  # killed by us
    assert exc._render_traceback_() == [f"CudaProgramError: {exc}"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX shell programs")
def test_ipython_shows_the_message_and_no_traceback(ip, capfd):
    capfd.readouterr()
    result = ip.run_cell(
        "from cudamagic.cuda.run import run_program\n"
        "run_program(['/bin/sh', '-c', 'echo bad input >&2; exit 3'])\n"
    )
    assert isinstance(result.error_in_exec, CudaProgramError)
    shown = capfd.readouterr().out  # IPython prints what it shows for an error on stdout
    assert (
        "CudaProgramError: the program exited with status 3.\nLast lines on stderr:\nbad input"
        in shown
    )
    assert "Traceback" not in shown and f"cudamagic{os.sep}cuda" not in shown
