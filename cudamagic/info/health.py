"""GPU health for ``%cudainfo``.

A lost GPU, ECC errors, retired pages and remapped rows, as nvidia-smi shows them.

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
    "check `sudo dmesg | grep -i xid` (Xid 79: fallen off the bus) and `nvidia-smi`; stop the jobs "
    "on it and reset it (`sudo nvidia-smi -r -i {index}`) or reboot; if it recurs check power, "
    "cooling and the card's seating, and report it to the administrator or the cloud provider"
)


def read_health(dev) -> dict:
    """The health fields of one :class:`cudamagic.core.nvml.Device`.

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
    """``(healthy, lost)`` GPU rows; a lost row's ``cuda_ordinal`` is NA (CUDA cannot see it)."""
    lost = [g for g in gpus if is_lost(g)]
    for g in lost:
        g["cuda_ordinal"] = LOST_ORDINAL
        g["mapping_source"] = ""
    return [g for g in gpus if not is_lost(g)], lost
