"""%%cuda programs in a real shell: streaming, time-outs, failures, the cache, headers, options."""

from __future__ import annotations

import os
import stat
import sys
import time

import psutil
import pytest
from IPython.core.error import UsageError

from .conftest import NVCC, cuda_magics, needs_nvcc, wait_until

pytestmark = needs_nvcc

HELLO = '%%cuda\n#include <cstdio>\nint main() { printf("hello from the cell\\n"); return 0; }\n'
#: Device code that is never launched: built for the GPU's architecture, runs anywhere.
KERNEL_DEFINED = "__global__ void unused(int *p) { *p = 1; }\nint main() { return 0; }\n"


class TimedWriter:
    """A stand-in for sys.stdout that records when each write arrives."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append((time.monotonic(), text))
        return len(text)

    def flush(self):
        pass

    def text(self):
        return "".join(t for _, t in self.writes)


def test_host_program_runs_and_prints(cuda_ip, capfd):
    result = cuda_ip.run_cell(HELLO)
    assert result.success, result.error_in_exec
    assert "hello from the cell" in capfd.readouterr().out
    assert cuda_magics().last.cached is False


def test_output_streams_line_by_line(cuda_ip, monkeypatch):
    cell = (
        '%%cuda\n#include <cstdio>\n#include <unistd.h>\nint main() {\n  printf("first\\n"); '
        "fflush(stdout);\n"
        '  sleep(2);\n  printf("second\\n");\n}\n'
    )
    assert cuda_ip.run_cell(
        cell
    ).success  # compile once, so the timed run below is only the program
    out = TimedWriter()
    monkeypatch.setattr(sys, "stdout", out)
    start = time.monotonic()
    result = cuda_ip.run_cell(cell)
    end = time.monotonic()
    monkeypatch.undo()
    assert result.success, result.error_in_exec
    first = next(t for t, text in out.writes if "first" in text)
    assert first - start < 1.0
    assert end - first >= 1.0, "the first line must arrive while the program still runs"
    assert out.text().index("first") < out.text().index("second")


def test_timeout_kills_the_whole_tree(cuda_ip, capfd):
    from cudamagic.cuda.errors import CudaProgramError

    cell = (
        "%%cuda --timeout 1\n#include <cstdio>\n#include <unistd.h>\nint main() {\n  pid_t child "
        "= fork();\n"
        '  if (child == 0) { sleep(100); return 0; }\n  printf("child %d\\n", child); '
        "fflush(stdout);\n"
        "  sleep(100);\n}\n"
    )
    cuda_ip.run_cell(cell)  # compiles (and times out)
    capfd.readouterr()
    start = time.monotonic()
    result = cuda_ip.run_cell(cell)
    elapsed = time.monotonic() - start
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and exc.timed_out
    assert "--timeout 1 s" in str(exc)
    assert elapsed < 1 + 10  # killed at the limit, long before the program's own 100 s
    child = int(capfd.readouterr().out.split("child ")[1].split()[0])
    assert wait_until(
        lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    )


SLEEPS_1_5_S = (
    '#include <cstdio>\n#include <unistd.h>\nint main() { usleep(1500000); printf("woke\\n"); }\n'
)


def test_timeout_0_is_no_limit_and_the_config_default_is_named(cuda_ip, capfd):
    from traitlets import TraitError

    from cudamagic.cuda.errors import CudaProgramError

    settings = cuda_magics().settings
    cuda_ip.run_line_magic("config", "CudaMagics.cuda_timeout_s = 0.5")
    try:
        # --timeout 0 turns the configured limit off for this cell (the README's "0 = none")
        result = cuda_ip.run_cell("%%cuda --timeout 0\n" + SLEEPS_1_5_S)
        assert result.success, result.error_in_exec
        assert "woke" in capfd.readouterr().out
        # no flag: the configured limit applies, and the message names it and how to change it
        result = cuda_ip.run_cell("%%cuda\n" + SLEEPS_1_5_S)
        exc = result.error_in_exec
        assert isinstance(exc, CudaProgramError) and exc.timed_out
        assert "`%config CudaMagics.cuda_timeout_s = 0.5`" in str(
            exc
        ) and "--timeout 0.5" not in str(exc)
        assert "`%%cuda --timeout 600` (0: no limit)" in str(exc)
        # the trait takes 0 too (no limit), and refuses what --timeout refuses
        cuda_ip.run_line_magic("config", "CudaMagics.cuda_timeout_s = 0")
        assert settings.cuda_timeout_s == 0
        assert cuda_ip.run_cell("%%cuda\n" + SLEEPS_1_5_S).success
        with pytest.raises(TraitError, match=r"cuda_timeout_s"):
            settings.cuda_timeout_s = -1.0
        with pytest.raises(TraitError, match=r"cuda_timeout_s must be a finite number"):
            settings.cuda_timeout_s = float("inf")
    finally:
        cuda_ip.run_line_magic("config", "CudaMagics.cuda_timeout_s = 0")
    capfd.readouterr()


@pytest.mark.parametrize(
    "body,expect",
    [
        (
            '#include <cstdio>\nint main() { fprintf(stderr, "bad input\\n"); return 3; }\n',
            r"exited with status 3.*bad input",
        ),
        ("#include <csignal>\nint main() { raise(SIGSEGV); }\n", r"killed by SIGSEGV"),
    ],
)
def test_failures_fail_the_cell(cuda_ip, body, expect):
    from cudamagic.cuda.errors import CudaProgramError

    result = cuda_ip.run_cell("%%cuda\n" + body)
    assert isinstance(result.error_in_exec, CudaProgramError)
    with pytest.raises(CudaProgramError, match=f"(?s){expect}"):
        raise result.error_in_exec


def test_failing_cell_shows_the_message_and_no_cudamagic_frame(cuda_ip, capfd):
    from cudamagic.cuda.errors import CudaCompileError, CudaProgramError

    capfd.readouterr()
    result = cuda_ip.run_cell(
        '%%cuda\n#include <cstdio>\nint main() { fprintf(stderr, "bad input\\n"); return 3; }\n'
    )
    assert isinstance(result.error_in_exec, CudaProgramError)
    shown = capfd.readouterr().out  # IPython prints the traceback it shows on stdout
    assert "CudaProgramError: the program exited with status 3." in shown
    assert "cudamagic/" not in shown and "cudamagic\\" not in shown and "Traceback" not in shown
    assert "run_cell_magic" not in shown and "not cudamagic's frames" not in shown
    result = cuda_ip.run_cell("%%cuda\nint main() {\n  return undefined_name;\n}\n")
    assert isinstance(result.error_in_exec, CudaCompileError)
    shown = capfd.readouterr().out
    assert (
        "CudaCompileError: " in shown
        and 'cell line 3: error: identifier "undefined_name" is undefined' in shown
    )
    assert "cudamagic/" not in shown and "Traceback" not in shown


def test_kernel_without_driver_shows_the_no_driver_box(cuda_ip, capfd):
    from cudamagic.core.platform import nvidia_driver_present as _nvidia_driver_present
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.extension import current

    if _nvidia_driver_present():
        pytest.skip("an NVIDIA driver is present")
    cell = (
        '%%cuda\n#include <cstdio>\n__global__ void hello() { printf("hi\\n"); }\n'
        "int main() { hello<<<1, 3>>>(); return 0; }\n"
    )
    result = cuda_ip.run_cell(cell)
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and exc.cuda_error.startswith(
        "cudaErrorInsufficientDriver"
    )
    assert str(exc).startswith(
        "the program exited with status 0 but left a CUDA error: cudaErrorInsufficientDriver "
        "(35): CUDA driver version is insufficient"
    )
    assert str(exc).count("CUDA error") == 1
    expl = current().magics["explain"].last_explanation
    assert expl is not None and expl.entry.id == "cuda-program-no-driver"
    assert expl.context.facts["nvidia_driver_found"] is False
    assert "No NVIDIA driver was found" in capfd.readouterr().out


def test_host_only_program_with_cuda_header_needs_no_driver(cuda_ip, capfd):
    # no device code: no exit check is added, so a host program that merely includes CUDA headers
    # runs
    result = cuda_ip.run_cell(
        "%%cuda\n#include <cuda_runtime.h>\n#include <cstdio>\n"
        'int main() { printf("%d\\n", CUDART_VERSION >= 12000); }\n'
    )
    assert result.success, result.error_in_exec
    assert capfd.readouterr().out.strip().endswith("1")


def test_unchanged_rerun_calls_nvcc_zero_times(cuda_ip, tmp_path, monkeypatch, capfd):
    from cudamagic.core import nvcc as nvcc_module

    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    count = tmp_path / "calls"
    wrapper = wrapper_dir / "nvcc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {count}\nexec {os.path.realpath(NVCC)} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(nvcc_module, "_info_cache", {})

    def calls():
        return len(count.read_text().splitlines()) if count.exists() else 0

    assert cuda_ip.run_cell(HELLO).success
    first = calls()
    assert first >= 1 and cuda_magics().last.path
    assert cuda_ip.run_cell(HELLO).success
    assert calls() == first
    assert cuda_magics().last.cached is True
    assert capfd.readouterr().out.count("hello from the cell") == 2
    assert cuda_ip.run_cell(HELLO.replace("hello", "hi")).success  # a changed cell compiles again
    assert calls() == first + 1


def test_saved_header_is_included_and_part_of_the_cache_key(cuda_ip, capfd):
    assert cuda_ip.run_cell(
        "%%cuda --save scale.cuh\ninline int scale(int v) { return 3 * v; }\n"
    ).success
    use = (
        '%%cuda\n#include <cstdio>\n#include "scale.cuh"\n'
        'int main() { printf("%d\\n", scale(7)); }\n'
    )
    assert cuda_ip.run_cell(use).success
    assert capfd.readouterr().out.strip().endswith("21")
    assert cuda_ip.run_cell(
        "%%cuda --save scale.cuh\ninline int scale(int v) { return 5 * v; }\n"
    ).success
    assert cuda_ip.run_cell(use).success
    assert cuda_magics().last.cached is False
    assert capfd.readouterr().out.strip().endswith("35")


def test_args_reach_the_program(cuda_ip, capfd):
    cell = (
        "%%cuda --args \"1024 'two words'\"\n#include <cstdio>\nint main(int argc, char **argv) {\n"
        '  for (int i = 1; i < argc; ++i) printf("[%s]", argv[i]);\n}\n'
    )
    assert cuda_ip.run_cell(cell).success
    assert "[1024][two words]" in capfd.readouterr().out


def test_clear_cache(cuda_ip, capfd):
    assert cuda_ip.run_cell(HELLO).success
    cuda_ip.run_line_magic("cuda", "--clear-cache")
    assert "removed 1 cached build" in capfd.readouterr().out
    assert cuda_ip.run_cell(HELLO).success
    assert cuda_magics().last.cached is False


def test_cache_is_bounded(cuda_ip):
    cuda_ip.run_line_magic("config", "CudaMagics.cuda_cache_max_bytes = 1")
    try:
        assert cuda_ip.run_cell(HELLO).success
        assert cuda_ip.run_cell(HELLO.replace("hello", "bye")).success
        root = cuda_magics()._workspace().root
        assert len(os.listdir(os.path.join(root, "prog"))) <= 1
    finally:
        cuda_ip.run_line_magic("config", "CudaMagics.cuda_cache_max_bytes = 2147483648")


@pytest.mark.parametrize(
    "line,match",
    [
        ("--arch foo", r"--arch 'foo' is not a GPU architecture"),
        (
            "--timeout -1",
            r"--timeout must be a positive number of seconds, or 0 for no limit, not -1\.0",
        ),
        (
            "--timeout inf",
            r"--timeout must be a positive number of seconds, or 0 for no limit, not inf",
        ),
        ("--save ../x.cuh", r"is not a header name"),
        ("--torch 1bad", r"give the C\+\+ function names"),
        ("--profile perf", r"choose ncu"),
        ('--args "unclosed', r"cannot split the arguments"),
        ("--bogus", r"unrecognized arguments"),
        ("--clear-cache", r"is a line magic"),
        ("--skip-without cpu", r"--skip-without 'cpu': choose nvcc .* or gpu"),
    ],
)
def test_bad_options_are_one_usage_error(cuda_ip, line, match):
    with pytest.raises(UsageError, match=match) as info:
        cuda_ip.run_cell_magic("cuda", line, "int main() {}\n")
    assert type(info.value) is UsageError


def test_line_magic_without_clear_cache(cuda_ip):
    with pytest.raises(UsageError, match=r"only takes --clear-cache"):
        cuda_ip.run_line_magic("cuda", "")


def test_arch_override_and_too_old_arch(cuda_ip):
    assert cuda_ip.run_cell(HELLO.replace("%%cuda", "%%cuda --arch sm_90")).success
    assert cuda_magics().last.archs == ("90",)
    with pytest.raises(UsageError, match=r"sm_35 .* is too old for nvcc"):
        cuda_ip.run_cell_magic("cuda", "--arch sm_35", "int main() {}\n")


def test_gpu_architecture_from_nvml(cuda_ip, fake_nvml):
    from tests import fake_nvml as fm

    scenario = dict(fm.SCENARIOS["one_gpu"], cuda_driver_version=13000)
    fake_nvml(scenario)
    assert cuda_ip.run_cell("%%cuda\n" + KERNEL_DEFINED).success
    assert cuda_magics().last.archs == ("90",)
    assert cuda_ip.run_cell(HELLO).success  # host-only code: no architecture, nvcc's default
    assert cuda_magics().last.archs == ()


def test_driver_older_than_toolkit_is_refused_before_compiling(cuda_ip, fake_nvml):
    fake_nvml("one_gpu")  # driver supports CUDA 12.4; nvcc here is 13.x
    with pytest.raises(UsageError, match=r"driver supports CUDA up to 12\.4, older than nvcc"):
        cuda_ip.run_cell_magic("cuda", "", KERNEL_DEFINED)
    assert cuda_ip.run_cell(HELLO).success  # a host-only program does not need the driver


def test_no_nvcc_says_how_to_get_one(cuda_ip, monkeypatch, tmp_path):
    from cudamagic.core import nvcc

    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nvcc, "wheel_folders", lambda: [])
    with pytest.raises(
        UsageError, match=r"no nvcc .* `%pip install nvidia-cuda-nvcc nvidia-cuda-runtime`"
    ):
        cuda_ip.run_cell_magic("cuda", "", "int main() {}\n")


def test_profile_without_the_tool(cuda_ip, monkeypatch):
    import shutil

    if shutil.which("ncu"):
        pytest.skip("ncu is installed")
    with pytest.raises(UsageError, match=r"Nsight Compute \(ncu\) is not on PATH"):
        cuda_ip.run_cell_magic("cuda", "--profile ncu", "int main() {}\n")


def test_unload_removes_the_magic_and_saved_headers(cuda_ip):
    assert cuda_ip.run_cell("%%cuda --save gone.cuh\nint gone();\n").success
    saved = cuda_magics()._workspace().saved_dir
    assert os.path.isfile(os.path.join(saved, "gone.cuh"))
    cuda_ip.run_line_magic("unload_ext", "cudamagic")
    try:
        assert not os.path.exists(saved)
        assert "cuda" not in cuda_ip.magics_manager.magics["cell"]
    finally:
        cuda_ip.run_line_magic("load_ext", "cudamagic")


def _interrupt_after(delay_s: float):
    import _thread
    import threading

    timer = threading.Timer(delay_s, _thread.interrupt_main)
    timer.start()
    return timer


def _our_children():
    return [
        p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE
    ]


def test_interrupt_during_compile_leaves_no_cache_entry(cuda_ip, tmp_path, monkeypatch):
    from cudamagic.core import nvcc as nvcc_module

    # a compile that takes long on any machine: nvcc behind a wrapper that waits 5 s before
    # compiling (the version and architecture queries pass straight through), so the interrupt lands
    # during the compile
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    wrapper = wrapper_dir / "nvcc"
    wrapper.write_text(
        '#!/bin/sh\ncase "$*" in *-V*|*--version*|*--list-gpu*) ;; *) sleep 5 ;; esac\n'
        f'exec {os.path.realpath(NVCC)} "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{wrapper_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(nvcc_module, "_info_cache", {})
    before = {p.pid for p in _our_children()}
    timer = _interrupt_after(1.2)
    try:
        result = cuda_ip.run_cell(HELLO.replace("hello", "interrupted"))
    finally:
        timer.cancel()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    root = cuda_magics()._workspace().root
    assert (
        not os.path.isdir(os.path.join(root, "prog"))
        or os.listdir(os.path.join(root, "prog")) == []
    )
    # nvcc and its compilers are gone
    assert wait_until(lambda: {p.pid for p in _our_children()} <= before)


def test_interrupt_kills_a_running_program(cuda_ip, capfd):
    body = (
        '#include <cstdio>\n#include <unistd.h>\nint main() {\n  printf("pid %d\\n", getpid()); '
        "fflush(stdout);\n"
        "  sleep(100);\n}\n"
    )
    cuda_ip.run_cell(
        "%%cuda --timeout 0.5\n" + body
    )  # compiles; the time-out is not part of the cache key
    capfd.readouterr()
    timer = _interrupt_after(1.0)
    start = time.monotonic()
    try:
        result = cuda_ip.run_cell("%%cuda\n" + body)
    finally:
        timer.cancel()
    assert isinstance(result.error_in_exec, KeyboardInterrupt)
    assert time.monotonic() - start < 1 + 20  # stopped at the interrupt, not after the 100 s sleep
    captured = capfd.readouterr()
    pid = int(captured.out.split("pid ")[1].split()[0])
    assert "were killed" in captured.err
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_program_that_checks_for_a_gpu_and_skips_passes(cuda_ip, capfd):
    cell = (
        "%%cuda\n#include <cstdio>\n__global__ void k() {}\nint main() {\n  int n = 0;\n"
        "  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {\n    cudaGetLastError();\n"
        '    printf("skipped: no GPU\\n");\n    return 0;\n  }\n  k<<<1, 1>>>();\n'
        "  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;\n}\n"
    )
    result = cuda_ip.run_cell(cell)
    assert result.success, result.error_in_exec
    from cudamagic.core.platform import nvidia_driver_present as _nvidia_driver_present

    if not _nvidia_driver_present():
        assert "skipped: no GPU" in capfd.readouterr().out


def test_timeout_also_stops_a_program_that_never_stops_printing(cuda_ip, capfd):
    from cudamagic.cuda.errors import CudaProgramError

    cell = '%%cuda --timeout 1\n#include <cstdio>\nint main() { for (;;) printf("spam\\n"); }\n'
    cuda_ip.run_cell(cell)  # compile
    capfd.readouterr()
    start = time.monotonic()
    result = cuda_ip.run_cell(cell)
    assert isinstance(result.error_in_exec, CudaProgramError) and result.error_in_exec.timed_out
    # the time limit ends an endless program; relaying the flood of lines already printed can take a
    # few more seconds on a loaded machine (seen: 12 s), so the bound here is generous (a sleeping
    # program: timeout + 1 s)
    assert time.monotonic() - start < 1 + 20.0
    capfd.readouterr()


def test_gpu_too_old_for_this_nvcc_is_refused(cuda_ip, fake_nvml):
    from tests import fake_nvml as fm

    scenario = dict(fm.SCENARIOS["one_gpu"], cuda_driver_version=13000)
    scenario["gpus"] = [fm._gpu(0, name="Tesla K80", cc=(3, 7))]
    fake_nvml(scenario)
    with pytest.raises(
        UsageError, match=r"This GPU sm_37 \(compute capability 3\.7\) is too old for nvcc"
    ):
        cuda_ip.run_cell_magic("cuda", "", KERNEL_DEFINED)


def test_cuda_error_printed_by_the_program_goes_to_the_explainer(cuda_ip, capfd):
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.extension import current

    cell = (
        '%%cuda\n#include <cstdio>\nint main() {\n  fprintf(stderr, "CUDA error: no CUDA-capable '
        "device is "
        'detected\\n");\n  return 1;\n}\n'
    )
    result = cuda_ip.run_cell(cell)
    assert isinstance(result.error_in_exec, CudaProgramError)
    assert str(result.error_in_exec) == (
        "the program exited with status 1. CUDA error: no CUDA-capable device is detected"
    )  # "CUDA error:" once, not twice
    assert current().magics["explain"].last_explanation.entry.id == "cuda-program-no-driver"


def test_profile_runs_the_program_under_the_tool_and_explains_the_permission_error(
    cuda_ip, tmp_path, monkeypatch, capfd
):
    # a stand-in `ncu` first on PATH: it prints Nsight Compute's permission error, then runs the
    # program
    tool = tmp_path / "ncu"
    tool.write_text(
        '#!/bin/sh\necho "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"\nexec '
        '"$@"\n'
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert cuda_ip.run_cell(HELLO.replace("%%cuda", "%%cuda --profile ncu")).success
    captured = capfd.readouterr()
    assert "hello from the cell" in captured.out and "ERR_NVGPUCTRPERM" in captured.out
    assert "NVreg_RestrictProfilingToAdminUsers=0" in captured.err


def test_flags_nvcc_rejects_are_a_usage_error(cuda_ip):
    with pytest.raises(UsageError, match=r"nvcc rejected the flags '--no-such-flag'"):
        cuda_ip.run_cell_magic("cuda", "--nvcc-flags '--no-such-flag'", "int main() {}\n")


@pytest.mark.parametrize(
    "printed",
    [
        "CUDA error: no CUDA-capable device is detected",
        "cudaMalloc failed: CUDA driver version is insufficient for CUDA runtime version",
        "error cudaErrorNoDevice at line 12",
    ],
)
def test_cuda_error_printed_with_exit_status_0_fails_the_cell(cuda_ip, capfd, printed):
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.extension import current

    cell = (
        '%%cuda\n#include <cstdio>\nint main() {\n  printf("before\\n");\n'
        f'  printf("{printed}\\n");\n  return 0;\n}}\n'
    )
    result = cuda_ip.run_cell(cell)
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and exc.returncode == 0 and exc.cuda_error == printed
    assert str(exc) == f"the program exited with status 0 but printed a CUDA error: {printed}"
    out = capfd.readouterr().out
    assert "before" in out and printed in out  # the output itself still streamed
    assert current().magics["explain"].last_explanation.entry.id == "cuda-program-no-driver"


def test_cuda_words_that_are_not_an_error_pass(cuda_ip, capfd):
    # a program that teaches or logs about CUDA errors without reporting one (see
    # test_printed_errors.py)
    cell = (
        '%%cuda\n#include <cstdio>\nint main() {\n  printf("CUDA error checking enabled\\n");\n'
        '  printf("out of memory handling: none\\n");\n  printf("skipped: no GPU\\n");\n'
        '  printf("note: cudaErrorMemoryAllocation is what you get when OOM\\n");\n'
        '  printf("Errors like cudaErrorInvalidValue come from bad arguments\\n");\n'
        '  printf("cudaSuccess\\n");\n  return 0;\n}\n'
    )
    result = cuda_ip.run_cell(cell)
    assert result.success, result.error_in_exec
    out = capfd.readouterr().out
    assert "CUDA error checking enabled" in out and "note: cudaErrorMemoryAllocation is what" in out


def test_program_printing_the_runtime_error_string_without_a_launch(cuda_ip, capfd):
    from cudamagic.core.platform import nvidia_driver_present
    from cudamagic.cuda.errors import CudaProgramError
    from cudamagic.extension import current

    # the real runtime's text on a machine without a driver, printed by the program, which then
    # returns 0
    cell = (
        "%%cuda\n#include <cstdio>\nint main() {\n  int n = 0;\n  cudaError_t e = "
        "cudaGetDeviceCount(&n);\n"
        '  printf("devices: %d (%s)\\n", n, cudaGetErrorString(e));\n  return 0;\n}\n'
    )
    result = cuda_ip.run_cell(cell)
    if nvidia_driver_present():  # pragma: no cover - GPU machines: "no error"
        assert result.success, result.error_in_exec
        return
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and exc.returncode == 0
    assert "printed a CUDA error: devices: 0 (" in str(exc)
    assert current().magics["explain"].last_explanation.entry.id == "cuda-program-no-driver"
    assert "No NVIDIA driver was found" in capfd.readouterr().out


def test_skip_without_gpu_and_nvcc(cuda_ip, capfd, monkeypatch, tmp_path, fake_nvml):
    from cudamagic.core import nvcc
    from cudamagic.cuda.result import Skipped
    from tests import fake_nvml as fm

    fake_nvml("no_driver")
    out = cuda_ip.run_cell_magic("cuda", "--skip-without gpu", HELLO.split("\n", 1)[1])
    assert isinstance(out, Skipped) and "needs an NVIDIA GPU, and NVML sees none" in repr(out)
    assert cuda_magics().last == out
    assert cuda_ip.run_cell(
        HELLO.replace("%%cuda", "%%cuda --skip-without nvcc")
    ).success  # nvcc is here: runs
    assert "hello from the cell" in capfd.readouterr().out
    fake_nvml(dict(fm.SCENARIOS["one_gpu"], cuda_driver_version=13000))
    assert cuda_ip.run_cell(HELLO.replace("%%cuda", "%%cuda --skip-without gpu")).success
    assert "hello from the cell" in capfd.readouterr().out
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nvcc, "wheel_folders", lambda: [])
    out = cuda_ip.run_cell_magic("cuda", "--skip-without nvcc", "int main() {}\n")
    assert repr(out).startswith(
        "skipped: this cell needs nvcc (the CUDA compiler), and none was found"
    )
    assert "%pip install nvidia-cuda-nvcc nvidia-cuda-runtime" in out._repr_html_()


NEW_KERNEL = """
import sys
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "cudamagic")
ip.run_line_magic("config", "CudaMagics.cuda_cache_dir = %r" % sys.argv[1])
result = ip.run_cell(sys.argv[2])
sys.exit(0 if result.success else 1)
"""


def test_unchanged_rerun_in_a_new_kernel_calls_nvcc_zero_times(tmp_path):
    import subprocess

    # each run is a fresh Python process (a new kernel): nvcc's version and architecture answers and
    # the build come from the on-disk cache, so the wrapper first on PATH counts no call at all
    wrapper_dir = tmp_path / "bin"
    wrapper_dir.mkdir()
    count = tmp_path / "calls"
    wrapper = wrapper_dir / "nvcc"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {count}\nexec {os.path.realpath(NVCC)} "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = f"{wrapper_dir}{os.pathsep}{os.environ['PATH']}"
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cache = str(tmp_path / "cache")

    def kernel(cell):
        done = subprocess.run(
            [sys.executable, "-c", NEW_KERNEL, cache, cell],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def calls():
        return count.read_text().splitlines() if count.exists() else []

    kernel_cell = (
        "%%cuda\n" + KERNEL_DEFINED
    )  # device code: architectures and the driver are checked too
    assert "hello from the cell" in kernel(HELLO)
    first = calls()
    assert [c for c in first if c == "-V"] and [c for c in first if c == "--list-gpu-arch"]
    kernel(kernel_cell)
    assert (
        len(calls()) == len(first) + 1
    )  # only the compile: the answers came from the first kernel's cache
    before = len(calls())
    assert "hello from the cell" in kernel(HELLO)
    kernel(kernel_cell)
    assert len(calls()) == before  # unchanged re-runs in new kernels: nvcc is not called at all
    wrapper.write_text(
        wrapper.read_text() + "# changed\n"
    )  # another nvcc at the same path: asked again
    assert "hello from the cell" in kernel(HELLO)
    assert sorted(calls()[before:]) == ["--list-gpu-arch", "-V"]


@needs_nvcc
def test_each_target_architecture_gets_its_own_binary(cuda_ip):
    # the cache key holds the architectures: sm_90 after sm_80 on the same source must compile again
    cell = KERNEL_DEFINED
    assert cuda_ip.run_cell("%%cuda --arch sm_80\n" + cell).success
    sm80 = cuda_magics().last
    assert cuda_ip.run_cell("%%cuda --arch sm_90\n" + cell).success
    sm90 = cuda_magics().last
    assert (sm80.archs, sm90.archs) == (("80",), ("90",))
    assert sm90.cached is False and sm90.path != sm80.path
    with open(sm80.path, "rb") as f80, open(sm90.path, "rb") as f90:
        assert f80.read() != f90.read()
    assert cuda_ip.run_cell("%%cuda --arch sm_80\n" + cell).success
    assert cuda_magics().last.cached is True and cuda_magics().last.path == sm80.path
