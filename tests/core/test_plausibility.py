"""The one plausibility check every NVML number passes (cudamagic.core.nvml.check_value).

Each documented bound.
"""

import pytest

from cudamagic.core import nvml
from cudamagic.core.na import is_na

GIB = 1024**3


@pytest.mark.parametrize(
    "field, value, context, code, words",
    [
        ("utilization.gpu", 0xFFFFFFFF, {}, "not_available", "0xFFFFFFFF"),
        ("power.draw", 0xFFFFFFFF, {}, "not_available", "0xFFFFFFFF"),
        ("memory.used", 0xFFFFFFFFFFFFFFFF, {}, "not_available", "0xFFFFFFFFFFFFFFFF"),
        ("utilization.memory", 101, {}, "implausible", "101 %"),
        ("fan.speed", 250, {}, "implausible", "250 %"),
        ("temperature.gpu", 151, {}, "implausible", "151 C"),
        (
            "power.draw",
            3_700_000,
            {"power.limit": 450_000},
            "implausible",
            "twice the enforced limit",
        ),
        ("power.draw", 5_000_001, {}, "implausible", "5000 W"),
        ("power.limit", 6_000_000, {}, "implausible", "6000000 mW"),
        ("clocks.sm", 2700, {"clocks.max.sm": 2520}, "implausible", "maximum 2520 MHz"),
        ("clocks.mem", 20_001, {}, "implausible", "20000 MHz"),
        ("memory.used", 81 * GIB, {"memory.total": 80 * GIB}, "implausible", "more than the GPU's"),
        ("memory.total", 2**51, {}, "implausible", "1 PiB"),
        ("pstate", 32, {}, "not_available", "unknown"),
    ],
)
def test_values_that_cannot_be_true_become_na_with_what_nvml_returned(
    field, value, context, code, words
):
    got = nvml.check_value(field, value, context)
    assert is_na(got) and got.code == code and words in got.reason


@pytest.mark.parametrize(
    "field, value, context",
    [
        ("utilization.gpu", 100, {}),
        ("temperature.gpu", 95, {}),
        ("power.draw", 800_000, {"power.limit": 450_000}),
        (
            "power.draw",
            700_000,
            {"power.limit": 0xFFFFFFFF},
        ),  # an unreadable limit does not bound the draw
        ("clocks.sm", 2640, {"clocks.max.sm": 2520}),  # within 5 % of the maximum (boost rounding)
        ("memory.used", 80 * GIB, {"memory.total": 80 * GIB}),
        ("memory.free", 0xFFFFFFFF, {}),  # 4 GiB is a size
        ("pstate", 15, {}),
        ("ecc.errors.uncorrected.aggregate.total", 12, {}),
    ],
)
def test_real_readings_pass_unchanged(field, value, context):
    assert nvml.check_value(field, value, context) == value


def test_check_values_uses_the_other_readings_as_bounds():
    got = nvml.check_values(
        {
            "power.draw": 3_700_000,
            "power.limit": 450_000,
            "memory.total": 80 * GIB,
            "memory.used": 90 * GIB,
            "memory.reserved": GIB,
        }
    )
    assert got["power.limit"] == 450_000 and got["memory.reserved"] == GIB
    assert got["power.draw"].code == "implausible" and got["memory.used"].code == "implausible"


def test_process_rows():
    assert nvml.check_process(4242, GIB, 80 * GIB) == (True, GIB)
    assert nvml.check_process(0, GIB, 80 * GIB)[0] is False
    assert nvml.check_process(nvml.PID_MAX + 1, GIB, 80 * GIB)[0] is False
    assert nvml.check_process(4_194_304, GIB, 80 * GIB) == (True, GIB)  # Linux PID_MAX_LIMIT
    assert nvml.check_process(1, GIB, 80 * GIB) == (True, GIB)
    ok, used = nvml.check_process(4242, 90 * GIB, 80 * GIB)
    assert ok and used.code == "implausible" and "a process's used GPU memory" in used.reason
