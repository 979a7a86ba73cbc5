"""Compiling a cell with nvcc into the build cache, and mapping compiler messages to cell lines."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile

from ..core.fmt import plural
from ..core.platform import executable_name, kill_tree, linker_can_wrap, run_capped
from .cache import Workspace, cache_key, entry, lookup, prune, publish
from .errors import CudaCompileError, CudaLinkError, CudaUsageError, Diagnostic
from .link import diagnostics, undefined_symbols
from .toolchain import gencode_flags, host_compiler_problem

#: Bytes of nvcc's output kept.
LOG_LIMIT_BYTES = 4 * 1024 * 1024

# Appended to cells with device code: at exit, report a CUDA error the program left behind, in one
# marker line on stderr that %%cuda turns into the cell's exception. With a GPU:
# cudaDeviceSynchronize() then cudaGetLastError(). Without one: only when the program launched a
# kernel (``<<<...>>>`` goes through __cudaPushCallConfiguration, which the link wraps where GNU ld
# can), so a program that finds no GPU, says so and returns 0 passes. cudaErrorCudartUnloading (4)
# means the runtime is already gone. Where the linker cannot wrap (MSVC), only the GPU case is seen.
_EXIT_CHECK_WRAP = r"""
extern "C" unsigned __real___cudaPushCallConfiguration(dim3, dim3, size_t, struct CUstream_st *);
extern "C" unsigned __wrap___cudaPushCallConfiguration(dim3 g, dim3 b, size_t s,
                                                       struct CUstream_st *st) {
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
    std::fprintf(stderr, "\n@@cudamagic-cuda-error@@ %d %s %s\n", (int)e, cudaGetErrorName(e),
                 cudaGetErrorString(e));
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


# Appended to every cell: stdout line-buffered before any constructor of the cell's own runs
# (GCC and Clang: constructor priority 101; MSVC: a C++ initializer in .CRT$XCT, before the
# user's .CRT$XCU), so each line leaves the program when it is printed (std::cout, fwrite and the
# CUDA runtime's device printf go through the same stdout) and a program killed or crashing has
# lost none. On POSIX the runner also gives stdout a pseudo-terminal (programs the cell starts
# line-buffer too); MSVC's C library has no line buffering (_IOLBF is full buffering there), so
# Windows gets _IONBF. A setvbuf in the user's own main still wins.
LINE_BUFFERING = r"""
#line 1 "cudamagic-line-buffering"
#include <cstdio>
namespace cudamagic_line_buffering_ {
static void set() {
#ifdef _WIN32
  std::setvbuf(stdout, nullptr, _IONBF, 0);
#else
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
#endif
}
}
#ifdef _MSC_VER
#pragma section(".CRT$XCT", read)
__declspec(allocate(".CRT$XCT")) static void (*cudamagic_line_buffering_init_)(void) =
    cudamagic_line_buffering_::set;
#else
__attribute__((constructor(101))) static void cudamagic_line_buffering_init_() {
  cudamagic_line_buffering_::set();
}
#endif
"""

EXIT_CHECK_LINK = ["-Xlinker", "--wrap=__cudaPushCallConfiguration"]
ERROR_MARKER = "@@cudamagic-cuda-error@@"
DEVICE_RE = re.compile(r"<<<|__global__|\bcuda[A-Z]\w*\s*\(")


def has_device_code(source: str) -> bool:
    """True when ``source`` launches kernels, defines one, or calls the CUDA runtime API."""
    return bool(DEVICE_RE.search(source))


def wait(proc, progress, step: str) -> None:
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
                progress.say(step)
    except KeyboardInterrupt:
        kill_tree(proc)
        proc.wait()
        raise


def _raise_link_error(
    text: str, returncode: int, source: str, ws: Workspace, headers: dict
) -> None:
    """Raise :class:`CudaLinkError` when the log of a failed build names missing symbols."""
    symbols = undefined_symbols(text)
    if not symbols:
        return
    diags = diagnostics(symbols, source.splitlines(), {n: ws.headers.get(n, []) for n in headers})
    them = "it" if len(symbols) == 1 else "them"
    missing = plural(len(symbols), "undefined symbol")
    head = (
        f"linking failed (nvcc exit status {returncode}): {missing}; "
        f"the cell compiled, but nothing defines {them}"
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


#: nvcc's intermediate files (``/tmp/tmpxft_00002491_00000000-11_cell.o``,
#: ``...-6_cell.cudafe1.cpp``).
_TMP_OBJECT_RE = re.compile(r"(?:[A-Za-z]:)?[^\s'`\"():]*tmpxft_[\w.-]+")
_SEVERITY_RE = re.compile(r"^\s*:?\s*(?P<sev>fatal error|error|warning)\s*:?\s*(?P<msg>.*)$")


def rewrite(log: str, sources: dict, ws: Workspace, cell_lines: list):
    """Rewrite compiler output so every location names the notebook.

    ``/tmp/.../cell.cu(5)`` and ``cell.cu:5:3`` become ``cell line 6`` (the ``%%cuda`` line is the
    cell's line 1); a saved header's ``vec.cuh(3)`` becomes ``vec.cuh line 3``.

    Args:
        log: the compiler's output.
        sources: path of each file holding the cell -> how many lines precede the cell's first
            line in it (0 for the program; 1 for load_inline's ``main.cpp``, 3 for its
            ``cuda.cu``).
        ws: the :class:`.cache.Workspace` (saved headers).
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
    """Nvcc's command line as a list: ``nvcc [-I dir] -o exe src [gencode] [wrap] [flags]``.

    ``subprocess`` passes each element as one argument, so paths with spaces need no quotes.
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
        source: the cell's text below the ``%%cuda`` line.
        tk: the :class:`.toolchain.Toolkit`.
        archs: nvcc architecture digits (``("90",)``), or ``()`` for nvcc's default.
        flags: extra nvcc arguments.
        ws: the :class:`.cache.Workspace`.
        progress: a :class:`~cudamagic.core.progress.ProgressLine`.
        max_bytes: the cache's bound (least recently used entries go after a new one is added).

    Returns:
        ``(path, cached, warnings_log)``: the program's path, True when nvcc was not called, and
        the compiler's rewritten output or ``""``.

    Raises:
        CudaCompileError: nvcc or the host compiler failed; diagnostics carry cell lines.
        CudaUsageError: nvcc rejected the extra flags; on Windows, no MSVC ``cl.exe``.
        KeyboardInterrupt: interrupted; nvcc's process tree is killed and nothing is cached.
    """
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
        line_buffering=LINE_BUFFERING,
    )
    hit = lookup(ws.root, "prog", key, name)
    if hit:
        return hit, True, ""
    problem = host_compiler_problem(flags)
    if problem:
        raise CudaUsageError(problem)
    work = tempfile.mkdtemp(prefix="cudamagic-cell-")
    try:
        src = os.path.join(work, "cell.cu")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source if source.endswith("\n") else source + "\n")
            f.write(LINE_BUFFERING + check)
        exe = os.path.join(work, name)
        include_dir = ws.saved_dir if ws.headers else None
        argv = nvcc_argv(tk.path, src, exe, gencode_flags(archs), flags, include_dir, wrap)
        code, log = run_capped(
            argv, None, LOG_LIMIT_BYTES, cwd=work, tick=lambda: progress.say("compiling with nvcc")
        )
        text, diags = rewrite(log, {src: 0}, ws, source.splitlines())
        if code != 0 and flags and not diags and "nvcc fatal" in text:
            fatal = next(ln for ln in text.splitlines() if "nvcc fatal" in ln).strip()
            raise CudaUsageError(
                f"%%cuda: nvcc rejected the flags {' '.join(flags)!r}: {fatal}; fix --nvcc-flags "
                "or %config CudaMagics.cuda_nvcc_flags."
            )
        if code != 0 or not os.path.isfile(exe):
            errors = [d for d in diags if d.severity != "warning"]
            if not errors:
                _raise_link_error(text, code, source, ws, headers)
            count = f" with {plural(len(errors), 'error')}" if errors else ""
            body = "\n".join(d.text() for d in errors[:10])
            if not errors:
                body = "\n".join(text.strip().splitlines()[-15:])
            raise CudaCompileError(
                f"nvcc failed (exit status {code}){count}:\n{body}", errors, text
            )
        publish(ws.root, "prog", key, {name: exe})
        prune(ws.root, max_bytes, keep=key)
        return os.path.join(entry(ws.root, "prog", key), name), False, text.strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
