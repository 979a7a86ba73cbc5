"""``%%cudamem`` / ``%cudamem``: what cells do to GPU and CPU memory, and what holds it.

Modules:
    magic: the IPython front (``MemSettings``, ``MemMagics``).
    options: checks of the action word and flags; ``--threshold`` sizes (``parse_bytes``).
    stats: allocator counters (the one ``torch.cuda`` seam), RSS, NVML process memory, snapshots,
        in-cell peak.
    census: tensor storages reachable from the namespace, live tensors, what holds them.
    report: ``CellMemReport`` (one measured cell) and how it is built from two snapshots.
    measure: ``%%cudamem`` (run one cell measured) and ``%cudamem on`` (``CellMemMonitor`` on
        IPython events).
    history: ``MemHistory``, the measured cells of the session.
    free: ``%cudamem free`` (traceback clearing, releasing named holders, ``FreeReport``).
    render: text and HTML of the three reports.
    holders: what keeps tensor memory alive, named as the user sees it, with the fix.
    why: ``%cudamem why`` (``WhyReport``) and ``%cudamem on``'s growth watch (``CellGrowth``).
    sites: where growing CUDA memory was allocated (PyTorch's memory snapshot).
"""
