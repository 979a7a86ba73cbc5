"""Tier 1 tests of cudamagic.mem.measure: which In[n] a running cell is, on IPython 8 and 9."""

from __future__ import annotations

from cudamagic.mem import measure


class _Result:
    def __init__(self, n):
        self.execution_count = n


class _Hook:
    def __init__(self, n):
        self.exec_result = _Result(n) if n is not None else None


class _Shell:
    def __init__(self, counter, running):
        self.execution_count = counter
        self.displayhook = _Hook(running)


def test_running_cell_number_on_ipython_8_and_9():
    assert measure.running_cell_number(_Shell(8, 7)) == 7  # IPython 9: counter already incremented
    assert measure.running_cell_number(_Shell(7, 7)) == 7  # IPython 8: incremented after the cell
    assert measure.running_cell_number(_Shell(8, None)) == 7  # no running stored cell
