"""%%cudafit leaves the user's objects exactly as they were, and creates no CUDA context.

A ResNet-like CNN (BatchNorm) with Adam after one real step (grads and optimizer state exist): after
%%cudafit of a full training step, every parameter, gradient, optimizer state tensor, BatchNorm
running statistic and ``num_batches_tracked``, the batch tensors, the torch RNG state and the names
in the namespace are unchanged, and ``torch.cuda.is_initialized()`` is still False.
"""

from __future__ import annotations

import pytest

from .workloads import STEP, resnet

STEP_VIA_FUNCTION = (
    "def train_step(x, y):\n"
    "    loss = loss_fn(model(x), y)\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "    opt.zero_grad(set_to_none=False)\n"
    "    return loss\n"
)


def _snapshot(ns):
    import torch

    model, opt = ns["model"], ns["opt"]
    state = {
        (i, k): v.clone()
        for i, p in enumerate(model.parameters())
        for k, v in opt.state[p].items()
        if isinstance(v, torch.Tensor)
    }
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": [p.grad.clone() for p in model.parameters()],
        "buffers": {n: b.clone() for n, b in model.named_buffers()},
        "state": state,
        "x": ns["x"].clone(),
        "y": ns["y"].clone(),
        "rng": torch.get_rng_state(),
        "names": set(ns),
        "ids": (id(model), id(opt), id(ns["x"])),
    }


def _same(a, b):
    import torch

    assert a["names"] == b["names"]
    assert a["ids"] == b["ids"]
    for key in ("params", "grads"):
        assert all(torch.equal(p, q) for p, q in zip(a[key], b[key], strict=True)), key
    assert a["buffers"].keys() == b["buffers"].keys()
    for name in a["buffers"]:
        assert torch.equal(a["buffers"][name], b["buffers"][name]), name
    assert a["state"].keys() == b["state"].keys()
    assert all(torch.equal(a["state"][k], b["state"][k]) for k in a["state"])
    assert torch.equal(a["x"], b["x"]) and torch.equal(a["y"], b["y"])
    assert torch.equal(a["rng"], b["rng"])


@pytest.mark.parametrize(
    "cell",
    [
        STEP,
        "loss = train_step(x, y)\n",  # through a notebook function reading the globals
        "model.train()\nnoise = torch.randn(8, 3, 32, 32)\nloss = loss_fn(model(x + noise), y)\n"
        "loss.backward()\nopt.step()\n",  # draws random numbers
    ],
    ids=["step", "function", "random"],
)
def test_objects_rng_and_namespace_unchanged(ip, cell, cuda_calls):
    import torch

    ns = resnet()
    exec(STEP, ns)  # one real step: grads (zeroed to None by the step), Adam state, BN stats
    exec("loss = loss_fn(model(x), y)\nloss.backward()\n", ns)  # grads present now
    ip.user_ns.update(ns)
    ip.run_cell(STEP_VIA_FUNCTION)
    before = _snapshot(ip.user_ns)
    result = ip.run_cell_magic("cudafit", "--device-memory 1GiB", cell)
    assert result.stopped is None and result.peak_reserved_bytes > 0
    _same(before, _snapshot(ip.user_ns))
    assert not torch.cuda.is_initialized()
    assert cuda_calls == []


def test_cuda_devices_in_the_cell_map_to_fake_cpu_tensors(ip, cuda_calls):
    """`.cuda()`, `.to("cuda")` and `device="cuda"` run on this CPU-only build.

    A fake cuda tensor would abort the process here; the estimate says they were mapped.
    """
    import torch

    ip.user_ns.update(resnet())
    cell = (
        "model.cuda()\nxb = x.to('cuda')\n"
        "extra = torch.ones(8, 10, device='cuda', requires_grad=True)\n"
        "loss = loss_fn(model(xb) + extra, y.cuda())\nloss.backward()\n"
        "torch.cuda.synchronize()\ntorch.cuda.empty_cache()\n"
    )
    result = ip.run_cell_magic("cudafit", "--gpu T4", cell)
    assert result.stopped is None and result.fits is True
    assert any("cuda devices were mapped" in n for n in result.notes)
    assert ip.user_ns["model"][0].weight.device.type == "cpu"
    assert "xb" not in ip.user_ns and "extra" not in ip.user_ns
    assert not torch.cuda.is_initialized()
    assert cuda_calls == []


def test_containers_scaler_and_notebook_objects_get_no_fakes(ip):
    """What the cell puts into a list, a dict, a GradScaler or a notebook object stays in copies.

    Without copies, fake tensors landed in the user's objects and the next real step failed.
    """
    import torch

    ip.user_ns.update(resnet())
    ip.run_cell(
        "losses, metrics = [], {}\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "class Meter:\n"
        "    def __init__(self):\n"
        "        self.total = None\n"
        "    def update(self, v):\n"
        "        self.total = v\n"
        "meter = Meter()\n"
    )
    cell = (
        "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "    loss = loss_fn(model(x), y)\n"
        "losses.append(loss.detach())\nmetrics['loss'] = loss.detach()\n"
        "meter.update(loss.detach())\n"
        "scaler.scale(loss).backward()\n"
    )
    result = ip.run_cell_magic("cudafit", "--gpu T4", cell)
    assert result.stopped is None
    ns = ip.user_ns
    assert ns["losses"] == [] and ns["metrics"] == {} and ns["meter"].total is None
    assert ns["scaler"]._scale is None
    assert ip.run_cell(cell).success  # the real step still runs
    assert not isinstance(ns["losses"][0], torch._subclasses.fake_tensor.FakeTensor)


def test_a_grad_scaler_step_is_followed(ip):
    """The AMP recipe's ``scaler.step(opt)`` reads ``found_inf``; the fake run steps instead.

    Without that, an enabled GradScaler (any GradScaler on a GPU) stopped the estimate there.
    """
    ip.user_ns.update(resnet())
    ip.run_cell("scaler = torch.amp.GradScaler('cpu')\n")
    cell = (
        "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
        "    loss = loss_fn(model(x), y)\n"
        "scaler.scale(loss).backward()\nscaler.step(opt)\nscaler.update()\n"
    )
    result = ip.run_cell_magic("cudafit", "--gpu T4", cell)
    assert result.stopped is None
    assert dict(result.categories).get("optimizer state", 0) > 0  # Adam's state was made
