"""``%%autograd_graph``: capture and walk of the autograd graph (:mod:`.walk`), DOT, layout and rendering
(:mod:`.dot`); the IPython front is :mod:`.magic`."""
