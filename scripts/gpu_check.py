"""GPU check: run on a machine with an NVIDIA GPU (never in CI).

1. Executes examples/quickstart.ipynb in a real Jupyter kernel (nbclient) and fails on any cell error.
2. Cross-checks ``%cudainfo --json`` against ``nvidia-smi --query-gpu=...``: names, UUIDs, PCI bus ids,
   memory total and driver version must agree for every GPU.
3. Exercises per-cell memory (``%%cudamem``) and the live monitor on the real GPU when those magics exist.

Prints one line per check (``PASS``/``FAIL``/``SKIP``) and a summary; exit status 1 on any FAIL.
Usage (after ``make setup TORCH=...`` with a CUDA build of torch): .venv/bin/python scripts/gpu_check.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

results = []


def check(name, ok, detail=""):
    results.append((name, ok))
    print(f"{'PASS' if ok is True else 'SKIP' if ok is None else 'FAIL'}  {name}  {detail}", flush=True)


def nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    q = "index,name,uuid,pci.bus_id,memory.total,driver_version"
    out = subprocess.run([exe, f"--query-gpu={q}", "--format=csv,noheader,nounits"], capture_output=True,
                         text=True, timeout=30)
    rows = []
    for line in out.stdout.strip().splitlines():
        idx, name, uuid, bus, mem, drv = [x.strip() for x in line.split(",")]
        rows.append({"index": int(idx), "name": name, "uuid": uuid, "pci.bus_id": bus, "memory.total_mib": int(mem),
                     "driver_version": drv})
    return rows


def main():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "cudamagic")
    buf = io.StringIO()
    with redirect_stdout(buf):
        ip.run_line_magic("cudainfo", "--json")
    info = json.loads(buf.getvalue())
    print(json.dumps({k: info[k] for k in ("driver", "toolkit")}, indent=1, default=str)[:2000])
    print("verdict:", info["verdict"]["title"], "-", info["verdict"]["cause"])
    smi = nvidia_smi()
    if smi is None:
        check("nvidia-smi present", False, "nvidia-smi not found")
    else:
        ours = info["gpus"]
        check("GPU count", len(ours) == len(smi), f"cudainfo {len(ours)} vs nvidia-smi {len(smi)}")
        for s in smi:
            g = next((x for x in ours if x["index"] == s["index"]), None)
            if g is None:
                check(f"GPU {s['index']} present", False)
                continue
            check(f"GPU {s['index']} name", g["name"] == s["name"], f"{g['name']!r} vs {s['name']!r}")
            check(f"GPU {s['index']} uuid", g["uuid"] == s["uuid"])
            check(f"GPU {s['index']} pci.bus_id", str(g["pci.bus_id"]).lower() == s["pci.bus_id"].lower(),
                  f"{g['pci.bus_id']} vs {s['pci.bus_id']}")
            mib = g["memory.total"] // (1024 * 1024) if isinstance(g["memory.total"], int) else None
            check(f"GPU {s['index']} memory.total", mib == s["memory.total_mib"], f"{mib} MiB vs {s['memory.total_mib']} MiB")
            check(f"GPU {s['index']} cuda ordinal", isinstance(g.get("cuda_ordinal"), int), str(g.get("cuda_ordinal")))
        check("driver_version", info["driver"]["driver_version"] == smi[0]["driver_version"],
              f"{info['driver']['driver_version']} vs {smi[0]['driver_version']}")
    import torch

    check("torch sees CUDA", torch.cuda.is_available(), torch.__version__)
    check("%cudainfo did not initialise CUDA", not torch.cuda.is_initialized())
    magics = ip.magics_manager.magics
    if "cudamem" in magics["cell"] and torch.cuda.is_available():
        ip.run_cell("import torch\nx_gpu_check = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device='cuda')")
        rep = ip.run_cell_magic("cudamem", "", "y_gpu_check = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device='cuda')\n"
                                "z = torch.empty(1024 * 1024 * 1024, dtype=torch.uint8, device='cuda'); del z")
        print(rep)
        g0 = rep.gpus[0] if rep is not None and rep.gpus else None
        check("%%cudamem: allocated delta = 512 MiB", g0 is not None and g0.allocated_delta_bytes == 512 * 2**20,
              str(g0.allocated_delta_bytes if g0 else None))
        check("%%cudamem: in-cell peak >= 1.5 GiB over the start",
              g0 is not None and g0.peak_allocated_bytes - g0.allocated_before_bytes >= 1536 * 2**20,
              str(g0.peak_allocated_bytes if g0 else None))
        # F22: an out-of-memory error inside a function keeps its 1 GiB local alive through the saved traceback
        ip.run_cell("def step():\n    local = torch.empty(2**30, dtype=torch.uint8, device='cuda')\n"
                    "    return torch.empty(2**50, dtype=torch.uint8, device='cuda')\nstep()", store_history=True)
        held = torch.cuda.memory_allocated()
        free = ip.run_line_magic("cudamem", "free")
        print(free)
        freed = free.gpu_allocated_freed_bytes if free is not None else 0
        check("%cudamem free gives back the OOM frame's 1 GiB", freed >= 2**30,
              f"allocated before free {held}, freed {freed}")
    else:
        check("%%cudamem on GPU", None, "magic not present or no CUDA")
    try:
        import run_demo

        run_demo.execute(os.path.join(ROOT, "examples", "quickstart.ipynb"))
        check("quickstart.ipynb executes in a real kernel", True)
    except Exception as exc:  # report, do not hide
        check("quickstart.ipynb executes in a real kernel", False, f"{type(exc).__name__}: {str(exc)[:500]}")
    failed = [n for n, ok in results if ok is False]
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
