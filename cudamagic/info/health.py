"""GPU health for ``%cudainfo``: a lost GPU, ECC errors, retired pages and remapped rows, as
nvidia-smi shows them.

Facts (:func:`read_health`) use ``nvidia-smi --query-gpu`` names and raw counts; findings
(:func:`health_findings`) say what to do. A lost GPU (``NVML_ERROR_GPU_IS_LOST``, usually Xid 79)
keeps no CUDA ordinal (:func:`split_lost`) and is left out of the comparison of GPU models, so two
identical GPUs, one lost, are not reported as different. Nothing here imports IPython.
"""

from __future__ import annotations

from ..core.na import NA, is_na

#: nvidia-smi name -> (label, source). Raw units: counts; the pending/failure flags are 0/1.
HEALTH_FIELDS = {
    "ecc.mode.current": ("ECC mode", "nvmlDeviceGetEccMode"),
    "ecc.errors.uncorrected.volatile.total": (
        "ECC uncorrected (since boot)",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)",
    ),
    "ecc.errors.uncorrected.aggregate.total": (
        "ECC uncorrected (lifetime)",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE_ECC)",
    ),
    "retired_pages.pending": (
        "retired pages pending",
        "nvmlDeviceGetRetiredPagesPendingStatus (before Ampere)",
    ),
    "remapped_rows.pending": (
        "remapped rows pending",
        "nvmlDeviceGetRemappedRows (Ampere and later)",
    ),
    "remapped_rows.failure": (
        "row remapping failed",
        "nvmlDeviceGetRemappedRows (Ampere and later)",
    ),
}

NO_ECC = NA("this GPU has no ECC memory or ECC is off (nvidia-smi shows N/A)", "not_supported")
LOST_ORDINAL = NA(
    "GPU lost: CUDA cannot use it until it is reset or the machine rebooted", "gpu_lost"
)

DMESG_FIX = (
    "check `sudo dmesg | grep -i xid` (Xid 79: fallen off the bus) and `nvidia-smi`; stop the jobs on "
    "it and reset it (`sudo nvidia-smi -r -i {index}`) or reboot; if it recurs check power, cooling "
    "and the card's seating, and report it to the administrator or the cloud provider"
)


def read_health(dev) -> dict:
    """The health fields of one :class:`cudamagic.core.nvml.Device` (checked by
    ``nvml.check_value``).

    ECC counters and retired pages read N/A (``NO_ECC``) where the GPU has no ECC memory or ECC is
    off; retired pages are N/A on GPUs that remap rows instead (Ampere and later) and the reverse
    before Ampere.
    """
    got = dev.read(list(HEALTH_FIELDS))
    mode = got["ecc.mode.current"]
    no_ecc = (is_na(mode) and mode.code == "not_supported") or mode == "Disabled"
    for key, v in got.items():
        if key == "ecc.mode.current":
            if is_na(v) and v.code == "not_supported":
                got[key] = NO_ECC
        elif no_ecc and (key.startswith("ecc.errors") or (is_na(v) and v.code == "not_supported")):
            got[key] = NO_ECC
    return got


def is_lost(g: dict) -> bool:
    """True when the GPU row's reads failed with "GPU is lost" (``NVML_ERROR_GPU_IS_LOST``)."""
    name = g.get("name")
    return is_na(name) and name.code == "gpu_lost"


def split_lost(gpus):
    """``(healthy, lost)`` GPU rows; lost rows get ``cuda_ordinal`` NA (CUDA cannot enumerate them)."""
    lost = [g for g in gpus if is_lost(g)]
    for g in lost:
        g["cuda_ordinal"] = LOST_ORDINAL
        g["mapping_source"] = ""
    return [g for g in gpus if not is_lost(g)], lost


def health_findings(gpus, finding_cls) -> list:
    """Findings for lost GPUs and ECC trouble. ``finding_cls`` is the report's ``Finding`` class
    (``severity, id, title, cause, fix``).
    """
    out = []
    for g in gpus:
        i = g["index"]
        if is_lost(g):
            out.append(
                finding_cls(
                    "error",
                    "gpu-lost",
                    f"GPU {i} is lost (fell off the bus)",
                    f"NVML answers 'GPU is lost' for GPU {i} ({g['name'].reason}). CUDA cannot use it: it has no CUDA "
                    "ordinal, the other GPUs are renumbered, and jobs that used it have failed.",
                    DMESG_FIX.format(index=i),
                )
            )
            continue
        vol, agg = (
            g.get("ecc.errors.uncorrected.volatile.total"),
            g.get("ecc.errors.uncorrected.aggregate.total"),
        )
        if isinstance(vol, int) and vol > 0:
            out.append(
                finding_cls(
                    "error",
                    "ecc-uncorrected",
                    f"GPU {i} had {vol} uncorrectable ECC error(s) since boot",
                    "Uncorrectable memory errors (nvidia-smi ecc.errors.uncorrected.volatile.total) corrupt results and "
                    "kill the CUDA contexts that touched the memory.",
                    "save your work, then reset the GPU (`sudo nvidia-smi -r -i "
                    f"{i}`) or reboot so the bad memory is retired/remapped; if errors come back, report the GPU",
                )
            )
        elif isinstance(agg, int) and agg > 0:
            out.append(
                finding_cls(
                    "warning",
                    "ecc-uncorrected-lifetime",
                    f"GPU {i} had {agg} uncorrectable ECC error(s) in its lifetime",
                    "nvidia-smi ecc.errors.uncorrected.aggregate.total is non-zero: this GPU's memory has failed before.",
                    "watch it; if the count grows, report the GPU to the administrator or provider",
                )
            )
        pend_pages, pend_rows = g.get("retired_pages.pending"), g.get("remapped_rows.pending")
        if pend_pages == 1 or pend_rows == 1:
            what = "retired pages" if pend_pages == 1 else "remapped rows"
            out.append(
                finding_cls(
                    "warning",
                    "memory-repair-pending",
                    f"GPU {i} has {what} waiting for a reset",
                    f"The driver marked bad memory ({what} pending) but the repair only takes effect after the GPU is "
                    "reset; until then the bad memory may still be used.",
                    f"when no job runs on it: `sudo nvidia-smi -r -i {i}` or reboot",
                )
            )
        if g.get("remapped_rows.failure") == 1:
            out.append(
                finding_cls(
                    "error",
                    "row-remap-failed",
                    f"GPU {i} ran out of spare memory rows (row remapping failed)",
                    "The GPU ran out of spare memory rows (nvidia-smi remapped_rows.failure): its memory can no longer "
                    "be repaired.",
                    "report the GPU for replacement (RMA) to the administrator or cloud provider",
                )
            )
    return out


def format_health(key, value) -> str:
    """Text of one health field (``Yes``/``No`` for the pending/failure flags, as nvidia-smi)."""
    if is_na(value):
        return value.describe()
    if key in ("retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"):
        return "Yes" if value else "No"
    return str(value)
