"""The autograd engine's own errors, raised for real on the CPU in a real InteractiveShell.

Each with context from the live objects; two field cases: the invalid gradient of a custom Function
and a GAN's ``optimizer.step()`` between a forward and a second backward.
"""

from __future__ import annotations

from .autograd_cases import CASES
from .failing import fail, notes


def test_every_engine_error_gets_its_box(ip):
    wrong = []
    for entry_id, code in CASES:
        ip.run_cell("import torch, torch.nn as nn")
        expl, result = fail(ip, code)
        got = expl.entry.id if expl is not None else None
        if got != entry_id or expl.entry.family != "autograd-engine":
            wrong.append((entry_id, got, str(result.error_in_exec)[:120]))
    assert wrong == []


INVALID_GRADIENT_CELL = """
class ScaleRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scales):
        ctx.save_for_backward(x, scales)
        return x * scales[:, None]
    @staticmethod
    def backward(ctx, g):
        x, scales = ctx.saved_tensors
        return g * scales[:, None], (g * x)          # bug: grad not summed to scales' shape
x = torch.randn(5, 3, requires_grad=True)
s = torch.randn(5, requires_grad=True)
ScaleRows.apply(x, s).sum().backward()
"""


def test_invalid_gradient_names_function_index_input_and_reduction(ip):
    expl, result = fail(ip, INVALID_GRADIENT_CELL)
    assert "ScaleRowsBackward returned an invalid gradient at index 1" in str(result.error_in_exec)
    assert expl.entry.id == "invalid-gradient"
    f = expl.context.facts
    assert f["function"] == "ScaleRows" and f["function_found"] is True
    assert f["index"] == 1 and f["argument"] == "s"
    assert f["got"] == (5, 3) and f["expected"] == (5,) and f["sum_dims"] == (1,)
    assert "`.sum(dim=1)`" in expl.context.fix and "`ScaleRows.backward`" in expl.context.fix
    assert "`s` in `ScaleRows.apply(x, s)`" in notes(expl)
    # the fix it proposes really works
    fixed = INVALID_GRADIENT_CELL.replace("(g * x)          #", "(g * x).sum(dim=1)  #")
    assert ip.run_cell(fixed).error_in_exec is None


def test_invalid_gradient_count_and_device(ip):
    ip.run_cell("import torch")
    from .autograd_cases import _BAD_FN

    expl, _ = fail(ip, _BAD_FN.format(ret="(g,)"))
    assert (expl.context.facts["n_expected"], expl.context.facts["n_got"]) == (2, 1)
    assert "return 2 values" in expl.context.fix
    expl, _ = fail(ip, _BAD_FN.format(ret="g.to('meta'), g.sum(1)"))
    assert (expl.context.facts["expected_device"], expl.context.facts["got_device"]) == (
        "cpu",
        "meta",
    )


GAN_STEP_CELL = """
netG = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
real, z = torch.randn(4, 8), torch.randn(4, 8)
fake = netG(z)
out_fake = netD(fake)                      # forward once, reused for both losses
errD = out_fake.mean() - netD(real).mean()
optD.zero_grad(); errD.backward(retain_graph=True)
optD.step()                                # updates netD's weights in place
errG = -out_fake.mean()
optG.zero_grad(); errG.backward()          # backward goes through netD's (now modified) weights
"""


def test_gan_names_the_parameter_and_the_optimizer_step_not_clone(ip):
    ip.run_cell("import torch, torch.nn as nn\ntorch.manual_seed(0)")
    expl, result = fail(ip, GAN_STEP_CELL)
    assert "is at version 2; expected version 1" in str(result.error_in_exec)
    assert expl.entry.id == "modified-inplace"
    f = expl.context.facts
    assert f["parameter"] == "netD.2.weight" and f["tensor"] == "netD.2.weight"
    assert f["candidates"] == ["netD.2.weight"]  # the only [1, 16] tensor at version 2
    assert f["transposed"] is True and f["shape"] == (16, 1)
    assert f["optimizer"] == "optD" and f["step_called"] is True
    assert (f["version"], f["expected"]) == (2, 1)
    assert "`optD.step()` (line 10 of the cell)" in notes(expl)
    fix = expl.context.fix
    assert (
        "`errG.backward()` before `optD.step()`" in fix and "`out_fake = netD(fake)` again" in fix
    )
    assert "fake.detach()" in fix
    assert ".clone()" not in expl.to_text()
    # the fix it proposes really works: a new forward after the step
    fixed = GAN_STEP_CELL.replace(
        "errG = -out_fake.mean()", "out_fake = netD(fake)\nerrG = -out_fake.mean()"
    )
    assert ip.run_cell(fixed).error_in_exec is None


def test_version_counter_in_place_op_in_the_cell(ip):
    ip.run_cell("import torch")
    expl, _ = fail(
        ip, "a = torch.randn(3, requires_grad=True)\nb = a.sigmoid()\nb.mul_(2)\nb.sum().backward()"
    )
    f = expl.context.facts
    assert f["tensor"] == "b" and f["parameter"] is None and f["step_called"] is False
    assert f["inplace_ops"] == ["b.mul_(...)"] or f["inplace_ops"][0].startswith("b.mul_")
    assert "out of place" in expl.context.fix


def test_version_counter_of_a_parameter_stepped_in_an_earlier_cell(ip):
    ip.run_cell(
        "import torch, torch.nn as nn\nnet = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nout = net(torch.randn(4, "
        "3))\nout.sum().backward(retain_graph=True)\nopt.step()"
    )
    expl, _ = fail(ip, "out.sum().backward()")
    f = expl.context.facts
    assert (
        f["parameter"] == "net.1.weight" and f["optimizer"] == "opt" and f["step_called"] is False
    )
    assert "an earlier `opt.step()`" in notes(expl)


def test_hook_changed_names_hook_and_tensor(ip):
    ip.run_cell("import torch")
    expl, _ = fail(
        ip,
        "x = torch.randn(5, 3, requires_grad=True)\ny = x * 2\n"
        "y.register_hook(lambda g: g.sum(0))\ny.sum().backward()",
    )
    assert expl.entry.id == "hook-changed-gradient"
    assert expl.context.facts["hook"] == "<lambda>" and expl.context.facts["changed"] == "size"
    assert expl.context.facts["tensors"] == ["y"]


def test_double_backward_without_create_graph_says_so(ip):
    ip.run_cell("import torch")
    expl, _ = fail(
        ip,
        "a = torch.randn(3, requires_grad=True)\ng, = torch.autograd.grad((a ** 2).sum(), a)\n"
        "g.sum().backward()",
    )
    assert expl.entry.id == "no-grad"
    assert expl.context.facts["double_backward"] is True and expl.context.facts["tensor"] == "g"
    assert "create_graph=True" in expl.context.fix
    fixed = "g, = torch.autograd.grad((a ** 2).sum(), a, create_graph=True)\ng.sum().backward()"
    assert ip.run_cell(fixed).error_in_exec is None
