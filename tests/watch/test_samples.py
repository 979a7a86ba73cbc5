"""Tier 1 for %gpuwatch samples: the flat ``watch.history`` records. No IPython here."""

import math

import pytest

from cudamagic.watch.samples import GPU_FIELDS, sample_rows
from tests.watch.fakes import live


SCALARS = (int, float, str, bool)


@pytest.mark.parametrize("scenario", ["two_gpus_f03", "mig", "container_f04", "no_driver"])
def test_history_rows_are_flat_scalars_with_numeric_columns(fake_nvml, scenario):
    """watch.history must suit pandas.DataFrame: flat dicts of plain scalars, numbers stay numbers
    (an NA object in a numeric column made the column object-typed: .mean() raised TypeError)."""
    fake_nvml(scenario)
    rows = sample_rows(live().read(1, 1000.0))
    assert rows and len({tuple(r) for r in rows}) == 1  # same columns in every row
    numeric = set(GPU_FIELDS) | {"host.cpu.utilization", "host.memory.used", "torch.allocated",
                                           "torch.reserved", "torch.peak", "torch.gap", "index"}
    for r in rows:
        assert all(type(v) in SCALARS for v in r.values()), {k: v for k, v in r.items() if type(v) not in SCALARS}
        for key in numeric & set(r):
            assert isinstance(r[key], (int, float)) and not isinstance(r[key], bool), (key, r[key])
        # every count, size and percentage is a real non-negative number (the gap may be negative: NVML < reserved)
        bad = {k: r[k] for k in numeric & set(r) - {"torch.gap"} if not (math.isnan(r[k]) or r[k] >= 0)}
        assert bad == {}, bad
        if any(isinstance(v, float) and math.isnan(v) for v in r.values()):
            assert r["na_reasons"]
    if scenario == "no_driver":  # the row says why there is no GPU (it said "no GPU selected")
        assert "not found" in rows[0]["na_reasons"] and "no GPU selected" not in rows[0]["na_reasons"]
        assert math.isnan(rows[0]["index"])
    if scenario == "mig":
        assert math.isnan(rows[0]["utilization.gpu"]) and "MIG" in rows[0]["na_reasons"]
