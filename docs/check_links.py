"""Check that every internal link of the built site resolves: the page and its #anchor exist.

Usage: python docs/check_links.py docs/_build/html

Reads every ``.html`` file under the folder; each ``href``/``src`` without a scheme is an internal
link. Prints one line per broken link and exits 1 when there is any; the network is never used
(links to other sites are not checked).
"""

from __future__ import annotations

import os
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set = set()
        self.links: list = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name"):
            if attrs.get(key):
                self.ids.add(attrs[key])
        self.links += [attrs[key] for key in ("href", "src") if attrs.get(key)]


def read_pages(root: str) -> dict:
    """``{absolute path: _Page}`` of every HTML file under ``root``."""
    pages = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                page = _Page()
                with open(path, encoding="utf-8") as fh:
                    page.feed(fh.read())
                pages[os.path.abspath(path)] = page
    return pages


def broken_links(root: str) -> list:
    """``["page.html: link (why)"]`` for every internal link that does not resolve."""
    pages = read_pages(root)
    broken = []
    for path, page in sorted(pages.items()):
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = path
            if parts.path:
                target = os.path.normpath(os.path.join(os.path.dirname(path), unquote(parts.path)))
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
            where = f"{os.path.relpath(path, root)}: {link}"
            if not os.path.exists(target):
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.endswith(".html"):
                ids = pages[target].ids if target in pages else set()
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no #{parts.fragment} in {os.path.basename(target)})")
    return broken


def main(argv=None) -> int:
    """Print the broken links under the folder given; 1 when there is any."""
    args = sys.argv[1:] if argv is None else argv
    root = args[0] if args else os.path.join(os.path.dirname(__file__), "_build", "html")
    broken = broken_links(root)
    for line in broken:
        print(line)
    count = sum(len(p.links) for p in read_pages(root).values())
    print(f"check_links: {count} links in {root}, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
