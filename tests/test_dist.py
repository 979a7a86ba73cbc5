"""The release: an sdist built from a copy of the checkout, and the wheel built from that sdist.

As ``make dist`` (``python -m build``) does, but offline: setuptools' own build backend in this
venv, no isolated build environment, on a copy of the checkout's files (nothing is written into
it). The wheel must hold every module of the package tree on disk and nothing else (no tests, no
caches); the sdist must carry the pictures the README (the long description) links to, and no
tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def _backend(cwd, call: str, out_dir) -> str:
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            f"from setuptools import build_meta as b; print(b.{call}({str(out_dir)!r}))",
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return os.path.join(out_dir, res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``(sdist path, wheel path)``, the wheel built from the unpacked sdist."""
    base = tmp_path_factory.mktemp("dist")
    src, out = base / "src", base / "out"
    src.mkdir()
    out.mkdir()
    # the checkout as git sees it (tracked files and new ones not ignored), as a clone has it
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if listed.returncode != 0:
        pytest.skip(f"git cannot list the checkout: {listed.stderr.strip()}")
    for rel in filter(None, listed.stdout.split("\0")):
        if os.path.isfile(os.path.join(ROOT, rel)):
            os.makedirs(src / os.path.dirname(rel), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, rel), src / rel)
    sdist = _backend(src, "build_sdist", out)
    with tarfile.open(sdist) as tar:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(base / "unpacked", **safe)
    (unpacked,) = (base / "unpacked").iterdir()
    wheel = _backend(unpacked, "build_wheel", out)
    return sdist, wheel


def package_files() -> set:
    """Every file of the package tree on disk, as a wheel names it."""
    found = set()
    for folder, dirs, files in os.walk(os.path.join(ROOT, "cudamagic")):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".pyc", ".pyo")):
                found.add(os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/"))
    return found


def test_the_wheel_holds_the_package_tree_and_nothing_else(built):
    _sdist, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    inside = {n for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert inside == package_files()
    assert all(p in inside for p in ("cudamagic/__init__.py", "cudamagic/core/style.py"))
    assert not [
        n for n in names if n.startswith("tests/") or "__pycache__" in n or n.endswith(".pyc")
    ]


def test_the_wheel_metadata_reads_right(built):
    _sdist, wheel = built
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
    headers, _, body = meta.partition("\n\n")
    assert "Requires-Python: >=3.10" in headers
    assert "Description-Content-Type: text/markdown" in headers
    assert "Classifier: Programming Language :: Python :: 3.13" in headers
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        assert body.strip() == fh.read().strip()  # the long description is the README as it is


def test_the_readme_pictures_are_in_the_sdist(built):
    sdist, _wheel = built
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        pictures = set(re.findall(r"\((docs/images/[^)\s]+)\)", fh.read()))
    assert pictures, "the README shows no picture from docs/images/"
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert pictures <= names
    assert "CHANGELOG.md" in names
    assert not [n for n in names if n.startswith("tests/") or "__pycache__" in n]
