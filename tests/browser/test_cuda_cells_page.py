"""Tier 4: examples/cuda_cells.ipynb in JupyterLab: every output in both themes and widths.

Issue 16. Run All goes past the cell that fails to compile on purpose: it is tagged
``raises-exception``, which JupyterLab honours. Skipped where nvcc is missing, as the ``%%cuda``
kernel tests are (nvcc is optional; Chromium is not).
"""

import shutil

import pytest

from tests.browser import jlab, looks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "cuda_cells.ipynb"


@pytest.fixture(scope="module")
def cuda_nb(page, lab):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed (needed by %%cuda)")
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page, timeout_s=300)
    return page


def test_runs_with_only_the_expected_compile_error(cuda_nb):
    errors = jlab.error_texts(cuda_nb)
    assert len(errors) == 1 and "missing_value" in errors[0], errors
    prompts = jlab.code_cells(cuda_nb).locator(".jp-InputArea-prompt").all_text_contents()
    assert all(any(ch.isdigit() for ch in p) for p in prompts), f"not every cell ran: {prompts}"


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks("cuda_nb", NAME)
