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


surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks("cluster", NAME)
