"""The error explainer: ``%cudaexplain`` and the box under a failing cell that says what happened,
why, and the fix.

- :mod:`.magic`: the IPython front (``%cudaexplain``, the ``post_run_cell`` callback that shows the
    box).
- :mod:`.model`: ``Entry`` (one known failure), ``Context`` (what a context function found),
    ``Explanation``.
- :mod:`.catalogue`: the catalogue of known errors, as data (``CATALOGUE``).
- :mod:`.match`: matching an exception (and its cause chain) against the catalogue; ``explain``.
- :mod:`.scene`: the live ``Scene`` (namespace, failing frames and lines) built from the shell, and
    queries on it.
- :mod:`.source`: reading the user's source with ``ast`` (backward calls, carried names, in-place
    ops).
- :mod:`.context`: the ``ctx_*`` context functions, one module per family of errors.
- :mod:`.box`: the box and the catalogue list as text and HTML.
"""
