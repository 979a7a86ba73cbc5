"""Issue 12, do no harm.

``%%cudamem`` and ``%cudamem on`` never force a synchronisation, never create a CUDA context and
reset the peak counters only with ``--reset-peak`` (the harmful ``torch.cuda`` calls are recorded,
in a real InteractiveShell, with CUDA not initialised and with CUDA looking initialised).
"""

from __future__ import annotations

import torch


def test_cudamem_makes_no_harmful_cuda_call_without_cuda(ip, recorder):
    ip.run_cell_magic("cudamem", "", "import torch\nx = torch.ones(1000)")
    ip.run_line_magic("cudamem", "on")
    ip.run_cell("y = torch.ones(100)")
    ip.run_line_magic("cudamem", "off")
    ip.run_line_magic("cudamem", "history")
    assert recorder == []
    assert not torch.cuda.is_initialized()


def test_cudamem_resets_counters_only_when_asked(ip, recorder, cuda_initialised):
    report = ip.run_cell_magic("cudamem", "", "import torch\nx = torch.ones(1000)")
    assert report is not None
    ip.run_line_magic("cudamem", "on")
    ip.run_cell("y = torch.ones(100)")
    ip.run_line_magic("cudamem", "off")
    assert recorder == []  # measured without a reset, a sync or a context
    assert ("memory_stats_as_nested_dict", (0,)) in cuda_initialised
    ip.run_cell_magic("cudamem", "--reset-peak", "z = torch.ones(10)")
    assert [name for name, *_ in recorder] == [
        "reset_peak_memory_stats"
    ]  # asked for: exactly that, once
    assert recorder[0][1] == (0,)
