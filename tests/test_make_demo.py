"""`make demo` needs no browser; only `make test` (and `make docs-images`) install Chromium.

The real Makefile is asked what it would run (`make -n`), and the real ``scripts/system_deps.sh``
runs with a PATH of stand-in programs, as a user who is not root, so it only says what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or BASH is None or os.name != "posix",
    reason="needs make and bash",
)


def dry_run(target: str, tmp_path) -> str:
    res = subprocess.run(
        ["make", "-n", "--no-print-directory", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.parametrize("target", ["demo", "lab", "bench"])
def test_demo_targets_ask_for_the_demo_programs_only(target, tmp_path):
    out = dry_run(target, tmp_path)
    assert "scripts/system_deps.sh demo" in out
    assert "system_deps.sh test" not in out


@pytest.mark.parametrize("target", ["test", "docs-images"])
def test_test_targets_ask_for_the_test_programs(target, tmp_path):
    assert "scripts/system_deps.sh test" in dry_run(target, tmp_path)


def system_deps(tmp_path, purpose: str, have: tuple) -> subprocess.CompletedProcess:
    """Run scripts/system_deps.sh PURPOSE where only the programs in ``have`` exist."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in (*have, "id"):
        prog = bin_dir / name
        prog.write_text("#!/bin/sh\necho 1000\n")  # `id -u` answers a user who is not root
        prog.chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    return subprocess.run(
        [BASH, os.path.join(ROOT, "scripts", "system_deps.sh"), purpose],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_demo_is_complete_without_a_browser(tmp_path):
    res = system_deps(tmp_path, "demo", have=("dot", "prometheus"))
    assert res.returncode == 0 and res.stdout == "" and res.stderr == ""


def test_demo_asks_for_dot_and_never_for_chromium(tmp_path):
    res = system_deps(tmp_path, "demo", have=())
    needs = res.stdout.splitlines()[0]
    assert "graphviz" in needs and "prometheus" in needs
    assert "chromium" not in res.stdout.lower()


def test_test_asks_for_chromium_gcc_and_openssl(tmp_path):
    res = system_deps(tmp_path, "test", have=("dot", "prometheus"))
    needs = res.stdout.splitlines()[0]
    assert needs.startswith("cudamagic (test) needs:")
    for name in ("gcc", "openssl", "chromium"):
        assert name in needs
    assert "graphviz" not in needs


def test_a_wrong_purpose_is_refused(tmp_path):
    res = system_deps(tmp_path, "everything", have=())
    assert res.returncode == 2 and "usage" in res.stderr
