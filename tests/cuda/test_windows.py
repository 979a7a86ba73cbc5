"""%%cuda on Windows, presented on Linux.

%%cuda on Windows, presented on Linux as tests/core/test_platform.py does (the platform module's
SYSTEM is "windows" and the POSIX-only names are gone): nvcc.exe and MSVC's cl.exe are stand-ins in
a folder whose path has spaces; the stand-in nvcc.exe answers -V and --list-gpu-arch like NVIDIA's
and records every command line it gets, then "builds" prog.exe (a script that prints), so the whole
magic runs: discovery, the cl.exe check with its fix, the argv list (no shell quoting), the .exe
output, no GNU-ld-only --wrap, Windows-style --nvcc-flags.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from IPython.core.error import UsageError

from cudamagic.core import nvcc, platform

from .conftest import cuda_magics

FAKE_NVCC = r"""#!{python}
import json, os, sys
args = sys.argv[1:]
if args == ["-V"]:
    print("nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.6, V12.6.85\n"
          "Build cuda_12.6.r12.6/compiler.35059454_0")
elif args == ["--list-gpu-arch"]:
    print("\n".join("compute_%d" % a for a in (50, 60, 70, 75, 80, 86, 89, 90)))
else:
    src = next(a for a in args if a.endswith(".cu"))
    with open({record!r}, "a") as f:
        f.write(json.dumps({{"argv": sys.argv, "source": open(src).read()}}) + "\n")
    out = args[args.index("-o") + 1]
    with open(out, "w") as f:
        f.write("#!/bin/sh\necho hello from ${{0##*/}}\n")
    os.chmod(out, 0o755)
"""


@pytest.fixture
def win_cuda(windows, tmp_path, monkeypatch):
    """Windows presented, with a CUDA 12.6 toolkit.

    Windows presented, with a CUDA 12.6 toolkit installed the way NVIDIA's installer does (CUDA_PATH
    set), in a Program Files folder under tmp_path, and the user's temporary folder also a path with
    spaces.
    """
    program_files = tmp_path / "Program Files"
    toolkit = program_files / "NVIDIA GPU Computing Toolkit" / "CUDA" / "v12.6"
    (toolkit / "bin").mkdir(parents=True)
    record = tmp_path / "nvcc calls.jsonl"
    nvcc = toolkit / "bin" / "nvcc.exe"
    nvcc.write_text(FAKE_NVCC.format(python=sys.executable, record=str(record)))
    nvcc.chmod(0o755)
    temp = tmp_path / "Ada Lovelace" / "AppData" / "Local" / "Temp"
    temp.mkdir(parents=True)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setenv("CUDA_PATH", str(toolkit))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setenv("ProgramFiles", str(program_files))
    monkeypatch.setenv("ProgramFiles(x86)", str(tmp_path / "Program Files (x86)"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    return {
        "nvcc": str(nvcc),
        "record": record,
        "program_files": program_files,
        "tmp": tmp_path,
        "temp": str(temp),
    }


def _cl_exe(root, year="2022", edition="BuildTools", version="14.40.33807"):
    folder = (
        root
        / "Microsoft Visual Studio"
        / year
        / edition
        / "VC"
        / "Tools"
        / "MSVC"
        / version
        / "bin"
        / "Hostx64"
        / "x64"
    )
    folder.mkdir(parents=True)
    (folder / "cl.exe").write_bytes(b"MZ")
    (folder / "cl.exe").chmod(0o755)
    return folder


def _calls(record):
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


HELLO = '%%cuda\n#include <cstdio>\nint main() { printf("hi\\n"); }\n'


def test_nvcc_exe_found_by_cuda_path_then_default_folders(win_cuda, monkeypatch):
    assert nvcc.find_nvcc() == win_cuda["nvcc"]
    monkeypatch.delenv("CUDA_PATH")
    cuda = win_cuda["program_files"] / "NVIDIA GPU Computing Toolkit" / "CUDA"
    for version in ("v11.8", "v12.10"):
        (cuda / version / "bin").mkdir(parents=True)
        (cuda / version / "bin" / "nvcc.exe").write_bytes(b"MZ")
        (cuda / version / "bin" / "nvcc.exe").chmod(0o755)
    # not on PATH: the installer's folders, newest first (12.10 is newer than 12.6)
    assert nvcc.find_nvcc() == str(cuda / "v12.10" / "bin" / "nvcc.exe")
    assert [os.path.basename(d) for d in nvcc.windows_toolkits()] == [
        "v12.10",
        "v12.6",
        "v11.8",
    ]
    monkeypatch.setenv("PATH", str(cuda / "v11.8" / "bin"))
    assert nvcc.find_nvcc() == str(
        cuda / "v11.8" / "bin" / "nvcc.exe"
    )  # PATH wins over the defaults


def test_cl_exe_missing_is_one_usage_error_with_the_fix(cuda_ip, win_cuda):
    with pytest.raises(UsageError, match=r"cl\.exe") as info:
        cuda_ip.run_cell_magic("cuda", "", "int main() {}\n")
    msg = str(info.value)
    assert type(info.value) is UsageError
    assert "winget install Microsoft.VisualStudio.2022.BuildTools" in msg
    assert "x64 Native Tools Command Prompt for VS" in msg and "\n" not in msg
    assert _calls(win_cuda["record"]) == []  # refused before compiling


def test_cl_exe_installed_but_not_on_path_names_it(cuda_ip, win_cuda):
    folder = _cl_exe(win_cuda["program_files"])
    with pytest.raises(UsageError, match=r"Visual Studio's is installed at") as info:
        cuda_ip.run_cell_magic("cuda", "", "int main() {}\n")
    msg = str(info.value)
    vcvars = (
        win_cuda["program_files"]
        / "Microsoft Visual Studio"
        / "2022"
        / "BuildTools"
        / "VC"
        / "Auxiliary"
        / "Build"
        / "vcvars64.bat"
    )
    assert f'`"{vcvars}"`' in msg and f"-ccbin '{folder}'" in msg


def test_program_built_as_exe_with_an_argv_list(cuda_ip, win_cuda, monkeypatch, capfd):
    cl = _cl_exe(win_cuda["tmp"] / "VS tools")
    monkeypatch.setenv("PATH", str(cl))
    result = cuda_ip.run_cell(HELLO)
    assert result.success, result.error_in_exec
    assert "hello from prog.exe" in capfd.readouterr().out
    assert cuda_magics().last.path.endswith(os.sep + "prog.exe")
    (call,) = _calls(win_cuda["record"])
    argv = call["argv"]
    assert argv[0] == win_cuda["nvcc"] and " " in argv[0]  # a path with spaces, one element
    exe = argv[argv.index("-o") + 1]
    src = next(a for a in argv if a.endswith("cell.cu"))
    assert (
        exe.endswith("prog.exe")
        and exe.startswith(win_cuda["temp"])
        and src.startswith(win_cuda["temp"])
    )
    assert not any('"' in a or "'" in a for a in argv)  # no shell quoting anywhere
    assert not any("--wrap" in a for a in argv)  # GNU ld only
    assert cuda_ip.run_cell(HELLO).success  # cached prog.exe: nvcc is not called again
    assert len(_calls(win_cuda["record"])) == 1


def test_device_code_gets_the_exit_check_without_wrap(cuda_ip, win_cuda, monkeypatch, capfd):
    monkeypatch.setenv("PATH", str(_cl_exe(win_cuda["tmp"] / "VS tools")))
    assert cuda_ip.run_cell("%%cuda\n__global__ void k() {}\nint main() { return 0; }\n").success
    (call,) = _calls(win_cuda["record"])
    assert "cudamagic-exit-check" in call["source"] and "__wrap" not in call["source"]
    assert not any(a.startswith("-Xlinker") for a in call["argv"])


def test_ccbin_flag_with_a_windows_path(cuda_ip, win_cuda, capfd):
    folder = (
        r"C:\Program Files\Microsoft Visual Studio\2022\BuildTools"
        r"\VC\Tools\MSVC\14.40.33807\bin\Hostx64\x64"
    )
    result = cuda_ip.run_cell(
        HELLO.replace(
            "%%cuda",
            f"%%cuda --nvcc-flags \"-ccbin '{folder}'\" --args "
            r'"C:\data\in.bin 2"',
        )
    )
    assert result.success, result.error_in_exec  # no cl.exe on PATH: -ccbin names it
    (call,) = _calls(win_cuda["record"])
    assert call["argv"][-2:] == ["-ccbin", folder]  # backslashes kept, spaces inside one element


def test_windows_command_line_splitting(windows):
    assert platform.split_command_line(r'C:\data\in.bin "two words" 3') == [
        r"C:\data\in.bin",
        "two words",
        "3",
    ]
    windows.setattr(platform, "SYSTEM", "linux")
    assert platform.split_command_line(r"a\ b 'c d'") == ["a b", "c d"]  # POSIX rules


def test_torch_build_needs_cl_exe_on_windows(win_cuda, monkeypatch):
    pytest.importorskip("torch")
    from cudamagic.cuda.errors import CudaUsageError
    from cudamagic.cuda.torchext import check_prereqs

    monkeypatch.setattr("torch.utils.cpp_extension.is_ninja_available", lambda: True)
    with pytest.raises(CudaUsageError, match=r"no Microsoft C\+\+ compiler \(cl\.exe\)"):
        check_prereqs("int f() { return 1; }", lambda: None)
    monkeypatch.setenv("PATH", str(_cl_exe(win_cuda["tmp"] / "VS tools")))
    assert check_prereqs("int f() { return 1; }", lambda: None) is None
    assert platform.extension_suffix() == ".pyd"


def test_crash_status_is_named_on_windows(windows):
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.cuda.run import _check

    with pytest.raises(
        CudaProgramError, match=r"status 3221225477 \(0xC0000005: STATUS_ACCESS_VIOLATION"
    ):
        _check(3221225477, False, None, [], [], [])
    with pytest.raises(CudaProgramError, match=r"exited with status 3\.$"):
        _check(3, False, None, [], [], [])
    windows.setattr(platform, "SYSTEM", "linux")
    assert platform.windows_crash_name(3221225477) is None


def test_stdout_is_a_pipe_and_the_program_is_unbuffered_before_main(cuda_ip, win_cuda, capfd):
    # Windows has no pseudo-terminal: stdout stays a pipe, and the code appended to every cell
    # makes it unbuffered before main (MSVC's _IOLBF would buffer fully), in an MSVC initializer
    # section since there is no constructor attribute
    import io

    from cudamagic.cuda.run import run_program

    assert platform.output_terminal() is None
    out = io.StringIO()
    run_program(["/bin/sh", "-c", "[ -t 1 ] && echo terminal || echo pipe"], out=out)
    assert out.getvalue() == "pipe\n"
    assert cuda_ip.run_cell(HELLO.replace("%%cuda", "%%cuda --nvcc-flags '-ccbin C:\\VC'")).success
    (call,) = _calls(win_cuda["record"])
    appended = call["source"].split('#line 1 "cudamagic-line-buffering"')[1]
    win = appended.split("#ifdef _WIN32")[1].split("#else")[0]
    assert "setvbuf(stdout, nullptr, _IONBF, 0)" in win
    assert '#pragma section(".CRT$XCT", read)' in appended.split("#ifdef _MSC_VER")[1]
