"""%%cuda --torch on this CPU build of PyTorch.

%%cuda --torch on this CPU build of PyTorch: C++ functions built once with load_inline, cached,
callable; a stale build lock is reported within 2 s; missing ninja and a CPU-only PyTorch are
one-line messages.
"""

from __future__ import annotations

import os
import re
import time

import pytest
import torch
from IPython.core.error import UsageError

from .conftest import cuda_magics, wait_until

ADD_ONE = (
    "#include <torch/extension.h>\n"
    "torch::Tensor add_one(torch::Tensor x) {\n"
    "  return x + 1;\n"
    "}\n"
    "torch::Tensor scale(torch::Tensor x, double k) { return x * k; }\n"
)


@pytest.fixture(scope="module")
def torch_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("torch-cache"))


@pytest.fixture
def tip(ip, torch_cache):
    ip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {torch_cache!r}")
    yield ip
    ip.run_line_magic("config", "CudaMagics.cuda_cache_dir = ''")


def test_failed_build_then_fixed_cell_builds_once_and_is_cached(tip):
    from cudamagic.cuda.errors import CudaCompileError

    broken = ADD_ONE.replace("x + 1", "x + one")
    result = tip.run_cell("%%cuda --torch add_one,scale\n" + broken)
    exc = result.error_in_exec
    assert isinstance(exc, CudaCompileError), exc
    assert exc.diagnostics[0].cell_line == 4 and "one" in exc.diagnostics[0].message
    assert "cell line 4" in str(exc) and "x + one" in str(exc)

    built = tip.run_cell(
        "%%cuda --torch add_one,scale\n" + ADD_ONE
    )  # the fix is built (no stale failure)
    assert built.success, built.error_in_exec
    assert built.result.cached is False and cuda_magics().last.cached is False
    assert tip.run_cell(
        "import torch\nout = add_one(torch.arange(3)); doubled = scale(torch.ones(2), 2.5)"
    ).success
    assert tip.user_ns["out"].tolist() == [1, 2, 3]
    assert tip.user_ns["doubled"].tolist() == [2.5, 2.5]

    start = time.monotonic()
    again = tip.run_cell("%%cuda --torch add_one,scale\n" + ADD_ONE)
    assert again.success and again.result.cached is True
    assert time.monotonic() - start < 5  # loaded from the cache, no build
    cache = cuda_magics().settings.cuda_cache_dir
    tip.run_line_magic(
        "unload_ext", "cudamagic"
    )  # a fresh load (as in a new kernel) finds the cache too
    tip.run_line_magic("load_ext", "cudamagic")
    tip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {cache!r}")
    reloaded = tip.run_cell("%%cuda --torch add_one,scale\n" + ADD_ONE)
    assert reloaded.success and reloaded.result.cached is True
    assert "loaded from the cache" in repr(reloaded.result)


def test_stale_lock_is_reported_within_two_seconds(tip):
    from cudamagic.cuda import cache
    from cudamagic.cuda.torchext import torch_key

    source = ADD_ONE.replace("x + 1", "x + 2")
    ws = cuda_magics()._workspace()
    folder = cache.entry(ws.root, "torch-build", torch_key(source, ("add_one",), ws, (), None))
    os.makedirs(folder, exist_ok=True)
    lock = os.path.join(folder, "lock")
    open(lock, "w").close()
    with open(os.path.join(folder, "cudamagic-owner"), "w") as f:
        f.write("999999")  # a builder that no longer exists
    start = time.monotonic()
    with pytest.raises(
        UsageError, match=r"build lock was left by a build that was killed: .*lock"
    ) as info:
        tip.run_cell_magic("cuda", "--torch add_one", source)
    assert time.monotonic() - start < 2
    assert lock in str(info.value)
    os.remove(lock)


def test_missing_ninja_is_one_line(tip, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        UsageError, match=r"with ninja, which is not on PATH; run `%pip install ninja`"
    ):
        tip.run_cell_magic("cuda", "--torch add_one", ADD_ONE)


def test_kernel_cell_on_cpu_pytorch_says_what_to_install(tip):
    if torch.version.cuda is not None:
        pytest.skip("this PyTorch has CUDA")
    cell = (
        "#include <torch/extension.h>\n__global__ void k(float *a) { a[0] = 1; }\n"
        "torch::Tensor run(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }\n"
    )
    with pytest.raises(UsageError, match=r"CPU-only build.*--index-url") as info:
        tip.run_cell_magic("cuda", "--torch run", cell)
    # an index with wheels of this release (never cu121 or cu128 for torch 2.13), pinned to it
    from cudamagic.core import wheels

    (index,) = re.findall(r"/whl/(cu\d+)", str(info.value))
    assert index in {wheels.tag(c) for c in wheels.wheel_cudas(torch.__version__)}
    assert f"torch=={wheels.base_version(torch.__version__)} " in str(info.value)


def test_undefined_name_is_a_usage_error(tip):
    with pytest.raises(UsageError, match=r"defines no function 'missing'"):
        tip.run_cell_magic("cuda", "--torch missing", ADD_ONE)


def test_declarations_of_kernel_cells():
    from cudamagic.cuda.torchext import declarations

    src = (
        "__global__ void k(float *a) {}\n"
        "torch::Tensor add_one(torch::Tensor x,\n                      float k) {\n  return x;\n}\n"
        "std::vector<torch::Tensor> pair(const torch::Tensor &a) { return {a, a}; }\n"
    )
    assert declarations(src, ["add_one", "pair"]) == (
        "torch::Tensor add_one(torch::Tensor x,\n                      float k);\n"
        "std::vector<torch::Tensor> pair(const torch::Tensor &a);"
    )


def test_interrupted_build_stops_cleanly(tip):
    import _thread
    import threading

    import psutil

    from cudamagic.cuda import cache
    from cudamagic.cuda.torchext import torch_key

    source = ADD_ONE.replace("x + 1", "x + 3")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    timer = threading.Timer(2.0, _thread.interrupt_main)
    timer.start()
    try:
        result = tip.run_cell("%%cuda --torch add_one\n" + source)
    finally:
        timer.cancel()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    ws = cuda_magics()._workspace()
    key = torch_key(source, ("add_one",), ws, (), None)
    assert not os.path.exists(
        cache.entry(ws.root, "torch", key)
    )  # nothing half-written in the cache
    assert not os.path.exists(os.path.join(cache.entry(ws.root, "torch-build", key), "lock"))

    def alive():
        children = psutil.Process().children(recursive=True)
        return [p for p in children if p.pid not in before and p.status() != "zombie"]

    assert wait_until(lambda: alive() == [])  # the builder, ninja and the compilers are gone


def test_arch_list_for_pytorch():
    from cudamagic.cuda.torchext import arch_list

    assert arch_list(("90", "100a", "86", "120f")) == "9.0;10.0a;8.6;12.0f"
