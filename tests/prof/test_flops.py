"""FLOPs of %%torchprof within 1 % of the analytic count, and the peak table.

Counted both from a profile and under ``FlopCounterMode``, in train and eval; the peak table is
data with a source for every entry.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import profile

from cudamagic.prof.flops import count_flops, flops_from_profiler
from cudamagic.prof.peaks import PEAKS
from cudamagic.prof.verdict import find_peak, mfu

B, L, D, H, FF = 4, 64, 128, 4, 256


class AttentionBlock(nn.Module):
    """Self-attention with SDPA: q/k/v projections, attention, output projection."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)

    def forward(self, x):
        q, k, v = self.qkv(x).view(B, L, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


def attention(length):  # QK^T and PV over all heads
    return 2 * B * H * length * length * (D // H) * 2


CASES = {
    # name: (model factory, input factory, forward FLOPs, backward FLOPs)
    "linear": (lambda: nn.Linear(256, 512), lambda: torch.randn(32, 256), 2 * 32 * 256 * 512),
    "conv2d": (
        lambda: nn.Conv2d(16, 32, 3, padding=1),
        lambda: torch.randn(4, 16, 32, 32),
        2 * 4 * 32 * 32 * 32 * 16 * 9,
    ),
    "attention": (
        AttentionBlock,
        lambda: torch.randn(B, L, D),
        2 * B * L * (D * 3 * D + D * D) + attention(L),
    ),
    "transformer_layer": (
        lambda: nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True),
        lambda: torch.randn(B, L, D),
        2 * B * L * (D * 3 * D + D * D + 2 * D * FF) + attention(L),
    ),
}


def run(model, x, mode):
    if mode == "train":
        model.train()
        model(x.requires_grad_()).sum().backward()  # backward: twice the forward
    else:
        model.eval()
        with torch.no_grad():
            model(x)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", list(CASES))
def test_flops_are_within_one_percent_of_the_analytic_count(name, mode):
    factory, inputs, forward = CASES[name]
    torch.manual_seed(0)
    model, x = factory(), inputs()
    expected = forward * (3 if mode == "train" else 1)
    counted, _ = count_flops(run, model, x.clone(), mode)
    assert counted == pytest.approx(expected, rel=0.01)
    with profile(record_shapes=True) as prof:
        run(model, x.clone(), mode)
    from_profile = flops_from_profiler(prof)
    assert sum(from_profile.values()) == pytest.approx(expected, rel=0.01)
    assert set(from_profile) == {"fp32"}


def test_bf16_flops_are_counted_as_bf16():
    a = torch.randn(64, 32, dtype=torch.bfloat16)
    b = torch.randn(32, 16, dtype=torch.bfloat16)
    with profile(record_shapes=True) as prof:
        a @ b
    assert flops_from_profiler(prof) == {"bf16": 2 * 64 * 32 * 16}


def test_a_strided_dilated_transposed_convolution():
    x = torch.randn(2, 8, 17, 17)
    conv = nn.Conv2d(8, 4, 3, stride=2, padding=2, dilation=2)
    out = conv(x).shape[-1]  # (17 + 4 - 4 - 1) // 2 + 1 = 9
    with profile(record_shapes=True) as prof:
        conv(x)
    assert sum(flops_from_profiler(prof).values()) == 2 * 2 * out * out * 4 * 8 * 9
    up = nn.ConvTranspose2d(8, 4, 2, stride=2)
    with profile(record_shapes=True) as prof:
        up(x)
    assert sum(flops_from_profiler(prof).values()) == 2 * 2 * 17 * 17 * 8 * 4 * 4


# ---- the peak table ---------------------------------------------------------------------------


def test_every_peak_entry_has_a_source_and_dense_values():
    names = set()
    for entry in PEAKS:
        assert entry["name"] not in names
        names.add(entry["name"])
        assert re.match(r"^https://[a-z0-9.-]*nvidia\.(com|net)/", entry["source"]) or re.match(
            r"^https://nvdam\.widen\.net/", entry["source"]
        ), entry
        assert entry["match"] and all(t == t.lower() for t in entry["match"])
        assert len(entry["cc"]) == 2
        peaks = entry["dense_tflops"]
        assert "fp32" in peaks and all(isinstance(v, float) and v > 0 for v in peaks.values())
        if "bf16" in peaks:
            assert peaks["bf16"] == peaks["fp16"]  # same tensor-core rate on every listed GPU
        if "tf32" in peaks and "bf16" in peaks:
            # dense tensor-core TF32 runs at half the BF16 rate (GeForce: the FP32-accumulate
            # rate); a sparse figure copied into one of the two breaks the ratio
            assert peaks["bf16"] / peaks["tf32"] == pytest.approx(2.0, rel=0.01), entry["name"]
        for k in ("bf16", "fp16", "tf32"):
            if k in peaks:
                assert peaks[k] >= peaks["fp32"], entry["name"]


def test_the_table_covers_the_gpus_beginners_have():
    wanted = {
        "NVIDIA GeForce GTX 1080 Ti": "GeForce GTX 1080 Ti",
        "NVIDIA GeForce GTX 1080": "GeForce GTX 1080",
        "NVIDIA GeForce RTX 2080 Ti": "GeForce RTX 2080 Ti",
        "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
        "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
        "NVIDIA GeForce RTX 5090": "GeForce RTX 5090",
        "Tesla T4": "T4",
        "NVIDIA L4": "L4",
        "NVIDIA A10": "A10",
        "NVIDIA A100-SXM4-80GB": "A100",
        "NVIDIA A100 80GB PCIe": "A100",
        "NVIDIA H100 80GB HBM3": "H100 SXM",
        "NVIDIA H100 PCIe": "H100 PCIe",
        "NVIDIA H100 NVL": "H100 NVL",
        "NVIDIA H200": "H200 SXM",
        "NVIDIA H200 NVL": "H200 NVL",
        "NVIDIA B200": "B200",
    }
    for device_name, entry_name in wanted.items():
        entry = find_peak(device_name)
        assert entry is not None and entry["name"] == entry_name, device_name


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA A10G",  # AWS's A10G has other clocks
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA GeForce RTX 2080 SUPER",
        "NVIDIA GeForce RTX 3080 Ti",
        "NVIDIA RTX A6000",
        "Radeon RX 7900 XTX",
        "NVIDIA GeForce RTX 4090 D",  # China's 4090 D has fewer SMs than the 4090
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",  # a MIG slice has a fraction of the SMs
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
    ],
)
def test_a_gpu_outside_the_table_is_not_guessed(device_name):
    assert find_peak(device_name) is None


def test_mfu_against_h100_peaks_on_an_a100_would_read_three_times_too_low():
    flops = {"bf16": 312e12 * 0.5}  # half a second of an A100's dense BF16 peak, in 1 s
    _, on_a100 = mfu(flops, 1.0, find_peak("NVIDIA A100-SXM4-40GB"))
    _, with_h100 = mfu(flops, 1.0, find_peak("NVIDIA H100 80GB HBM3"))
    assert on_a100 == pytest.approx(50.0)
    assert on_a100 / with_h100 == pytest.approx(989.5 / 312, rel=1e-6)


def test_fp32_counts_at_the_tf32_peak_only_when_tf32_is_on():
    entry = find_peak("NVIDIA A100")
    flops = {"fp32": 19.5e12}
    assert mfu(flops, 1.0, entry, "highest")[1] == pytest.approx(100.0)
    assert mfu(flops, 1.0, entry, "high")[1] == pytest.approx(100.0 * 19.5 / 156)


def test_the_math_backend_of_sdpa_is_counted_through_its_matmuls():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(B, H, L, D // H, requires_grad=True)
    with sdpa_kernel(SDPBackend.MATH), profile(record_shapes=True) as prof:
        F.scaled_dot_product_attention(q, q, q).sum().backward()
    assert sum(flops_from_profiler(prof).values()) == pytest.approx(3 * attention(L), rel=0.01)


@pytest.mark.parametrize(
    "forward, backward",
    [
        ("aten::_scaled_dot_product_flash_attention", "_flash_attention_backward"),
        ("aten::_scaled_dot_product_efficient_attention", "_efficient_attention_backward"),
        ("aten::_scaled_dot_product_cudnn_attention", None),
    ],
)
def test_the_cuda_backends_count_once_with_their_inner_kernels(forward, backward):
    from cudamagic.prof.flops import flops_from_events

    q = [B, H, L, D // H]
    blhe = [B, L, H, D // H]  # the inner kernels' layout
    kind = ["c10::BFloat16"] * 3
    events = [
        (1, 0.0, 100.0, forward, [q, q, q], kind, [None] * 3),
        (1, 10.0, 90.0, "aten::_flash_attention_forward", [blhe] * 3, kind, [None] * 3),
    ]
    grad = f"{forward}_backward"
    events.append((2, 200.0, 400.0, grad, [q, q, q, q], kind + kind[:1], [None] * 4))
    if backward:  # the inner backward kernel, nested: not counted again
        events.append((2, 210.0, 390.0, f"aten::{backward}", [blhe] * 4, kind, [None] * 4))
    assert flops_from_events(events) == {"bf16": 3 * attention(L)}
    # alone (called directly), the inner kernel counts in its own layout
    alone = [(3, 0.0, 1.0, "aten::_flash_attention_forward", [blhe] * 3, kind, [None] * 3)]
    assert flops_from_events(alone) == {"bf16": attention(L)}
