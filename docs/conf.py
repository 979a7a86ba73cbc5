"""Sphinx configuration of the cudamagic manual (``make docs`` builds it into docs/_build/html).

Why Sphinx with MyST-NB: see about.md. The build is offline and deterministic: notebooks are
rendered with the outputs they were saved with (never executed here), no page loads anything from
a CDN, and every option and setting table is generated from the code (``_ext/cudamagic_docs.py``).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # this checkout's cudamagic
sys.path.insert(0, os.path.join(HERE, "_ext"))

from cudamagic.core.version import __version__  # noqa: E402

project = "cudamagic"
author = "the cudamagic developers"
copyright = "the cudamagic developers"
version = release = __version__

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "cudamagic_docs"]
exclude_patterns = ["_build", "examples/*.tmp", "images"]  # images/: the README's pictures
html_theme = "furo"
html_title = f"cudamagic {__version__}"
html_static_path = []
smartquotes = False  # "--group" stays two hyphens, as typed
html_last_updated_fmt = None  # deterministic pages: no build date

# every internal reference must resolve (-W turns a missing one into an error)
nitpicky = True
nitpick_ignore_regex = [
    # names from outside this project (the standard library, torch, IPython, traitlets) and the
    # typing forms in signatures are not documented here
    ("py:class", r"(?!cudamagic\.).*"),
    ("py:obj", r"(?!cudamagic\.).*"),
    ("py:exc", r"(?!cudamagic\.).*"),
]
# the returned objects' docstrings name internal functions that the API page does not document;
# every other cudamagic reference must resolve
nitpick_ignore = [
    ("py:func", "cudamagic.info.facts.collect_facts"),
    ("py:meth", "Monitors.start"),
    ("py:class", "cudamagic.graph.AutogradGraph"),
    ("py:func", "cudamagic.mem.render.summary_line"),
    ("py:func", "render.text"),
    ("py:func", "render.html"),
    ("py:func", "cudamagic.explain.match.explain"),
    ("py:data", "cudaerrors.FAMILIES"),
]

# MyST: headings get anchors (links like magics/gpuwatch.md#cluster resolve or fail the build)
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
suppress_warnings = []

# notebooks: shown with their saved outputs, never executed (the build needs no kernel, no GPU)
nb_execution_mode = "off"
# widgets need their JavaScript from a CDN: the page shows each widget's text snapshot instead
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [
    ("html", "application/vnd.jupyter.widget-view+json", None),
    ("html", "application/vnd.jupyter.widget-state+json", None),
]

autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # a dataclass's Attributes: section and its fields are one description
