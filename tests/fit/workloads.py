"""Six small reference training steps.

Model, optimizer, batch and the cell of one step, shared by the accuracy tests,
``benchmarks/bench_cudafit.py`` and ``scripts/gpu_check_cudafit.py``; each builds in well under a
second on a CPU. The optimizers use ``foreach=True``: the implementation PyTorch picks on a GPU,
which %%cudafit estimates (on this CPU PyTorch's default would be the per-parameter loop).
"""

from __future__ import annotations

STEP = "loss = loss_fn(model(x), y)\nloss.backward()\nopt.step()\nopt.zero_grad()\n"
BF16_STEP = (
    "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
    "    loss = loss_fn(model(x), y)\n"
    "loss.backward()\nopt.step()\nopt.zero_grad()\n"
)


def mlp(batch=64):
    """Three linear layers, SGD with momentum."""
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    x, y = torch.randn(batch, 256), torch.randint(0, 10, (batch,))
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.CrossEntropyLoss(), torch=torch)


def _block(cin, cout, stride):
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )

        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(out)) + self.down(x)).relu()

    return Block()


def resnet(batch=8):
    """A ResNet-18-like CNN (stem, four stages of basic blocks, BatchNorm), Adam."""
    import torch
    from torch import nn

    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        _block(16, 16, 1),
        _block(16, 32, 2),
        _block(32, 64, 2),
        _block(64, 128, 2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.CrossEntropyLoss(), torch=torch)


def unet(batch=4):
    """A two-level UNet (skip connections, transposed convolutions), AdamW, MSE."""
    import torch
    from torch import nn

    def conv(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.mid = conv(3, 8), conv(8, 16), conv(16, 32)
            self.up2, self.u2 = nn.ConvTranspose2d(32, 16, 2, 2), conv(32, 16)
            self.up1, self.u1 = nn.ConvTranspose2d(16, 8, 2, 2), conv(16, 8)
            self.out = nn.Conv2d(8, 3, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(nn.functional.max_pool2d(a, 2))
            m = self.mid(nn.functional.max_pool2d(b, 2))
            b = self.u2(torch.cat([self.up2(m), b], 1))
            return self.out(self.u1(torch.cat([self.up1(b), a], 1)))

    model = UNet()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(batch, 3, 32, 32), torch.randn(batch, 3, 32, 32)
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.MSELoss(), torch=torch)


def lstm(batch=8):
    """A two-layer LSTM over 20 steps with a linear head, Adam."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True)
            self.head = nn.Linear(64, 5)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(batch, 20, 32), torch.randint(0, 5, (batch,))
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.CrossEntropyLoss(), torch=torch)


def encoder(batch=8):
    """A 6-layer transformer encoder (d_model 64, 4 heads), mean-pooled head, AdamW."""
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True)
            self.enc = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
            self.head = nn.Linear(64, 3)

        def forward(self, x):
            return self.head(self.enc(x).mean(1))

    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x, y = torch.randn(batch, 32, 64), torch.randint(0, 3, (batch,))
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.CrossEntropyLoss(), torch=torch)


def gpt(batch=4):
    """A GPT-2-small-like decoder (4 blocks, d 64, causal attention, tied embeddings), AdamW."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, 2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, vocab=1000, d=64, ctx=64):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.Sequential(*[Block(d) for _ in range(4)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            h = self.ln(self.blocks(self.wte(idx) + self.wpe(pos)))
            return self.head(h).flatten(0, 1)

    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    x = torch.randint(0, 1000, (batch, 64))
    y = torch.randint(0, 1000, (batch * 64,))
    return dict(model=model, opt=opt, x=x, y=y, loss_fn=nn.CrossEntropyLoss(), torch=torch)


WORKLOADS = {
    "mlp": mlp,
    "resnet": resnet,
    "unet": unet,
    "lstm": lstm,
    "encoder": encoder,
    "gpt": gpt,
}
