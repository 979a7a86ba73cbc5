"""What JupyterLab's sanitiser leaves of an HTML output (an untrusted notebook).

GitHub and nbviewer sanitise in the same spirit. An approximation of ``@jupyterlab/apputils``
``Sanitizer`` (sanitize-html) with bleach: ``<style>`` elements go with their text, ``<svg>`` and
other unknown tags go but their text stays (the "wall of text" an untrusted notebook shows),
``style=`` attributes keep the CSS properties JupyterLab allows, and a declaration whose value
holds ``var(`` is dropped (JupyterLab's value patterns never match it). ``<img src>`` keeps its
data URI (JupyterLab checks the scheme of href and cite only).
"""

from __future__ import annotations

import re

import bleach
from bleach.css_sanitizer import CSSSanitizer

TAGS = {
    *("a", "abbr", "b", "bdi", "bdo", "blockquote", "br", "caption", "code", "col", "colgroup"),
    *("dd", "del", "details", "div", "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3"),
    *("h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "label", "li", "mark", "ol", "p", "pre"),
    *("q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table", "tbody"),
    *("td", "tfoot", "th", "thead", "time", "tr", "u", "ul", "var"),
}
ATTRIBUTES = {
    "*": ["class", "dir", "hidden", "id", "lang", "style", "title"],
    "img": ["align", "alt", "border", "height", "src", "width"],
    "a": ["href", "rel", "target"],
    "details": ["open"],
    "td": ["colspan", "rowspan", "nowrap", "align", "valign"],
    "th": ["colspan", "rowspan", "nowrap", "align", "valign", "scope"],
}
#: JupyterLab's allowedStyles properties (apputils/src/sanitizer.ts); flex, grid and gap are not.
PROPERTIES = {
    *("background", "background-color", "background-image", "background-position"),
    *("background-repeat", "background-size", "border", "border-bottom", "border-collapse"),
    *("border-color", "border-left", "border-radius", "border-right", "border-spacing"),
    *("border-style", "border-top", "border-width", "bottom", "box-shadow", "box-sizing"),
    *("clear", "color", "cursor", "direction", "display", "float", "font", "font-family"),
    *("font-size", "font-style", "font-variant", "font-weight", "height", "left"),
    *("letter-spacing", "line-height", "list-style", "list-style-type", "margin"),
    *("margin-bottom", "margin-left", "margin-right", "margin-top", "max-height", "max-width"),
    *("min-height", "min-width", "opacity", "outline", "overflow", "overflow-wrap", "overflow-x"),
    *("overflow-y", "padding", "padding-bottom", "padding-left", "padding-right", "padding-top"),
    *("position", "right", "table-layout", "text-align", "text-decoration", "text-indent"),
    *("text-overflow", "text-transform", "top", "vertical-align", "visibility", "white-space"),
    *("width", "word-break", "word-spacing", "word-wrap", "z-index"),
}


def _no_vars(match: re.Match) -> str:
    kept = [d for d in match.group(1).split(";") if d.strip() and "var(" not in d]
    return f' style="{";".join(kept)}"'


def sanitise(html: str) -> str:
    """``html`` as JupyterLab shows it in an untrusted notebook (approximately; see the module)."""
    html = re.sub(r"<style\b[^>]*>.*?</style>", "", html, flags=re.S | re.I)
    clean = bleach.clean(
        html,
        tags=TAGS,
        attributes=ATTRIBUTES,
        protocols={"http", "https", "data"},
        css_sanitizer=CSSSanitizer(allowed_css_properties=PROPERTIES),
        strip=True,
    )
    return re.sub(r'\sstyle="([^"]*)"', _no_vars, clean)
