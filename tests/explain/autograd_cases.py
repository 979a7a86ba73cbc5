"""Cells that make the autograd engine raise each of its errors for real on the CPU, as data.

The test of the autograd-engine family and ``scripts/explain_coverage.py`` both run them. ``(entry
id, cell source)``.
"""

from __future__ import annotations

_BAD_FN = """
class Bad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        return x * s[:, None]
    @staticmethod
    def backward(ctx, g):
        return {ret}
x = torch.randn(5, 3, requires_grad=True); s = torch.randn(5, requires_grad=True)
Bad.apply(x, s).sum().backward()
"""

CASES = (
    ("invalid-gradient", _BAD_FN.format(ret="g, g")),  # shape
    ("invalid-gradient", _BAD_FN.format(ret="g.to('meta'), g.sum(1)")),  # device
    ("invalid-gradient", _BAD_FN.format(ret="(g,)")),  # too few
    ("invalid-gradient", _BAD_FN.format(ret="g, g.sum(1), g")),  # too many
    ("invalid-gradient", _BAD_FN.format(ret="g.to(torch.complex64), g.sum(1)")),  # real/complex
    (
        "hook-changed-gradient",
        "x = torch.randn(5, 3, requires_grad=True)\ny = x * 2\n"
        "y.register_hook(lambda g: g.sum(0))\ny.sum().backward()",
    ),
    (
        "hook-changed-gradient",
        "x = torch.randn(5, 3, requires_grad=True)\ny = x * 2\n"
        "y.register_hook(lambda g: g.double())\ny.sum().backward()",
    ),
    (
        "view-inplace",
        "a = torch.randn(4, requires_grad=True).clone()\nparts = a.unbind(0)\nparts[0].mul_(2)",
    ),
    (
        "view-inplace",
        "a = torch.randn(4, requires_grad=True)\nwith torch.no_grad():\n    v = a[:2]\nv.mul_(2)",
    ),
    ("leaf-inplace", "w = torch.randn(4, requires_grad=True)\nw[0].mul_(2)"),
    ("leaf-inplace", "w = torch.randn(4, requires_grad=True)\nw.add_(1)"),
    (
        "modified-inplace",
        "a = torch.randn(3, requires_grad=True)\nb = a.sigmoid()\nb.mul_(2)\nb.sum().backward()",
    ),
    (
        "modified-inplace",
        "net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nout = net(torch.randn(4, "
        "3))\nout.sum().backward(retain_graph=True)\nopt.step()\n"
        "out.sum().backward()",
    ),
    (
        "backward-twice",
        "a = torch.randn(3, requires_grad=True)\ny = (a * a).sum()\ny.backward()\ny.backward()",
    ),
    ("no-grad", "a = torch.randn(3)\n(a * 2).sum().backward()"),
    (
        "no-grad",
        "a = torch.randn(3, requires_grad=True)\ng, = torch.autograd.grad((a ** 2).sum(), a)\n"
        "g.sum().backward()",
    ),
    ("grad-not-scalar", "a = torch.randn(3, requires_grad=True)\n(a * 2).backward()"),
    (
        "grad-output-shape",
        "a = torch.randn(3, requires_grad=True)\n(a * 2).backward(torch.ones(4))",
    ),
    (
        "unused-input",
        "a = torch.randn(3, requires_grad=True); b = torch.randn(3, requires_grad=True)\n"
        "torch.autograd.grad((a * 2).sum(), [a, b])",
    ),
    (
        "unused-input",
        "a = torch.randn(3, requires_grad=True); b = torch.randn(3)\n"
        "torch.autograd.grad((a * 2).sum(), [a, b])",
    ),
    (
        "once-differentiable",
        """
from torch.autograd.function import once_differentiable
class Once(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 2
    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g
a = torch.randn(3, requires_grad=True)
v = torch.ones(3, requires_grad=True)
g, = torch.autograd.grad(Once.apply(a), a, grad_outputs=v, create_graph=True)
g.sum().backward()
""",
    ),
    (
        "inference-tensor",
        "with torch.inference_mode():\n    a = torch.randn(3)\nw = torch.randn(3, "
        "requires_grad=True)\n"
        "(a * w).sum().backward()",
    ),
    (
        "inference-tensor",
        "with torch.inference_mode():\n    a = torch.randn(3)\na.mul_(torch.randn(3, "
        "requires_grad=True))",
    ),
    ("requires-grad-flag", "a = torch.randn(3, requires_grad=True)\n(a * 2).requires_grad_(False)"),
    ("requires-grad-flag", "torch.tensor([1, 2]).requires_grad_()"),
)
