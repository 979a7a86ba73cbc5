"""`make ... TORCH=...` reinstalls torch when, and only when, the requested torch changes.

CONTRIBUTING.md says "switching builds is one command". The real Makefile and
scripts/make_venv.sh run for real in a throwaway copy, against a fake virtualenv whose `bin/python`
only records the commands it is given, so nothing is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or os.name != "posix", reason="needs make and a shell"
)

CU126 = "torch==2.6.0 --index-url https://download.pytorch.org/whl/cu126"


@pytest.fixture
def project(tmp_path):
    """A copy of the Makefile and what `make setup` reads, with a fake .venv that logs its calls."""
    (tmp_path / "scripts").mkdir()
    for rel in ("Makefile", "setup.cfg", "pyproject.toml", "scripts/make_venv.sh"):
        shutil.copy2(os.path.join(ROOT, rel), tmp_path / rel)
    (tmp_path / "scripts" / "system_deps.sh").write_text(
        "exit 0\n"
    )  # the system programs are not the subject
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "calls.log"
    (bin_dir / "python").write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
    (bin_dir / "python").chmod(0o755)
    return tmp_path, log


def setup_calls(project, *args) -> list:
    """Run `make setup VENV=venv ARGS` for real; return the fake python's calls of this run."""
    path, log = project
    log.write_text("")
    res = subprocess.run(
        ["make", "--no-print-directory", "setup", "VENV=venv", *args],
        cwd=path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return log.read_text().splitlines()


def torch_installs(calls) -> list:
    return [
        c
        for c in calls
        if c.startswith("-m pip install") and "torch" in c and "-e" not in c.split()
    ]


UNINSTALL = "-m pip uninstall --yes --quiet torch"


def uninstalls(calls) -> list:
    """The torch uninstalls among ``calls``.

    Each must come before the torch install of the same run: pip takes ``torch==2.13.0`` as met
    by any local build, ``2.13.0+cpu`` or ``2.13.0+cu128``, so only an uninstall switches builds.
    """
    found = [c for c in calls if c.startswith("-m pip uninstall")]
    if found:
        assert calls.index(UNINSTALL) < calls.index(torch_installs(calls)[0]), calls
    return found


def test_first_setup_installs_the_default_torch(project):
    calls = setup_calls(project)
    assert torch_installs(calls) == ["-m pip install --quiet torch==2.13.0"]
    assert uninstalls(calls) == []  # same torch: pip leaves it as it is
    assert "-m pip install --quiet -e .[test]" in calls
    assert uninstalls(calls) == []  # nothing installed yet
    assert (project[0] / "venv" / ".cudamagic-torch").read_text() == "torch==2.13.0\n"


def test_same_torch_does_not_reinstall(project):
    setup_calls(project)
    assert setup_calls(project) == []
    assert setup_calls(project, "TORCH=torch==2.13.0") == []  # the default, spelled out


def test_changing_torch_reinstalls_once_then_not_again(project):
    setup_calls(project)
    calls = setup_calls(project, f"TORCH={CU126}")
    assert uninstalls(calls) == [UNINSTALL]
    assert torch_installs(calls) == [f"-m pip install --quiet {CU126}"]
    assert setup_calls(project, f"TORCH={CU126}") == []
    # back to the default CPU pin: one more uninstall and reinstall, of the default
    calls = setup_calls(project)
    assert uninstalls(calls) == [UNINSTALL]
    assert torch_installs(calls) == ["-m pip install --quiet torch==2.13.0"]
    assert setup_calls(project) == []


def test_same_version_another_build_uninstalls_first(project):
    """CONTRIBUTING.md's own switch: the same version from another index.

    pip alone would keep the build it has.
    """
    setup_calls(project, "TORCH=torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu")
    calls = setup_calls(
        project, "TORCH=torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    )
    assert uninstalls(calls) == [UNINSTALL]
    assert torch_installs(calls) == [
        "-m pip install --quiet torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
    ]


def test_a_venv_from_before_the_torch_file_uninstalls_when_torch_is_given(project):
    """A .venv set up before make recorded the requested torch: its torch is unknown.

    It has the install stamp and no torch file.
    """
    setup_calls(project)
    (project[0] / "venv" / ".cudamagic-torch").unlink()
    assert uninstalls(setup_calls(project, f"TORCH={CU126}")) == [UNINSTALL]


def test_a_changed_setup_cfg_reinstalls_the_package_and_the_same_torch(project):
    setup_calls(project)
    cfg = project[0] / "setup.cfg"
    stamp = os.stat(project[0] / "venv" / ".cudamagic-installed").st_mtime
    os.utime(cfg, (stamp + 10, stamp + 10))  # edited 10 s after the install
    calls = setup_calls(project)
    assert torch_installs(calls) == ["-m pip install --quiet torch==2.13.0"]
    assert uninstalls(calls) == []  # same torch: pip leaves it as it is
    assert "-m pip install --quiet -e .[test]" in calls
