"""Link failures of a ``%%cuda`` cell: the missing symbols, and where the cell uses them.

A cell that declares a function it never defines compiles, and then the linker (GNU ld, nvlink for
device code built with ``-rdc``, ptxas for a device function called from a kernel, or MSVC's
``link.exe`` on Windows) fails with messages about temporary object files. :func:`undefined_symbols`
reads the symbols from those messages and :func:`locate` finds them in the cell (or a ``--save``'d
header).
"""

from __future__ import annotations

import re
import shutil
import subprocess

from ..core.platform import run_capped
from .errors import Diagnostic

#: One pattern per linker's "missing symbol" message; group ``sym`` is the symbol (mangled or not).
UNDEFINED_RES = (
    re.compile(r"undefined reference to [`'](?P<sym>[^'`]+)'"),  # GNU ld (gcc, clang)
    re.compile(r"Undefined reference to '(?P<sym>[^']+)'"),  # nvlink (-rdc device code)
    re.compile(r"Unresolved extern function '(?P<sym>[^']+)'"),  # ptxas (device call, no -rdc)
    re.compile(r"undefined symbol: (?P<sym>.+?)\s*$"),  # lld
    re.compile(
        r'unresolved external symbol (?:"(?P<sym>[^"]+)"|(?P<plain>\S+))'
    ),  # MSVC LNK2019 / LNK2001
)

#: Libraries whose functions need a flag on the link line: symbol prefix -> nvcc flag.
LIBRARY_FLAGS = (
    ("cublasLt", "-lcublasLt"),
    ("cublas", "-lcublas"),
    ("cufft", "-lcufft"),
    ("curand", "-lcurand"),
    ("cusparse", "-lcusparse"),
    ("cusolver", "-lcusolver"),
    ("nvrtc", "-lnvrtc"),
    ("nvtx", "-lnvToolsExt"),
    ("cudnn", "-lcudnn"),
    ("nccl", "-lnccl"),
    ("cu", "-lcuda"),
)

#: Seconds ``c++filt`` may take to demangle a link failure's symbols.
CXXFILT_TIMEOUT_S = 10.0

#: Words that make ``word name(...);`` a statement that calls ``name``, not a declaration of it.
_KEYWORDS = {"return", "else", "case", "throw", "co_return", "new", "delete", "sizeof", "co_await"}


def demangle(names) -> dict:
    """Itanium C++ names (``_Z6helperi``) -> readable ones (``helper(int)``), with ``c++filt``.

    ``c++filt`` comes with the GNU linker that produced the names. Names that are not mangled, or
    when ``c++filt`` is absent, cannot start, hangs (:data:`CXXFILT_TIMEOUT_S`) or fails (Windows:
    ``link.exe`` prints readable names itself), map to themselves.
    """
    names = list(dict.fromkeys(names))
    out = {n: n for n in names}
    mangled = [n for n in names if n.startswith("_Z")]
    tool = shutil.which("c++filt") if mangled else None
    if not tool:
        return out
    try:
        code, text = run_capped([tool, *mangled], CXXFILT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return out
    lines = text.splitlines()
    if code == 0 and len(lines) == len(mangled):
        out.update(zip(mangled, (ln.strip() for ln in lines), strict=True))
    return out


def undefined_symbols(log: str) -> list:
    """The symbols a linker reported missing in ``log``, demangled, in order, without repeats."""
    raw = []
    for line in log.splitlines():
        for pattern in UNDEFINED_RES:
            m = pattern.search(line)
            if m:
                raw.append(m["sym"] or m.groupdict().get("plain"))
                break
    names = demangle(raw)
    return list(dict.fromkeys(names[s] for s in raw))


def _scopes(symbol: str) -> list:
    """A demangled symbol's qualified name, split into its parts.

    ``ns::Box<int>::Box(int)`` -> ``["ns", "Box", "Box"]``, ``int __cdecl helper(int)`` ->
    ``["helper"]`` (return type, calling convention, template arguments and parameters dropped;
    ``(anonymous namespace)`` too).
    """
    head = symbol.replace("(anonymous namespace)::", "").partition("(")[0]
    while True:  # drop the template argument lists, innermost first
        head, n = re.subn(r"<[^<>]*>", "", head)
        if not n:
            break
    return head.rpartition(" ")[2].split("::")


def base_name(symbol: str) -> str:
    """The identifier a demangled symbol is written as in source.

    ``ns::scale(float, int)`` -> ``scale``, ``int __cdecl helper(int)`` -> ``helper``, ``void
    add<float>(float*)`` -> ``add``, ``(anonymous namespace)::helper(int)`` -> ``helper``,
    ``Timer::~Timer()`` -> ``~Timer``; an operator keeps its sign (``operator+``).
    """
    return _scopes(symbol)[-1]


def _is_declaration(line: str, name: str, member: bool) -> bool:
    """Whether ``line`` declares function ``name`` (``int name(int);``).

    A declaration has a return type (none for a constructor or destructor, ``member``) and a
    parameter list closed by ``;``.
    """
    m = re.search(r"(?<![\w~])" + re.escape(name) + r"\s*\(", line)
    if not m or not re.search(r"\)\s*(?:const\s*)?;", line[m.end() :]):
        return False
    before = re.split(r"[;{}]", line[: m.start()])[-1].strip()
    words = re.findall(r"[A-Za-z_]\w*", before)
    return (
        (member or bool(words))
        and not _KEYWORDS.intersection(words)
        and re.fullmatch(r'(?:[\w:<>,\s\*&]|"C(?:\+\+)?")*', before) is not None
    )  # extern "C" int f(int);


def locate(symbol: str, cell_lines: list, headers: dict) -> tuple:
    """Where ``symbol`` (demangled) appears: ``(declared, used)``.

    Args:
        symbol: a demangled symbol.
        cell_lines: the cell body's lines.
        headers: saved header name -> its lines (the ones the cell includes), searched after the
            cell.

    Returns:
        The first declaration (``int helper(int);``) and the first other use (a call, taking its
        address, a variable of the class whose constructor it is); ``file`` is ``"cell"`` or the
        header's name; ``line`` is 1-based in that file. ``(None, None)`` for an operator (``a + b``
        does not name it).
    """
    scopes = _scopes(symbol)
    name = scopes[-1]
    if not re.fullmatch(r"~?[A-Za-z_]\w*", name):
        return None, None
    member = scopes[-2:-1] == [name.removeprefix("~")]  # Timer::Timer, Timer::~Timer
    # the name as a word, not in a class head (`struct Timer {` does not use Timer::Timer)
    word = re.compile(r"(?<![\w~])(?<!struct\s)(?<!class\s)(?<!union\s)" + re.escape(name) + r"\b")
    declared = used = None
    for file, lines in [("cell", cell_lines), *headers.items()]:
        for n, text in enumerate(lines, start=1):
            code = text.partition("//")[0]
            if not word.search(code):
                continue
            if _is_declaration(code, name, member):
                declared = declared or (file, n, text.rstrip())
            else:
                used = used or (file, n, text.rstrip())
    return declared, used


def library_flag(symbol: str) -> str | None:
    """The nvcc flag that links ``symbol``'s CUDA library (``cublasCreate_v2`` -> ``-lcublas``)."""
    name = base_name(symbol)
    return next(
        (
            flag
            for prefix, flag in LIBRARY_FLAGS
            if name.startswith(prefix) and (prefix != "cu" or re.match(r"cu[A-Z]", name))
        ),
        None,
    )


def diagnostics(symbols, cell_lines: list, headers: dict) -> list:
    """One :class:`Diagnostic` (severity ``"link error"``) per missing symbol.

    Each is at the line that uses the symbol, else at its declaration; line 0 when the cell has
    neither (a library function).
    """
    out = []
    for sym in symbols:
        declared, used = locate(sym, cell_lines, headers)
        where = used or declared
        if declared and used:
            decl_at = (
                "cell line " + str(declared[1] + 1)
                if declared[0] == "cell"
                else f"{declared[0]} line {declared[1]}"
            )
            msg = (
                f"`{sym}` is used here but never defined (declared at {decl_at}): define it, or "
                "link the file or library that does"
            )
        elif declared:
            msg = (
                f"`{sym}` is declared here but never defined: define it, or link the file or "
                "library that does"
            )
        else:
            flag = library_flag(sym)
            msg = f"`{sym}` is not defined anywhere" + (
                f': it is in a CUDA library; link it with --nvcc-flags "{flag}"'
                if flag
                else ': define it, or link the library that does with --nvcc-flags "-lNAME"'
            )
        if where is None:
            out.append(
                Diagnostic(
                    file="cell", line=0, cell_line=0, severity="link error", message=msg, source=""
                )
            )
            continue
        file, n, text = where
        cell_line = n + 1  # a header's line N is line N + 1 of the cell that saved it
        out.append(
            Diagnostic(
                file=file,
                line=n,
                cell_line=cell_line,
                severity="link error",
                message=msg,
                source=text,
            )
        )
    return out
