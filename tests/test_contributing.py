"""CONTRIBUTING.md's Layout table is the package tree: every module, nothing else."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "CONTRIBUTING.md")


def layout_rows() -> dict:
    """``{folder: (module names, subfolder names)}`` of the table between the layout markers."""
    with open(GUIDE, encoding="utf-8") as fh:
        table = fh.read().split("<!-- layout:start -->", 1)[1].split("<!-- layout:end -->", 1)[0]
    rows = {}
    for line in table.splitlines():
        m = re.match(r"\| `(cudamagic/[^`]*)` \| (.*) \|$", line)
        if m:
            names = re.findall(r"`([A-Za-z_]+\.py|[a-z_]+/)`", m.group(2))
            rows[m.group(1).rstrip("/")] = (
                {n for n in names if n.endswith(".py")},
                {n.rstrip("/") for n in names if n.endswith("/")},
            )
    return rows


def tree() -> dict:
    """``{folder: (module names, subpackage names)}`` of the package on disk."""
    found = {}
    for folder, dirs, files in os.walk(os.path.join(ROOT, "cudamagic")):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(folder, ROOT).replace(os.sep, "/")
        found[rel] = ({f for f in files if f.endswith(".py")}, set(dirs))
    return found


def test_every_folder_of_the_package_has_a_row_and_no_other():
    assert set(layout_rows()) == set(tree())


def test_each_row_names_every_module_of_its_folder_and_no_other():
    rows, disk = layout_rows(), tree()
    for folder, (modules, subfolders) in disk.items():
        named, named_dirs = rows[folder]
        # an area's __init__.py only re-exports; the root's and a sub-subpackage's are named
        nested = folder == "cudamagic" or folder.count("/") > 1
        expected = modules if nested else modules - {"__init__.py"}
        assert named == expected, (folder, sorted(named ^ expected))
        if folder != "cudamagic":  # the areas have rows of their own
            assert subfolders <= named_dirs, folder
