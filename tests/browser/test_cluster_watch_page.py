"""Tier 4: examples/cluster_watch.ipynb in JupyterLab, in both themes and widths.

The cluster monitor and every other output are checked (issue 16). With a ``prometheus`` program it
watches a local simulated cluster, else a replay.
"""

import pytest

from tests.browser import jlab, looks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "cluster_watch.ipynb"


@pytest.fixture(scope="module")
def cluster(page, lab):
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page, timeout_s=300)
    return page


def test_runs_without_errors(cluster):
    assert jlab.error_texts(cluster) == [], jlab.page_state(cluster)
    assert "Error displaying widget" not in jlab.text(cluster.locator(jlab.PANEL))


@pytest.fixture(scope="module")
def surveyed(cluster, screenshots):
    return looks.survey(cluster, NAME, screenshots)


@pytest.mark.parametrize("theme", looks.params("cluster_watch", "contrast", looks.THEMES))
def test_text_contrast(surveyed, theme):
    looks.assert_contrast(surveyed, theme)


@pytest.mark.parametrize("width", looks.params("cluster_watch", "overflow", looks.WIDTHS))
def test_no_hidden_overflow(surveyed, width):
    looks.assert_no_hidden_overflow(surveyed, width)
