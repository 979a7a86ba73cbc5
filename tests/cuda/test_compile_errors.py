"""%%cuda compile errors land on the cell's own lines (front end, host compiler, headers)."""

from __future__ import annotations

import re

import pytest

from .compile_fixtures import CASES, expected
from .conftest import needs_nvcc

pytestmark = needs_nvcc


@pytest.mark.parametrize("name", sorted(CASES))
def test_reported_line_is_the_cell_line(cuda_ip, name):
    from cudamagic.cuda.errors import CudaCompileError

    body, header = CASES[name]
    if header is not None:
        hname = re.search(r'#include "([^"]+)"', body).group(1)
        saved = cuda_ip.run_cell(f"%%cuda --save {hname}\n{header}")
        assert saved.success, saved.error_in_exec
    result = cuda_ip.run_cell(f"%%cuda\n{body}")
    exc = result.error_in_exec
    assert isinstance(exc, CudaCompileError), exc
    first = exc.diagnostics[0]
    if header is not None:
        assert (first.file, first.cell_line) == (hname, expected(header))
        assert f"{hname} line {expected(header) - 1}" in str(exc)
    else:
        assert (first.file, first.cell_line) == ("cell", expected(body))
        assert f"cell line {expected(body)}:" in str(exc)
    assert first.source.rstrip().endswith("//!")  # the offending source line is shown
    assert "/tmp/" not in str(exc) and "cell.cu" not in str(exc)
