"""``%%torchprof``: where a cell's time and memory went.

``%%torchprof``: profile a cell with ``torch.profiler`` and show where the time and memory went,
offline.

Modules: :mod:`.magic` (the IPython front), :mod:`.options` (flag checks), :mod:`.run` (running the
cell under the profiler), :mod:`.summary` (a result from the profiler's events), :mod:`.result`
(what the magic returns), :mod:`.render` (text, HTML, the SVG timeline), :mod:`.compare`
(``--compare``), :mod:`.trace` (Chrome/Perfetto trace writing under a size cap).
"""
