"""Link failures read from the linkers' own messages (fast: no nvcc).

Link failures read from the linkers' own messages, captured as text from real runs (fast: no nvcc;
what `make mutation` runs for cudamagic/cuda/link.py): GNU ld behind nvcc 13.0 (demangled, and
mangled with ``-Xlinker --no-demangle``), ptxas and nvlink for device code, lld, MSVC link.exe. Each
log goes through the build's own rewrite and ``_raise_link_error``, so the message is the one a
failing ``%%cuda`` cell shows.
"""

from __future__ import annotations

import os
import stat

import pytest

from cudamagic.cuda import link
from cudamagic.cuda.build import _raise_link_error, rewrite
from cudamagic.cuda.cache import Workspace
from cudamagic.cuda.errors import CudaLinkError, Diagnostic

# nvcc 13.0 on Linux, `nvcc -o prog cell.cu` of CELL (GNU ld demangles itself)
CELL = (
    "#include <cstdio>\n"
    "int helper(int);\n"
    "namespace ns { float scale(float, int); }\n"
    "template <class T> void add(T *p, int n);\n"
    "int main() {\n"
    '  printf("%d\\n", helper(3));\n'
    "  float x = ns::scale(1.f, 2);\n"
    "  add<float>(&x, 1);\n"
    "  return 0;\n"
    "}\n"
)
LD_LOG = """/usr/bin/ld: /tmp/tmpxft_00007a54_00000000-11_cell.o: in function `main':
tmpxft_00007a54_00000000-6_cell.cudafe1.cpp:(.text+0x3c): undefined reference to `helper(int)'
/usr/bin/ld: tmpxft_00007a54_00000000-6_cell.cudafe1.cpp:(.text+0x66): undefined reference to `ns::scale(float, int)'
/usr/bin/ld: tmpxft_00007a54_00000000-6_cell.cudafe1.cpp:(.text+0x7e): undefined reference to `void add<float>(float*, int)'
collect2: error: ld returned 1 exit status
"""
# the same cell with `-Xlinker --no-demangle`
LD_MANGLED_LOG = """/usr/bin/ld: /tmp/tmpxft_0000795c_00000000-11_cell.o: in function `main':
tmpxft_0000795c_00000000-6_cell.cudafe1.cpp:(.text+0x3c): undefined reference to `_Z6helperi'
/usr/bin/ld: tmpxft_0000795c_00000000-6_cell.cudafe1.cpp:(.text+0x66): undefined reference to `_ZN2ns5scaleEfi'
/usr/bin/ld: tmpxft_0000795c_00000000-6_cell.cudafe1.cpp:(.text+0x7e): undefined reference to `_Z3addIfEvPT_i'
collect2: error: ld returned 1 exit status
"""
SYMBOLS = ["helper(int)", "ns::scale(float, int)", "void add<float>(float*, int)"]
# `#include <cuda.h>` and `return cuInit(0);` without -lcuda
CUINIT_LOG = """/usr/bin/ld: /tmp/tmpxft_00002ce4_00000000-11_cell.o: in function `main':
tmpxft_00002ce4_00000000-6_cell.cudafe1.cpp:(.text+0x38): undefined reference to `cuInit'
collect2: error: ld returned 1 exit status
"""
# a __device__ function declared, called from a kernel, defined nowhere: without and with -rdc=true
PTXAS_LOG = "ptxas fatal   : Unresolved extern function '_Z3devi'\n"
NVLINK_LOG = "nvlink error   : Undefined reference to '_Z3devi' in '/tmp/tmpxft_00002c14_00000000-11_cell.o'\n"
# clang with -fuse-ld=lld (lld demangles by default and names each reference below)
LLD_LOG = """ld.lld: error: undefined symbol: helper(int)
>>> referenced by cell.cu
>>>               /tmp/tmpxft_00001a2b_00000000-11_cell.o:(main)
clang: error: linker command failed with exit code 1 (use -v to see invocation)
"""
MSVC_LOG = (
    'cell.obj : error LNK2019: unresolved external symbol "int __cdecl helper(int)" '
    "(?helper@@YAHH@Z) referenced "
    "in function main\n"
    "cell.obj : error LNK2019: unresolved external symbol cfun referenced in function main\n"
    r"C:\Users\Ada Lovelace\AppData\Local\Temp\cudamagic-cell-1\prog.exe : fatal error LNK1120: "
    r"2 unresolved externals"
)


def link_failure(tmp_path, log: str, body: str, headers: dict | None = None) -> CudaLinkError:
    """What building ``body`` raises when nvcc printed ``log``.

    What building ``body`` (with saved ``headers``: name -> text) raises when nvcc printed ``log``
    and exited 1: the build's rewrite of the log, then its link check (as build.compile_program
    does).
    """
    ws = Workspace(str(tmp_path / "cache"))
    for name, text in (headers or {}).items():
        ws.save(name, text)
    src = os.path.join(str(tmp_path), "cudamagic-cell-q1w2e3r4", "cell.cu")
    text, diags = rewrite(log.replace("{cell}", src), {src: 0}, ws, body.splitlines())
    assert [
        d.severity for d in diags if d.severity != "warning"
    ] == []  # no compiler error: a link failure
    with pytest.raises(CudaLinkError, match=r"^linking failed \(nvcc exit status 1\): ") as info:
        _raise_link_error(text, 1, body, ws, ws.included(body))
    return info.value


def test_gnu_ld_failure_is_the_cell_lines_that_use_each_symbol(tmp_path):
    exc = link_failure(tmp_path, LD_LOG, CELL)
    assert str(exc) == (
        "linking failed (nvcc exit status 1): 3 undefined symbols; the cell compiled, but "
        "nothing defines them:\n"
        "cell line 7: link error: `helper(int)` is used here but never defined (declared at cell "
        "line 3): define it, "
        "or link the file or library that does\n"
        '       7 |   printf("%d\\n", helper(3));\n'
        "cell line 8: link error: `ns::scale(float, int)` is used here but never defined "
        "(declared at cell line 4): "
        "define it, or link the file or library that does\n"
        "       8 |   float x = ns::scale(1.f, 2);\n"
        "cell line 9: link error: `void add<float>(float*, int)` is used here but never defined "
        "(declared at cell line "
        "5): define it, or link the file or library that does\n"
        "       9 |   add<float>(&x, 1);"
    )
    assert exc.symbols == SYMBOLS
    assert exc.diagnostics[0] == Diagnostic(
        file="cell",
        line=6,
        cell_line=7,
        severity="link error",
        source='  printf("%d\\n", helper(3));',
        message="`helper(int)` is used here but never defined (declared at cell line 3): define it, or link the file "
        "or library that does",
    )
    assert [(d.line, d.cell_line) for d in exc.diagnostics] == [(6, 7), (7, 8), (8, 9)]
    assert (
        "undefined reference to `helper(int)'" in exc.log and "tmpxft" not in exc.log
    )  # the whole linker log
    # IPython shows the message alone, no traceback (the cell's code failed, not cudamagic)
    assert exc._render_traceback_() == [f"CudaLinkError: {exc}"]


def test_mangled_names_are_demangled_with_cxxfilt(tmp_path):
    exc = link_failure(tmp_path, LD_MANGLED_LOG, CELL)
    assert exc.symbols == SYMBOLS
    assert [d.cell_line for d in exc.diagnostics] == [7, 8, 9]


def test_without_cxxfilt_names_stay_mangled_and_are_not_placed_on_a_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no c++filt (Windows, or binutils missing)
    exc = link_failure(tmp_path, LD_MANGLED_LOG, CELL)
    assert exc.symbols == ["_Z6helperi", "_ZN2ns5scaleEfi", "_Z3addIfEvPT_i"]
    assert [(d.file, d.line, d.cell_line, d.source) for d in exc.diagnostics] == [
        ("cell", 0, 0, "")
    ] * 3
    first = exc.diagnostics[0]
    # no location and no source line: the message only
    assert first.text() == (
        "link error: `_Z6helperi` is not defined anywhere: define it, or link the library that "
        'does with --nvcc-flags "-lNAME"'
    )
    assert str(exc).splitlines()[1] == first.text()


def _cxxfilt(tmp_path, script: str | None) -> None:
    """A ``c++filt`` first on PATH: a shell script, or (None) a file marked executable that is not a program."""
    path = tmp_path / "c++filt"
    path.write_text(f"#!/bin/sh\n{script}\n" if script is not None else "not a program\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize(
    "script",
    [
        None,  # cannot be started (OSError: exec format error)
        'for a in "$@"; do echo "x $a"; done; exit 1',  # fails (a line per name, but exit status 1)
        'echo "c++filt: warning"; exit 0',  # a line count that does not match the names
        "exec sleep 30",  # hangs: killed after CXXFILT_TIMEOUT_S
    ],
)
def test_a_broken_cxxfilt_leaves_names_as_they_are(tmp_path, monkeypatch, script):
    monkeypatch.setattr(link, "CXXFILT_TIMEOUT_S", 0.5)
    _cxxfilt(tmp_path, script)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert link.demangle(["_Z3devi", "cfun", "_ZN2ns3devEi"]) == {
        "_Z3devi": "_Z3devi",
        "cfun": "cfun",
        "_ZN2ns3devEi": "_ZN2ns3devEi",
    }


def test_demangle_maps_each_name_once(tmp_path, monkeypatch):
    # c++filt sees the mangled names only, once each; the output is stripped of its spaces
    _cxxfilt(
        tmp_path, 'echo "$#" > "$(dirname "$0")/count"; for a in "$@"; do echo " d:$a  "; done'
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert link.demangle(["_Z3devi", "cfun", "_Z3devi", "_Zx"]) == {
        "_Z3devi": "d:_Z3devi",
        "cfun": "cfun",
        "_Zx": "d:_Zx",
    }
    assert (tmp_path / "count").read_text().strip() == "2"
    (tmp_path / "count").unlink()
    assert link.demangle(["cfun", "main"]) == {"cfun": "cfun", "main": "main"}
    assert not (tmp_path / "count").exists()  # nothing mangled: c++filt is not run


def test_symbols_from_each_linker():
    assert link.undefined_symbols(MSVC_LOG) == ["int __cdecl helper(int)", "cfun"]
    assert link.undefined_symbols(LLD_LOG) == ["helper(int)"]
    assert link.undefined_symbols(LD_LOG) == SYMBOLS
    assert link.undefined_symbols(CUINIT_LOG + CUINIT_LOG) == ["cuInit"]
    ptxas_ns = "ptxas fatal   : Unresolved extern function '_ZN2ns3devEi'\n"
    assert link.undefined_symbols(NVLINK_LOG + ptxas_ns + NVLINK_LOG) == [
        "dev(int)",
        "ns::dev(int)",
    ]  # once each
    assert link.undefined_symbols(PTXAS_LOG) == ["dev(int)"]
    # a mangled and a demangled report of one function are one symbol
    assert link.undefined_symbols(LD_MANGLED_LOG + LD_LOG) == SYMBOLS
    assert link.undefined_symbols("collect2: error: ld returned 1 exit status\n") == []


def test_device_function_is_placed_at_the_kernel_that_calls_it(tmp_path):
    body = "__device__ int dev(int);\n__global__ void k(int *p) { *p = dev(1); }\nint main() { return 0; }\n"
    for log in (PTXAS_LOG, NVLINK_LOG):
        exc = link_failure(tmp_path, log, body)
        assert str(exc).startswith(
            "linking failed (nvcc exit status 1): 1 undefined symbol; the cell compiled, "
            "but nothing defines it:\ncell line 3: link error: `dev(int)` is used here but "
            "never defined (declared at cell line 2)"
        )


def test_library_function_gets_the_flag_that_links_it(tmp_path):
    exc = link_failure(
        tmp_path, CUINIT_LOG, "#include <cuda.h>\nint main() {\n  return cuInit(0);\n}\n"
    )
    assert exc.symbols == ["cuInit"]
    assert exc.diagnostics[0].text() == (
        "cell line 4: link error: `cuInit` is not defined anywhere: it is in a CUDA "
        'library; link it with --nvcc-flags "-lcuda"\n       4 |   return cuInit(0);'
    )


def test_function_declared_and_used_on_one_line_is_shown_at_its_declaration(tmp_path):
    log = LD_LOG.splitlines()[1] + "\n"
    exc = link_failure(tmp_path, log, "int helper(int); int main() { return helper(1); }\n")
    assert exc.diagnostics[0].text() == (
        "cell line 2: link error: `helper(int)` is declared here but never defined: define it, "
        "or link the file or "
        "library that does\n       2 | int helper(int); int main() { return helper(1); }"
    )


def test_symbol_used_in_a_saved_header_is_shown_there(tmp_path):
    header = "#pragma once\nint mul(int, int);\ninline int sq(int v) {\n  return mul(v, v);\n}\n"
    log = (
        "/usr/bin/ld: tmpxft_00007a54_00000000-6_cell.cudafe1.cpp:(.text+0x3c): undefined "
        "reference to "
        "`mul(int, int)'\n"
    )
    exc = link_failure(
        tmp_path, log, '#include "m.cuh"\nint main() { return sq(3); }\n', {"m.cuh": header}
    )
    d = exc.diagnostics[0]
    assert (d.file, d.line, d.cell_line) == ("m.cuh", 4, 5)
    assert d.text() == (
        "m.cuh line 4 (cell line 5 of the `%%cuda --save m.cuh` cell): link error: `mul(int, int)` "
        "is used here but never defined (declared at m.cuh line 2): define it, or link the file or "
        "library that does\n       5 |   return mul(v, v);"
    )


def test_cell_is_searched_before_headers_and_the_first_line_wins(tmp_path):
    header = "#pragma once\nint helper(int);\ninline int h2() { return helper(2); }\n"
    body = (
        '#include "h.cuh"\nint helper(int);\nint helper(int);\nint main() {\n  return helper(1) '
        "+ helper(0);\n"
        "}\nint other() { return helper(3); }\n"
    )
    assert link.locate("helper(int)", body.splitlines(), {"h.cuh": header.splitlines()}) == (
        ("cell", 2, "int helper(int);"),
        ("cell", 5, "  return helper(1) + helper(0);"),
    )
    assert link.locate(
        "helper(int)",
        ["int main() {", "  return helper(1);", "}"],
        {"h.cuh": header.splitlines(), "i.cuh": ["int helper(int);  "]},
    ) == (("h.cuh", 2, "int helper(int);"), ("cell", 2, "  return helper(1);"))


def test_locate_prefers_cell_then_headers():
    cell = [
        '#include "h.cuh"',
        "int helper(int);  // helper( in a comment",
        "int main() {",
        "  return helper(2) + twice(1);",
        "}",
    ]
    headers = {"h.cuh": ["#pragma once", "int twice(int v);"]}
    assert link.locate("helper(int)", cell, headers) == (("cell", 2, cell[1]), ("cell", 4, cell[3]))
    assert link.locate("twice(int)", cell, headers) == (
        ("h.cuh", 2, "int twice(int v);"),
        ("cell", 4, cell[3]),
    )
    assert link.locate("absent()", cell, headers) == (None, None)
    commented = [
        "int helper(int);",
        "// helper(2) below is defined in libhelper",
        "int f() { return helper(2); }",
    ]
    assert link.locate("helper(int)", commented, {})[1] == ("cell", 3, commented[2])
    diag = link.diagnostics(["twice(int)"], cell, headers)[0]
    assert diag.cell_line == 5 and "declared at h.cuh line 2" in diag.message


@pytest.mark.parametrize(
    "statement",
    [
        "helper(1);",
        "return helper(1);",
        "if (n) n = 0; else helper(1);",
        "switch (n) { case 1: helper(1); }",
        "throw helper(1);",
        "co_return helper(1);",
        "co_await helper(1);",
        "new helper(1);",
        "delete helper(1);",
        "sizeof helper(1);",
        "int r = helper(1);",
        "auto f = &helper;",
        "n += helper(1) * 2;",
    ],
)
def test_a_statement_that_calls_the_function_is_a_use_not_a_declaration(statement):
    cell = ["int helper(int);", "void f(int n) {", f"  {statement}", "}"]
    assert link.locate("helper(int)", cell, {}) == (("cell", 1, cell[0]), ("cell", 3, cell[2]))


@pytest.mark.parametrize(
    "declaration",
    [
        "int helper(int);",
        "static int helper(int v) ;",
        "ns::Vec<int, 2> & helper(int*) ;",
        "struct Box { int helper() const; };",
        "namespace ns { float helper(float, int); }",
        'extern "C" int helper(int);',
        'extern "C++" int helper(int);',
        "X helper(int);",
    ],
)
def test_declarations_are_found(declaration):
    assert link.locate("helper(int)", [declaration], {}) == (("cell", 1, declaration), None)


@pytest.mark.parametrize(
    "line",
    [
        "int helper(int) { return 1; }",
        "int helper(int v) const {",
        "// int helper(int);",
        "int helperx(int);",
        "x + helper(1);",
        'extern "D" int helper(int);',
    ],
)
def test_definitions_comments_and_other_names_are_not_declarations(line):
    declared, _ = link.locate("helper(int)", [line], {})
    assert declared is None


@pytest.mark.parametrize(
    "symbol,name",
    [
        ("helper(int)", "helper"),
        ("ns::scale(float, int)", "scale"),
        ("int __cdecl helper(int)", "helper"),
        ("void add<float>(float*, int)", "add"),
        ("cuInit", "cuInit"),
        ("a::b<int, c<d>>::run()", "run"),
        ("void ns::f<c<int>, 3>(int)", "f"),
        ("Box::get() const", "get"),
        ("void a<b<c>>()", "a"),
        ("(anonymous namespace)::helper(int)", "helper"),
        ("operator+(Vec, Vec)", "operator+"),
        ("bool operator><int>(A, A)", "operator>"),
        ("void apply(int (*)(int))", "apply"),
        ("Functor::operator()(int) const", "operator"),
        ("Timer::~Timer()", "~Timer"),
        ("ns::Box<int>::Box(int)", "Box"),
        ("bool operator<(A const&, A const&)", "operator<"),
    ],
)
def test_base_name(symbol, name):
    assert link.base_name(symbol) == name


@pytest.mark.parametrize(
    "symbol,flag",
    [
        ("cublasCreate_v2", "-lcublas"),
        ("cublasLtMatmul", "-lcublasLt"),
        ("cufftPlan1d", "-lcufft"),
        ("curandCreateGenerator", "-lcurand"),
        ("cusparseCreate", "-lcusparse"),
        ("cusolverDnCreate", "-lcusolver"),
        ("nvrtcCreateProgram", "-lnvrtc"),
        ("nvtxRangePushA", "-lnvToolsExt"),
        ("cudnnCreate", "-lcudnn"),
        ("ncclCommInitRank", "-lnccl"),
        ("cuInit", "-lcuda"),
        ("cuMemAlloc_v2", "-lcuda"),
        ("cute_helper", None),
        ("cudaMalloc", None),
        ("sqlite3_open", None),
        ("int __cdecl cuInit(unsigned int)", "-lcuda"),
    ],
)
def test_library_functions_get_their_flag(symbol, flag):
    assert link.library_flag(symbol) == flag


# nvcc 13.0: a function in an anonymous namespace and a call operator, declared and never defined
# (ANON_CELL)
ANON_LOG = """{cell}(1): warning #114-D: function "<unnamed>::helper" was referenced but not defined
  namespace { int helper(int); }
                  ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

/usr/bin/ld: /tmp/tmpxft_000023a6_00000000-11_cell.o: in function `main':
tmpxft_000023a6_00000000-6_cell.cudafe1.cpp:(.text+0x3d): undefined reference to `(anonymous namespace)::helper(int)'
/usr/bin/ld: tmpxft_000023a6_00000000-6_cell.cudafe1.cpp:(.text+0x50): undefined reference to `Functor::operator()(int) const'
/usr/bin/ld: cell: hidden symbol `_ZN35_GLOBAL__N__214d9203_7_cell_cu_main6helperEi' isn't defined
/usr/bin/ld: final link failed: bad value
collect2: error: ld returned 1 exit status
"""
ANON_CELL = (
    "namespace { int helper(int); }\nstruct Functor { int operator()(int) const; };\nint main() {\n"
    "  Functor f;\n  return helper(1) + f(2);\n}\n"
)


def test_anonymous_namespace_and_call_operator_are_placed(tmp_path):
    exc = link_failure(tmp_path, ANON_LOG, ANON_CELL)
    assert exc.symbols == ["(anonymous namespace)::helper(int)", "Functor::operator()(int) const"]
    assert [(d.cell_line, d.message.split(": define")[0]) for d in exc.diagnostics] == [
        (
            6,
            "`(anonymous namespace)::helper(int)` is used here but never defined (declared at "
            "cell line 2)",
        ),
        (3, "`Functor::operator()(int) const` is declared here but never defined"),
    ]


# nvcc 13.0: a class whose constructor and destructor are declared and never defined (TIMER_CELL)
TIMER_LOG = """/usr/bin/ld: /tmp/tmpxft_000045cf_00000000-11_cell.o: in function `main':
tmpxft_000045cf_00000000-6_cell.cudafe1.cpp:(.text+0x44): undefined reference to `Timer::Timer(int)'
/usr/bin/ld: tmpxft_000045cf_00000000-6_cell.cudafe1.cpp:(.text+0x55): undefined reference to `Timer::~Timer()'
collect2: error: ld returned 1 exit status
"""
TIMER_CELL = (
    "struct Timer {\n  explicit Timer(int n);\n  ~Timer();\n  int n_;\n};\nint main() {\n  Timer "
    "t(3);\n"
    "  return 0;\n}\n"
)


def test_constructor_and_destructor_are_placed(tmp_path):
    exc = link_failure(tmp_path, TIMER_LOG, TIMER_CELL)
    assert exc.symbols == ["Timer::Timer(int)", "Timer::~Timer()"]
    assert [(d.cell_line, d.source, d.message.split(": define")[0]) for d in exc.diagnostics] == [
        (
            8,
            "  Timer t(3);",
            "`Timer::Timer(int)` is used here but never defined (declared at cell line 3)",
        ),
        (4, "  ~Timer();", "`Timer::~Timer()` is declared here but never defined"),
    ]


@pytest.mark.parametrize(
    "symbol,cell,expect",
    [
        # a member function named like its class's constructor is not one, and a call statement is a
        # use
        (
            "Timer::start(int)",
            ["struct Timer {", "  start(int n);", "};", "void f(Timer t) {", "  t.start(1);", "}"],
            (None, ("cell", 2, "  start(int n);")),
        ),
        (
            "start(int)",
            ["struct start;", "int start(int);", "int f() { return start(1); }"],
            (("cell", 2, "int start(int);"), ("cell", 3, "int f() { return start(1); }")),
        ),
        (
            "ns::Box<int>::Box(int)",
            ["template <class T> struct Box {", "  Box(T v);", "};", "Box<int> b(1);"],
            (("cell", 2, "  Box(T v);"), ("cell", 4, "Box<int> b(1);")),
        ),
        (
            "Box::~Box()",
            ["class Box { public:", "  virtual ~Box();", "};", "Box::Box() {}"],
            (("cell", 2, "  virtual ~Box();"), None),
        ),
    ],
)
def test_members_and_their_class(symbol, cell, expect):
    assert link.locate(symbol, cell, {}) == expect


def test_an_operator_used_as_a_sign_is_not_placed_on_a_line(tmp_path):
    log = "/usr/bin/ld: tmpxft_1-6_cell.cudafe1.cpp:(.text+0x7e): undefined reference to `operator>(Vec, Vec)'\n"
    body = "struct Vec { int x; };\nbool operator>(Vec, Vec);\nint main() {\n  return Vec{1} > Vec{2};\n}\n"
    d = link_failure(tmp_path, log, body).diagnostics[0]
    assert (d.line, d.message) == (
        0,
        (
            "`operator>(Vec, Vec)` is not defined anywhere: define it, or link the "
            'library that does with --nvcc-flags "-lNAME"'
        ),
    )


def test_function_from_no_known_library_says_to_link_one(tmp_path):
    log = "/usr/bin/ld: tmpxft_1-6_cell.cudafe1.cpp:(.text+0x3c): undefined reference to `sqlite3_open'\n"
    exc = link_failure(
        tmp_path, log, "#include <sqlite3.h>\nint main() { return sqlite3_open(0, 0); }\n"
    )
    assert exc.diagnostics[0].message == (
        "`sqlite3_open` is not defined anywhere: define it, or link the library "
        'that does with --nvcc-flags "-lNAME"'
    )
    assert exc.diagnostics[0].cell_line == 3


def test_a_log_without_a_missing_symbol_is_not_a_link_failure(tmp_path):
    ws = Workspace(str(tmp_path))
    assert (
        _raise_link_error(
            "collect2: error: ld returned 1 exit status", 1, "int main() {}\n", ws, {}
        )
        is None
    )
