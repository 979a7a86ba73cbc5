"""Dense peak throughput of NVIDIA GPUs, in TFLOP/s, per dtype: the denominator of MFU.

Data only (the code that uses it is in :mod:`.verdict`). Every value is the **dense** figure: a
datasheet that prints the 2:4 structured-sparsity number (marked ``*`` by NVIDIA) is halved here.
Tensor-core figures of GeForce cards are the ones "with FP32 accumulate" (what PyTorch's matmuls
use), which the architecture whitepapers list separately from the twice-as-high FP16-accumulate
figure. ``fp32`` is the plain (non-tensor-core) FP32 rate; ``tf32`` the TF32 tensor-core rate,
which PyTorch uses for FP32 matmuls only under ``torch.set_float32_matmul_precision("high")``.
A dtype missing from an entry has no tensor-core path on that GPU (bf16 before Ampere).

Each entry: ``match`` (lower-case substrings of ``torch.cuda.get_device_name()``, all required),
``cc`` (compute capability), ``dense_tflops`` (dtype -> TFLOP/s), ``source`` (the datasheet or
whitepaper URL the figures come from). The first matching entry wins, so the more specific names
(``"h100", "pcie"``) come before the general ones.
"""

from __future__ import annotations

_TURING = (
    "https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/"
    "turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf"
)
_GA102 = (
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_RTX_BLACKWELL = (
    "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/"
    "nvidia-rtx-blackwell-gpu-architecture.pdf"
)
_PASCAL = (
    "https://international.download.nvidia.com/geforce-com/international/pdfs/"
    "GeForce_GTX_1080_Whitepaper_FINAL.pdf"
)
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://nvdam.widen.net/s/nb5zzzsjdf/hpc-datasheet-sc23-h200-datasheet-3002446"

#: the peak table (see the module docstring for the fields).
PEAKS = (
    # ---- data centre
    {
        "name": "B200",
        "match": ("b200",),
        "cc": (10, 0),
        "dense_tflops": {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0},
        "source": "https://www.nvidia.com/en-us/data-center/hgx/",
    },
    {
        "name": "H200 NVL",
        "match": ("h200", "nvl"),
        "cc": (9, 0),
        "dense_tflops": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
        "source": _H200,
    },
    {
        "name": "H200 SXM",
        "match": ("h200",),
        "cc": (9, 0),
        "dense_tflops": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
        "source": _H200,
    },
    {
        "name": "H100 PCIe",
        "match": ("h100", "pcie"),
        "cc": (9, 0),
        "dense_tflops": {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5},
        "source": _H100,
    },
    {
        "name": "H100 NVL",
        "match": ("h100", "nvl"),
        "cc": (9, 0),
        "dense_tflops": {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5},
        "source": _H100,
    },
    {
        "name": "H100 SXM",
        "match": ("h100",),
        "cc": (9, 0),
        "dense_tflops": {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5},
        "source": _H100,
    },
    {
        "name": "A100",
        "match": ("a100",),
        "cc": (8, 0),
        "dense_tflops": {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        "source": (
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
            "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
        ),
    },
    {
        "name": "A10",
        "match": ("a10",),
        "cc": (8, 6),
        "dense_tflops": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
        "source": (
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/"
            "datasheet-new/nvidia-a10-datasheet.pdf"
        ),
    },
    {
        "name": "L4",
        "match": ("l4",),
        "cc": (8, 9),
        "dense_tflops": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0},
        "source": "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet",
    },
    {
        "name": "T4",
        "match": ("t4",),
        "cc": (7, 5),
        "dense_tflops": {"fp32": 8.1, "fp16": 65.0},
        "source": (
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
            "t4-tensor-core-datasheet-951643.pdf"
        ),
    },
    # ---- GeForce 50 (Blackwell), FP16/BF16 tensor with FP32 accumulate
    {
        "name": "GeForce RTX 5090",
        "match": ("rtx 5090",),
        "cc": (12, 0),
        "dense_tflops": {"fp32": 104.8, "tf32": 104.8, "bf16": 209.5, "fp16": 209.5},
        "source": _RTX_BLACKWELL,
    },
    {
        "name": "GeForce RTX 5080",
        "match": ("rtx 5080",),
        "cc": (12, 0),
        "dense_tflops": {"fp32": 56.3, "tf32": 56.3, "bf16": 112.6, "fp16": 112.6},
        "source": _RTX_BLACKWELL,
    },
    # ---- GeForce 40 (Ada)
    {
        "name": "GeForce RTX 4090",
        "match": ("rtx 4090",),
        "cc": (8, 9),
        "dense_tflops": {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
        "source": _ADA,
    },
    {
        "name": "GeForce RTX 4080",
        "match": ("rtx 4080",),
        "cc": (8, 9),
        "dense_tflops": {"fp32": 48.7, "tf32": 48.7, "bf16": 97.5, "fp16": 97.5},
        "source": _ADA,
    },
    # ---- GeForce 30 (Ampere GA102)
    {
        "name": "GeForce RTX 3090",
        "match": ("rtx 3090",),
        "cc": (8, 6),
        "dense_tflops": {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
        "source": _GA102,
    },
    {
        "name": "GeForce RTX 3080",
        "match": ("rtx 3080",),
        "cc": (8, 6),
        "dense_tflops": {"fp32": 29.8, "tf32": 29.8, "bf16": 59.5, "fp16": 59.5},
        "source": _GA102,
    },
    {
        "name": "GeForce RTX 3070",
        "match": ("rtx 3070",),
        "cc": (8, 6),
        "dense_tflops": {"fp32": 20.3, "tf32": 20.3, "bf16": 40.6, "fp16": 40.6},
        "source": _GA102,
    },
    # ---- GeForce 20 (Turing), reference boost clocks
    {
        "name": "GeForce RTX 2080 Ti",
        "match": ("rtx 2080 ti",),
        "cc": (7, 5),
        "dense_tflops": {"fp32": 13.4, "fp16": 53.8},
        "source": _TURING,
    },
    {
        "name": "GeForce RTX 2080",
        "match": ("rtx 2080",),
        "cc": (7, 5),
        "dense_tflops": {"fp32": 10.1, "fp16": 40.3},
        "source": _TURING,
    },
    {
        "name": "GeForce RTX 2070",
        "match": ("rtx 2070",),
        "cc": (7, 5),
        "dense_tflops": {"fp32": 7.5, "fp16": 29.9},
        "source": _TURING,
    },
    # ---- GeForce 10 (Pascal): no tensor cores, FP16 at 1/64 rate (not listed: use fp32)
    {
        "name": "GeForce GTX 1080 Ti",
        "match": ("gtx 1080 ti",),
        "cc": (6, 1),
        "dense_tflops": {"fp32": 11.3},
        "source": "https://www.nvidia.com/en-gb/geforce/products/10series/geforce-gtx-1080-ti/",
    },
    {
        "name": "GeForce GTX 1080",
        "match": ("gtx 1080",),
        "cc": (6, 1),
        "dense_tflops": {"fp32": 8.9},
        "source": _PASCAL,
    },
)
