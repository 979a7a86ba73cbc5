"""What JupyterLab's sanitiser leaves of an output's HTML in an untrusted notebook.

A model of JupyterLab 4's ``Sanitizer`` (``@jupyterlab/apputils``, sanitize-html underneath) built
on bleach: its allowed tags and attributes (the ones cudamagic's outputs could use), ``<img src>``
not checked for a scheme (data URIs pass), inline styles kept for the properties it allows, and
the text of ``<style>`` and ``<script>`` dropped while the text of any other removed tag (an
``<svg>``'s labels and ``<title>``s) stays in the flow, as sanitize-html does.
"""

from __future__ import annotations

import html as html_lib
import re

import bleach
from bleach.css_sanitizer import CSSSanitizer

TAGS = {
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del",
    "details", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6",
    "hr", "i", "img", "kbd", "li", "ol", "p", "pre", "s", "samp", "small", "span", "strong", "sub",
    "summary", "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
}  # fmt: skip
COMMON = ["class", "dir", "hidden", "id", "lang", "style", "title"]
ATTRIBUTES = {
    "*": COMMON,
    "a": [*COMMON, "href", "name", "rel", "target"],
    "details": [*COMMON, "open"],
    "img": [*COMMON, "align", "alt", "border", "height", "src", "width"],
    "td": [*COMMON, "align", "colspan", "rowspan", "valign"],
    "th": [*COMMON, "align", "colspan", "rowspan", "scope", "valign"],
}
STYLES = [
    "background", "background-color", "border", "border-bottom", "border-left", "border-radius",
    "border-width", "color", "display", "float", "font", "font-family", "font-size",
    "font-style", "font-weight", "height", "line-height", "margin", "margin-bottom",
    "margin-left", "margin-right", "margin-top", "max-height", "max-width", "min-width",
    "overflow", "overflow-x", "overflow-y", "padding", "padding-left", "padding-right",
    "text-align", "vertical-align", "white-space", "width", "word-break",
]  # fmt: skip


def sanitise(html: str) -> str:
    """``html`` as JupyterLab shows it in an untrusted notebook."""
    html = re.sub(r"<(style|script)\b.*?</\1>", "", html, flags=re.S | re.I)
    return bleach.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        protocols=["http", "https", "mailto", "data"],
        strip=True,
        strip_comments=True,
        css_sanitizer=CSSSanitizer(allowed_css_properties=STYLES),
    )


def visible_text(html: str) -> str:
    """The text of ``html``, whitespace collapsed (what a reader sees, without pictures)."""
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", " ", html)).split())
