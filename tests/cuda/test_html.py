"""The HTML of %%cuda's results: one themed page, no hard-coded colour."""

from __future__ import annotations

from cudamagic.core.style import hard_coded_colours
from cudamagic.cuda.result import Saved, Skipped, TorchBuild
from tests.inline import own_styles, plain


def _check(page: str) -> None:
    assert page.startswith('<div class="cudamagic mathjax_ignore cm-cuda">'), page[:80]
    assert hard_coded_colours(page) == []
    assert own_styles(page) == []  # the look comes from the shared stylesheet


def test_saved_header_through_the_shell_is_themed(cuda_ip):
    saved = cuda_ip.run_cell_magic(
        "cuda", "--save vec.cuh", "#define N 4\n"
    )  # saving compiles nothing
    assert isinstance(saved, Saved)
    page = saved._repr_html_()
    _check(page)
    assert '<span class="cm-badge cm-ok">\u2713 saved</span> <code>vec.cuh</code>' in plain(page)
    assert '<code>#include "vec.cuh"</code>' in page.replace("&quot;", '"')


def test_torch_build_is_themed_and_escaped():
    built = TorchBuild(
        ("add_one", "<x>"), module=None, cached=True, archs=(), elapsed_s=0.0
    )._repr_html_()
    _check(built)
    assert (
        "<code>add_one</code>, <code>&lt;x&gt;</code>: PyTorch extension loaded from the cache"
        in built
    )


def test_skipped_cell_is_themed_and_escaped():
    page = Skipped('this cell needs nvcc <and> "cudamagic[cuda]"')._repr_html_()
    _check(page)
    assert "skipped</span> this cell needs nvcc &lt;and&gt; &quot;cudamagic[cuda]&quot;" in page
