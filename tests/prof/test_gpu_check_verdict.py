"""scripts/gpu_check_torchprof.py's verdict checks, dry-run on this CPU without IPython.

The GPU run itself needs a lent device; here the same function runs the seeded cells on ``cpu``
through %%torchprof's engine on the plain stand-in shell, in a process where IPython cannot be
imported, and must pass every check.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = r"""
import sys
sys.modules["IPython"] = None
sys.modules["traitlets"] = None
sys.path.insert(0, "scripts")
import gpu_check_torchprof as g
results = []
g.verdict_checks(g.EngineRunner(), lambda ok, text: results.append((ok, text)), "cpu")
for ok, text in results:
    print(("PASS " if ok else "FAIL ") + text)
"""


def test_the_verdict_checks_pass_on_cpu_without_ipython():
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("PASS", "FAIL"))]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(lines) == 6 and all(ln.startswith("PASS") for ln in lines), lines
