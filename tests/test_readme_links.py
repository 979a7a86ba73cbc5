"""The README is a front page: its links and pictures resolve, and each magic has its manual page.

The pictures are ``docs/images/*.png`` (``make docs-images``), small enough for a front page; the
manual's pages are linked by the names the manual site under ``docs/`` uses, and once the site's
sources are in the tree (``docs/conf.py``) every linked page must exist.
"""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

#: The manual's pages, other than the magics' own, that the README links to.
MANUAL_PAGES = {"index", "install", "settings", "frontends", "troubleshooting", "windows"}


def readme_links() -> list:
    """Every relative link and picture of the README (no scheme, no anchor-only link)."""
    with open(README, encoding="utf-8") as fh:
        targets = re.findall(r"\]\(([^)\s]+)\)", fh.read())
    return [t.split("#")[0] for t in targets if "://" not in t and not t.startswith("#")]


def test_pictures_and_files_exist_and_pictures_stay_small():
    links = readme_links()
    pictures = [t for t in links if t.startswith("docs/images/")]
    assert len(pictures) >= 9  # the overview and one per magic
    for target in links:
        if not target.startswith("docs/") or target.startswith("docs/images/"):
            assert os.path.isfile(os.path.join(ROOT, target)), target
    for pic in pictures:
        assert os.path.getsize(os.path.join(ROOT, pic)) < 150 * 1024, pic


def test_each_magic_is_linked_to_its_manual_page():
    from cudamagic.extension import AREAS

    magics = {name for cls in AREAS.values() for kind in cls.magics.values() for name in kind}
    pages = {t for t in readme_links() if t.startswith("docs/") and t.endswith(".md")}
    linked = {p[len("docs/magics/") : -3] for p in pages if p.startswith("docs/magics/")}
    assert linked <= magics
    assert {"cudainfo", "gpuwatch", "autograd_graph", "cudamem", "cudafit"} <= linked
    assert {"torchprof", "cuda", "cudaexplain"} <= linked
    others = {p[len("docs/") : -3] for p in pages if not p.startswith("docs/magics/")}
    assert others <= MANUAL_PAGES
    if os.path.isfile(os.path.join(ROOT, "docs", "conf.py")):  # the manual's sources are here
        for page in pages:
            assert os.path.isfile(os.path.join(ROOT, page)), page


def test_the_readme_stays_a_front_page():
    with open(README, encoding="utf-8") as fh:
        assert len(fh.read().splitlines()) <= 220
