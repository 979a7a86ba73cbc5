"""scripts/gpu_check.py's field comparison, on the stand-in NVML.

scripts/gpu_check.py's field comparison, run here against the stand-in NVML library and a stand-in
``nvidia-smi`` on PATH that prints what a real one prints for the same GPU (the real comparison
needs a GPU).
"""

from __future__ import annotations

import json
import os
import stat
import sys

from tests import fake_nvml as fm

MIB = 1024**2

SMI = r"""#!{python}
import json, sys
data = json.load(open({path!r}))
args = sys.argv[1:]
q = next(a for a in args if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
for i, gpu in enumerate(data):
    if any(f not in gpu and f != "index" for f in q):
        sys.stderr.write("Field is not a valid field to query.\n"); sys.exit(2)
    print(", ".join(str(i) if f == "index" else gpu[f] for f in q))
"""


def test_every_shared_field_agrees_with_nvidia_smi(stub_nvml, tmp_path, monkeypatch, capsys):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
    import gpu_check

    stub_nvml(
        fm.a100(
            power_draw_mw=61_234,
            power_limit_mw=400_000,
            util_gpu=0xFFFFFFFF,
            ecc={"current": 1, "aggregate_uncorrected": 2},
        )
    )
    smi = [
        {
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": "GPU-00000000-aaaa-bbbb-cccc-000000000000",
            "pci.bus_id": "00000000:17:00.0",
            "memory.total": "81920",
            "memory.reserved": "908",
            "memory.used": "4",
            "memory.free": "81008",
            "utilization.gpu": "[N/A]",
            "utilization.memory": "0",
            "temperature.gpu": "35",
            "power.draw": "61.23",
            "enforced.power.limit": "400.00",
            "clocks.sm": "1980",
            "clocks.mem": "2619",
            "clocks.max.sm": "1980",
            "clocks.max.mem": "2619",
            "pstate": "P0",
            "fan.speed": "30",
            "ecc.mode.current": "Enabled",
            "ecc.errors.uncorrected.volatile.total": "0",
            "ecc.errors.uncorrected.aggregate.total": "2",
            "retired_pages.pending": "No",
            "remapped_rows.pending": "No",
            "driver_version": "535.104.05",
        }
    ]
    data = tmp_path / "smi.json"
    data.write_text(json.dumps(smi))
    exe = tmp_path / "nvidia-smi"
    exe.write_text(SMI.format(python=sys.executable, path=str(data)))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    gpu_check.results.clear()
    gpu_check.check_fields()
    out = capsys.readouterr().out
    got = dict(gpu_check.results)
    assert got["GPU 0 memory.used"] is True and got["GPU 0 memory.reserved"] is True
    assert got["GPU 0 utilization.gpu"] is None  # both N/A: nvidia-smi [N/A], ours 0xFFFFFFFF
    assert got["GPU 0 remapped_rows.failure"] is None and "does not know the field" in out
    assert [name for name, ok in gpu_check.results if ok is False] == []
    assert "memory read with nvmlDeviceGetMemoryInfo v2" in out
    # a disagreement is a FAIL line
    smi[0]["memory.used"] = "912"  # what the legacy v1 call would give
    data.write_text(json.dumps(smi))
    gpu_check.results.clear()
    gpu_check.check_fields()
    assert dict(gpu_check.results)["GPU 0 memory.used"] is False
