"""What each NVML error code means and how to fix it, as data.

One :class:`NvmlError` per ``NVML_ERROR_*`` value of the NVML Python binding (``pynvml`` of
``nvidia-ml-py``; names and meanings as in ``nvml.h``). :func:`cudamagic.core.nvml.translate`
turns an exception into an NA from this table; the tests check that every constant the
installed binding defines has an entry.
"""

from __future__ import annotations

from typing import NamedTuple


class NvmlError(NamedTuple):
    """The user's words for one NVML error code."""

    #: What happened, in plain words (the NA's reason).
    cause: str
    #: The step or command that fixes it ("nothing to fix: ..." when nothing can).
    fix: str
    #: The NA code callers act on (``"not_supported"``, ``"gpu_lost"``, ``"no_driver"``...).
    code: str = "error"


_LOST_FIX = (
    "look for the GPU's Xid error with `sudo dmesg | grep -i xid`, then reset it "
    "(`sudo nvidia-smi -r -i <index>`, with no process on it) or reboot"
)
_DMESG = "`sudo dmesg | grep -i -e nvrm -e xid`"

#: ``NVML_ERROR_*`` value -> :class:`NvmlError`. 18 (driver/library mismatch) and 999 (unknown)
#: are completed by :func:`cudamagic.core.nvml.translate` with what it finds on this machine.
NVML_ERRORS = {
    1: NvmlError(
        "NVML is not initialised",
        "restart the kernel (cudamagic initialises NVML itself; something shut it down)",
        "not_initialized",
    ),
    2: NvmlError(
        "NVML rejected an argument: a GPU index or handle that does not exist on this machine",
        "list the GPUs with `nvidia-smi -L` and use one of their indices",
    ),
    3: NvmlError(
        "not supported on this GPU",
        "nothing to fix: this GPU or driver does not report it (nvidia-smi shows N/A too)",
        "not_supported",
    ),
    4: NvmlError(
        "permission denied by the driver (try as root or ask the administrator)",
        "run as root, or ask the administrator to allow this query",
        "no_permission",
    ),
    5: NvmlError(
        "NVML was already initialised (an answer only old drivers give)",
        "nothing to fix: NVML is usable; restart the kernel if readings stay unavailable",
    ),
    6: NvmlError(
        "NVML found no such object: a process, MIG instance or GPU that is gone",
        "list what exists with `nvidia-smi -L` (GPUs, MIG instances) and `nvidia-smi` (processes)",
        "not_found",
    ),
    7: NvmlError(
        "NVML's answer did not fit the buffer the binding gave it (more entries than expected)",
        "update the binding: `pip install -U nvidia-ml-py`, then restart the kernel",
    ),
    8: NvmlError(
        "a GPU's external power cables are not connected properly",
        "power the machine off and reseat the GPU's PCIe power connectors; "
        "`nvidia-smi -q -d POWER` shows the GPU's power state",
    ),
    9: NvmlError(
        "the NVIDIA driver is installed but its kernel module is not loaded "
        "(`sudo modprobe nvidia`, or reboot after installing the driver)",
        "sudo modprobe nvidia  (or reboot after installing the driver)",
        "no_driver",
    ),
    10: NvmlError(
        "NVML timed out",
        f"read again; if it repeats, the GPU may be failing: check {_DMESG}",
    ),
    11: NvmlError(
        "the NVIDIA kernel driver found an interrupt (IRQ) problem with a GPU",
        f"check {_DMESG}, then reboot; if it persists, reseat the GPU or check the BIOS's PCIe "
        "settings",
    ),
    12: NvmlError(
        "NVML library libnvidia-ml.so.1 not found: no NVIDIA driver is installed on this machine "
        "(or its library is not on the loader path)",
        "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore this on a "
        "machine without an NVIDIA GPU",
        "no_driver",
    ),
    13: NvmlError(
        "this driver's NVML lacks the function (driver too old for this query)",
        "update the NVIDIA driver (this query needs a newer one)",
        "not_supported",
    ),
    14: NvmlError(
        "the GPU's infoROM is corrupted",
        "`nvidia-smi -q | grep -i -A4 inforom` shows it; the board needs an infoROM update from "
        "its vendor (contact NVIDIA or the board's maker)",
    ),
    15: NvmlError(
        "GPU lost: it fell off the bus or was reset; check `dmesg` and `nvidia-smi`",
        _LOST_FIX,
        "gpu_lost",
    ),
    16: NvmlError(
        "GPU requires a reset (`nvidia-smi -r`) or a reboot",
        "sudo nvidia-smi -r -i <index>  (with no process on the GPU), or reboot",
        "gpu_lost",
    ),
    17: NvmlError(
        "the operating system refused NVML's call (a driver crash or a blocked device file)",
        f"check {_DMESG} (Windows: the System event log), then reboot",
    ),
    18: NvmlError(
        "driver/library version mismatch",
        "sudo reboot  (or: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
        "sudo modprobe nvidia)",
        "version_mismatch",
    ),
    19: NvmlError(
        "the GPU is in use, so this setting cannot change now",
        "stop the processes `nvidia-smi` lists on that GPU, then try again",
    ),
    20: NvmlError(
        "NVML ran out of host memory",
        "free memory on this machine (close other programs), then restart the kernel",
    ),
    21: NvmlError(
        "NVML has no data yet (nothing was sampled since the last reading)",
        "nothing to fix: read again later",
        "no_data",
    ),
    22: NvmlError(
        "this vGPU does not support ECC while the host GPU has ECC on",
        "ask the host's administrator to turn ECC off for vGPU (`nvidia-smi -e 0` on the host, "
        "then reboot it)",
        "not_supported",
    ),
    23: NvmlError(
        "the GPU has no resources left for this (MIG instances or vGPU slots used up)",
        "free some: `nvidia-smi mig -lgi` lists the MIG instances; destroy unused ones or ask the "
        "administrator",
    ),
    24: NvmlError(
        "the requested clock frequency is not supported by this GPU",
        "pick one of `nvidia-smi -q -d SUPPORTED_CLOCKS`",
        "not_supported",
    ),
    25: NvmlError(
        "the nvidia-ml-py binding and the driver disagree on a structure's version",
        "install the nvidia-ml-py that matches the driver (`pip install -U nvidia-ml-py`), or "
        "update the driver",
        "not_supported",
    ),
    26: NvmlError(
        "the driver no longer offers this NVML function (deprecated)",
        "update the binding: `pip install -U nvidia-ml-py`",
        "not_supported",
    ),
    27: NvmlError(
        "the GPU is not ready yet (still initialising, or recovering)",
        f"wait a few seconds and read again; if it persists check {_DMESG}",
    ),
    28: NvmlError(
        "GPU lost: it fell off the bus or was reset; check `dmesg` and `nvidia-smi`",
        _LOST_FIX,
        "gpu_lost",
    ),
    29: NvmlError(
        "the GPU is in a state that does not allow this (a reset or mode change is pending)",
        "see the pending modes in `nvidia-smi -q`; reset the GPU (`sudo nvidia-smi -r -i "
        "<index>`) or reboot",
    ),
    30: NvmlError(
        "this GPU does not support the reset type asked for",
        "reboot the machine to reset the GPU",
        "not_supported",
    ),
    999: NvmlError(
        "NVML failed with 'Unknown Error' (nvidia-smi prints 'Failed to initialize NVML: Unknown "
        "Error' too)",
        f"run `nvidia-smi` in a terminal; if it fails the same way, check {_DMESG} and reboot",
    ),
}

#: NVIDIA's notice on containers losing their GPUs (``nvidia-container-toolkit#48``).
CONTAINER_NOTICE = "https://github.com/NVIDIA/nvidia-container-toolkit/issues/48"

#: ``NVML_ERROR_UNKNOWN`` inside a container: the container lost its GPU devices.
CONTAINER_LOST_GPU = NvmlError(
    "NVML's 'Unknown Error' inside a container: the container lost access to its GPU devices "
    "(/dev/nvidia*) because systemd re-applied its device cgroup, e.g. after `systemctl "
    "daemon-reload` on the host; nvidia-smi in the container fails the same way while the host "
    "is fine",
    "recreate the container (`docker rm -f <name>` and `docker run --gpus all ...` again; in "
    "Kubernetes delete the pod): restarting the kernel is not enough. The lasting fix, from "
    f"NVIDIA's notice ({CONTAINER_NOTICE}): on the host run `sudo nvidia-ctk system "
    "create-dev-char-symlinks --create-all`, and at every boot through the notice's udev rule "
    "(/lib/udev/rules.d/71-nvidia-dev-char.rules); or set Docker's "
    '`"exec-opts": ["native.cgroupdriver=cgroupfs"]` in /etc/docker/daemon.json',
    "container_gpu_lost",
)
