"""Python's cyclic garbage collector paused while a burst of objects is built.

Building a graph of 100,000 nodes or aggregating 100,000 profiler events allocates fast enough to
start collections, each of which traverses every object made so far: the work was 2-10x slower
with the collector on (``benchmarks/bench_graph.py``, ``benchmarks/bench_torchprof.py``).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def paused_gc(*, promote: bool = False):
    """Pause the cyclic GC inside the block; enabled again after, if it was.

    A pause only delays collection: cycles made inside are collected once the collector is back.

    Args:
        promote: For blocks whose objects outlive them and make no garbage cycles (the graph
            walk): the objects made inside go to the oldest generation without the traversal of
            the youngest that the first collection after the pause would make (0.2 s for the
            650,000 objects of a 100,000-op chain's walk). The collections the pause skipped would
            have moved every survivor there too. The young garbage made before the block is
            collected first (``gc.collect(1)``: a few thousand objects at most), so no garbage
            cycle, and no GPU memory it holds, is moved with them; done with ``gc.freeze()`` and
            ``gc.unfreeze()``, and not done when the program froze objects of its own (then
            ``unfreeze`` would let them go) or turned the collector off.
    """
    was_enabled = gc.isenabled()
    promote = promote and was_enabled and not gc.get_freeze_count()
    if promote:
        gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if promote:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
