"""Do no harm: the module-call recorder is invisible to torch.compile."""

from __future__ import annotations

import warnings

import pytest

from cudamagic.graph import model as M

from .common import magic

SETUP = """
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
cmodel = torch.compile(model, backend="aot_eager")
x = torch.randn(5, 8)
"""


def _dynamo_counts():
    from torch._dynamo.utils import counters

    return (
        sum(counters["graph_break"].values()),
        counters["stats"]["unique_graphs"],
        counters["stats"]["calls_captured"],
    )


def _no_hooks_left(ip):
    from torch.nn.modules import module as mod

    assert not mod._global_forward_hooks and not mod._global_forward_pre_hooks
    assert all(
        not m._forward_hooks and not m._forward_pre_hooks for m in ip.user_ns["model"].modules()
    )


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_compiled_model_drawn_without_breaks_recompiles_or_warnings(ip, warm):
    import torch._dynamo

    torch._dynamo.reset()
    ip.run_cell(SETUP)
    if warm:
        ip.run_cell("cmodel(x).logsumexp(-1).mean()")
    before = _dynamo_counts()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = magic(ip, "", "loss = cmodel(x).logsumexp(-1).mean()\nloss")
    assert [str(w.message) for w in caught] == []
    assert "CompiledFunctionBackward" in r.graph.labels(M.BACKWARD)
    after_magic = _dynamo_counts()
    assert after_magic[0] == 0  # no graph break, cold or warm
    # cold: exactly the one graph compiling it takes anyway; warm: nothing compiled again
    assert after_magic[1] == before[1] + (0 if warm else 1)
    _no_hooks_left(ip)
    ip.run_cell("out = cmodel(x).logsumexp(-1).mean()")
    assert _dynamo_counts()[:2] == after_magic[:2]  # runs the compiled graph, no recompile
    assert (
        type(ip.user_ns["out"].grad_fn.next_functions[0][0].next_functions[0][0]).__name__
        == "CompiledFunctionBackward"
    )


def test_compile_in_the_cell_and_compiled_functions_hook_nothing(ip):
    import torch._dynamo

    torch._dynamo.reset()
    ip.run_cell("import torch, torch.nn as nn\nlin = nn.Linear(4, 4)\nx = torch.randn(2, 4)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = magic(ip, "", "f = torch.compile(lin, backend='aot_eager')\nf(x).sum()")
    assert caught == []
    assert _dynamo_counts()[0] == 0
    assert any("not grouped" in n for n in r.graph.notes)


def test_plain_models_still_grouped_next_to_a_compiled_one(ip):
    ip.run_cell(SETUP + "other = nn.Sequential(nn.Linear(8, 8), nn.ReLU())")
    r = magic(ip, "--group", "other(x).sum()")
    assert [c.path for c in r.graph.calls][:1] == ["other"]
    _no_hooks_left(ip)
    assert not any(m._forward_hooks for m in ip.user_ns["other"].modules())
