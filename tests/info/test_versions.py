"""Tier 1.

The parsers behind %cudainfo (cuDNN integers, nvcc -V, torch.__version__, CUDA_VISIBLE_DEVICES),
table-driven.
"""

import pytest

from cudamagic.core.na import is_na
from cudamagic.core.nvcc import parse_nvcc_version
from cudamagic.info import versions


@pytest.mark.parametrize(
    "value, expected",
    [
        (7605, "7.6.5"),
        (8902, "8.9.2"),
        (8100, "8.1.0"),
        (90100, "9.1.0"),
        (91002, "9.10.2"),
        (90501, "9.5.1"),
    ],
)
def test_decode_cudnn(value, expected):
    assert versions.decode_cudnn_version(value) == expected


@pytest.mark.parametrize("value", [None, 0, -5, "garbage"])
def test_decode_cudnn_na(value):
    assert is_na(versions.decode_cudnn_version(value))


NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0"""


NVCC_101 = "Cuda compilation tools, release 10.1, V10.1.243"


@pytest.mark.parametrize(
    "text, release, build", [(NVCC_13, "13.0", "13.0.88"), (NVCC_101, "10.1", "10.1.243")]
)
def test_parse_nvcc(text, release, build):
    assert parse_nvcc_version(text) == {"release": release, "build": build}


@pytest.mark.parametrize("text", ["", "Segmentation fault", "\x00\xff garbage", None])
def test_parse_nvcc_garbage(text):
    assert is_na(parse_nvcc_version(text))


@pytest.mark.parametrize(
    "version, kind, variant, tag",
    [
        ("2.3.1+cpu", "cpu", "cpu", None),
        ("2.13.0+cpu", "cpu", "cpu", None),
        ("2.4.0+cu121", "cuda", "cu121", "12.1"),
        ("2.6.0+cu126", "cuda", "cu126", "12.6"),
        ("1.13.1+cu117", "cuda", "cu117", "11.7"),
        ("2.5.0", "default", "", None),
        ("2.4.0+rocm6.1", "rocm", "rocm6.1", None),
        ("2.6.0a0+git1234abc", "source", "git1234abc", None),
        ("2.9.0+cu130", "cuda", "cu130", "13.0"),
        # old two-digit CUDA tags (torch 1.0-1.4 wheels): cu80, cu90, cu92, and cu100/cu101 beside
        # them
        ("1.1.0+cu90", "cuda", "cu90", "9.0"),
        ("1.4.0+cu92", "cuda", "cu92", "9.2"),
        ("1.0.0+cu80", "cuda", "cu80", "8.0"),
        ("1.4.0+cu100", "cuda", "cu100", "10.0"),
        ("1.2.0+cu1", "default", "cu1", None),
    ],
)
def test_parse_torch_version(version, kind, variant, tag):
    v = versions.parse_torch_version(version)
    assert (v["kind"], v["variant"], v["cuda_tag"]) == (kind, variant, tag)


@pytest.mark.parametrize(
    "raw, kinds, hides_all, invalid",
    [
        (None, [], False, None),
        ("", [], True, None),
        ("-1", [], True, "-1"),
        ("0", ["index"], False, None),
        ("1,0", ["index", "index"], False, None),
        ("0,foo,1", ["index"], False, "foo"),
        ("GPU-8932f937-d72c", ["uuid"], False, None),
        ("MIG-11111111-2222-3333-4444-555555555555", ["mig"], False, None),
        ("MIG-GPU-8932f937/1/0", ["mig"], False, None),
        (" 0 , 1 ", ["index", "index"], False, None),
    ],
)
def test_parse_cuda_visible_devices(raw, kinds, hides_all, invalid):
    r = versions.parse_cuda_visible_devices(raw)
    assert [e["kind"] for e in r["entries"]] == kinds
    assert r["hides_all"] == hides_all
    assert r["invalid"] == invalid


@pytest.mark.parametrize(
    "raw, repeated",
    [
        ("0,0", 0),
        ("2,2,0", 2),
        ("0,00", 0),
        ("1,0,1,x", 1),
        ("GPU-1111,GPU-2222,GPU-1111", "GPU-1111"),
        ("MIG-a,MIG-a", "MIG-a"),
        # PyTorch stops at the first entry of another form: a repeat after it is not read
        ("0,GPU-1111,0", None),
        ("GPU-1111,0,GPU-1111", None),
        ("0,1", None),
        ("MIG-a,MIG-b", None),
        ("0,x,0", None),
    ],
)
def test_a_repeat_is_read_as_pytorch_reads_it(raw, repeated):
    cvd = versions.parse_cuda_visible_devices(raw)
    assert cvd["repeated"] == repeated
    assert cvd["hides_all"] is (repeated is not None)
