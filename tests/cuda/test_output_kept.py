"""%%cuda output with real nvcc: each line arrives as printed, and survives a time-out or a crash.

A program's stdout is a pseudo-terminal on POSIX and is line-buffered before ``main`` by a piece of
code appended to every cell (build.LINE_BUFFERING), so printf, std::cout without std::endl, fwrite
and the programs the cell starts all reach the notebook line by line, not in one block at exit, and
a program killed by --timeout or by SIGSEGV has lost none of them.
"""

from __future__ import annotations

import sys
import time

import psutil
import pytest

from cudamagic.cuda.errors import CudaProgramError

from .conftest import needs_nvcc, wait_until

pytestmark = [
    needs_nvcc,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX programs (unistd.h)"),
]

# three lines, one second apart, written three ways and never flushed by the program; then a line
# on stderr
THREE_WAYS = r"""%%cuda
#include <cstdio>
#include <iostream>
#include <unistd.h>
int main() {
  printf("one by printf\n");
  sleep(1);
  std::cout << "two by cout" << '\n';
  sleep(1);
  fwrite("three by fwrite\n", 1, 16, stdout);
  sleep(1);
  fprintf(stderr, "four on stderr\n");
  return 0;
}
"""


class Timed:
    """A stand-in for sys.stdout or sys.stderr that records when each line arrives."""

    def __init__(self):
        self.lines = []

    def write(self, text):
        now = time.monotonic()
        self.lines += [(now, line) for line in text.splitlines() if line]
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    def arrival(self, text):
        return next(t for t, line in self.lines if text in line)


@pytest.fixture
def timed(monkeypatch):
    """Run a cell with stdout and stderr timed: ``(result, out, err)``."""

    def run(ip, cell):
        out, err = Timed(), Timed()
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        try:
            return ip.run_cell(cell), out, err
        finally:
            monkeypatch.setattr(sys, "stdout", sys.__stdout__)
            monkeypatch.setattr(sys, "stderr", sys.__stderr__)

    return run


@pytest.mark.parametrize("stdout", ["terminal", "pipe"])
def test_lines_arrive_as_printed_without_a_flush(cuda_ip, timed, monkeypatch, stdout):
    assert cuda_ip.run_cell(THREE_WAYS).success  # compiled here, so the timed run is the program
    if stdout == "pipe":  # no pseudo-terminal (Windows): the line buffering set before main alone
        monkeypatch.setattr("cudamagic.cuda.run.output_terminal", lambda: None)
    result, out, err = timed(cuda_ip, THREE_WAYS)
    assert result.success, result.error_in_exec
    one, two, three = (out.arrival(t) for t in ("one by", "two by", "three by"))
    assert two - one >= 0.7 and three - two >= 0.7, out.lines
    assert [line for _, line in out.lines if "on stderr" in line] == []  # stderr stays apart
    assert err.arrival("four on stderr") - three >= 0.7


def test_lines_before_a_timeout_kill_are_shown_also_from_a_program_it_started(cuda_ip, timed):
    # the cell starts a Python child (block-buffered on a pipe, line-buffered on a terminal), says
    # so, and waits for it; the child prints its pid and hangs: --timeout kills both
    cell = (
        "%%cuda --timeout 3 --args "
        + repr(sys.executable)
        + "\n"
        + r"""#include <cstdio>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
  printf("loaded 1024 rows\n");
  if (fork() == 0) {
    execl(argv[1], argv[1], "-c",
          "import os, time\nprint('child', os.getpid())\ntime.sleep(60)", (char *)nullptr);
    return 1;
  }
  printf("waiting for the child\n");
  wait(nullptr);
  return 0;
}
"""
    )
    cuda_ip.run_cell(cell)  # compiles (and times out)
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONUNBUFFERED", raising=False)  # the child buffers as Python does
        result, out, _ = timed(cuda_ip, cell)
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and exc.timed_out
    shown = [line for _, line in out.lines]
    assert shown[0] == "loaded 1024 rows" and "waiting for the child" in shown
    (child_line,) = [line for line in shown if line.startswith("child ")]
    child = int(child_line.split()[1])
    assert wait_until(
        lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie"
    )


def test_lines_before_a_crash_are_shown(cuda_ip, timed):
    cell = r"""%%cuda
#include <cstdio>
#include <iostream>
int main() {
  printf("loaded 1024 rows\n");
  std::cout << "about to touch a bad pointer\n";
  int *p = nullptr;
  *p = 1;
  return 0;
}
"""
    result, out, _ = timed(cuda_ip, cell)
    exc = result.error_in_exec
    assert isinstance(exc, CudaProgramError) and "killed by SIGSEGV" in str(exc)
    assert [line for _, line in out.lines if "%%cuda" not in line][:2] == [
        "loaded 1024 rows",
        "about to touch a bad pointer",
    ]


def test_a_setvbuf_in_main_still_wins(cuda_ip, timed, monkeypatch):
    # the user's own choice of full buffering is kept: the line buffering runs before main
    cell = r"""%%cuda
#include <cstdio>
#include <unistd.h>
static char buf[1 << 16];
int main() {
  setvbuf(stdout, buf, _IOFBF, sizeof buf);
  printf("first\n");
  sleep(1);
  printf("second\n");
  return 0;
}
"""
    assert cuda_ip.run_cell(cell).success
    result, out, _ = timed(cuda_ip, cell)
    assert result.success, result.error_in_exec
    assert out.arrival("second") - out.arrival("first") < 0.3  # both at exit, as the user asked
