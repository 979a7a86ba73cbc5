"""``%%autograd_graph``: run a cell and draw the autograd graph (``grad_fn`` DAG) of its result.

Modules:
    magic: the IPython front (``GraphSettings``, ``GraphMagics``); options: flag and setting checks.
    capture: running the cell like ``%%time``, recording module calls, naming tensors, finding the
        outputs.
    walk: the iterative walk of ``grad_fn``/``next_functions`` and the bytes saved tensors keep
        alive.
    model: the graph model (node and edge kinds, ``GraphNode``, ``GraphEdge``, ``ModuleCall``,
        ``AutogradGraph``).
    views: graphs derived from a walked one (parameters placed, per-use leaves, collapsed and folded
        views).
    dot: DOT text (styles, legend, escaping) and running the Graphviz ``dot`` program with a time
        limit.
    draw: choosing the view that fits, rendering it, the fallbacks and ``--save``.
    result: ``GraphResult``, what the magic returns, and its text and HTML forms.
"""
