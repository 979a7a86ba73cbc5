"""Issue 14: tests that fail on the planted bugs that survived (cuDNN 9.x boundary, CUDA_VISIBLE_DEVICES)."""

import pytest

from cudamagic.info import facts
from cudamagic.info.findings import findings
from cudamagic.info.versions import decode_cudnn_version, parse_cuda_visible_devices


@pytest.mark.parametrize("value, expected", [(90000, "9.0.0"), (8000, "8.0.0"), (99999, "9.99.99"), (89999, "89.9.99")])
def test_decode_cudnn_9x_boundary(value, expected):
    assert decode_cudnn_version(value) == expected


@pytest.mark.parametrize("raw, invalid, ignored", [
    ("-1,0", "-1", ["0"]), ("0,foo,1", "foo", ["1"]), ("0,foo,1,GPU-ab", "foo", ["1", "GPU-ab"]),
    ("0,1,bar", "bar", []), ("0,1", None, []),
])
def test_cvd_ignored_entries(raw, invalid, ignored):
    r = parse_cuda_visible_devices(raw)
    assert (r["invalid"], r["ignored"]) == (invalid, ignored)


@pytest.mark.parametrize("raw, blamed", [("2", "2"), ("0,2", "2"), ("1", None), ("0,1", None)])
def test_cvd_index_equal_to_gpu_count_is_flagged(fake_nvml, raw, blamed):
    fake_nvml("two_gpus_f03")
    f = facts.collect_facts(env={"CUDA_VISIBLE_DEVICES": raw, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    bad = [x for x in findings(f) if x.id == "cvd-unknown"]
    if blamed is None:
        assert bad == []
    else:
        assert len(bad) == 1 and bad[0].cause.startswith(f"{blamed} in CUDA_VISIBLE_DEVICES={raw!r}")
