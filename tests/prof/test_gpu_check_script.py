"""scripts/gpu_check_torchprof.py runs where only torch is installed.

Its no-IPython path (the engine on a plain stand-in shell) profiles a cell on CPU in a process where
importing IPython fails. The GPU checks themselves are not run here (no GPU).
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = r"""
import sys
sys.modules["IPython"] = None  # import IPython fails in this process
sys.modules["traitlets"] = None
sys.path.insert(0, "scripts")
import gpu_check_torchprof as g
assert not g.has_ipython()
r = g.EngineRunner()
r.setup("import torch\nw = torch.randn(8, 8)\n")
res = r.torchprof("-o prof", "for _ in range(3):\n    v = (w @ w).relu()\nv.sum()")
assert r.ns["prof"] is res and "v" in r.ns
names = {row.name for row in res.rows()}
assert {"aten::matmul", "aten::relu"} <= names, names
try:
    r.torchprof("", "x = 1\n1 / 0")
except ZeroDivisionError:
    pass
else:
    raise AssertionError("the cell's error must propagate")
loaded = [k for k in sys.modules if k.split(".")[0] in ("IPython", "traitlets") and sys.modules[k]]
print("ENGINE-OK", sorted(loaded))
"""


def test_the_gpu_check_runs_without_ipython():
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ENGINE-OK []" in proc.stdout, proc.stdout[-2000:]
