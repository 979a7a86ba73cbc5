"""Tests that fail on the planted bugs that survived (cuDNN 9.x boundary, CUDA_VISIBLE_DEVICES)."""

import pytest

from cudamagic.core.na import NA, is_na
from cudamagic.core.nvcc import parse_nvcc_version
from cudamagic.core.wheels import parse_version_tuple
from cudamagic.info import facts
from cudamagic.info.findings import findings
from cudamagic.info.versions import (
    decode_cudnn_version,
    parse_cuda_visible_devices,
    parse_torch_version,
)


@pytest.mark.parametrize(
    "value, expected", [(90000, "9.0.0"), (8000, "8.0.0"), (99999, "9.99.99"), (89999, "89.9.99")]
)
def test_decode_cudnn_9x_boundary(value, expected):
    assert decode_cudnn_version(value) == expected


@pytest.mark.parametrize(
    "raw, invalid, ignored",
    [
        ("-1,0", "-1", ["0"]),
        ("0,foo,1", "foo", ["1"]),
        ("0,foo,1,GPU-ab", "foo", ["1", "GPU-ab"]),
        ("0,1,bar", "bar", []),
        ("0,1", None, []),
    ],
)
def test_cvd_ignored_entries(raw, invalid, ignored):
    r = parse_cuda_visible_devices(raw)
    assert (r["invalid"], r["ignored"]) == (invalid, ignored)


@pytest.mark.parametrize("raw, blamed", [("2", "2"), ("0,2", "2"), ("1", None), ("0,1", None)])
def test_cvd_index_equal_to_gpu_count_is_flagged(fake_nvml, raw, blamed):
    fake_nvml("gpu_without_fan")
    f = facts.collect_facts(env={"CUDA_VISIBLE_DEVICES": raw, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    bad = [x for x in findings(f) if x.id == "cvd-unknown"]
    if blamed is None:
        assert bad == []
    else:
        assert len(bad) == 1 and bad[0].cause.startswith(
            f"{blamed} in CUDA_VISIBLE_DEVICES={raw!r}"
        )


# ---- killing mutmut survivors in info/versions.py (scripts/mutation.py versions) -----------------


def test_parse_version_tuple_passes_none_and_na_through():
    assert parse_version_tuple(None) is None
    assert parse_version_tuple(NA("x", "error")) is None  # str(NA) is "N/A": must not be parsed
    assert parse_version_tuple("12.4") == (12, 4)


@pytest.mark.parametrize(
    "version, kind",
    [
        ("2.3.1+cpu", "cpu"),
        ("2.3.1+cpu.cxx11.abi", "cpu"),
        ("2.6.0a0+git1234abc", "source"),
        ("2.6.0+git1234abc", "source"),
        ("2.6.0a0", "source"),
        ("2.6.0", "default"),
        ("2.6.0+CPU", "default"),
    ],
)
def test_parse_torch_version_kinds(version, kind):
    assert parse_torch_version(version)["kind"] == kind


def test_parse_nvcc_version_reasons():
    na = parse_nvcc_version(None)
    assert is_na(na) and (na.reason, na.code) == ("nvcc printed no text", "error")
    got = parse_nvcc_version("Cuda compilation tools, release 12.4")
    assert got["release"] == "12.4" and set(got) == {"release", "build"}
    assert (got["build"].reason, got["build"].code) == ("no V<build> in nvcc output", "error")
    na = parse_nvcc_version("Segmentation fault\nmore")
    assert na.reason == "unrecognised `nvcc -V` output: 'Segmentation fault'" and na.code == "error"
    assert parse_nvcc_version("  \n").reason == "unrecognised `nvcc -V` output: '(empty)'"


@pytest.mark.parametrize(
    "raw, kinds, invalid",
    [
        ("MIG-", [], "MIG-"),
        ("GPU-", [], "GPU-"),
        ("MIG-a", ["mig"], None),
        ("GPU-a", ["uuid"], None),
        ("0,GPU-", ["index"], "GPU-"),
    ],
)
def test_cvd_bare_uuid_prefix_is_invalid(raw, kinds, invalid):
    r = parse_cuda_visible_devices(raw)
    assert ([e["kind"] for e in r["entries"]], r["invalid"]) == (kinds, invalid)


def test_decode_cudnn_na_reasons_and_codes():
    na = decode_cudnn_version(None)
    assert (na.reason, na.code) == (
        "PyTorch has no cuDNN: CPU build, or cuDNN not loaded",
        "not_available",
    )
    given = NA("not readable here", "mig")
    assert decode_cudnn_version(given) is given  # an NA passes through unchanged
    for bad in ("garbage", 0, -5):
        na = decode_cudnn_version(bad)
        assert (na.reason, na.code) == (f"unreadable cuDNN version {bad!r}", "error")
    assert decode_cudnn_version(1) == "0.0.1"  # only 0 and below are unreadable


def test_parse_nvcc_snippet_is_80_characters():
    na = parse_nvcc_version("x" * 100)
    assert na.reason == f"unrecognised `nvcc -V` output: {'x' * 80!r}"
