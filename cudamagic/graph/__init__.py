"""``%%autograd_graph``: run a cell and draw the autograd graph (``grad_fn`` DAG) of its result.

Modules:
    magic: the IPython front (``GraphSettings``, ``GraphMagics``).
    options: flag and setting checks (``GraphOptions``).
    capture: running the cell, recording module calls, naming tensors, finding the outputs.
    walk: the iterative walk of ``grad_fn``/``next_functions`` and the bytes saved tensors keep.
    model: the graph model (node and edge kinds, nodes, edges, module calls, ``topo_order``).
    views: graphs derived from a walked one (per-use leaves, collapsed and folded views).
    dot: DOT text (styles, legend, escaping).
    layout: running the Graphviz ``dot`` program with a time limit.
    draw: choosing the view that fits, the fallbacks and ``--save``.
    torchviz_engine: ``--engine torchviz`` (torchviz's ``make_dot``).
    result: ``GraphResult``, what the magic returns.
    render: the text and HTML of a ``GraphResult``.
"""
