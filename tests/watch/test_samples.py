"""Tier 1 for %gpuwatch samples: the flat ``watch.history`` records. No IPython here."""

import datetime as dt
import math

import pandas
import pytest

from cudamagic.core.na import NA, is_na
from cudamagic.watch.samples import (
    GPU_FIELDS,
    GpuSample,
    HostSample,
    MigSample,
    ProcessSample,
    Sample,
    TorchSample,
    WorkerSample,
    sample_rows,
)
from cudamagic.watch.trace import TraceWriter, read_trace
from tests.watch.fakes import live, no_torch

SCALARS = (int, float, str, bool)


@pytest.mark.parametrize(
    "scenario", ["gpu_without_fan", "mig", "process_in_other_pid_namespace", "no_driver"]
)
def test_history_rows_are_flat_scalars_with_numeric_columns(fake_nvml, scenario):
    """watch.history suits pandas.DataFrame.

    watch.history must suit pandas.DataFrame: flat dicts of plain scalars, numbers stay numbers (an
    NA object in a numeric column made the column object-typed: .mean() raised TypeError).
    """
    fake_nvml(scenario)
    rows = sample_rows(live().read(1, 1000.0))
    assert rows and len({tuple(r) for r in rows}) == 1  # same columns in every row
    numeric = set(GPU_FIELDS) | {
        "host.cpu.utilization",
        "host.memory.used",
        "torch.allocated",
        "torch.reserved",
        "torch.peak",
        "torch.gap",
        "index",
    }
    for r in rows:
        assert all(type(v) in SCALARS for v in r.values()), {
            k: v for k, v in r.items() if type(v) not in SCALARS
        }
        for key in numeric & set(r):
            assert isinstance(r[key], (int, float)) and not isinstance(r[key], bool), (key, r[key])
        # every count, size and percentage is a real non-negative number (the gap may be negative:
        # NVML < reserved)
        bad = {
            k: r[k] for k in numeric & set(r) - {"torch.gap"} if not (math.isnan(r[k]) or r[k] >= 0)
        }
        assert bad == {}, bad
        if any(isinstance(v, float) and math.isnan(v) for v in r.values()):
            assert r["na_reasons"]
    if scenario == "no_driver":  # the row says why there is no GPU (it said "no GPU selected")
        assert (
            "not found" in rows[0]["na_reasons"] and "no GPU selected" not in rows[0]["na_reasons"]
        )
        assert math.isnan(rows[0]["index"])
    if scenario == "mig":
        assert math.isnan(rows[0]["utilization.gpu"]) and "MIG" in rows[0]["na_reasons"]


# ---- the exact records: what pandas.DataFrame(watch.history) and user code index by name
# ----------------------

GIB, MIB = 1024**3, 1024**2
NOT_SUPPORTED = NA("not supported on this GPU", "not_supported")


def gpu(index=0, **over):
    """A GpuSample with every field read (raw NVML units), ``over`` replacing some."""
    vals = dict(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-{index}",
        gpu_util_pct=55,
        mem_util_pct=20,
        memory_used_bytes=10 * GIB,
        memory_total_bytes=80 * GIB,
        temperature_c=61,
        power_draw_mw=300_000,
        power_limit_mw=700_000,
        fan_speed_pct=40,
        clock_sm_mhz=1980,
        clock_mem_mhz=2619,
        pstate=2,
        throttle_reasons_mask=0x1 | 0x4,
        memory_reserved_bytes=512 * MIB,
        processes=(
            ProcessSample(101, "python", "python a.py", GIB),
            ProcessSample(102, "python", "python b.py", 2 * GIB),
        ),
    )
    vals.update(over)
    return GpuSample(**vals)


def sample(*gpus, torch=None, nvml_status=None, workers=()):
    host = HostSample(
        cpu_util_pct=12.5,
        cpu_count=8,
        memory_used_bytes=4 * GIB,
        memory_total_bytes=32 * GIB,
        kernel_cpu_pct=3.0,
        workers=workers,
    )
    return Sample(
        seq=7,
        timestamp_s=1000.25,
        nvml_status=nvml_status,
        gpus=gpus,
        host=host,
        torch=no_torch() if torch is None else torch,
    )


def test_history_row_of_a_local_gpu_has_every_documented_column():
    """One row per GPU, nvidia-smi key names, raw units.

    Host.* and torch.* of this kernel beside them.
    """
    torch = TorchSample(
        allocated_bytes=GIB,
        reserved_bytes=2 * GIB,
        peak_bytes=3 * GIB,
        nvml_process_bytes=2 * GIB + 300 * MIB,
        gap_bytes=300 * MIB,
    )
    workers = (WorkerSample(201, 50.0, MIB), WorkerSample(202, 40.0, MIB))
    rows = sample_rows(
        sample(
            gpu(0), gpu(1, mig_enabled=True, lost=None, processes=()), torch=torch, workers=workers
        )
    )
    assert [r["index"] for r in rows] == [0, 1]
    row = rows[0]
    assert (
        dt.datetime.fromisoformat(row.pop("timestamp")).timestamp() == 1000.25
    )  # local time, milliseconds
    assert row == {
        "timestamp_s": 1000.25,
        "seq": 7,
        "host.cpu.utilization": 12.5,
        "host.memory.used": 4 * GIB,
        "host.memory.total": 32 * GIB,
        "host.kernel.cpu.utilization": 3.0,
        "host.dataloader_workers": 2,
        "torch.allocated": GIB,
        "torch.reserved": 2 * GIB,
        "torch.peak": 3 * GIB,
        "torch.gap": 300 * MIB,
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-0",
        "utilization.gpu": 55,
        "utilization.memory": 20,
        "memory.used": 10 * GIB,
        "memory.total": 80 * GIB,
        "memory.reserved": 512 * MIB,
        "temperature.gpu": 61,
        "power.draw": 300_000,
        "power.limit": 700_000,
        "fan.speed": 40,
        "clocks.sm": 1980,
        "clocks.mem": 2619,
        "pstate": 2,
        "clocks_event_reasons.active": 0x5,
        "clocks_event_reasons": "idle, power cap",
        "mig.mode.current": "Disabled",
        "processes.count": 2,
        "lost": False,
        "na_reasons": "",
    }
    assert (rows[1]["mig.mode.current"], rows[1]["processes.count"], rows[1]["lost"]) == (
        "Enabled",
        0,
        False,
    )
    df = pandas.DataFrame(rows)  # the README's use: numeric columns, per-GPU means
    assert df.groupby("index")["memory.used"].mean().to_dict() == {0: 10 * GIB, 1: 10 * GIB}
    assert df["torch.reserved"].dtype.kind == "i" and df["lost"].dtype.kind == "b"


def test_unreadable_values_become_nan_or_na_text_and_the_reasons_are_grouped():
    """A number that could not be read is NaN, a text "N/A".

    Na_reasons lists the keys per reason, in row order.
    """
    lost = NA("the GPU has fallen off the bus", "gpu_lost")
    row = sample_rows(
        sample(
            gpu(
                0,
                name=NOT_SUPPORTED,
                fan_speed_pct=NOT_SUPPORTED,
                power_draw_mw=NOT_SUPPORTED,
                temperature_c=lost,
                throttle_reasons_mask=lost,
                processes=lost,
                lost=lost,
                mig_enabled=NA("not recorded", "error"),
            )
        )
    )[0]
    assert (
        row["name"] == "N/A"
        and row["clocks_event_reasons"] == "N/A"
        and row["mig.mode.current"] == "N/A"
    )
    assert all(
        math.isnan(row[k])
        for k in ("fan.speed", "power.draw", "temperature.gpu", "processes.count")
    )
    assert row["lost"] is True and row["memory.used"] == 10 * GIB
    assert row["na_reasons"] == (
        "torch.allocated, torch.reserved, torch.peak, torch.gap: PyTorch is not imported in this "
        "kernel; "
        "name, power.draw, fan.speed: not supported on this GPU; "
        "temperature.gpu, clocks_event_reasons.active, clocks_event_reasons, processes.count: "
        "the GPU has fallen off the bus; mig.mode.current: not recorded"
    )


@pytest.mark.parametrize(
    "status, reason",
    [
        (None, "no GPU selected"),
        (NA("NVML Shared Library Not Found", "no_driver"), "NVML Shared Library Not Found"),
    ],
)
def test_without_gpus_one_host_row_says_why(status, reason):
    """No GPU in the sample: one host row that says why.

    No GPU in the sample (none selected, or NVML failed): one row with the host and torch columns,
    and the index NaN with the reason (NVML's when NVML failed).
    """
    row = sample_rows(sample(nvml_status=status))[0]
    assert math.isnan(row["index"]) and row["na_reasons"].endswith(f"index: {reason}")
    assert (
        row["seq"] == 7 and row["host.memory.used"] == 4 * GIB and math.isnan(row["torch.reserved"])
    )
    assert "memory.used" not in row


def test_cluster_gpu_rows_carry_their_host_and_profiling_ratios_not_this_kernels():
    """A cluster GPU's row carries its host and profiling ratios.

    A GPU of another host (--source prometheus://): its host name and prof.* / mig.N.prof.* columns;
    this kernel's host.* and torch.* would describe the wrong machine, so they are left out.
    """
    mig = MigSample(
        1, "MIG-1", GIB, 10 * GIB, ratios=(("sm_active", 0.25), ("dram_active", NOT_SUPPORTED))
    )
    rows = sample_rows(
        sample(
            gpu(
                0,
                host="node-a",
                ratios=(("gr_engine_active", 0.5),),
                mig_devices=(mig,),
                mig_enabled=True,
            ),
            gpu(1, host="node-b"),  # an exporter without profiling ratios
            gpu(2, ratios=(("sm_active", 0.75),)),
        )
    )  # ratios, host label missing
    for r in rows:
        assert not [k for k in r if k.startswith(("host.", "torch."))], r
        assert r["memory.used"] == 10 * GIB
    assert [r["host"] for r in rows] == ["node-a", "node-b", ""]
    assert rows[0]["prof.gr_engine_active"] == 0.5 and rows[0]["mig.1.prof.sm_active"] == 0.25
    assert math.isnan(rows[0]["mig.1.prof.dram_active"]) and "prof.sm_active" not in rows[0]
    assert rows[0]["na_reasons"] == "mig.1.prof.dram_active: not supported on this GPU"
    assert rows[2]["prof.sm_active"] == 0.75 and not [
        k for k in rows[1] if k.startswith(("prof.", "mig.")) and k != "mig.mode.current"
    ]


def test_gpu_sample_get_reads_by_nvidia_smi_name_or_attribute(fake_nvml):
    """watch.samples users read a GpuSample by nvidia-smi name or by attribute name.

    Memory.used.
    """
    fake_nvml("gpu_without_fan")
    g0, g1 = live().read(1, 1000.0).gpus
    assert (g0.get("memory.total"), g0.get("power.limit"), g0.get("clocks.sm")) == (
        80 * GIB,
        700_000,
        1980,
    )
    assert g1.get("memory_total_bytes") == 16 * GIB and g1.get("name") == "Tesla T4"
    assert is_na(g1.get("fan.speed")) and g1.get("fan.speed").code == "not_supported"
    with pytest.raises(AttributeError, match="no attribute 'memory.free'"):
        g0.get("memory.free")


def test_a_replayed_trace_with_an_unread_mig_mode_shows_na_not_disabled(tmp_path):
    """A trace may record mig.mode.current as not available.

    Its history row must not claim "Disabled".
    """
    path = str(tmp_path / "t.jsonl")
    writer = TraceWriter(path)
    writer.write(sample(gpu(0, mig_enabled=NA("Insufficient Permissions", "no_permission"))))
    writer.close()
    _, (replayed,) = read_trace(path)
    row = sample_rows(replayed)[0]
    assert row["mig.mode.current"] == "N/A" and row["na_reasons"].endswith(
        "mig.mode.current: Insufficient Permissions"
    )
