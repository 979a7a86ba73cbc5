"""Run every benchmarks/bench_*.py in turn.

Run every benchmarks/bench_*.py in turn (what `make bench` runs); extra args go to each script
(every script takes ``--quick``: `python benchmarks/run_all.py --quick`).
"""

import glob
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
rc = 0
for script in sorted(glob.glob(os.path.join(here, "bench_*.py"))):
    print(f"\n=== {os.path.basename(script)} ===", flush=True)
    rc |= subprocess.call([sys.executable, script, *sys.argv[1:]])
sys.exit(rc)
