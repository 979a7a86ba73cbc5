"""One visual language for every cudamagic HTML output, built on JupyterLab's theme variables.

Every magic's HTML goes through :func:`page`: one outer ``<div class="cudamagic mathjax_ignore
cm-KIND">`` that carries a small scoped stylesheet (:data:`CSS`). Colours come only from
JupyterLab's ``--jp-*`` CSS variables, so the light and dark themes (and any theme that defines
them) both apply; every ``var()`` has a neutral fallback for front ends without those variables (VS
Code, classic Notebook, nbviewer), where text inherits the page's own colour.

Shared pieces, so the magics look alike:

* tables: :func:`core.fmt.html_table` emits ``<table class="cm-table">``; long prose cells wrap
    (class ``cm-prose``,
  left-aligned); numbers are right-aligned with class ``cm-num``; a table wider than the output
  scrolls inside a ``cm-scroll`` box with a visible cue (shadow at the cut edge).
* N/A: :func:`core.fmt.na_cell_html` (``cm-na`` + the reason in ``cm-na-reason``).
* badges: :func:`badge` (``ok``, ``info``, ``warn``, ``error``): text in the normal text colour, the
    level shown by a
  coloured border and icon, so contrast never depends on the level colour.
* details: :func:`details` for technical detail a user can open.

Untrusted notebooks: a sanitiser (JupyterLab's for a notebook executed by nbclient or papermill,
GitHub's, nbviewer's) drops the ``<style>`` element, every ``<svg>`` and every ``var()`` value. So
:func:`page` also writes the styles that matter (:data:`INLINE`: alignment, spacing, monospace,
box edges; no colours) into each element's ``style``, and an output that still holds an inline
``<svg>`` gets one line, hidden by the stylesheet, that says the picture needs a trusted notebook.

Table rows are not striped: JupyterLab's even-row and hover greys would put the muted text (N/A
    reasons, sources)
below a 4.5:1 contrast in the light theme, so rows are separated by borders only.

Nothing here is imported by anything heavy; it is plain strings.
"""

from __future__ import annotations

import re

from .fmt import NO_MATH, esc

#: Scoped stylesheet; every rule starts with ``.cudamagic`` so nothing leaks into the notebook.
CSS = """
.cudamagic{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
 font-size:var(--jp-ui-font-size1,13px);
 color:var(--jp-content-font-color1,inherit);line-height:1.4;max-width:100%;
 overflow-wrap:break-word}
.cudamagic code,.cudamagic pre,.cudamagic .cm-mono{
 font-family:var(--jp-code-font-family,monospace)!important;font-size:var(--jp-code-font-size,12px)}
.cudamagic .cm-muted{color:var(--jp-content-font-color2,inherit)}
.cudamagic h3,.cudamagic h4{margin:.6em 0 .3em;color:var(--jp-content-font-color1,inherit)}
.cudamagic .cm-scroll{max-width:100%;overflow-x:auto;
 background:linear-gradient(to right,var(--jp-layout-color0,transparent) 30%,transparent),
 linear-gradient(to left,var(--jp-layout-color0,transparent) 30%,transparent) 100% 0,
 linear-gradient(to right,var(--jp-border-color1,#8888),transparent 8px),
 linear-gradient(to left,var(--jp-border-color1,#8888),transparent 8px) 100% 0;
 background-repeat:no-repeat;background-size:40px 100%,40px 100%,8px 100%,8px 100%;
 background-attachment:local,local,scroll,scroll}
.cudamagic table.cm-table{border-collapse:collapse;margin:.3em 0;color:inherit;
 background:transparent;
 table-layout:auto;max-width:100%}
.cudamagic table.cm-table th{background:var(--jp-layout-color2,transparent);
 color:var(--jp-ui-font-color1,inherit);
 font-weight:600;text-align:left;padding:3px 8px;
 border-bottom:1px solid var(--jp-border-color1,#8888)}
.cudamagic table.cm-table td{padding:2px 8px;border-bottom:1px solid var(--jp-border-color2,#8884);
 color:inherit;background:transparent;text-align:left;vertical-align:top}
.cudamagic table.cm-table td.cm-num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}
.cudamagic table.cm-table td.cm-prose{text-align:left;white-space:normal;min-width:8em;
 overflow-wrap:anywhere}
.cudamagic table.cm-table th.cm-num{text-align:right}
.cudamagic table.cm-table tbody th{background:transparent;font-weight:600;text-align:left;
 vertical-align:top;
 border-bottom:1px solid var(--jp-border-color2,#8884)}
.cudamagic .cm-mono{overflow-wrap:anywhere}
.cudamagic table.cm-table th.cm-mono{font-family:inherit!important;font-size:inherit}
.cudamagic .cm-pre{white-space:pre-wrap}
.cudamagic .cm-src,.cudamagic .cm-note{color:var(--jp-content-font-color2,inherit);font-size:.92em}
.cudamagic .cm-title{font-weight:600}
.cudamagic p{margin:.3em 0}
.cudamagic ul{margin:.2em 0;padding-left:1.5em}
.cudamagic table.cm-table tbody tr:nth-child(odd) td{background:transparent}
.cudamagic table.cm-table tbody tr{background:transparent}
.cudamagic .cm-na{color:var(--jp-content-font-color2,inherit);font-style:italic}
.cudamagic .cm-na-reason{color:var(--jp-content-font-color2,inherit)}
.cudamagic .cm-note code,.cudamagic .cm-src code,.cudamagic summary code{background:transparent}
.cudamagic .cm-badge{display:inline-block;padding:0 6px;
 border:1px solid var(--jp-border-color1,#8888);
 border-left-width:4px;border-radius:3px;color:var(--jp-content-font-color1,inherit);
 background:var(--jp-layout-color1,transparent);font-size:.9em;white-space:nowrap}
.cudamagic .cm-badge.cm-ok,.cudamagic .cm-box.cm-ok{border-left-color:var(--jp-success-color1,
 #4caf50)}
.cudamagic .cm-badge.cm-info,.cudamagic .cm-box.cm-info{border-left-color:var(--jp-info-color1,
 #2196f3)}
.cudamagic .cm-badge.cm-warn,.cudamagic .cm-box.cm-warn{border-left-color:var(--jp-warn-color1,
 #ff9800)}
.cudamagic .cm-badge.cm-error,.cudamagic .cm-box.cm-error{border-left-color:var(--jp-error-color1,
 #f44336)}
.cudamagic .cm-box{border:1px solid var(--jp-border-color2,#8884);border-left-width:6px;
 border-radius:3px;
 padding:6px 10px;margin:6px 0;background:var(--jp-layout-color1,transparent)}
.cudamagic.cm-explain:is(.jp-RenderedHTMLCommon>*){margin-right:-20px;max-width:none}
.cudamagic details>summary{cursor:pointer;color:var(--jp-content-font-color2,inherit)}
.cudamagic td details>summary{color:inherit}
.cudamagic a{color:var(--jp-content-link-color,inherit)}
.cudamagic .cm-untrusted{display:none}
"""

#: The styles that matter, inlined by :func:`page` on the elements (key ``tag``, ``.class`` or
#: ``tag.class``, applied in that order): a sanitiser (JupyterLab's for an untrusted notebook,
#: GitHub's, nbviewer's) drops the ``<style>`` element and every ``var()`` value but keeps these.
#: Same values as :data:`CSS` (or overridden there with ``!important``), so the trusted look does
#: not change. No colours: the front end's own theme colours the text then.
INLINE = {
    "table.cm-table": "border-collapse:collapse;margin:.3em 0;table-layout:auto;max-width:100%",
    "th": "text-align:left",
    "td": "text-align:left",
    ".cm-num": "text-align:right;white-space:nowrap",
    ".cm-mono": "font-family:monospace",
    "th.cm-mono": "font-family:inherit",
    ".cm-pre": "white-space:pre-wrap",
    ".cm-scroll": "max-width:100%;overflow-x:auto",
    ".cm-box": "border-style:solid;border-width:1px 1px 1px 6px;border-radius:3px;"
    "padding:6px 10px;margin:6px 0",
    ".cm-badge": "display:inline-block;padding:0 6px;border-style:solid;"
    "border-width:1px 1px 1px 4px;border-radius:3px;white-space:nowrap;font-size:.9em",
    ".cm-src": "font-size:.92em",
    ".cm-note": "font-size:.92em",
    ".cm-na": "font-style:italic",
    ".cm-title": "font-weight:600",
}

#: The one line an output whose picture needs a trusted notebook shows where it is not trusted
#: (:data:`CSS` hides it where the stylesheet applies).
NEEDS_TRUST = (
    '<div class="cm-untrusted" style="font-style:italic">This notebook is not trusted, so part '
    "of this output (a picture) is hidden: \u201cTrust Notebook\u201d (JupyterLab\u2019s "
    "command palette, Notebook 7\u2019s File menu) shows it.</div>"
)

_OPEN_TAG = re.compile(r"<(table|th|td|div|span|code|small|p|pre|details|summary)\b([^>]*)>")
_CLASS_ATTR = re.compile(r'\sclass="([^"]*)"')
_STYLE_ATTR = re.compile(r'\sstyle="([^"]*)"')

LEVELS = ("ok", "info", "warn", "error")
_ICON = {"ok": "\u2713", "info": "\u2139", "warn": "\u26a0", "error": "\u2716"}


def page(body_html: str, kind: str) -> str:
    """The outer element of one output, with :data:`CSS`.

    The outer element of one output: ``<div class="cudamagic mathjax_ignore cm-<kind>">`` with
    :data:`CSS`.

    Args:
        body_html: the output's HTML; every outside string in it already escaped.
        kind: a short name of the output (``info``, ``watch``, ``graph``, ``mem``, ``explain``,
            ``prof``, ``cuda``), used as a class so tests and themes can find it.
    """
    trust = NEEDS_TRUST if "<svg" in body_html else ""
    return (
        f'<div class="cudamagic {NO_MATH} cm-{esc(kind)}"><style>{CSS}</style>'
        f"{trust}{inline_styles(body_html)}</div>"
    )


def inline_styles(html_text: str) -> str:
    """``html_text`` with the declarations of :data:`INLINE` in each matching element's ``style``.

    An element's own ``style`` comes after them, so it wins. Only HTML tags are touched (never
    SVG's).
    """

    def one(m: re.Match) -> str:
        tag, attrs = m.group(1), m.group(2)
        found = _CLASS_ATTR.search(attrs)
        keys = [tag]
        for name in found.group(1).split() if found else ():
            keys += [f".{name}", f"{tag}.{name}"]
        merged = {}  # property -> value; a later key overrides an earlier one
        for key in keys:
            for decl in filter(None, INLINE.get(key, "").split(";")):
                prop, value = decl.split(":", 1)
                merged[prop] = value
        if not merged:
            return m.group(0)
        decls = ";".join(f"{p}:{v}" for p, v in merged.items())
        own = _STYLE_ATTR.search(attrs)
        if own and own.group(1).startswith(decls):
            return m.group(0)  # inlined before (a page inside a page)
        if own:
            decls, attrs = f"{decls};{own.group(1)}", attrs[: own.start()] + attrs[own.end() :]
        return f'<{tag}{attrs} style="{decls}">'

    return _OPEN_TAG.sub(one, html_text)


def badge(text: str, level: str = "info") -> str:
    """A small labelled badge; ``level`` is one of :data:`LEVELS`; ``text`` is escaped."""
    if level not in LEVELS:
        raise ValueError(f"badge level must be one of {LEVELS}, not {level!r}")
    return f'<span class="cm-badge cm-{level}">{_ICON[level]} {esc(text)}</span>'


def box_open(level: str = "info") -> str:
    """The opening tag of a box whose left edge shows ``level`` (close it with ``</div>``)."""
    if level not in LEVELS:
        raise ValueError(f"box level must be one of {LEVELS}, not {level!r}")
    return f'<div class="cm-box cm-{level}">'


def details(summary: str, body_html: str, open_: bool = False) -> str:
    """A collapsible ``<details>``; ``summary`` is escaped, ``body_html`` must be safe HTML."""
    return (
        f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body_html}</details>"
    )


def level(severity: str) -> str:
    """A severity word as a :data:`LEVELS` name; an unknown word is ``"info"``.

    A severity word as a :data:`LEVELS` name (``"warning"`` -> ``"warn"``, ``"fatal error"`` ->
    ``"error"``); an unknown word is ``"info"``.
    """
    word = str(severity).lower()
    if "error" in word or "fatal" in word:
        return "error"
    if word.startswith("warn"):
        return "warn"
    return word if word in LEVELS else "info"


def icon(level_name: str) -> str:
    """The icon shown with ``level_name`` (one of :data:`LEVELS`) in badges and boxes."""
    return _ICON[level_name]


# Patterns of the colour check, compiled on first use (by the tests): no output needs them.
_VAR = r"var\(\s*--[\w-]+\s*(?:,[^()]*(?:\([^()]*\)[^()]*)*)?\)"
_HARD = (
    r"(?<![&\w])#(?:[0-9a-fA-F]{8}|[0-9a-fA-F]{6}|[0-9a-fA-F]{3,4})\b|\b(?:rgba?|hsla?)\(|"
    r"(?<![-\w])(?:color|background(?:-color)?|fill|stroke)\s*[:=]\s*[\"']?(?!var\(|inherit|"
    r"transparent|none|currentcolor|linear-gradient|initial|unset)[a-zA-Z]+\b"
)


def hard_coded_colours(html_text: str) -> list:
    """Colours in ``html_text`` that do not come from the theme.

    Colours in ``html_text`` that do not come from the theme: ``#hex``, ``rgb(``/``hsl(`` or a
    colour name in a ``color``/``background``/``fill``/``stroke`` declaration, outside
    ``var(--jp-..., fallback)``. HTML character references (``&#8594;``) are not colours. Used by
    the tests of every output (an empty list is the goal).
    """
    return re.findall(_HARD, re.sub(_VAR, "var()", html_text))


def scroll(html_fragment: str) -> str:
    """Wrap a wide fragment (a table) so it scrolls, with a shadow at the cut edge."""
    return f'<div class="cm-scroll">{html_fragment}</div>'
