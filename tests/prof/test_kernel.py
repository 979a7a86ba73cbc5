"""Tier 3: %%torchprof in a real Jupyter kernel.

Tier 3: %%torchprof in a real Jupyter kernel (nbclient): the summary is the cell's HTML output
(self-contained), Kineto's log lines stay out of the cell, a failing cell shows the profile then its
own traceback, and nothing is left enabled after `%unload_ext`.
"""

from __future__ import annotations

import re

import nbformat
import pytest
import run_demo  # scripts/run_demo.py (on sys.path via conftest): the one notebook runner

pytestmark = pytest.mark.kernel

CELLS = [
    "%load_ext cudamagic\nimport torch\nw = torch.randn(64, 64)",  # 0
    "%%torchprof -o p\nfor _ in range(20):\n    h = (w @ w).relu()\nh.shape",  # 1
    "print(p.slowest().name, len(p.ops))",  # 2
    "%%torchprof\nh = w @ w\nraise KeyError('missing batch')",  # 3
    "big = torch.randn(1_000_000)",  # 4
    "%%torchprof --memory -o m\ndel big",  # 5: PyTorch's C++ allocator warns on fd 2
    "print(m.warnings)",  # 6
    "%unload_ext cudamagic",  # 7
    "print('enabled:', torch._C._autograd._profiler_enabled())",  # 8
]


def test_torchprof_in_a_kernel(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    run_demo.execute_nb(nb, cwd=str(tmp_path), timeout_s=300, allow_errors=True)
    outs = [c.outputs for c in nb.cells]

    stderr = [
        o.text for cell in outs for o in cell if o.output_type == "stream" and o.name == "stderr"
    ]
    assert not any("USDT:" in t or "STAGE:" in t for t in stderr)

    html = [o.data["text/html"] for o in outs[1] if "text/html" in o.get("data", {})]
    plain = [o.data["text/plain"] for o in outs[1] if "text/plain" in o.get("data", {})]
    assert any("torch.Size([64, 64])" in t for t in plain)  # the final expression is displayed
    (summary,) = [h for h in html if "cm-prof" in h]
    assert "aten::<wbr>mm" in summary and 'src="data:image/svg+xml;base64,' in summary
    assert not re.search(r"(src|href)\s*=\s*\"(?!data:)|url\(|@import|<script", summary)

    assert outs[2][0].text.startswith(("aten::mm", "aten::relu", "aten::clamp_min"))

    kinds = [o.output_type for o in outs[3]]
    assert kinds[-1] == "error" and outs[3][-1].ename == "KeyError"
    # the part that ran
    assert any("cm-prof" in o.get("data", {}).get("text/html", "") for o in outs[3])
    tb = "\n".join(outs[3][-1].traceback)
    assert "raise KeyError('missing batch')" in re.sub(r"\x1b\[[0-9;]*m", "", tb)

    # the allocator's warning (a free of memory allocated before profiling) is in the notice line
    assert not any("CPUAllocator" in t or "unknown size" in t for t in stderr)
    (memory,) = [h for o in outs[5] if "cm-prof" in (h := o.get("data", {}).get("text/html", ""))]
    # a cell quicker than a second leaves no progress line, not even an empty output
    assert [o.data for o in outs[5] if "text/html" not in o.get("data", {})] == []
    assert "1 PyTorch warning(s) collected" in memory and "Memory block of unknown size" in memory
    assert "CPUAllocator.cpp" in outs[6][0].text

    assert outs[8][0].text.strip() == "enabled: False"
