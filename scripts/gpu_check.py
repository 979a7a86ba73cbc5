"""GPU check: run on a machine with an NVIDIA GPU (never in CI).

1. Executes examples/quickstart.ipynb in a real Jupyter kernel (nbclient) and fails on any cell
    error.
2. Cross-checks ``%cudainfo --json`` against ``nvidia-smi --query-gpu=...``: names, UUIDs, PCI bus
    ids,
   memory total and driver version must agree for every GPU.
3. Compares every field cudamagic shares with ``nvidia-smi --query-gpu=<field>`` (one query per
    field, so a
   field this nvidia-smi lacks is a SKIP, not a failure), per GPU, with the tolerances in
   ``FIELDS``.
4. Records a real ``%gpuwatch --log`` trace during a short CUDA training loop and checks it: samples
    taken,
   utilization and memory moved, no implausible reading, the trace replays.
5. Exercises per-cell memory (``%%cudamem``) on the real GPU when that magic exists.
6. Reads ``nvidia-smi -q -x`` (the format of the real captures in ``tests/data/real``, parsed by
   ``tests/real_captures.py``) and compares, GPU by GPU, what the capture tests compare: name, UUID,
   memory used/total/reserved, utilization, temperature, power draw and limit, clocks, P-state, fan,
   ECC mode and counts, MIG mode, driver model, each MIG instance and its memory, each process and
   its memory; N/A must meet N/A.
   ``--xml [FILE]`` runs only this check (no IPython, no torch) and saves the capture to FILE.

Prints one line per check (``PASS``/``FAIL``/``SKIP``) and a summary; exit status 1 on any FAIL.
Usage (after ``make setup TORCH=...`` with a CUDA build of torch): .venv/bin/python
    scripts/gpu_check.py [--xml [FILE]]
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

results = []


def check(name, ok, detail=""):
    results.append((name, ok))
    print(
        f"{'PASS' if ok is True else 'SKIP' if ok is None else 'FAIL'}  {name}  {detail}",
        flush=True,
    )


def nvidia_smi():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    q = "index,name,uuid,pci.bus_id,memory.total,driver_version"
    out = subprocess.run(
        [exe, f"--query-gpu={q}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    rows = []
    for line in out.stdout.strip().splitlines():
        idx, name, uuid, bus, mem, drv = [x.strip() for x in line.split(",")]
        rows.append(
            {
                "index": int(idx),
                "name": name,
                "uuid": uuid,
                "pci.bus_id": bus,
                "memory.total_mib": int(mem),
                "driver_version": drv,
            }
        )
    return rows


MIB = 1024 * 1024

# : nvidia-smi field -> (our nvml field, how to turn nvidia-smi's text (nounits) into our raw unit,
# tolerance).
# : Tolerance: ``0`` exact; ``("abs", x)`` within x raw units; ``("rel", f, x)`` within f of the
# larger value or
# : x raw units, whichever is larger. Moving readings are sampled a few ms apart, hence the
# tolerances.
FIELDS = {
    "name": ("name", str, 0),
    "uuid": ("uuid", str, 0),
    "pci.bus_id": ("pci.bus_id", str.lower, 0),
    "memory.total": ("memory.total", lambda v: int(v) * MIB, ("abs", MIB)),
    "memory.reserved": ("memory.reserved", lambda v: int(v) * MIB, ("abs", MIB)),
    "memory.used": ("memory.used", lambda v: int(v) * MIB, ("abs", 64 * MIB)),
    "memory.free": ("memory.free", lambda v: int(v) * MIB, ("abs", 64 * MIB)),
    "utilization.gpu": ("utilization.gpu", int, ("abs", 20)),
    "utilization.memory": ("utilization.memory", int, ("abs", 20)),
    "temperature.gpu": ("temperature.gpu", int, ("abs", 3)),
    "power.draw": ("power.draw", lambda v: round(float(v) * 1000), ("rel", 0.2, 20_000)),
    "enforced.power.limit": ("power.limit", lambda v: round(float(v) * 1000), ("abs", 1000)),
    "clocks.sm": ("clocks.sm", int, ("rel", 0.15, 50)),
    "clocks.mem": ("clocks.mem", int, ("rel", 0.15, 50)),
    "clocks.max.sm": ("clocks.max.sm", int, 0),
    "clocks.max.mem": ("clocks.max.mem", int, 0),
    "pstate": ("pstate", lambda v: int(v.lstrip("P")), ("abs", 2)),
    "fan.speed": ("fan.speed", int, ("abs", 5)),
    "ecc.mode.current": ("ecc.mode.current", str, 0),
    "ecc.errors.uncorrected.volatile.total": ("ecc.errors.uncorrected.volatile.total", int, 0),
    "ecc.errors.uncorrected.aggregate.total": ("ecc.errors.uncorrected.aggregate.total", int, 0),
    "retired_pages.pending": (
        "retired_pages.pending",
        lambda v: int(v.strip().lower() in ("yes", "1")),
        0,
    ),
    "remapped_rows.pending": (
        "remapped_rows.pending",
        lambda v: int(v.strip().lower() in ("yes", "1")),
        0,
    ),
    "remapped_rows.failure": (
        "remapped_rows.failure",
        lambda v: int(v.strip().lower() in ("yes", "1")),
        0,
    ),
}
_SMI_NA = (
    "[N/A]",
    "N/A",
    "[Not Supported]",
    "Not Supported",
    "[Unknown Error]",
    "[Insufficient Permissions]",
)


def smi_field(exe, field):
    """``{index: text}`` of one nvidia-smi field (nounits); None if this nvidia-smi lacks it."""
    out = subprocess.run(
        [exe, f"--query-gpu=index,{field}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return None
    rows = {}
    for line in out.stdout.strip().splitlines():
        idx, _, val = line.partition(",")
        rows[int(idx)] = val.strip()
    return rows


def compare(smi_text, ours, convert, tol):
    """``(ok, detail)`` for one field of one GPU: ok True/False, or None if neither has a value."""
    from cudamagic.core.na import is_na

    smi_na = smi_text is None or smi_text in _SMI_NA
    if smi_na and is_na(ours):
        return None, f"both N/A (ours: {ours.reason})"
    if smi_na or is_na(ours):
        return (
            False,
            f"nvidia-smi {smi_text!r} vs ours {ours.describe() if is_na(ours) else ours!r}",
        )
    try:
        theirs = convert(smi_text)
    except ValueError:
        return False, f"nvidia-smi printed {smi_text!r}"
    if tol == 0:
        return theirs == ours, f"{ours!r} vs nvidia-smi {theirs!r}"
    if tol[0] == "abs":
        return abs(theirs - ours) <= tol[1], f"{ours} vs nvidia-smi {theirs} (tolerance {tol[1]})"
    allowed = max(tol[1] * max(abs(theirs), abs(ours)), tol[2])
    return abs(theirs - ours) <= allowed, f"{ours} vs nvidia-smi {theirs} (tolerance {allowed:.0f})"


def check_fields():
    """Every shared field of every GPU against nvidia-smi, one line each."""
    from cudamagic.core import nvml

    exe = shutil.which("nvidia-smi")
    if exe is None:
        check("fields vs nvidia-smi", None, "nvidia-smi not found")
        return
    nvml.reset()
    n = nvml.device_count()
    if not isinstance(n, int):
        check("fields vs nvidia-smi", False, f"NVML: {n.reason}")
        return
    drv = (
        subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        .stdout.strip()
        .splitlines()
    )
    ours_drv = nvml.system_info().driver_version
    check("driver_version", bool(drv) and drv[0] == ours_drv, f"{ours_drv} vs nvidia-smi {drv[:1]}")
    for field, (ours_field, convert, tol) in FIELDS.items():
        smi = smi_field(exe, field)
        for i in range(n):
            ours = nvml.device(i).get(ours_field)  # read right after nvidia-smi, a few ms apart
            if smi is None:
                check(f"GPU {i} {field}", None, "this nvidia-smi does not know the field")
                continue
            ok, detail = compare(smi.get(i), ours, convert, tol)
            check(f"GPU {i} {field}", ok, detail)
    api = nvml.device(0).memory_api if n else None
    print(f"memory read with nvmlDeviceGetMemoryInfo {api}", flush=True)


#: ``nvidia-smi -q -x`` value (tests/real_captures.py's key) -> (cudamagic's nvml field, factor to
#: its raw unit, tolerance as in FIELDS). The same fields as tests/test_real_captures.py.
XML_FIELDS = {
    "memory_total_mib": ("memory.total", MIB, 0),
    "memory_reserved_mib": ("memory.reserved", MIB, ("abs", MIB)),
    "memory_used_mib": ("memory.used", MIB, ("abs", 64 * MIB)),
    "util_gpu_pct": ("utilization.gpu", 1, ("abs", 20)),
    "util_mem_pct": ("utilization.memory", 1, ("abs", 20)),
    "temperature_c": ("temperature.gpu", 1, ("abs", 3)),
    "power_draw_w": ("power.draw", 1000, ("rel", 0.2, 20_000)),
    "power_limit_w": ("power.limit", 1000, ("abs", 1000)),
    "clock_sm_mhz": ("clocks.sm", 1, ("rel", 0.15, 50)),
    "clock_mem_mhz": ("clocks.mem", 1, ("rel", 0.15, 50)),
    "pstate": ("pstate", 1, ("abs", 2)),
    "fan_pct": ("fan.speed", 1, ("abs", 5)),
    "ecc_volatile_uncorrected": ("ecc.errors.uncorrected.volatile.total", 1, 0),
    "ecc_aggregate_uncorrected": ("ecc.errors.uncorrected.aggregate.total", 1, 0),
}


def compare_value(want, ours, scale, tol):
    """``(ok, detail)`` of a capture value (``"N/A"`` or a number) against cudamagic's reading."""
    from cudamagic.core.na import is_na

    if want == "N/A" and is_na(ours):
        return None, f"both N/A (ours: {ours.reason})"
    if want == "N/A" or is_na(ours):
        return False, f"nvidia-smi -q -x {want!r} vs ours {ours!r}"
    theirs = round(want * scale)
    if tol == 0:
        return theirs == ours, f"{ours!r} vs nvidia-smi {theirs!r}"
    if tol[0] == "abs":
        return abs(theirs - ours) <= tol[1], f"{ours} vs nvidia-smi {theirs} (tolerance {tol[1]})"
    allowed = max(tol[1] * max(abs(theirs), abs(ours)), tol[2])
    return abs(theirs - ours) <= allowed, f"{ours} vs nvidia-smi {theirs} (tolerance {allowed:.0f})"


def check_xml(save_to=None):
    """This machine's ``nvidia-smi -q -x`` against cudamagic, field by field (no IPython)."""
    from cudamagic.core import nvml
    from cudamagic.core.na import is_na
    from cudamagic.watch.sources import LiveSource
    from tests import real_captures as rc

    exe = shutil.which("nvidia-smi")
    if exe is None:
        check("nvidia-smi -q -x", None, "nvidia-smi not found")
        return
    out = subprocess.run([exe, "-q", "-x"], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        check("nvidia-smi -q -x", False, (out.stderr or out.stdout)[:300])
        return
    if save_to:
        with open(save_to, "w", encoding="utf-8") as fh:
            fh.write(out.stdout)
    cap = rc.parse(out.stdout)
    nvml.reset()
    sample = LiveSource(host=None).read(0, time.time())  # a %gpuwatch sample, read right after
    check("nvidia-smi -q -x GPU count", len(sample.gpus) == len(cap["gpus"]), str(len(cap["gpus"])))
    check(
        "nvidia-smi -q -x driver_version",
        nvml.system_info().driver_version == cap["driver_version"],
        str(cap["driver_version"]),
    )
    for i, want in enumerate(cap["gpus"]):
        dev = nvml.device(i)
        for key, field, na_too in (
            ("name", "name", ()),
            ("uuid", "uuid", ()),
            ("ecc_mode", "ecc.mode.current", ()),
            ("mig_mode", "mig.mode.current", ("Disabled",)),  # GeForce: N/A, NVML may say off
        ):
            ours = dev.get(field)
            if want[key] == "N/A" and (is_na(ours) or ours in na_too):
                check(f"xml GPU {i} {field}", None, f"both N/A (ours: {ours!r})")
            else:
                check(f"xml GPU {i} {field}", ours == want[key], f"{ours!r} vs {want[key]!r}")
        for key, (field, scale, tol) in XML_FIELDS.items():
            ok, detail = compare_value(want[key], dev.get(field), scale, tol)
            check(f"xml GPU {i} {field} (%cudainfo)", ok, detail)
        g = sample.gpus[i] if i < len(sample.gpus) else None
        if g is None:
            continue
        for key, attr in (
            ("memory_used_mib", "memory_used_bytes"),
            ("memory_total_mib", "memory_total_bytes"),
            ("power_draw_w", "power_draw_mw"),
            ("temperature_c", "temperature_c"),
        ):
            field, scale, tol = XML_FIELDS[key]
            ok, detail = compare_value(want[key], getattr(g, attr), scale, tol)
            check(f"xml GPU {i} {field} (%gpuwatch)", ok, detail)
        dm = want["driver_model"]
        check(
            f"xml GPU {i} driver model",
            (is_na(g.driver_model) and dm == "N/A") or g.driver_model == dm,
            f"{g.driver_model!r} vs {dm!r}",
        )
        ours_mig = [(m.memory_total_bytes, m.memory_used_bytes) for m in g.mig_devices]
        check(
            f"xml GPU {i} MIG instances",
            [t for t, _ in ours_mig] == [t * MIB for _, t, _ in want["mig_devices"]],
            f"{len(ours_mig)} vs {len(want['mig_devices'])}",
        )
        pairs = zip(ours_mig, want["mig_devices"], strict=False)  # a count differing: above
        for j, ((_, used), (_, _, theirs)) in enumerate(pairs):
            ok, detail = compare_value(theirs, used, MIB, ("abs", 64 * MIB))
            check(f"xml GPU {i} MIG instance {j} memory.used", ok, detail)
        procs = {} if is_na(g.processes) else {p.pid: p.used_memory_bytes for p in g.processes}
        for pid, _, _, used in want["processes"]:
            if pid not in procs:
                check(f"xml GPU {i} process {pid}", False, "listed by nvidia-smi, not by cudamagic")
                continue
            ok, detail = compare_value(used, procs[pid], MIB, ("abs", 64 * MIB))
            check(f"xml GPU {i} process {pid} memory", ok, detail)


def check_watch_trace(ip, seconds=10.0):
    """A real %gpuwatch --log trace during a short CUDA training loop."""
    import math
    import tempfile
    import time

    import torch

    if not torch.cuda.is_available():
        check("%gpuwatch trace during training", None, "torch sees no CUDA")
        return
    from cudamagic.watch.trace import read_trace

    path = os.path.join(tempfile.mkdtemp(), "gpu_check_trace.jsonl")
    ip.run_line_magic("gpuwatch", f"--text --interval 0.25 --log {path}")
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 4096, device="cuda")
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
    ip.run_line_magic("gpuwatch", "--stop")
    header, samples = read_trace(path)
    check(
        "%gpuwatch --log: samples recorded",
        len(samples) >= seconds * 2,
        f"{len(samples)} samples in {path}",
    )
    gpu = torch.cuda.current_device()
    utils = [g.gpu_util_pct for s in samples for g in s.gpus if isinstance(g.gpu_util_pct, int)]
    check(
        "%gpuwatch --log: utilization rose during training",
        bool(utils) and max(utils) >= 50,
        f"max {max(utils) if utils else None} % (CUDA device {gpu})",
    )
    own = [
        p
        for s in samples
        for g in s.gpus
        if isinstance(g.processes, tuple)
        for p in g.processes
        if p.own
    ]
    check("%gpuwatch --log: this kernel listed with its GPU memory", bool(own), f"{len(own)} rows")
    bad = sorted(
        {
            (k, v.reason)
            for s in samples
            for g in s.gpus
            for k, v in vars(g).items()
            if getattr(v, "code", None) in ("implausible", "not_available")
        }
    )
    check(
        "%gpuwatch --log: no implausible reading",
        not bad,
        "; ".join(f"{k}: {r}" for k, r in bad[:3]),
    )
    rows = ip.run_line_magic("gpuwatch", f"--text --replay {path} --count 2").history
    check(
        "%gpuwatch --replay of the real trace",
        bool(rows) and not math.isnan(rows[0]["memory.total"]),
        f"{len(rows)} rows",
    )


def main():
    if "--xml" in sys.argv[1:]:
        rest = sys.argv[sys.argv.index("--xml") + 1 :]
        check_xml(rest[0] if rest else None)
        return summary()
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
            check(
                f"GPU {s['index']} name", g["name"] == s["name"], f"{g['name']!r} vs {s['name']!r}"
            )
            check(f"GPU {s['index']} uuid", g["uuid"] == s["uuid"])
            check(
                f"GPU {s['index']} pci.bus_id",
                str(g["pci.bus_id"]).lower() == s["pci.bus_id"].lower(),
                f"{g['pci.bus_id']} vs {s['pci.bus_id']}",
            )
            mib = g["memory.total"] // (1024 * 1024) if isinstance(g["memory.total"], int) else None
            check(
                f"GPU {s['index']} memory.total",
                mib == s["memory.total_mib"],
                f"{mib} MiB vs {s['memory.total_mib']} MiB",
            )
            check(
                f"GPU {s['index']} cuda ordinal",
                isinstance(g.get("cuda_ordinal"), int),
                str(g.get("cuda_ordinal")),
            )
        check(
            "driver_version",
            info["driver"]["driver_version"] == smi[0]["driver_version"],
            f"{info['driver']['driver_version']} vs {smi[0]['driver_version']}",
        )
    check_fields()
    check_xml(os.path.join(os.environ.get("OUT") or tempfile.gettempdir(), "nvidia-smi-q-x.xml"))
    import torch

    check("torch sees CUDA", torch.cuda.is_available(), torch.__version__)
    check("%cudainfo did not initialise CUDA", not torch.cuda.is_initialized())
    magics = ip.magics_manager.magics
    if "cudamem" in magics["cell"] and torch.cuda.is_available():
        ip.run_cell(
            "import torch\n"
            "x_gpu_check = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device='cuda')"
        )
        rep = ip.run_cell_magic(
            "cudamem",
            "",
            "y_gpu_check = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device='cuda')\n"
            "z = torch.empty(1024 * 1024 * 1024, dtype=torch.uint8, device='cuda'); del z",
        )
        print(rep)
        g0 = rep.gpus[0] if rep is not None and rep.gpus else None
        check(
            "%%cudamem: allocated delta = 512 MiB",
            g0 is not None and g0.allocated_delta_bytes == 512 * 2**20,
            str(g0.allocated_delta_bytes if g0 else None),
        )
        check(
            "%%cudamem: in-cell peak >= 1.5 GiB over the start",
            g0 is not None and g0.peak_allocated_bytes - g0.allocated_before_bytes >= 1536 * 2**20,
            str(g0.peak_allocated_bytes if g0 else None),
        )
        # an out-of-memory error inside a function keeps its 1 GiB local alive through the
        # saved traceback
        ip.run_cell(
            "def step():\n    local = torch.empty(2**30, dtype=torch.uint8, device='cuda')\n"
            "    return torch.empty(2**50, dtype=torch.uint8, device='cuda')\nstep()",
            store_history=True,
        )
        held = torch.cuda.memory_allocated()
        free = ip.run_line_magic("cudamem", "free")
        print(free)
        freed = free.gpu_allocated_freed_bytes if free is not None else 0
        check(
            "%cudamem free gives back the OOM frame's 1 GiB",
            freed >= 2**30,
            f"allocated before free {held}, freed {freed}",
        )
    else:
        check("%%cudamem on GPU", None, "magic not present or no CUDA")
    check_watch_trace(ip)
    try:
        import run_demo

        run_demo.execute(os.path.join(ROOT, "examples", "quickstart.ipynb"))
        check("quickstart.ipynb executes in a real kernel", True)
    except Exception as exc:  # report, do not hide
        check(
            "quickstart.ipynb executes in a real kernel",
            False,
            f"{type(exc).__name__}: {str(exc)[:500]}",
        )
    return summary()


def summary():
    """Print the counts (a SKIP is not a pass) and return the exit status: 1 on any FAIL."""
    counts = {k: sum(ok is k for _, ok in results) for k in (True, None, False)}
    print(f"\n{counts[True]} passed, {counts[None]} skipped, {counts[False]} failed")
    return 1 if counts[False] else 0


if __name__ == "__main__":
    sys.exit(main())
