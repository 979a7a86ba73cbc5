"""Run every benchmarks/bench_*.py in turn (what `make bench` runs), then the side-by-side rows.

Extra args go to each script (every script takes ``--quick``: `python benchmarks/run_all.py
--quick`). Each script's output is shown as it runs; at the end the rows that put cudamagic beside
a peer on the same work (benchmarks/sidebyside.py: interleaved runs, process CPU time first, the
load average, the same-work guard) are printed again together, refused rows included.
"""

import glob
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
#: A side-by-side row starts with its title line (guard passed or REFUSED) and ends with its ratio
#: (or the refusal's difference).
ROW_START = re.compile(r"^  \S.*(\(\d+ interleaved runs each; .*\)|: REFUSED, .*)$")
ROW_END = re.compile(r"^    (-> cudamagic / |first difference: )")

rc = 0
rows = []
for script in sorted(glob.glob(os.path.join(here, "bench_*.py"))):
    name = os.path.basename(script)
    print(f"\n=== {name} ===", flush=True)
    proc = subprocess.Popen(
        [sys.executable, script, *sys.argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    current = None
    for line in proc.stdout:
        print(line, end="", flush=True)
        line = line.rstrip("\n")
        if ROW_START.match(line):
            current = [f"[{name}]", line]
        elif current is not None:
            current.append(line)
            if ROW_END.match(line):
                rows.append(current)
                current = None
    rc |= proc.wait()

print("\n=== side by side: cudamagic and its peers on the same work ===")
if not rows:
    print("  no side-by-side row was printed (peers not installed? `make bench` installs them)")
for row in rows:
    print("\n".join(row))
sys.exit(rc)
