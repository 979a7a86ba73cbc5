"""GPU memory sizes by product name.

GPU memory sizes for ``%%cudafit --gpu NAME`` on a machine without that GPU: the capacity on each
product's NVIDIA datasheet, less what ECC takes where it is on by default (data-centre GDDR
boards: T4, A10, L4, L40S lose 6.25 %, "CUDA C++ Best Practices Guide", ECC; a T4's
``nvidia-smi`` shows 15079 MiB), and the compute capability (for the cuBLAS workspace and CUDA
context). There is no margin: the driver keeps a little more, so a verdict within a few hundred
MiB of the size is tight.

Data only.
"""

from __future__ import annotations

GB = 1000**3
GIB = 1 << 30
MIB = 1 << 20
#: GDDR with ECC on: 1/16 of the memory holds the ECC bits (CUDA C++ Best Practices Guide).
ECC = 15 / 16

#: name -> (memory bytes, compute capability major, source). Names match case- and space-
#: insensitively, so ``--gpu "rtx 4090"`` and ``--gpu RTX4090`` both work.
GPUS = {
    "T4": (15079 * MIB, 7, "nvidia-smi memory.total of a T4 (16 GB GDDR6, ECC on): 15079 MiB"),
    "V100 16GB": (16 * GIB, 7, "NVIDIA V100 datasheet: 16 GB HBM2"),
    "V100 32GB": (32 * GIB, 7, "NVIDIA V100 datasheet: 32 GB HBM2"),
    "RTX 3060": (12 * GIB, 8, "GeForce RTX 3060 specifications: 12 GB GDDR6"),
    "RTX 3090": (24 * GIB, 8, "GeForce RTX 3090 specifications: 24 GB GDDR6X"),
    "RTX 4070": (12 * GIB, 8, "GeForce RTX 4070 specifications: 12 GB GDDR6X"),
    "RTX 4080": (16 * GIB, 8, "GeForce RTX 4080 specifications: 16 GB GDDR6X"),
    "RTX 4090": (24 * GIB, 8, "GeForce RTX 4090 specifications: 24 GB GDDR6X"),
    "RTX 5090": (32 * GIB, 12, "GeForce RTX 5090 specifications: 32 GB GDDR7"),
    "A10": (int(24 * GIB * ECC), 8, "NVIDIA A10 datasheet: 24 GB GDDR6, less 1/16 for ECC"),
    "L4": (int(24 * GIB * ECC), 8, "NVIDIA L4 datasheet: 24 GB GDDR6, less 1/16 for ECC"),
    "A100 40GB": (40 * GIB, 8, "NVIDIA A100 datasheet: 40 GB HBM2"),
    "A100 80GB": (80 * GIB, 8, "NVIDIA A100 datasheet: 80 GB HBM2e"),
    "L40S": (int(48 * GIB * ECC), 8, "NVIDIA L40S datasheet: 48 GB GDDR6, less 1/16 for ECC"),
    "H100 80GB": (80 * GIB, 9, "NVIDIA H100 datasheet: 80 GB HBM3 (SXM, PCIe)"),
    "H200": (141 * GB, 9, "NVIDIA H200 datasheet: 141 GB HBM3e"),
    "B200": (180 * GB, 10, "NVIDIA DGX B200 datasheet: 1,440 GB for 8 GPUs (180 GB each)"),
}


def _key(name: str) -> str:
    return "".join(str(name).lower().split()).replace("nvidia", "").replace("geforce", "")


def lookup(name: str):
    """``(canonical name, bytes, capability major, source)`` of a GPU name, or None when unknown."""
    want = _key(name)
    return next(((name, *row) for name, row in GPUS.items() if _key(name) == want), None)
