"""Link failures through real nvcc.

Link failures through real nvcc: reported as such, symbols demangled, mapped to the cell lines that
use and declare them, and no temporary path in sight (GNU ld, ptxas, nvlink). The same messages
captured as text, and lld's and MSVC link.exe's, are read in tests/cuda/test_link_messages.py (fast:
what `make mutation` runs).
"""

from __future__ import annotations

import pytest

from .conftest import needs_nvcc


@needs_nvcc
@pytest.mark.parametrize(
    "body,flags,symbol,line,declared",
    [
        (
            "#include <cstdio>\nint helper(int);\nnamespace ns { float scale(float, int); }\nint "
            "main() {\n"
            '  printf("%d\\n", helper(3));\n  return 0;\n}\n',
            "",
            "helper(int)",
            6,
            3,
        ),
        (
            "__device__ int dev(int);\n__global__ void k(int *p) { *p = dev(1); }\nint main() { "
            "return 0; }\n",
            "",
            "dev(int)",
            3,
            2,
        ),
        (
            "__device__ int dev(int);\n__global__ void k(int *p) { *p = dev(1); }\nint main() { "
            "return 0; }\n",
            '--nvcc-flags "-rdc=true"',
            "dev(int)",
            3,
            2,
        ),
    ],
)
def test_link_failure_is_reported_at_the_cell_line(cuda_ip, body, flags, symbol, line, declared):
    from cudamagic.cuda.errors import CudaLinkError

    result = cuda_ip.run_cell(f"%%cuda {flags}\n{body}")
    exc = result.error_in_exec
    assert isinstance(exc, CudaLinkError), exc
    assert exc.symbols[0] == symbol
    msg = str(exc)
    assert msg.startswith("linking failed") and "0 errors" not in msg
    assert (
        f"cell line {line}: link error: `{symbol}` is used here but never defined (declared at "
        "cell line "
        f"{declared})" in msg
    )
    assert (
        exc.diagnostics[0].cell_line == line and symbol.split("(")[0] in exc.diagnostics[0].source
    )
    for text in (msg, exc.log):
        assert "/tmp/" not in text and "tmpxft" not in text and "cell.cu" not in text


@needs_nvcc
def test_missing_library_says_which_flag(cuda_ip):
    from cudamagic.cuda.errors import CudaLinkError

    result = cuda_ip.run_cell("%%cuda\n#include <cuda.h>\nint main() {\n  return cuInit(0);\n}\n")
    exc = result.error_in_exec
    assert isinstance(exc, CudaLinkError) and exc.symbols == ["cuInit"]
    assert (
        "cell line 4: link error: `cuInit` is not defined anywhere: it is in a CUDA library; "
        "link it with "
        '--nvcc-flags "-lcuda"' in str(exc)
    )
