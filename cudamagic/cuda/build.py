"""Compiling a cell with nvcc into a content-addressed cache, and mapping compiler messages back to
cell lines.

Cache layout under the root (``CudaMagics.cuda_cache_dir``, default ``~/.cache/cudamagic/cuda``)::

    prog/<key>/prog          a compiled program, ``prog.exe`` on Windows (the entry appears by one
    atomic rename) torch/<key>/<name>.so    a built PyTorch extension (same rule)
    torch-build/<key>/       load_inline's build folder (ninja files, objects, its ``lock``)
    saved/<session>/NAME.cuh headers saved by ``--save`` in one loaded session (removed on unload)
    toolkit/<digest>.json    nvcc's answers to -V and --list-gpu-arch, per nvcc path, size and mtime

``<key>`` is the SHA-256 of the source, the saved headers it includes, the flags, nvcc's path and
version and the architectures, so an unchanged cell never calls nvcc again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid

from ..core.platform import (
    executable_name,
    host_compiler_problem,
    kill_tree,
    linker_can_wrap,
    popen_group_kwargs,
)
from .errors import CudaCompileError, CudaLinkError, Diagnostic

# : Appended to cells with device code: at exit, report a CUDA error the program left behind on
# stderr, in one
# : marker line that ``%%cuda`` turns into the cell's exception. With a GPU: cudaDeviceSynchronize()
# then
# : cudaGetLastError() (a failed launch, an asynchronous kernel fault). Without a usable GPU or
# driver: only
# : when the program launched a kernel (``<<<...>>>`` goes through __cudaPushCallConfiguration,
# which the link
# : wraps with :data:`EXIT_CHECK_LINK` where the linker can: GNU ld on Linux), so a program that
# finds no GPU,
# : says so and returns 0 passes. cudaErrorCudartUnloading (4) means the runtime is already gone and
# is not
# : reported. Where the linker cannot wrap (MSVC's link.exe), launches are not seen: only the GPU
# case is checked.
_EXIT_CHECK_WRAP = r"""
extern "C" unsigned __real___cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st *);
extern "C" unsigned __wrap___cudaPushCallConfiguration(dim3 g, dim3 b, size_t s, struct CUstream_st *st) {
  cudamagic_exit_check_::launched = true;
  return __real___cudaPushCallConfiguration(g, b, s, st);
}
"""
_EXIT_CHECK = r"""
#line 1 "cudamagic-exit-check"
#include <cstdio>
#include <cstdlib>
namespace cudamagic_exit_check_ { static bool launched = false; }
@WRAP@namespace cudamagic_exit_check_ {
static void check() {
  int n = 0;
  cudaError_t e = cudaSuccess;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n > 0) {
    e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
  } else if (launched) {
    e = cudaPeekAtLastError();
  }
  if (e != cudaSuccess && e != cudaErrorCudartUnloading) {
    std::fflush(stdout);
    std::fprintf(stderr, "\n@@cudamagic-cuda-error@@ %d %s %s\n", (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
    std::fflush(stderr);
  }
}
struct Reg { Reg() { std::atexit(check); } };
static Reg reg_;
}
"""


def exit_check(wrap: bool) -> str:
    """The exit check's source, with launch detection when ``wrap`` (the linker has ``--wrap``)."""
    return _EXIT_CHECK.replace("@WRAP@", _EXIT_CHECK_WRAP.lstrip("\n") if wrap else "")


EXIT_CHECK = exit_check(True)
EXIT_CHECK_LINK = ["-Xlinker", "--wrap=__cudaPushCallConfiguration"]
ERROR_MARKER = "@@cudamagic-cuda-error@@"
DEVICE_RE = re.compile(r"<<<|__global__|\bcuda[A-Z]\w*\s*\(")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def has_device_code(source: str) -> bool:
    """True when ``source`` launches kernels, defines one, or calls the CUDA runtime API."""
    return bool(DEVICE_RE.search(source))


def default_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudamagic", "cuda")


class Workspace:
    """The cache root and this session's saved headers.

    Attributes:
        root: cache folder. saved_dir: this session's folder of ``--save``d headers (on the include
            path).
        headers: header name -> list of its lines (1-based line N is ``headers[name][N - 1]``).
    """

    def __init__(self, root: str):
        self.root = root
        self.saved_dir = os.path.join(root, "saved", f"{os.getpid()}-{uuid.uuid4().hex[:8]}")
        self.headers: dict = {}

    def save(self, name: str, source: str) -> str:
        """Write ``source`` as header ``name``; returns its path."""
        os.makedirs(self.saved_dir, exist_ok=True)
        path = os.path.join(self.saved_dir, name)
        tmp = path + f".tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)
        self.headers[name] = source.splitlines()
        return path

    def included(self, source: str) -> dict:
        """Saved headers ``source`` includes, directly or through other saved headers: name -> text."""
        found, todo = {}, [source]
        while todo:
            for name in INCLUDE_RE.findall(todo.pop()):
                if name in self.headers and name not in found:
                    found[name] = "\n".join(self.headers[name])
                    todo.append(found[name])
        return found

    def remove_saved(self) -> None:
        shutil.rmtree(self.saved_dir, ignore_errors=True)


def cache_key(**parts) -> str:
    """SHA-256 (hex) of the JSON of ``parts`` (sorted keys)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def entry(root: str, kind: str, key: str) -> str:
    return os.path.join(root, kind, key)


def lookup(root: str, kind: str, key: str, name: str) -> str | None:
    """Path of file ``name`` in the cache entry, or None; a hit refreshes the entry's time (LRU pruning)."""
    path = os.path.join(entry(root, kind, key), name)
    if os.path.isfile(path):
        try:
            os.utime(entry(root, kind, key))
        except OSError:
            pass
        return path
    return None


def publish(root: str, kind: str, key: str, files: dict) -> str:
    """Move ``files`` (name -> path) into the entry with one atomic rename; returns the entry
    folder. A concurrent builder that got there first wins (ours is dropped).
    """
    final = entry(root, kind, key)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{key[:16]}.tmp-", dir=os.path.dirname(final))
    for name, path in files.items():
        shutil.move(path, os.path.join(tmp, name))
    try:
        os.rename(tmp, final)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _size(path: str) -> int:
    total = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(dirpath, n))
            except OSError:
                pass
    return total


def prune(root: str, max_bytes: int, keep: str = "") -> int:
    """Remove least recently used entries (``prog/``, ``torch/``, ``torch-build/``) until the total
    is at most ``max_bytes``; entries whose folder name is ``keep`` (the build just made) stay. Returns the bytes removed.
    """
    entries = []
    for kind in ("prog", "torch", "torch-build"):
        d = os.path.join(root, kind)
        if os.path.isdir(d):
            for name in os.listdir(d):
                p = os.path.join(d, name)
                if name != keep:
                    entries.append((os.path.getmtime(p), _size(p), p))
    total = sum(e[1] for e in entries)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        shutil.rmtree(path, ignore_errors=True)
        total -= size
        removed += size
    return removed


def clear(root: str) -> tuple:
    """Remove every cache entry and nvcc's cached answers (``toolkit/``), not this session's saved
    headers. Returns ``(entries, bytes)`` of builds removed.
    """
    shutil.rmtree(os.path.join(root, "toolkit"), ignore_errors=True)  # asked again on the next cell
    count = size = 0
    for kind in ("prog", "torch", "torch-build"):
        d = os.path.join(root, kind)
        if os.path.isdir(d):
            for name in os.listdir(d):
                p = os.path.join(d, name)
                size += _size(p)
                count += 1
                shutil.rmtree(p, ignore_errors=True)
    return count, size


def wait(proc, progress, step: str, deadline_s: float | None = None) -> None:
    """Wait for ``proc`` in this thread (so a kernel interrupt lands here), refreshing ``progress``.

    Raises:
        KeyboardInterrupt: after killing the whole process tree.
    """
    try:
        while True:
            try:
                proc.wait(timeout=0.1)
                return
            except subprocess.TimeoutExpired:
                progress.tick(step)
    except KeyboardInterrupt:
        kill_tree(proc)
        proc.wait()
        raise


def _raise_link_error(
    text: str, returncode: int, source: str, ws: Workspace, headers: dict
) -> None:
    """Raise :class:`CudaLinkError` when the log of a failed build names missing symbols; else return."""
    from .link import diagnostics, undefined_symbols

    symbols = undefined_symbols(text)
    if not symbols:
        return
    diags = diagnostics(symbols, source.splitlines(), {n: ws.headers.get(n, []) for n in headers})
    n = len(symbols)
    head = (
        f"linking failed (nvcc exit status {returncode}): {n} undefined symbol{'s' if n != 1 else ''}; the "
        "cell compiled, but nothing defines " + ("it" if n == 1 else "them")
    )
    body = "\n".join(d.text() for d in diags[:10])
    raise CudaLinkError(f"{head}:\n{body}", symbols, diags, text)


# ---- compiler messages -------------------------------------------------------------------


def _loc_re(sources, saved_dir: str):
    names = [f"(?P<s{i}>{re.escape(path)})" for i, path in enumerate(sources)]
    if saved_dir:
        names.append(re.escape(saved_dir) + r"[/\\](?P<hdr>[^\s:()\"]+)")
    return re.compile(
        r"(?P<path>" + "|".join(names) + r")(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::(?P<col>\d+))?)"
    )


# : nvcc's intermediate files (``/tmp/tmpxft_00002491_00000000-11_cell.o``,
# ``...-6_cell.cudafe1.cpp``).
_TMP_OBJECT_RE = re.compile(r"(?:[A-Za-z]:)?[^\s'`\"():]*tmpxft_[\w.-]+")
_SEVERITY_RE = re.compile(r"^\s*:?\s*(?P<sev>fatal error|error|warning)\s*:?\s*(?P<msg>.*)$")


def rewrite(log: str, sources: dict, ws: Workspace, cell_lines: list):
    """Rewrite compiler output so every location names the notebook: ``/tmp/.../cell.cu(5)`` and
    ``cell.cu:5:3`` become ``cell line 6`` (the ``%%cuda`` line is the cell's line 1), a saved
    header's ``vec.cuh(3)`` becomes ``vec.cuh line 3``.

    Args:
        log: the compiler's output. sources: path of each file holding the cell -> how many lines
            precede the cell's first line in it (0 for the program; 1 for load_inline's
            ``main.cpp``, 3 for its ``cuda.cu``). ws: the :class:`Workspace` (saved headers).
            cell_lines: the cell body's lines.

    Returns:
        ``(text, diagnostics)``: the rewritten log and a :class:`Diagnostic` per error/warning line
        in the cell or a saved header (messages about other files keep their paths and carry no
        diagnostic).
    """
    paths = list(sources)
    loc = _loc_re(paths, ws.saved_dir)
    out, diags = [], []
    for line in log.splitlines():
        pos = 0
        new = ""
        for m in loc.finditer(line):
            n = int(m["l1"] or m["l2"])
            hdr = m.groupdict().get("hdr")
            if hdr:
                lines, body, where = ws.headers.get(hdr, []), n, f"{hdr} line {n}"
            else:
                path = next(p for i, p in enumerate(paths) if m[f"s{i}"])
                body = n - sources[path]
                lines = cell_lines
                if not 0 < body <= len(cell_lines):
                    continue  # generated lines around the cell (includes, bindings, exit check)
                where = f"cell line {body + 1}"
            if not new and not pos:
                sev = _SEVERITY_RE.match(line[m.end() :])
                if sev:
                    source = lines[body - 1].rstrip() if 0 < body <= len(lines) else ""
                    diags.append(
                        Diagnostic(
                            file=hdr or "cell",
                            line=body,
                            cell_line=body + 1,
                            severity=sev["sev"],
                            message=sev["msg"].strip(),
                            source=source,
                        )
                    )
            new += line[pos : m.start()] + where
            pos = m.end()
        line = new + line[pos:]
        for path in paths:
            line = line.replace(path, "the cell")
        line = _TMP_OBJECT_RE.sub("the cell's object file", line)
        if ws.saved_dir:
            line = line.replace(ws.saved_dir + os.sep, "")
        out.append(line)
    return "\n".join(out), diags


def nvcc_argv(nvcc: str, src: str, exe: str, gencode, flags, include_dir, wrap: bool) -> list:
    """Nvcc's command line as a list (``subprocess`` passes each element as one argument, so paths
    with spaces need no quotes on any platform): ``nvcc [-I include_dir] -o exe src [gencode...] [wrap] [flags...]``.
    """
    argv = [nvcc]
    if include_dir:
        argv += ["-I", include_dir]
    return argv + ["-o", exe, src, *gencode, *(EXIT_CHECK_LINK if wrap else []), *flags]


def compile_program(
    source: str, tk, archs, flags, ws: Workspace, progress, max_bytes: int = 2**31
) -> tuple:
    """Compile ``source`` (the cell body) into a cached program.

    Args:
        source: the cell's text below the ``%%cuda`` line. tk: :class:`.toolchain.Toolkit`.
        archs: nvcc architecture digits (``("90",)``) or ``()`` for nvcc's default. flags: extra
            nvcc args.
        ws: the :class:`Workspace`. progress: a :class:`.progress.Progress`. max_bytes: the cache's
            bound (least recently used entries are removed after a new one is added).

    Returns:
        ``(path, cached, warnings_log)``: the program's path, True when nvcc was not called, and the
        compiler's rewritten output (warnings) or ``""``.

    Raises:
        CudaCompileError: nvcc or the host compiler failed; diagnostics carry cell lines.
        UsageError: nvcc rejected the extra flags ("nvcc fatal"); on Windows, no MSVC ``cl.exe``
            (the message says how to get one on PATH, or to pass ``-ccbin``).
        KeyboardInterrupt: interrupted; nvcc's process tree is killed and nothing is cached.
    """
    from .toolchain import gencode_flags

    device = has_device_code(source)
    wrap = device and linker_can_wrap()
    check = exit_check(wrap) if device else ""
    headers = ws.included(source)
    name = executable_name("prog")
    key = cache_key(
        kind="prog",
        source=source,
        headers=headers,
        flags=list(flags),
        nvcc=tk.path,
        build=tk.build,
        archs=list(archs),
        exit_check=check,
    )
    hit = lookup(ws.root, "prog", key, name)
    if hit:
        return hit, True, ""
    problem = host_compiler_problem(flags)
    if problem:
        from IPython.core.error import UsageError

        raise UsageError(problem)
    work = tempfile.mkdtemp(prefix="cudamagic-cell-")
    try:
        src = os.path.join(work, "cell.cu")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source if source.endswith("\n") else source + "\n")
            f.write(check)
        exe = os.path.join(work, name)
        argv = nvcc_argv(
            tk.path,
            src,
            exe,
            gencode_flags(archs),
            flags,
            ws.saved_dir if ws.headers else None,
            wrap,
        )
        with tempfile.TemporaryFile() as logf:
            proc = subprocess.Popen(
                argv,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=work,
                **popen_group_kwargs(),
            )
            wait(proc, progress, "compiling with nvcc")
            logf.seek(0)
            log = logf.read().decode("utf-8", "replace")
        text, diags = rewrite(log, {src: 0}, ws, source.splitlines())
        if proc.returncode != 0 and flags and not diags and "nvcc fatal" in text:
            from IPython.core.error import UsageError

            fatal = next(ln for ln in text.splitlines() if "nvcc fatal" in ln).strip()
            raise UsageError(
                f"%%cuda: nvcc rejected the flags {' '.join(flags)!r}: {fatal}. Fix --nvcc-flags or "
                "%config CudaMagics.cuda_nvcc_flags (`nvcc --help` lists the options)."
            )
        if proc.returncode != 0 or not os.path.isfile(exe):
            errors = [d for d in diags if d.severity != "warning"]
            if not errors:
                _raise_link_error(text, proc.returncode, source, ws, headers)
            head = f"nvcc failed (exit status {proc.returncode})" + (
                f" with {len(errors)} error{'s' if len(errors) != 1 else ''}" if errors else ""
            )
            body = "\n".join(d.text() for d in errors[:10])
            if not errors:
                body = "\n".join(text.strip().splitlines()[-15:])
            raise CudaCompileError(f"{head}:\n{body}", errors, text)
        publish(ws.root, "prog", key, {name: exe})
        prune(ws.root, max_bytes, keep=key)
        return os.path.join(entry(ws.root, "prog", key), name), False, text.strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
