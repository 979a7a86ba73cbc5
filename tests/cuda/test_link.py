"""Link failures: reported as such, symbols demangled, mapped to the cell lines that use and declare them, and
no temporary path in sight (GNU ld, ptxas, nvlink through real nvcc; lld and MSVC link.exe messages as text)."""

from __future__ import annotations

import pytest

from cudamagic.cuda import link

from .conftest import needs_nvcc

MSVC_LOG = (
    'cell.obj : error LNK2019: unresolved external symbol "int __cdecl helper(int)" (?helper@@YAHH@Z) referenced '
    "in function main\n"
    "cell.obj : error LNK2019: unresolved external symbol cfun referenced in function main\n"
    r"C:\Users\Ada Lovelace\AppData\Local\Temp\cudamagic-cell-1\prog.exe : fatal error LNK1120: 2 unresolved externals"
)


def test_symbols_from_each_linker():
    assert link.undefined_symbols(MSVC_LOG) == ["int __cdecl helper(int)", "cfun"]
    assert link.undefined_symbols("ld.lld: error: undefined symbol: scale(float)\n") == ["scale(float)"]
    nvlink = "nvlink error   : Undefined reference to '_Z3devi' in '/tmp/tmpxft_0000_00000000-11_cell.o'\n"
    ptxas = "ptxas fatal   : Unresolved extern function '_ZN2ns3devEi'\n"
    assert link.undefined_symbols(nvlink + ptxas + nvlink) == ["dev(int)", "ns::dev(int)"]  # demangled, once each


@pytest.mark.parametrize("symbol,name", [
    ("helper(int)", "helper"), ("ns::scale(float, int)", "scale"), ("int __cdecl helper(int)", "helper"),
    ("void add<float>(float*, int)", "add"), ("cuInit", "cuInit"), ("a::b<int, c<d>>::run()", "run"),
])
def test_base_name(symbol, name):
    assert link.base_name(symbol) == name


def test_locate_prefers_cell_then_headers():
    cell = ["#include \"h.cuh\"", "int helper(int);  // helper( in a comment", "int main() {",
            "  return helper(2) + twice(1);", "}"]
    headers = {"h.cuh": ["#pragma once", "int twice(int v);"]}
    assert link.locate("helper(int)", cell, headers) == (("cell", 2, cell[1]), ("cell", 4, cell[3]))
    assert link.locate("twice(int)", cell, headers) == (("h.cuh", 2, "int twice(int v);"), ("cell", 4, cell[3]))
    assert link.locate("absent()", cell, headers) == (None, None)
    diag = link.diagnostics(["twice(int)"], cell, headers)[0]
    assert diag.cell_line == 5 and "declared at h.cuh line 2" in diag.message


def test_library_functions_get_their_flag():
    assert link.library_flag("cublasCreate_v2") == "-lcublas"
    assert link.library_flag("cuInit") == "-lcuda"
    assert link.library_flag("curandCreateGenerator") == "-lcurand"
    assert link.library_flag("cute_helper") is None


@needs_nvcc
@pytest.mark.parametrize("body,flags,symbol,line,declared", [
    ("#include <cstdio>\nint helper(int);\nnamespace ns { float scale(float, int); }\nint main() {\n"
     "  printf(\"%d\\n\", helper(3));\n  return 0;\n}\n", "", "helper(int)", 6, 3),
    ("__device__ int dev(int);\n__global__ void k(int *p) { *p = dev(1); }\nint main() { return 0; }\n", "",
     "dev(int)", 3, 2),
    ("__device__ int dev(int);\n__global__ void k(int *p) { *p = dev(1); }\nint main() { return 0; }\n",
     "--nvcc-flags \"-rdc=true\"", "dev(int)", 3, 2),
])
def test_link_failure_is_reported_at_the_cell_line(cuda_ip, body, flags, symbol, line, declared):
    from cudamagic.cuda.errors import CudaLinkError

    result = cuda_ip.run_cell(f"%%cuda {flags}\n{body}")
    exc = result.error_in_exec
    assert isinstance(exc, CudaLinkError), exc
    assert exc.symbols[0] == symbol
    msg = str(exc)
    assert msg.startswith("linking failed") and "0 errors" not in msg
    assert f"cell line {line}: link error: `{symbol}` is used here but never defined (declared at cell line " \
           f"{declared})" in msg
    assert exc.diagnostics[0].cell_line == line and symbol.split("(")[0] in exc.diagnostics[0].source
    for text in (msg, exc.log):
        assert "/tmp/" not in text and "tmpxft" not in text and "cell.cu" not in text


@needs_nvcc
def test_missing_library_says_which_flag(cuda_ip):
    from cudamagic.cuda.errors import CudaLinkError

    result = cuda_ip.run_cell("%%cuda\n#include <cuda.h>\nint main() {\n  return cuInit(0);\n}\n")
    exc = result.error_in_exec
    assert isinstance(exc, CudaLinkError) and exc.symbols == ["cuInit"]
    assert "cell line 4: link error: `cuInit` is not defined anywhere: it is in a CUDA library; link it with " \
           "--nvcc-flags \"-lcuda\"" in str(exc)
