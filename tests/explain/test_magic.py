"""Tier 2: how the explainer box lives in the shell.

Below the traceback, traceback unchanged, nothing swallowed, no box for unmatched
errors, chains with another extension's custom exception handler, `explain_errors
= False`, `%cudaexplain`, `%cudaexplain --list`, removal on `%unload_ext`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types

import pytest
import torch
from IPython.core.error import UsageError

from tests.inline import own_styles, plain

BOX = "cudamagic explains"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SCALAR_FAIL = "w = torch.randn(3, requires_grad=True)\npred = w * 2\npred.backward()"


def magics():
    from cudamagic import extension as m

    return m.current().magics["explain"]


def clean(text: str) -> str:
    text = ANSI.sub("", text)
    return re.sub(r"In\[\d+\]|line \d+", "X", text)


def run(ip, capsys, code):
    capsys.readouterr()
    result = ip.run_cell(code, store_history=True)
    return result, capsys.readouterr().out


def test_box_below_traceback_and_traceback_unchanged(ip, capsys):
    ip.run_cell("import torch")
    result, with_box = run(ip, capsys, SCALAR_FAIL)
    assert isinstance(result.error_in_exec, RuntimeError)  # nothing swallowed
    assert BOX in with_box
    tb_end = with_box.index("grad can be implicitly created only for scalar outputs")
    assert with_box.index(BOX) > tb_end  # the box comes after the traceback

    ip.run_line_magic("unload_ext", "cudamagic")
    try:
        result_off, without = run(ip, capsys, SCALAR_FAIL)
    finally:
        ip.run_line_magic("load_ext", "cudamagic")
    assert BOX not in without
    assert type(result_off.error_in_exec) is type(result.error_in_exec)
    # the traceback text is exactly IPython's own: the output with the box starts with it
    assert clean(with_box).startswith(clean(without).rstrip("\n"))
    assert "pred.backward()" in clean(without)


def test_unmatched_errors_get_no_box(ip, capsys):
    for code in ("1/0", "raise RuntimeError('my own bug')", "import torch\ntorch.ones(2)[5]"):
        result, out = run(ip, capsys, code)
        assert result.error_in_exec is not None
        assert BOX not in out
        assert magics().last_explanation is None


def test_successful_cell_gets_no_box(ip, capsys):
    result, out = run(ip, capsys, "x = 1 + 1")
    assert result.success and BOX not in out and magics().last_explanation is None


def test_another_extensions_custom_handler_still_runs(ip, capsys):
    calls = []

    def handler(shell, etype, value, tb, tb_offset=None):
        calls.append(etype.__name__)
        print("OTHER-EXTENSION-HANDLER")
        return ["handled"]

    ip.run_cell("import torch")
    ip.set_custom_exc((RuntimeError,), handler)
    try:
        result, out = run(ip, capsys, SCALAR_FAIL)
    finally:
        ip.set_custom_exc((), None)
        ip.custom_exceptions = ()
    assert calls == ["RuntimeError"]
    assert "OTHER-EXTENSION-HANDLER" in out and BOX in out
    assert out.index("OTHER-EXTENSION-HANDLER") < out.index(BOX)
    assert magics().last_explanation.entry.id == "grad-not-scalar"


def test_other_post_run_cell_callbacks_keep_running(ip, capsys):
    seen = []

    def other(result):
        seen.append(type(result.error_in_exec).__name__)

    ip.events.register("post_run_cell", other)
    try:
        ip.run_cell("import torch")
        run(ip, capsys, SCALAR_FAIL)
    finally:
        ip.events.unregister("post_run_cell", other)
    assert seen[-1] == "RuntimeError"


def test_explain_errors_false_turns_the_box_off(ip, capsys):
    ip.run_cell("import torch")
    ip.run_line_magic("config", "CudaMagics.explain_errors = False")
    result, out = run(ip, capsys, SCALAR_FAIL)
    assert result.error_in_exec is not None and BOX not in out
    assert magics().last_explanation is None
    # on demand it still works
    expl = ip.run_line_magic("cudaexplain", "")
    assert expl.entry.id == "grad-not-scalar"
    assert expl.context.facts["tensor"] == "pred"
    ip.run_line_magic("config", "CudaMagics.explain_errors = True")
    _, out = run(ip, capsys, SCALAR_FAIL)
    assert BOX in out


def test_cudaexplain_list_and_entry(ip):
    from cudamagic.explain.catalogue import CATALOGUE

    listing = ip.run_line_magic("cudaexplain", "--list")
    assert len(listing) == len(CATALOGUE) >= 20
    text, html = repr(listing), listing._repr_html_()
    for entry in CATALOGUE:
        assert entry.id in text and entry.id in html
    assert max(len(line) for line in text.splitlines()) <= 96  # fits a terminal
    one = ip.run_line_magic("cudaexplain", "cuda-oom")
    assert one.entry.id == "cuda-oom" and "Fix:" in one.to_text()
    with pytest.raises(UsageError, match="--list"):
        ip.run_line_magic("cudaexplain", "no-such-entry")


def test_cudaexplain_without_error_and_with_unmatched(ip, monkeypatch):
    monkeypatch.delattr(sys, "last_value", raising=False)
    with pytest.raises(UsageError, match="No error to explain"):
        ip.run_line_magic("cudaexplain", "")
    ip.run_cell("1/0")
    out = ip.run_line_magic("cudaexplain", "")
    assert "no catalogue entry matches ZeroDivisionError" in repr(out)


def test_html_and_text_forms_escape_outside_text(ip):
    ip.run_cell(
        "raise RuntimeError('mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3) "
        "<script>x</script>')"
    )
    expl = magics().last_explanation
    assert expl.entry.id == "matmul-shapes"
    html = expl._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "What happened" in html and "Fix" in html


def test_explanation_holds_no_exception_traceback_or_frame(ip):
    ip.run_cell("import torch")
    ip.run_cell(
        "def f():\n    big = torch.zeros(100)\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 "
        "has a total "
        "capacity of 8.00 GiB of which 0 bytes is free.')\nf()"
    )
    expl = magics().last_explanation
    assert expl.entry.id == "cuda-oom"
    forbidden = (BaseException, types.TracebackType, types.FrameType, torch.Tensor)

    def walk(obj, depth=0):
        assert not isinstance(obj, forbidden), type(obj)
        if depth > 6:
            return
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                if f.name != "context" or not callable(getattr(obj, f.name)):
                    walk(getattr(obj, f.name), depth + 1)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                walk(v, depth + 1)

    walk(expl.context)
    walk(expl.exc_type)
    walk(expl.message)


def test_unload_removes_the_callback(ip, capsys):
    def ours():
        return [
            cb
            for cb in ip.events.callbacks["post_run_cell"]
            if getattr(cb, "__name__", "") == "_explain_after_cell"
        ]

    assert len(ours()) == 1
    ip.run_line_magic("unload_ext", "cudamagic")
    try:
        assert ours() == []
        ip.run_cell("import torch")
        _, out = run(ip, capsys, SCALAR_FAIL)
        assert BOX not in out
    finally:
        ip.run_line_magic("load_ext", "cudamagic")
    assert len(ours()) == 1  # a reload installs exactly one


def test_explaining_keeps_no_reference_to_the_failing_frames_tensors(ip):
    """explain() and its Scene keep nothing alive.

    Once the exception is dropped, the failing function's tensor is collected.
    """
    import gc

    from cudamagic.explain.match import explain
    from cudamagic.explain.scene import scene_from_shell

    ip.run_cell(
        "import torch\nnn_lin = torch.nn.Linear(7, 2)\ndef f(keep):\n    big = torch.zeros(1000, "
        "100)\n"
        "    keep.append(weakref.ref(big))\n    return nn_lin(big)\nimport weakref"
    )
    refs = []
    try:
        ip.user_ns["f"](refs)
    except RuntimeError as exc:
        expl = explain(exc, scene_from_shell(ip, exc))
    assert expl.entry.id == "matmul-shapes" and expl.context.facts["input"] == "big"
    gc.collect()
    assert refs[0]() is None, "the explainer kept a reference to the failing frame's tensor"


class _Tty:
    """A stdout that says it is a terminal."""

    def isatty(self):
        return True

    def write(self, text):
        return len(text)

    def flush(self):
        pass


def test_text_box_fits_an_80_column_terminal(ip, monkeypatch):
    import os
    import shutil

    from cudamagic.explain import render as er
    from cudamagic.explain.catalogue import CATALOGUE
    from cudamagic.explain.result import CatalogueView

    ip.run_cell("import torch")
    ip.run_cell(SCALAR_FAIL)
    expl = magics().last_explanation
    monkeypatch.setattr(
        shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((80, 24))
    )
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert er.text_width() == 79
    for text in (expl.to_text(), repr(CatalogueView(CATALOGUE))):
        assert max(len(line) for line in text.splitlines()) <= 79
    assert expl.to_text().splitlines()[-1].startswith("╰─ ")
    monkeypatch.setattr(
        shutil, "get_terminal_size", lambda fallback=None: os.terminal_size((20, 24))
    )
    assert er.text_width() == er.MIN_WIDTH  # never narrower than that
    monkeypatch.undo()
    assert er.text_width() == er.WIDTH  # not a terminal (a pipe, a kernel): the fixed width


def test_html_outputs_opt_out_of_math_typesetting(ip):
    """JupyterLab typesets text between two `$` as a formula; a message may hold `$HOME/...`."""
    from cudamagic.core.fmt import NO_MATH
    from cudamagic.explain.catalogue import CATALOGUE
    from cudamagic.explain.result import CatalogueView, NoMatch

    ip.run_cell(
        "raise RuntimeError('mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3) $HOME and "
        "$PATH')"
    )
    for obj in (
        magics().last_explanation,
        CatalogueView(CATALOGUE),
        NoMatch("ValueError", "$a$ and $b$"),
    ):
        assert re.match(r"<div class=['\"][^'\"]*\b" + NO_MATH, obj._repr_html_()), type(obj)


def test_cudaexplain_bad_arguments_and_a_usage_error_as_the_last_error(ip):
    with pytest.raises(UsageError, match=r"Usage: %cudaexplain \[--list\] \[ENTRY\]"):
        ip.run_line_magic("cudaexplain", "a b")
    ip.run_cell("%cudainfo --bogus")  # another magic's UsageError: no box ...
    assert magics().last_explanation is None
    with pytest.raises(UsageError, match="usage message"):  # ... and not 'no entry matches'
        ip.run_line_magic("cudaexplain", "")


def _user_text(page):
    """What a person reads: the text between tags, without the stylesheet and attribute values."""
    import html

    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_box_and_list_are_themed_and_show_ids_only_in_the_list(ip):
    """The box follows the theme and shows the catalogue id only in the list.

    No hard-coded colour; the catalogue id is not in what a person reads (kept as data-id;
    `%cudaexplain --list` shows the ids), technical detail is collapsible, the list's prose columns
    are left-aligned and wrap.
    """
    import html

    from cudamagic.core.style import hard_coded_colours
    from cudamagic.explain.catalogue import CATALOGUE
    from cudamagic.explain.result import CatalogueView, Explanation, NoMatch

    ip.run_cell("raise RuntimeError('mat1 and mat2 shapes cannot be multiplied (2x5 and 4x3)')")
    live = magics().last_explanation
    by_id = [Explanation(entry=e, exc_type="(catalogue entry)", message=e.title) for e in CATALOGUE]
    for expl in [live, *by_id]:
        page, text = expl._repr_html_(), expl.to_text()
        assert page.startswith('<div class="cudamagic mathjax_ignore cm-explain">'), expl.entry.id
        assert hard_coded_colours(page) == [] and own_styles(page) == [], expl.entry.id
        assert f'data-id="{expl.entry.id}"' in page
        assert f"[{expl.entry.id}]" not in text and f"[{expl.entry.id}]" not in _user_text(page)
        assert not re.search(r"\bF\d\d\b", text + _user_text(page)), (
            expl.entry.id
        )  # no field-report ids
        assert "<details><summary>Technical detail</summary>" in page
        assert "cudamagic explains: " + expl.entry.title in text.replace("\n│ ", " ")
    listing = CatalogueView(CATALOGUE)._repr_html_()
    assert listing.startswith('<div class="cudamagic mathjax_ignore cm-explain">')
    assert hard_coded_colours(listing) == []
    listing = plain(listing)
    assert (
        '<th>id</th><th class="cm-prose">case (open for the fix)</th><th>exception</th>' in listing
    )
    assert '<div class="cm-scroll"><table' in listing
    for entry in CATALOGUE:
        assert f"<td><code>{entry.id}</code></td>" in listing
        assert (
            '<td class="cm-prose"><details>'
            f"<summary>{html.escape(entry.title)}</summary><p><b>Fix:</b> " in listing
        )
    nomatch = NoMatch(
        "ValueError", "#fff rgb(1,2,3)"
    )._repr_html_()  # outside text is not a colour of ours
    assert nomatch.startswith('<div class="cudamagic mathjax_ignore cm-explain">')
    assert own_styles(nomatch) == []
