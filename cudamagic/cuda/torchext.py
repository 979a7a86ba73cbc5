"""``%%cuda --torch NAMES``: the cell built as a PyTorch extension with ``load_inline``.

The build runs in a child Python process (so a kernel interrupt kills ninja and the compilers
cleanly and the user's process never waits on load_inline's lock), for this GPU's architecture only
(``TORCH_CUDA_ARCH_LIST``), into ``torch-build/<key>``; the finished ``.so`` is published to
``torch/<key>/`` by one rename and then imported in the kernel. An unchanged cell loads the cached
``.so`` without building.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import psutil

from ..core import wheels
from ..core.fmt import plural
from ..core.platform import extension_suffix, popen
from . import build, cache
from .errors import CudaCompileError, CudaUsageError
from .toolchain import host_compiler_problem

#: Lines load_inline puts before the cell in main.cpp (C++ cells) and cuda.cu (cells with device
#: code).
CPP_OFFSET, CUDA_OFFSET = 1, 3

STALE_GRACE_S = (
    1.0  # a lock with no live builder is reported after this long (the issue asks for < 2 s)
)

_CHILD = r"""
import json, sys
a = json.loads(sys.argv[1])
from torch.utils.cpp_extension import load_inline
load_inline(name=a["name"], cpp_sources=a["cpp"], cuda_sources=a["cuda"] or None,
            functions=a["functions"], extra_cuda_cflags=a["cuda_flags"], build_directory=a["dir"],
            verbose=False, is_python_module=True)
"""


def arch_list(archs) -> str:
    """Nvcc digits as ``TORCH_CUDA_ARCH_LIST``: ``("90", "100a")`` -> ``"9.0;10.0a"``."""
    out = []
    for a in archs:
        digits = a.rstrip("af")
        out.append(f"{digits[:-1]}.{digits[-1]}{a[len(digits) :]}")
    return ";".join(out)


def check_ninja() -> None:
    """Raise CudaUsageError when ``ninja`` (load_inline's build tool) cannot be run."""
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        raise CudaUsageError(
            "%%cuda --torch: PyTorch builds extensions with ninja, which is not on PATH; run "
            "`%pip install ninja`."
        )


def check_prereqs(source: str, tk_fn) -> object:
    """Check ninja, the host compiler, and for device code PyTorch's CUDA against nvcc's.

    Args:
        source: the cell body.
        tk_fn: returns the :class:`.toolchain.Toolkit` (called only for device code).

    Returns:
        The Toolkit, or None for a C++-only cell.

    Raises:
        CudaUsageError: each with its one-line fix.
    """
    import torch

    check_ninja()
    problem = host_compiler_problem(torch=True)  # c++ (or $CXX); on Windows MSVC's cl.exe
    if problem:
        raise CudaUsageError(problem)
    if not build.has_device_code(source):
        return None
    if torch.version.cuda is None:
        cudas = wheels.wheel_cudas(torch.__version__)
        install = (
            f"`%{wheels.pip_command(wheels.base_version(torch.__version__), cudas[0])}` installs "
            f"a CUDA build of it (it has {', '.join(map(wheels.tag, cudas))} wheels: take the "
            "newest not above the 'CUDA Version' that nvidia-smi shows)"
            if cudas
            else "install a CUDA build (https://pytorch.org/get-started/locally/)"
        )
        raise CudaUsageError(
            f"%%cuda --torch: this PyTorch ({torch.__version__}) is a CPU-only build, which cannot "
            f"build CUDA kernels; {install}."
        )
    tk = tk_fn()
    if int(torch.version.cuda.split(".")[0]) != tk.major:
        raise CudaUsageError(
            f"%%cuda --torch: PyTorch was built with CUDA {torch.version.cuda} but nvcc at "
            f"{tk.path} is {tk.release}; the major versions must match: `%pip install "
            f'"nvidia-cuda-nvcc=={torch.version.cuda}.*"`.'
        )
    return tk


_SIG_TEMPLATE = r"(?P<ret>[\w:<>,\s\*&]+?)\s*\b{name}\s*\((?P<args>[^)]*)\)\s*\{{"


def declarations(source: str, names) -> str:
    """C++ declarations (``torch::Tensor add_one(torch::Tensor x);``) of ``names`` in ``source``.

    Raises:
        CudaUsageError: a name has no definition in the cell.
    """
    out = []
    for name in names:
        m = re.search(_SIG_TEMPLATE.format(name=re.escape(name)), source)
        if not m:
            raise CudaUsageError(
                f"%%cuda --torch: the cell defines no function {name!r}; --torch takes names of "
                "C++ functions the cell defines."
            )
        ret = m["ret"].strip().splitlines()[-1].strip()
        out.append(f"{ret} {name}({m['args'].strip()});")
    return "\n".join(out)


def _check_lock(build_dir: str, progress) -> None:
    """Wait while a live build holds load_inline's lock.

    Raises:
        CudaUsageError: the lock's builder is gone (reported within :data:`STALE_GRACE_S`).
    """
    lock = os.path.join(build_dir, "lock")
    owner_file = os.path.join(build_dir, "cudamagic-owner")
    first = time.monotonic()
    while os.path.exists(lock):
        try:
            owner = int(pathlib.Path(owner_file).read_text().strip() or 0)
        except (OSError, ValueError):
            owner = 0
        if owner and psutil.pid_exists(owner):
            progress.say(f"waiting for another build of this cell (pid {owner})")
        elif time.monotonic() - first > STALE_GRACE_S:
            raise CudaUsageError(
                f"%%cuda --torch: a build lock was left by a build that was killed: {lock} (no "
                f"process is building). Remove it (`!rm {lock}`) and run the cell again."
            )
        time.sleep(0.1)


def torch_key(source: str, names, ws, archs, tk) -> str:
    """The cache key of a ``--torch`` cell (its build folder is ``torch-build/<key>``)."""
    import torch

    return cache.cache_key(
        kind="torch",
        source=source,
        names=list(names),
        headers=ws.included(source),
        torch=torch.__version__,
        python=sys.version,
        nvcc=(tk.path, tk.build) if tk else None,
        archs=list(archs),
    )


def build_extension(source: str, names, ws, archs, tk, progress, max_bytes: int = 2**31):
    """Build (or load from the cache) the extension and return the imported module.

    Args:
        source: the cell body.
        names: function names to bind.
        ws: the :class:`.cache.Workspace`.
        archs: architecture digits for ``TORCH_CUDA_ARCH_LIST`` (``("90",)``).
        tk: the :class:`.toolchain.Toolkit`, or None (C++ only).
        progress: a :class:`~cudamagic.core.progress.ProgressLine`.
        max_bytes: the cache's bound.

    Returns:
        ``(module, cached)``.

    Raises:
        CudaCompileError: the build failed (locations rewritten to cell lines).
        CudaUsageError: a stale build lock, or a name the cell does not define.
        KeyboardInterrupt: the build's process tree was killed; nothing was cached.
    """
    device = build.has_device_code(source)
    decls = declarations(source, names)  # also checks that every name is defined in the cell
    key = torch_key(source, names, ws, archs, tk)
    modname = f"cudamagic_{key[:16]}"
    so = cache.lookup(ws.root, "torch", key, modname + extension_suffix())
    cached = so is not None
    if not cached:
        so = _build(source, names, decls, device, ws, archs, key, modname, progress)
        cache.prune(ws.root, max_bytes, keep=key)
    return _import(modname, so), cached


def _build(source, names, decls, device, ws, archs, key, modname, progress) -> str:
    build_dir = cache.entry(ws.root, "torch-build", key)
    os.makedirs(build_dir, exist_ok=True)
    _check_lock(build_dir, progress)
    cell = source if source.endswith("\n") else source + "\n"
    args = {
        "name": modname,
        "cpp": [decls] if device else [cell],
        "cuda": [cell] if device else [],
        "functions": list(names),
        "dir": build_dir,
        "cuda_flags": ["-I", ws.saved_dir] if ws.headers else [],
    }
    env = dict(os.environ)
    if ws.headers:
        env["CPATH"] = ws.saved_dir + (os.pathsep + env["CPATH"] if env.get("CPATH") else "")
    if archs:
        env["TORCH_CUDA_ARCH_LIST"] = arch_list(archs)
    log_path = os.path.join(build_dir, "cudamagic-build.log")
    with open(log_path, "wb") as log:
        proc = popen(
            [sys.executable, "-c", _CHILD, json.dumps(args)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    pathlib.Path(build_dir, "cudamagic-owner").write_text(str(proc.pid))
    try:
        build.wait(proc, progress, "building the PyTorch extension (load_inline, ninja)")
    except KeyboardInterrupt:
        for name in ("lock", "cudamagic-owner"):  # we killed its owner: the lock is ours to remove
            with contextlib.suppress(OSError):
                os.remove(os.path.join(build_dir, name))
        raise
    log_text = pathlib.Path(log_path).read_text("utf-8", "replace")
    built = os.path.join(build_dir, modname + extension_suffix())
    if proc.returncode != 0 or not os.path.isfile(built):
        sources = {os.path.join(build_dir, "main.cpp"): 0 if device else CPP_OFFSET}
        if device:
            sources = {os.path.join(build_dir, "cuda.cu"): CUDA_OFFSET}
        text, diags = build.rewrite(log_text, sources, ws, source.splitlines())
        errors = [d for d in diags if d.severity != "warning"]
        body = "\n".join(d.text() for d in errors[:10]) or "\n".join(
            ln for ln in text.strip().splitlines()[-15:]
        )
        raise CudaCompileError(
            f"the PyTorch extension build failed with {plural(len(errors), 'error')} in the cell:"
            f"\n{body}",
            errors,
            text,
        )
    tmp = built + ".publish"
    shutil.copy2(built, tmp)
    cache.publish(ws.root, "torch", key, {modname + extension_suffix(): tmp})
    return os.path.join(cache.entry(ws.root, "torch", key), modname + extension_suffix())


def _import(modname: str, path: str):
    import torch  # noqa: F401 - the extension links against libtorch, loaded by importing torch

    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[modname] = module
    return module
