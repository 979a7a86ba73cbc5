"""``%%cudamem`` / ``%cudamem``: per-cell memory measurement, tensor census, history and ``free``
(:mod:`.cellmem`); the IPython front is :mod:`.magic`."""
