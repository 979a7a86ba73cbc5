import re

import pytest

from cudamagic.core import style


def test_page_wraps_with_scoped_css_and_kind():
    out = style.page("<b>x</b>", "info")
    assert out.startswith('<div class="cudamagic mathjax_ignore cm-info"><style>')
    assert out.endswith("<b>x</b></div>")


def test_every_rule_is_scoped_and_colours_come_from_theme_variables():
    rules = [r.strip() for r in style.CSS.split("}") if r.strip()]
    for rule in rules:
        selectors = rule.split("{", 1)[0]
        for sel in selectors.split(","):
            assert sel.strip().startswith(".cudamagic"), sel
    # every colour / background declaration is a theme variable (a neutral fallback inside var() is
    # allowed)
    for prop, value in re.findall(r"(?<![-\w])(color|background)\s*:\s*([^;}]+)", style.CSS):
        assert value.startswith(("var(--jp-", "inherit", "transparent", "linear-gradient(")), (
            prop,
            value,
        )


def test_badge_escapes_and_checks_level():
    assert style.badge("<x>", "warn") == '<span class="cm-badge cm-warn">\u26a0 &lt;x&gt;</span>'
    with pytest.raises(ValueError, match="badge level must be one of"):
        style.badge("x", "red")


def test_details_escapes_summary():
    assert (
        style.details("a<b", "<i>y</i>") == "<details><summary>a&lt;b</summary><i>y</i></details>"
    )


def test_hard_coded_colours_are_found_outside_theme_variables_only():
    found = style.hard_coded_colours(
        '<b style="color:#fff">x</b> &#8594; <svg fill="red" style="fill:var(--jp-a, #123)">'
        "</svg> rgb(1,2,3) background:white color:inherit stroke:none"
    )
    assert found == ["#fff", 'fill="red', "rgb(", "background:white"]
    assert (
        style.hard_coded_colours(
            style.page(style.badge("x", "error") + style.box_open("warn") + "</div>", "t")
        )
        == []
    )
    assert (
        style.hard_coded_colours(
            "background:linear-gradient(to right,var(--jp-border-color1,#8888),transparent)"
        )
        == []
    )


def test_level_maps_severity_words():
    assert [style.level(w) for w in ("warning", "fatal error", "error", "ok", "info", "odd")] == [
        "warn",
        "error",
        "error",
        "ok",
        "info",
        "info",
    ]
    assert style.icon("warn") == "\u26a0"


def test_sanitised_page_keeps_alignment_and_monospace_but_no_colours():
    """What an untrusted notebook shows (JupyterLab's sanitiser, tests/sanitise.py)."""
    from cudamagic.core.fmt import html_table
    from tests import sanitise

    table = html_table(
        ["operator", "ms"], [["aten::addmm", "1.0"]], num=[1], col_cls={0: "cm-mono"}
    )
    clean = sanitise.sanitise(style.page(style.scroll(table), "prof"))
    assert "<style" not in clean and "var(" not in clean
    name = re.search(r'<td class="cm-mono"[^>]*>', clean).group(0)
    number = re.search(r'<td class="cm-num"[^>]*>', clean).group(0)
    assert "text-align:left" in name and "font-family:monospace" in name
    assert "text-align:right" in number and "white-space:nowrap" in number
    assert "margin:.3em 0" in re.search(r"<table[^>]*>", clean).group(0)  # not centred
    assert "overflow-x:auto" in re.search(r'<div class="cm-scroll"[^>]*>', clean).group(0)
    assert style.hard_coded_colours(style.page(table, "prof")) == []


def test_inline_styles_leave_own_styles_last_svg_alone_and_run_once():
    out = style.inline_styles(
        '<td class="cm-num" style="color:inherit">1</td><text class="cm-num">'
    )
    assert out == (
        '<td class="cm-num" style="text-align:right;white-space:nowrap;color:inherit">1</td>'
        '<text class="cm-num">'
    )
    assert style.inline_styles(out) == out
    assert style.inline_styles("<b>x</b><td>") == '<b>x</b><td style="' + style.INLINE["td"] + '">'


def test_trust_line_only_where_a_picture_needs_trust_and_hidden_by_the_stylesheet():
    assert style.NEEDS_TRUST not in style.page("<table></table>", "mem")
    assert style.NEEDS_TRUST in style.page("<svg><title>t</title></svg>", "graph")
    assert ".cudamagic .cm-untrusted{display:none}" in style.CSS
