"""``--verify``'s bookkeeping, on this CPU.

A real training step inside ``restored`` leaves every parameter, grad, buffer, optimizer state and
RNG state as it was; inputs grow to a batch. The GPU measurement itself is checked by
scripts/gpu_check_cudafit.py (no GPU here).
"""

from __future__ import annotations

from .test_do_no_harm import _same, _snapshot
from .workloads import STEP, resnet


def test_a_real_step_inside_restored_is_undone():
    import torch

    from cudamagic.fit.verify import restored

    ns = resnet()
    exec(STEP, ns)
    exec("loss = loss_fn(model(x), y)\nloss.backward()\n", ns)  # grads present, state present
    before = _snapshot(ns)
    state_ids = {id(v) for s in ns["opt"].state.values() for v in s.values()}
    with restored([ns["model"], ns["opt"], ns["x"], ns["y"]]):
        exec(STEP + "noise = torch.randn(3)\n", ns)  # changes weights, stats, state, grads, RNG
        changed = not torch.equal(ns["model"][0].weight, before["params"][0])
    assert changed  # the step really ran
    del ns["noise"]
    _same(before, _snapshot(ns))
    assert ns["model"][0].weight.grad is not None  # grads put back, not dropped
    assert state_ids  # the optimizer had state to restore


def test_restored_puts_back_after_an_error_and_grads_that_were_none():
    import pytest
    import torch

    from cudamagic.fit.verify import restored

    model = torch.nn.Linear(3, 2)
    w = model.weight.detach().clone()
    with pytest.raises(RuntimeError, match="boom"), restored([model]):
        model(torch.ones(1, 3)).sum().backward()
        with torch.no_grad():
            model.weight.add_(1)
        raise RuntimeError("boom")
    assert torch.equal(model.weight, w) and model.weight.grad is None


def test_grown_repeats_rows_to_the_batch():
    import torch

    from cudamagic.fit.verify import grown

    x = torch.arange(6).reshape(3, 2)
    g = grown(x, 7)
    assert g.shape == (7, 2) and torch.equal(g[3:6], x) and torch.equal(g[6], x[0])
