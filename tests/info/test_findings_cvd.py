"""Tier 1.

The CUDA_VISIBLE_DEVICES and ordinal rules of %cudainfo, each branch with the whole finding the user
reads (severity, id, title, cause, fix), on hand-built facts (no NVML needed).
"""

from __future__ import annotations

from cudamagic.info.findings import Finding, _Basis, _cvd_rules, _ordinal_rules
from cudamagic.info.versions import parse_cuda_visible_devices

UUID0, UUID1 = (
    "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",
    "GPU-11112222-3333-4444-5555-666677778888",
)
MIG = "MIG-7d7f3a8e-1b2c-5d6e-8f90-a1b2c3d4e5f6"


def basis(raw, n_gpus=2, nvml_ok=True, mapping=None, gpus=None):
    gpus = (
        gpus
        if gpus is not None
        else [{"index": i, "uuid": [UUID0, UUID1][i % 2]} for i in range(n_gpus)]
    )
    facts = {"mapping": mapping or {"certain": True, "note": ""}}
    return _Basis(
        facts=facts,
        t={},
        drv={},
        tk={},
        gpus=gpus,
        cvd=parse_cuda_visible_devices(raw),
        nvml_ok=nvml_ok,
        n_gpus=len(gpus),
        driver_cuda=None,
        build=None,
        cpu_only=False,
    )


def unknown(named, raw, n, last):
    return Finding(
        "warning",
        "cvd-unknown",
        "CUDA_VISIBLE_DEVICES names GPUs that do not exist",
        f"{named} in CUDA_VISIBLE_DEVICES={raw!r} match no GPU NVML sees ({n} GPU(s)); CUDA "
        f"ignores that "
        "entry and every one after it.",
        f"use indices 0..{last} or UUIDs from `nvidia-smi -L`",
    )


def test_hides_every_gpu():
    assert list(_cvd_rules(basis("-1"))) == [
        Finding(
            "warning",
            "cvd-hides-all",
            "CUDA_VISIBLE_DEVICES hides every GPU",
            "CUDA_VISIBLE_DEVICES='-1' leaves no device visible to CUDA.",
            "unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then restart "
            "the kernel) or list "
            "the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0",
        )
    ]
    assert list(_cvd_rules(basis("", nvml_ok=False)))[0].id == "cvd-hides-all"


def test_unset_or_fine_says_nothing():
    assert list(_cvd_rules(basis(None))) == []
    assert list(_cvd_rules(basis("1,0"))) == []
    assert list(_cvd_rules(basis(UUID1[:12]))) == []  # a UUID prefix, as CUDA accepts
    assert list(_cvd_rules(basis(UUID0.upper()))) == []  # case does not matter
    assert list(_cvd_rules(basis(None, nvml_ok=False))) == []
    assert (
        list(_cvd_rules(basis("0,1", nvml_ok=False))) == []
    )  # without NVML the count is unknown: no claim


def test_index_equal_to_the_gpu_count_is_unknown():
    assert list(_cvd_rules(basis("0,2"))) == [unknown("2", "0,2", 2, 1)]
    assert list(_cvd_rules(basis("1", n_gpus=1))) == [unknown("1", "1", 1, 0)]


def test_unknown_uuid_and_mig_and_several():
    assert list(_cvd_rules(basis("GPU-deadbeef"))) == [
        unknown("GPU-deadbeef", "GPU-deadbeef", 2, 1)
    ]
    assert list(_cvd_rules(basis(MIG))) == [unknown(MIG, MIG, 2, 1)]
    gpus = [{"index": 0, "uuid": UUID0, "cuda_mig_uuid": MIG}]
    assert list(_cvd_rules(basis(MIG, gpus=gpus))) == []
    assert list(_cvd_rules(basis("3,5,0"))) == [unknown("3, 5", "3,5,0", 2, 1)]


def test_invalid_entry_with_and_without_nvml():
    assert list(_cvd_rules(basis("0,foo,1"))) == [unknown("foo", "0,foo,1", 2, 1)]
    assert list(_cvd_rules(basis("7,foo"))) == [unknown("7, foo", "7,foo", 2, 1)]
    assert list(_cvd_rules(basis("0,foo", nvml_ok=False))) == [
        Finding(
            "warning",
            "cvd-unknown",
            "CUDA_VISIBLE_DEVICES has an entry CUDA cannot parse",
            "'foo' in CUDA_VISIBLE_DEVICES='0,foo' is neither an index, a GPU- nor a MIG- UUID; "
            "CUDA ignores it and "
            "every entry after it.",
            "use indices or UUIDs from `nvidia-smi -L`, separated by commas",
        )
    ]


def test_no_gpus_fix_names_index_zero():
    assert list(_cvd_rules(basis("0", gpus=[]))) == [unknown("0", "0", 0, 0)]


def test_uncertain_order_with_several_gpus():
    m = {"certain": False, "note": "CUDA_DEVICE_ORDER is not PCI_BUS_ID"}
    assert list(_ordinal_rules(basis(None, mapping=m))) == [
        Finding(
            "warning",
            "index-order",
            "nvidia-smi indices and PyTorch ordinals may differ",
            "CUDA_DEVICE_ORDER is not PCI_BUS_ID.",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID before starting Python (or set it in os.environ "
            "before importing torch)",
        )
    ]
    assert (
        list(_ordinal_rules(basis(None, n_gpus=1, mapping=m))) == []
    )  # one GPU: nothing to mix up


def test_renumbered_gpus_are_listed():
    gpus = [
        {"index": 0, "cuda_ordinal": None},
        {"index": 1, "cuda_ordinal": 0},
        {"index": 2, "cuda_ordinal": 1},
    ]
    assert list(_ordinal_rules(basis(None, gpus=gpus))) == [
        Finding(
            "info",
            "index-map",
            "PyTorch numbers the GPUs differently from nvidia-smi",
            "nvidia-smi 1 = cuda:0, nvidia-smi 2 = cuda:1 (CUDA_VISIBLE_DEVICES renumbers the GPUs "
            "it shows from 0).",
            "",
        )
    ]
    same = [{"index": 0, "cuda_ordinal": 0}, {"index": 1, "cuda_ordinal": 1}]
    assert list(_ordinal_rules(basis(None, gpus=same))) == []


def test_finding_to_dict():
    f = Finding("info", "x-id", "Title", "Cause.", "fix it")
    assert f.to_dict() == {
        "severity": "info",
        "id": "x-id",
        "title": "Title",
        "cause": "Cause.",
        "fix": "fix it",
    }
    assert Finding("ok", "a", "b", "c").to_dict()["fix"] == ""


def test_a_repeated_entry_hides_every_gpu_and_is_named_as_the_cause():
    """PyTorch reads a repeated CUDA_VISIBLE_DEVICES entry as an empty set.

    The user is told so, and 'CUDA could not initialise' (a driver problem) is not blamed for it.
    """
    import dataclasses

    from cudamagic.info.findings import _cuda_unavailable_rules

    b = basis("0,0")
    assert list(_cvd_rules(b)) == [
        Finding(
            "warning",
            "cvd-hides-all",
            "CUDA_VISIBLE_DEVICES hides every GPU",
            "CUDA_VISIBLE_DEVICES='0,0' leaves no device visible to CUDA: it repeats 0, and "
            "PyTorch reads a repeated "
            "entry as no GPU at all.",
            "unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then restart "
            "the kernel) or list "
            "the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0",
        )
    ]
    cuda_build = dataclasses.replace(b, t={"cuda_available": False}, build="12.4")
    assert list(_cuda_unavailable_rules(cuda_build, [])) == []
    assert [
        f.id
        for f in list(
            _cuda_unavailable_rules(
                dataclasses.replace(cuda_build, cvd=parse_cuda_visible_devices("0,1")), []
            )
        )
    ] == ["cuda-unavailable"]
    assert (
        list(_cvd_rules(basis("-1")))[0].cause
        == "CUDA_VISIBLE_DEVICES='-1' leaves no device visible to CUDA."
    )
