"""Notebook-on-Windows errors in the explainer.

Spawned workers that cannot find code defined in the notebook, and GPU tensors held by a Dataset
that workers receive (error 801 on Windows).
"""

from __future__ import annotations

from .failing import SETUP, fail, notes

SQUARES = (
    "from torch.utils.data import DataLoader, Dataset\n"
    "class Squares(Dataset):\n"
    "    def __len__(self): return 4\n"
    "    def __getitem__(self, i): return torch.tensor([i * i])\n"
)


def test_spawned_worker_cannot_pickle_a_notebook_dataset_real(ip, monkeypatch):
    # real: spawn pickles the Dataset by module and name; a class defined in a cell is not found in
    # __main__. Other tests' shells can leave a __main__ without __spec__ (which spawn reads); a
    # kernel's has one.
    import sys

    monkeypatch.setattr(sys.modules["__main__"], "__spec__", None, raising=False)
    ip.run_cell(SETUP)
    ip.run_cell(
        SQUARES + "loader = DataLoader(Squares(), num_workers=1, multiprocessing_context='spawn', "
        "timeout=60)"
    )
    expl, result = fail(ip, "next(iter(loader))")
    # Where the shell's namespace is the real __main__ (as in a kernel) pickling works and the
    # worker fails to find the class ("exited unexpectedly"); otherwise pickling fails in this
    # process first.
    err = result.error_in_exec
    assert (type(err).__name__, "exited unexpectedly" in str(err)) in {
        ("PicklingError", False),
        ("RuntimeError", True),
    }, f"{type(err).__name__}: {err}"
    assert expl.entry.id == "spawn-main"
    assert expl.context.facts["name"] == "Squares" and expl.context.facts[
        "loaders_with_main_code"
    ] == ["loader"]
    text = notes(expl)
    assert "`loader` starts 1 worker(s) with spawn" in text and "dataset class `Squares`" in text
    assert "from mydata import Squares" in text
    assert "num_workers=0" in expl.to_text()


def test_worker_side_message_of_a_windows_kernel(ip):
    # Lib/pickle.py Unpickler.find_class, as a worker on Windows prints it (the notebook's class is
    # in __main__)
    ip.run_cell(SETUP)
    # Windows starts workers with spawn (its only method); the loader names it so the Linux test
    # kernel does too
    ip.run_cell(
        SQUARES + "loader = DataLoader(Squares(), num_workers=2, multiprocessing_context='spawn')"
    )
    expl, _ = fail(
        ip,
        "raise AttributeError(\"Can't get attribute 'Squares' on <module '__main__' (built-in)>\")",
    )
    assert expl.entry.id == "spawn-main" and expl.context.facts["name"] == "Squares"
    assert "`Squares` is defined in this notebook" in notes(expl)
    # torch/utils/data/dataloader.py: what the notebook itself sees
    expl, _ = fail(
        ip, "raise RuntimeError('DataLoader worker (pid(s) 10468, 10472) exited unexpectedly')"
    )
    assert expl.entry.id == "spawn-main" and expl.context.facts["loaders_with_main_code"] == [
        "loader"
    ]


def test_801_names_the_dataset_that_holds_gpu_tensors(ip):
    # torch/csrc/StorageSharing.cpp on Windows; the dataset's tensors are on a device (meta stands
    # in for cuda here)
    ip.run_cell(SETUP)
    ip.run_cell(
        "from torch.utils.data import DataLoader, Dataset, TensorDataset\n"
        "class Images(Dataset):\n"
        "    def __init__(self):\n"
        "        self.x = torch.zeros(8, 3, device='meta')\n"
        "    def __len__(self): return 8\n"
        "    def __getitem__(self, i): return self.x[i]\n"
        "train = DataLoader(Images(), num_workers=2)\n"
        "plain = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)"
    )
    expl, _ = fail(ip, "raise RuntimeError('CUDA error: operation not supported')")
    assert expl.entry.id == "cuda-801-workers"
    assert expl.context.facts["loaders_with_gpu_datasets"] == ["train"]
    assert "The dataset of `train` (Images) holds GPU tensors (`x` on meta)" in notes(expl)


def test_worker_side_message_when_main_is_the_kernel_launcher(ip):
    # a spawned worker of a Jupyter kernel re-imports ipykernel_launcher as __mp_main__
    # (Lib/multiprocessing/spawn.py)
    ip.run_cell(SETUP)
    expl, _ = fail(
        ip,
        "raise AttributeError(\"Can't get attribute 'collate' on <module '__mp_main__' from "
        "'C:\\\\\\\\Users\\\\\\\\student\\\\\\\\miniconda3\\\\\\\\Lib\\\\\\\\site-packages"
        "\\\\\\\\ipykernel_launcher.py'>\")",
    )
    assert expl.entry.id == "spawn-main" and expl.context.facts["name"] == "collate"


_DISTRIBUTED = ("nvidia-smi topo", "NCCL_DEBUG", "TORCH_DISTRIBUTED_DEBUG")


def test_801_localise_fits_dataloader_workers_on_one_gpu(ip):
    # a one-GPU Windows laptop; torch/csrc/generic/StorageSharing.cpp
    # (pytorch#36037 text)
    ip.run_cell(SETUP)
    ip.run_cell(
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.zeros(8, 2)), num_workers=2)"
    )
    expl, _ = fail(
        ip,
        "raise RuntimeError('cuda runtime error (801) : operation not supported at "
        "..\\\\torch/csrc/generic/StorageSharing.cpp:245')",
    )
    assert expl.entry.id == "cuda-801-workers"
    localise = expl.entry.localise
    assert not [w for w in _DISTRIBUTED if w in localise], localise
    assert "num_workers=0" in localise and ".cuda()" in localise and ".to('cuda')" in localise
    assert "Dataset" in localise and "training loop" in localise
    text, html = expl.to_text(), expl._repr_html_()
    assert not [w for w in _DISTRIBUTED if w in text or w in html]
    assert "distributed" not in " ".join(expl.context.notes)
    # the distributed advice stays with the distributed case: peer access between GPUs (CUDA runtime
    # 217)
    expl, _ = fail(
        ip,
        "raise RuntimeError('CUDA error: peer access is not supported between these two devices')",
    )
    assert expl.entry.id == "cuda-peer" and "NCCL_DEBUG=INFO" in expl.entry.localise


def test_801_in_a_distributed_kernel_adds_the_distributed_advice(ip, tmp_path):
    # a real (one-process, gloo) torch.distributed group: only then does the 801 box speak of NCCL
    import torch.distributed as dist

    ip.run_cell(SETUP)
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        expl, _ = fail(ip, "raise RuntimeError('CUDA error: operation not supported')")
    finally:
        dist.destroy_process_group()
    assert expl.entry.id == "cuda-801-workers"
    assert expl.context.facts["distributed_backend"] == "gloo"
    assert "NCCL_DEBUG=INFO" in notes(expl) and "world size 1" in notes(expl)
