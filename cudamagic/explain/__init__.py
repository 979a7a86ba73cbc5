"""The error explainer: catalogue, matching and context (:mod:`.match`), the box (:mod:`.box`); the IPython
front (``%cudaexplain`` and the box after a failing cell) is :mod:`.magic`."""
