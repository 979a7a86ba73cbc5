"""Seeded slow cells, one per cause of a slow training loop, each with the fix the verdict names.

Used by tests/prof/test_verdict.py (CPU), benchmarks/bench_verdict.py (the speed-up of each fix)
and scripts/gpu_check_torchprof.py (the same cells on CUDA). Every cell is a notebook cell's
source, run in a namespace prepared by its ``setup`` (``DEVICE`` is set there first). Each runs
well under a second on one CPU core.

- ``data``: a Dataset whose ``__getitem__`` sleeps 3 ms (a decode), loaded in the main process.
  Fix: ``num_workers=2, persistent_workers=True``.
- ``python``: a per-element Python list comprehension builds every batch. Fix: one tensor
  expression.
- ``tiny_ops``: a Python loop over the rows of a tensor, three tiny operators per row. Fix: the
  same on the whole tensor.
- ``optimizer``: 400 small parameters and ``SGD(momentum, nesterov, weight_decay,
  foreach=False)``. Fix (on a CPU): one parameter of shape (400, 4) and ``foreach=True``.
- ``copies``: the whole float64 data set is cloned and converted to float32 in every step. Fix:
  convert once, before the loop.
- ``healthy``: a compute-bound MLP step (large matmuls): no finding expected.
"""

from __future__ import annotations

COMMON = """
import time
import torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)  # one core: the shared test machine gives steadier times
"""

CELLS = {
    "data": {
        "setup": """
class SlowSet(torch.utils.data.Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        time.sleep(0.003)  # decoding an image
        return torch.randn(32), i % 2
model = nn.Linear(32, 2).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(SlowSet(), batch_size=8{loader_args})
""",
        "slow": {"loader_args": ""},
        "fixed": {"loader_args": ", num_workers=2, persistent_workers=True"},
        "cell": """
for xb, yb in loader:
    xb, yb = xb.to(DEVICE), yb.to(DEVICE)
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    },
    "python": {
        "setup": """
raw = torch.rand(1024, 16)
rows = raw.tolist()
model = nn.Linear(16, 1).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
""",
        "slow": {
            "batch": "torch.tensor([[v * 0.5 + 1.0 for v in r] for r in rows], device=DEVICE)"
        },
        "fixed": {"batch": "(raw * 0.5 + 1.0).to(DEVICE)"},
        "cell": """
for step in range(6):
    xb = {batch}
    loss = model(xb).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    },
    "tiny_ops": {
        "setup": """
scores = torch.randn(400, 8, device=DEVICE)
""",
        "slow": {
            "body": "totals = [row.relu().mul(2.0).sum() for row in scores]\n"
            "    total = torch.stack(totals).sum()"
        },
        "fixed": {"body": "total = scores.relu().mul(2.0).sum(dim=1).sum()"},
        "cell": """
for step in range(2):
    {body}
""",
    },
    "optimizer": {
        "setup": """
{params}
opt = torch.optim.SGD(
    params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4, foreach={foreach}
)
""",
        "slow": {
            "params": "params = [nn.Parameter(torch.randn(4, device=DEVICE)) for _ in range(400)]",
            "foreach": "False",
        },
        "fixed": {
            "params": "params = [nn.Parameter(torch.randn(400, 4, device=DEVICE))]",
            "foreach": "True",
        },
        "cell": """
for step in range(3):
    loss = torch.stack(params).square().sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    },
    "copies": {
        "setup": """
data64 = torch.randn(4096, 512, dtype=torch.float64)
{prepare}
model = nn.Linear(512, 4).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
""",
        "slow": {"prepare": "", "batch": "data64.clone().float().to(DEVICE)"},
        "fixed": {"prepare": "data32 = data64.float().to(DEVICE)", "batch": "data32"},
        "cell": """
for step in range(4):
    xb = {batch}
    loss = model(xb).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    },
    "healthy": {
        "setup": """
model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512)).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(512, 512, device=DEVICE)
""",
        "slow": {},
        "fixed": {},
        "cell": """
for step in range(3):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
""",
    },
}

#: the seeded causes (every cell but ``healthy``).
CAUSES = tuple(k for k in CELLS if k != "healthy")


def sources(name: str, fixed: bool = False, device: str = "cpu") -> tuple[str, str]:
    """(setup source, cell source) of seeded cell ``name``, slow or with its fix applied."""
    spec = CELLS[name]
    fill = spec["fixed" if fixed else "slow"]
    setup = f"DEVICE = {device!r}\n" + COMMON + spec["setup"].format(**fill)
    return setup, spec["cell"].format(**fill)
