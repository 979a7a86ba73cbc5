"""``%load_ext cudamagic`` says what it added; ``%cudamagic`` is the overview of every magic."""

import pytest
from IPython.core.error import UsageError

from cudamagic import extension
from tests.inline import plain


def our_magics(ip) -> set:
    """Names (with % or %%) of the registered magics bound to cudamagic's instances."""
    ours = {id(m) for m in extension.current().magics.values()}
    return {
        prefix + name
        for kind, prefix in (("line", "%"), ("cell", "%%"))
        for name, func in ip.magics_manager.magics[kind].items()
        if id(getattr(func, "__self__", None)) in ours
    }


def test_load_says_in_one_line_what_it_added(ip, capsys):
    ip.run_line_magic("unload_ext", "cudamagic")
    capsys.readouterr()
    ip.run_line_magic("load_ext", "cudamagic")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.rstrip().endswith("Overview: %cudamagic")
    added = set(out.split(" added ", 1)[1].split(". Overview")[0].split(", "))
    assert added == our_magics(ip) - {"%cudamagic"}
    assert {"%cudainfo", "%gpuwatch", "%%autograd_graph", "%%cudafit", "%%cuda"} <= added


def test_overview_lists_every_magic_with_its_manual(ip):
    overview = ip.run_line_magic("cudamagic", "")
    assert {m.name for m in overview.magics} == our_magics(ip)
    assert all(m.summary and not m.summary.startswith("::") for m in overview.magics)
    fit = next(m for m in overview.magics if m.name == "%%cudafit")
    assert fit.help == "%%cudafit?"
    text = repr(overview)
    assert "%%cudafit?" in text and "Estimate whether" in text
    html = overview._repr_html_()
    assert "<table" in html and "%%autograd_graph?" in html
    assert plain(html).count('<div class="cm-scroll"><table') == 1  # narrow outputs scroll


def test_overview_takes_no_options(ip):
    with pytest.raises(UsageError, match="takes no options"):
        ip.run_line_magic("cudamagic", "--all")


def test_lsmagic_has_no_stray_entry(ip):
    listing = repr(ip.run_line_magic("lsmagic", ""))
    assert "%cudainfo;" not in listing and "%cudamagic" in listing


def test_a_cell_magics_usage_error_points_to_its_own_manual(ip):
    with pytest.raises(UsageError, match=r"Type %%cudafit\? for every option"):
        ip.run_cell_magic("cudafit", "--no-such-flag", "pass")
