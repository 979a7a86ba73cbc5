"""Build the manual offline and check its internal links (what ``make docs`` runs).

Usage: python docs/build.py [OUT]      (OUT defaults to docs/_build)

Runs ``sphinx-build -b html -W --keep-going`` (warnings are errors, every one reported) into
OUT/html with the doctrees in OUT/doctrees, writes the warnings to OUT/warnings.txt, then
``docs/check_links.py`` on the pages. Prints the warning count, the broken-link count and the CPU
time; exits 1 on any warning or broken link.
"""

from __future__ import annotations

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(out: str) -> int:
    """Build into ``out``; 0 when there was no warning and no broken link."""
    from sphinx.cmd.build import build_main

    sys.path.insert(0, HERE)
    import check_links

    os.makedirs(out, exist_ok=True)
    warnings = os.path.join(out, "warnings.txt")
    html = os.path.join(out, "html")
    cpu = time.process_time()
    status = build_main(
        ["-b", "html", "-W", "--keep-going", "-q", "-w", warnings]
        + ["-d", os.path.join(out, "doctrees"), HERE, html]
    )
    with open(warnings, encoding="utf-8") as fh:
        count = sum(1 for line in fh if "WARNING" in line or "ERROR" in line)
    broken = check_links.broken_links(html) if os.path.isdir(html) else ["no pages were built"]
    for line in broken:
        print(line)
    print(
        f"docs: {count} warnings, {len(broken)} broken internal links, "
        f"{time.process_time() - cpu:.1f} s CPU; pages in {html}"
    )
    return 1 if status or count or broken else 0


if __name__ == "__main__":
    sys.exit(build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "_build")))
