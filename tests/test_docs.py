"""The manual site (docs/) and the ``%magic?`` pages tell the same truth.

- The site builds offline with no warning and no broken internal link (``docs/build.py``, slow).
- Each magic's ``%magic?`` page lists the same options, with the same defaults, as its site page.
- Every magic line of the site's pages runs as written in a real shell (as the README's do).
- A setting refuses a bad value at ``%config`` time, naming what it accepts.
"""

from __future__ import annotations

import logging
import math
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
from IPython.core.error import UsageError
from traitlets import Enum, Float, Int

from tests.test_readme import CANNOT_RUN_HERE, prepare_shell, readme_cells, run_cells, site_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
sys.path.insert(0, os.path.join(ROOT, "docs"))
import check_links  # noqa: E402
import cudamagic_docs  # noqa: E402

sys.path.pop(0)
sys.path.pop(0)


def magic_names() -> list:
    """``[(name, prefix)]`` of every magic with options; ``%%`` where it is a cell magic."""
    from cudamagic.extension import AREAS

    out = []
    for cls in AREAS.values():
        for kind, prefix in (("cell", "%%"), ("line", "%")):
            for name, method in cls.magics.get(kind, {}).items():
                if getattr(getattr(cls, method), "parser", None) is not None:
                    if name not in [n for n, _p in out]:
                        out.append((name, prefix))
    return out


def help_page(ip, capsys, name: str, prefix: str) -> str:
    ip.run_line_magic("pinfo", prefix + name)
    return capsys.readouterr().out


def help_options(page: str) -> list:
    """``[(form, default)]`` read back from the Options section of a printed ``%magic?`` page."""
    section = page.split("\nOptions:\n", 1)[1].split("\n\nManual: ", 1)[0]
    rows = []
    for block in re.split(r"\n(?=  \S)", section):
        form, _, body = block.partition("\n")
        text = " ".join(body.split())
        rows.append((form.strip(), text.rsplit(" Default: ", 1)[1].removesuffix(".")))
    return rows


def test_every_magic_has_a_site_page_generated_from_its_parser():
    names = magic_names()
    assert len(names) == 8
    for name, _prefix in names:
        page = os.path.join(ROOT, "docs", "magics", f"{name}.md")
        with open(page, encoding="utf-8") as fh:
            assert f"```{{cudamagic-options}} {name}\n```" in fh.read(), page


def test_help_page_options_are_the_site_page_options(ip, capsys):
    for name, prefix in magic_names():
        page = help_page(ip, capsys, name, prefix)
        site = [(form, default) for form, default, _m in cudamagic_docs.option_rows(name)]
        assert help_options(page) == site, name
        assert len(site) >= 2


def test_help_pages_are_manuals(ip, capsys):
    forms = {}
    for name, prefix in magic_names():
        page = help_page(ip, capsys, name, prefix)
        usage = page.split("::\n\n", 1)[1].split("\n\n", 1)[0]
        assert usage.lstrip().startswith(f"{prefix}{name} "), (name, usage)
        examples = page.split("Examples", 1)[1].split("\nOptions:\n", 1)[0]
        magic_lines = [ln for ln in examples.splitlines() if ln.strip().startswith("%")]
        assert len(magic_lines) >= 3, (name, magic_lines)
        # a magic starts its line (or follows `x =`), never runs on after code (r.tensors %cudamem)
        glued = re.compile(rf"[^\s=]\s+%{{1,2}}({'|'.join(n for n, _p in magic_names())}|config)\b")
        assert not [ln for ln in examples.splitlines() if glued.search(ln.split("  #")[0])], name
        assert f"docs/magics/{name}.md" in page and os.path.exists(
            os.path.join(ROOT, "docs", "magics", f"{name}.md")
        )
        for form, default in help_options(page):
            assert default, (name, form)
            forms[f"{name} {form.split()[0]}"] = form
    # the real forms of the options whose metavars once lied
    assert forms["torchprof --compare"] == "--compare A B"
    assert forms["gpuwatch --job"] == "--job [JOB]"
    assert forms["cudamem --out"] == "--out [N ...]"
    assert forms["autograd_graph --format"] == "--format {svg,png,pdf,dot}"


def test_cell_magics_print_a_cell_usage_line(ip, capsys):
    for name in ("cudafit", "autograd_graph", "torchprof", "cudamem", "cuda"):
        page = help_page(ip, capsys, name, "%%")
        assert re.search(rf"^  %%{name} \[", page, re.M), name


def test_each_usage_line_shows_what_that_form_takes(ip, capsys):
    # (a line-only option, a cell-only option, that option on a line) of each magic that is both
    cases = {
        "cuda": ("--clear-cache", "--arch", "--arch sm_90"),
        "torchprof": ("--compare", "--top", "--top 3"),
        "cudamem": ("--threshold", "--reset-peak", "on --reset-peak"),
    }
    for name, (line_opt, cell_opt, misuse) in cases.items():
        usage = help_page(ip, capsys, name, "%%").split("\n\n")[1]
        cell, line = usage.split(f"\n  %{name} ")
        assert cell_opt in cell and line_opt not in cell, name
        assert line_opt in line and cell_opt not in line, name
        # the magic agrees: the cell's option is refused on the line
        with pytest.raises(UsageError, match=re.escape(cell_opt)):
            ip.run_line_magic(name, misuse)


def test_numbered_options_state_their_unit(ip):
    units = ("second", "Seconds", "MiB", "bytes", "rows", "Rows", "samples", "boxes", "frames")
    units += ("steps", "count", "module calls", "indices")
    for name, _prefix in magic_names():
        func = cudamagic_docs.magic_function(name)
        for action in func.parser._actions:
            if action.type in (int, float):
                assert any(u in (action.help or "") for u in units), (name, action.option_strings)


# ---- the %config settings ----------------------------------------------------------------------


def _bad_values(trait) -> list:
    if isinstance(trait, Enum):
        return ["'jpg'"]
    if isinstance(trait, Float):
        return ["-1.0", "float('nan')"]
    if isinstance(trait, Int):
        return ["-1"]
    return []


def test_config_refuses_bad_values_naming_what_it_accepts(ip, caplog):
    from cudamagic.extension import CudaMagics, current

    settings = current().settings
    checked = 0
    for name, trait in sorted(CudaMagics.class_traits(config=True).items()):
        for bad in _bad_values(trait):
            before = getattr(settings, name)
            caplog.clear()
            with caplog.at_level(logging.ERROR):
                assert ip.run_cell(f"%config CudaMagics.{name} = {bad}").error_in_exec is None
            assert getattr(settings, name) == before or (
                isinstance(before, float) and math.isnan(before)
            ), (name, bad)
            message = " ".join(r.getMessage() for r in caplog.records)
            assert name in message, (name, bad, message)
            if isinstance(trait, Enum):
                assert all(repr(v) in message for v in trait.values), message
            checked += 1
    assert checked >= 15
    assert ip.run_cell("%config CudaMagics.graph_format = 'png'").error_in_exec is None
    assert settings.graph_format == "png"


# ---- the site's magic lines run ----------------------------------------------------------------

#: The manual's lines that cannot run here (besides the README's), each with the reason.
SITE_CANNOT_RUN = {
    "%gpuwatch --source": "needs a Prometheus server (tests/watch/test_cluster*.py run one)",
    "%gpuwatch --replay cluster.jsonl": "needs the cluster.jsonl the --source --log line records",
}


def test_every_site_cannot_run_entry_matches_a_site_line():
    sources = [src for _p, _n, src in site_cells()]
    for start in SITE_CANNOT_RUN:
        assert any(s.startswith(start) for s in sources), start


@pytest.mark.parametrize("page", sorted({p for p, _n, _s in site_cells()}))
def test_site_magic_lines_run_as_written(ip, fake_nvml, tmp_path, monkeypatch, capsys, page):
    prepare_shell(ip, fake_nvml, tmp_path, monkeypatch)
    cells = [(no, src) for p, no, src in site_cells() if p == page]
    ran, skipped = run_cells(ip, cells, page, {**CANNOT_RUN_HERE, **SITE_CANNOT_RUN})
    assert ran or skipped
    assert "UsageError" not in capsys.readouterr().out


def test_site_runs_more_magic_lines_than_the_readme():
    assert len(site_cells()) >= len(readme_cells()) >= 1


# ---- the internal link check -------------------------------------------------------------------


def test_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text(
        '<h1 id="top">A</h1><a href="b.html#here">ok</a><a href="b.html#gone">anchor</a>'
        '<a href="c.html">page</a><a href="#top">self</a><a href="https://example.org/x">out</a>'
    )
    (tmp_path / "b.html").write_text('<p id="here">B</p>')
    broken = check_links.broken_links(str(tmp_path))
    assert len(broken) == 2
    assert "b.html#gone (no #gone in b.html)" in broken[0] + broken[1]
    assert any("c.html (no such file)" in b for b in broken)


# ---- the whole build (slow: about 30 s on a CPU) -----------------------------------------------


class _Rows(HTMLParser):
    """The rows of the option tables of a built page: ``[[cell text, ...]]``."""

    def __init__(self):
        super().__init__()
        self.rows, self._row, self._cell, self._in_table = [], None, None, 0

    def handle_starttag(self, tag, attrs):
        if tag == "table" and "cudamagic-options" in (dict(attrs).get("class") or ""):
            self._in_table += 1
        elif self._in_table and tag == "tr":
            self._row = []
        elif self._row is not None and tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "table" and self._in_table:
            self._in_table -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@pytest.mark.slow
def test_site_builds_offline_with_no_warning_and_agrees_with_the_help_pages(ip, capsys, tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "docs", "build.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "docs: 0 warnings, 0 broken internal links" in proc.stdout
    html = tmp_path / "html"
    for name, prefix in magic_names():
        parser = _Rows()
        parser.feed((html / "magics" / f"{name}.html").read_text(encoding="utf-8"))
        built = [tuple(r[:2]) for r in parser.rows if r and r[0] != "option"]
        page = help_page(ip, capsys, name, prefix)
        options = help_options(page)
        assert built[: len(options)] == options, name  # then the area's settings
    for name in cudamagic_docs.NOTEBOOKS:
        assert (html / "examples" / f"{name}.html").exists()
    settings = _Rows()
    settings.feed((html / "settings.html").read_text(encoding="utf-8"))
    from cudamagic.extension import CudaMagics

    names = {r[0] for r in settings.rows}
    assert {f"CudaMagics.{n}" for n in CudaMagics.class_traits(config=True)} <= names
    for page in html.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r'<script[^>]+src="https?:', text), page  # nothing from a CDN
