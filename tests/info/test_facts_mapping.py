"""Tier 1.

Which CUDA ordinal (``cuda:N``) each NVML GPU gets (``map_cuda_ordinals``), from an initialised
CUDA's device properties, or from CUDA_DEVICE_ORDER and every form of CUDA_VISIBLE_DEVICES, as the
CUDA runtime does.
"""

import pytest

from cudamagic.core.na import NA, is_na
from cudamagic.info.facts import map_cuda_ordinals


def gpu(index, bus, name="NVIDIA H100 80GB HBM3", uuid=None, migs=()):
    return {
        "index": index,
        "name": name,
        "uuid": uuid or f"GPU-{index}{index}{index}{index}aaaa-bbbb",
        "pci.bus_id": bus,
        "mig_devices": list(migs),
    }


def ordinals(gpus):
    return [
        g["cuda_ordinal"] if not is_na(g["cuda_ordinal"]) else g["cuda_ordinal"].code for g in gpus
    ]


PCI = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


# ---- from an initialised CUDA: the device properties decide --------------------------------------


def test_initialised_cuda_maps_by_uuid_and_leaves_unmatched_gpus_not_visible():
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0"), gpu(2, "00000000:19:00.0")]
    torch_devices = [
        {"ordinal": 0, "uuid": gpus[2]["uuid"], "pci.bus_id": None},
        NA("properties of CUDA device 1 unreadable: RuntimeError: x", "error"),
        {"ordinal": 2, "uuid": gpus[0]["uuid"], "pci.bus_id": None},
    ]
    res = map_cuda_ordinals(gpus, {"CUDA_VISIBLE_DEVICES": "0"}, torch_devices)
    assert res == {"certain": True, "note": "mapped from the running CUDA context by UUID"}
    assert [g["cuda_ordinal"] for g in gpus] == [2, NA("not visible to CUDA", "hidden"), 0]
    assert [g["mapping_source"] for g in gpus] == [
        "UUID (from initialised CUDA)",
        "",
        "UUID (from initialised CUDA)",
    ]


def test_initialised_cuda_without_uuid_maps_by_pci_bus_id_in_any_case():
    gpus = [
        gpu(0, "00000000:3B:00.0"),
        gpu(1, "00000000:AF:00.0", uuid=NA("not supported", "not_supported")),
    ]
    torch_devices = [
        {"ordinal": 0, "uuid": None, "pci.bus_id": "00000000:af:00.0"},
        {"ordinal": 1, "uuid": "GPU-not-this-one", "pci.bus_id": "00000000:3b:00.0"},
    ]
    map_cuda_ordinals(gpus, {}, torch_devices)
    assert [g["cuda_ordinal"] for g in gpus] == [1, 0]
    assert {g["mapping_source"] for g in gpus} == {"PCI bus id (from initialised CUDA)"}


def test_initialised_cuda_ignores_a_bus_id_nvml_could_not_read():
    gpus = [gpu(0, NA("not supported", "not_supported"))]
    map_cuda_ordinals(gpus, {}, [{"ordinal": 0, "uuid": "GPU-other", "pci.bus_id": "N/A"}])
    assert gpus[0]["cuda_ordinal"] == NA("not visible to CUDA", "hidden")


def test_unreadable_torch_devices_fall_back_to_the_environment():
    gpus = [gpu(0, "00000000:17:00.0")]
    res = map_cuda_ordinals(gpus, PCI, [NA("properties of CUDA device 0 unreadable", "error")])
    assert res["note"].startswith("CUDA_DEVICE_ORDER=PCI_BUS_ID") and gpus[0]["cuda_ordinal"] == 0


# ---- from the environment: CUDA_DEVICE_ORDER -----------------------------------------------------


def test_pci_bus_order_sorts_by_bus_id_case_blind_and_puts_unknown_buses_last_in_nvml_order():
    gpus = [
        gpu(0, "00000000:0b:00.0"),
        gpu(1, NA("x", "error")),
        gpu(2, "00000000:0A:00.0"),
        gpu(10, NA("x", "error")),
        gpu(3, NA("x", "error")),
    ]
    res = map_cuda_ordinals(gpus, PCI)
    assert res == {
        "certain": True,
        "note": "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA enumerates in PCI bus order",
    }
    assert ordinals(gpus) == [1, 2, 0, 4, 3]
    assert {g["mapping_source"] for g in gpus} == {
        "UUID/PCI bus id via CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER"
    }


@pytest.mark.parametrize(
    "env", [{}, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, {"CUDA_DEVICE_ORDER": ""}]
)
def test_identical_gpus_are_certain_under_fastest_first(env):
    gpus = [gpu(0, "00000000:18:00.0"), gpu(1, "00000000:17:00.0")]
    res = map_cuda_ordinals(gpus, env)
    assert res == {
        "certain": True,
        "note": "identical GPUs: FASTEST_FIRST order equals PCI bus order",
    }
    assert ordinals(gpus) == [1, 0]


def test_one_gpu_is_certain_under_fastest_first():
    gpus = [gpu(0, "00000000:17:00.0")]
    assert map_cuda_ordinals(gpus, {})["certain"] and gpus[0]["cuda_ordinal"] == 0


@pytest.mark.parametrize("order", ["pci_bus_id", "Pci_Bus_Id"])
def test_device_order_value_is_read_case_blind(order):
    gpus = [gpu(0, "00000000:18:00.0", name="Tesla T4"), gpu(1, "00000000:17:00.0")]
    assert map_cuda_ordinals(gpus, {"CUDA_DEVICE_ORDER": order})["certain"]
    assert ordinals(gpus) == [1, 0]


def test_mixed_gpus_under_fastest_first_give_probable_ordinals_and_say_how_to_fix():
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0", name="Tesla T4")]
    res = map_cuda_ordinals(gpus, {"CUDA_VISIBLE_DEVICES": "1,0"})
    assert res == {
        "certain": False,
        "note": "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs differ: "
        "CUDA may put the fastest first, so ordinals can differ from nvidia-smi indices",
    }
    assert [g["cuda_ordinal"] for g in gpus] == [
        NA(
            f"probably {n}; uncertain until CUDA is initialised (set CUDA_DEVICE_ORDER=PCI_BUS_ID "
            f"to make it certain)",
            "uncertain",
        )
        for n in (1, 0)
    ]
    assert [g["mapping_source"] for g in gpus] == ["", ""]


# ---- from the environment: CUDA_VISIBLE_DEVICES --------------------------------------------------

HIDDEN = NA("hidden by CUDA_VISIBLE_DEVICES", "hidden")


@pytest.mark.parametrize(
    "cvd, expected",
    [
        ("1", [HIDDEN, 0, HIDDEN]),
        ("2,0", [1, HIDDEN, 0]),
        ("0,7,1", [0, HIDDEN, HIDDEN]),  # CUDA stops at the first entry it cannot resolve
        ("7,0", [HIDDEN, HIDDEN, HIDDEN]),
        ("gpu-1111", [HIDDEN, 0, HIDDEN]),  # UUID prefixes are matched case-blind
        ("GPU-2222AAAA,GPU-0", [1, HIDDEN, 0]),
        (
            "GPU-1111aaaa-bbbb-cccc,0",
            [HIDDEN, HIDDEN, HIDDEN],
        ),  # longer than the UUID: no GPU, CUDA stops
    ],
)
def test_visible_devices_index_and_uuid_forms(cvd, expected):
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0"), gpu(2, "00000000:19:00.0")]
    res = map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES=cvd))
    assert res["certain"]
    assert [g["cuda_ordinal"] for g in gpus] == expected


def test_an_ambiguous_uuid_prefix_resolves_to_no_gpu():
    gpus = [
        gpu(0, "00000000:17:00.0", uuid="GPU-abc1"),
        gpu(1, "00000000:18:00.0", uuid="GPU-abc2"),
        gpu(2, "00000000:19:00.0", uuid=NA("x", "error")),
    ]
    map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES="GPU-abc,1"))
    assert [g["cuda_ordinal"] for g in gpus] == [HIDDEN, HIDDEN, HIDDEN]
    map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES="GPU-ABC2,0"))
    assert [g["cuda_ordinal"] for g in gpus] == [1, 0, HIDDEN]


def test_a_mig_uuid_makes_its_parent_gpu_visible_and_is_remembered():
    migs = [{"uuid": "MIG-aaaa1111"}, {"uuid": "MIG-bbbb2222"}]
    gpus = [
        gpu(0, "00000000:17:00.0"),
        gpu(1, "00000000:18:00.0", migs=migs),
        gpu(2, "00000000:19:00.0", migs=[{"name": "no uuid"}]),
        dict(gpu(3, "00000000:1A:00.0"), mig_devices=NA("x")),
    ]
    map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES="mig-BBBB"))
    assert [g["cuda_ordinal"] for g in gpus] == [HIDDEN, 0, HIDDEN, HIDDEN]
    assert gpus[1]["cuda_mig_uuid"] == "mig-BBBB" and "cuda_mig_uuid" not in gpus[0]
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0", migs=migs)]
    map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES="MIG-cccc,1"))
    assert [g["cuda_ordinal"] for g in gpus] == [HIDDEN, HIDDEN]


@pytest.mark.parametrize("cvd", ["", "-1", "-1,0", "x"])
def test_visible_devices_that_hide_every_gpu(cvd):
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0", name="Tesla T4")]
    res = map_cuda_ordinals(gpus, {"CUDA_VISIBLE_DEVICES": cvd})
    assert res == {"certain": True, "note": "CUDA_VISIBLE_DEVICES hides every GPU"}
    assert [g["cuda_ordinal"] for g in gpus] == [
        NA("hidden: CUDA_VISIBLE_DEVICES hides every GPU", "hidden")
    ] * 2


def test_no_gpu_nothing_to_map():
    assert map_cuda_ordinals([], {"CUDA_VISIBLE_DEVICES": "0"}) == {
        "certain": True,
        "note": "no GPU visible to NVML: nothing to map",
    }


@pytest.mark.parametrize(
    "cvd, repeated",
    [("2,2,0", "2"), ("0,1,0", "0"), ("GPU-1111,GPU-2222,GPU-1111", "GPU-1111"), ("1,0,1,x", "1")],
)
def test_a_repeated_entry_hides_every_gpu(cvd, repeated):
    # torch.cuda._parse_visible_devices: "Repeated ordinal results in empty set" (so does its NVML
    # device count)
    gpus = [gpu(0, "00000000:17:00.0"), gpu(1, "00000000:18:00.0"), gpu(2, "00000000:19:00.0")]
    res = map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES=cvd))
    assert res == {
        "certain": True,
        "note": f"CUDA_VISIBLE_DEVICES repeats {repeated}: CUDA sees no GPU",
    }
    assert [g["cuda_ordinal"] for g in gpus] == [
        NA(f"hidden: CUDA_VISIBLE_DEVICES repeats {repeated}, so CUDA sees no GPU", "hidden")
    ] * 3


def test_two_mig_instances_of_one_gpu_are_not_a_repeat():
    migs = [{"uuid": "MIG-aaaa1111"}, {"uuid": "MIG-bbbb2222"}]
    gpus = [gpu(0, "00000000:17:00.0", migs=migs), gpu(1, "00000000:18:00.0")]
    map_cuda_ordinals(gpus, dict(PCI, CUDA_VISIBLE_DEVICES="MIG-aaaa,MIG-bbbb"))
    assert [g["cuda_ordinal"] for g in gpus] == [0, HIDDEN]
