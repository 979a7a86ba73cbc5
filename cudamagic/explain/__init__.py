"""The error explainer: ``%cudaexplain`` and the box under a failing cell.

- :mod:`.magic`: the IPython front (``%cudaexplain``, the ``post_run_cell`` callback).
- :mod:`.result`: ``Entry``, ``Context``, ``Explanation``, ``CatalogueView``, ``NoMatch``.
- :mod:`.render`: the box, the catalogue list and "no match" as text and HTML.
- :mod:`.catalogue`: the known errors, as data; :mod:`.cudaerrors`: CUDA error families.
- :mod:`.match`: matching an exception and its cause chain against the catalogue.
- :mod:`.scene`: the live namespace, failing frames and lines, and queries on them.
- :mod:`.source`: reading the user's source with ``ast``.
- :mod:`.context`: the ``ctx_*`` context functions, one module per family of errors.
"""
