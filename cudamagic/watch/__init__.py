"""``%gpuwatch``: a live GPU monitor that keeps updating while other cells run.

- :mod:`.magic`: the IPython front (``WatchSettings``, ``WatchMagics.gpuwatch``).
- :mod:`.options`: checks the flags and settings, opens the sample source and the ``--log`` writer.
- :mod:`.samples`: the immutable ``Sample`` dataclasses (GPU, process, MIG, host, PyTorch) and their
    flat records.
- :mod:`.sources`: where samples come from: the live machine (NVML, ``psutil``, the PyTorch
    allocator) or a replay.
- :mod:`.sampler`: the ``Sampler`` thread that reads a source every interval into a bounded history.
- :mod:`.trace`: the JSON-lines trace format, its writer and its strict, bounded reader.
- :mod:`.monitor`: starts a monitor, keeps the one monitor per kernel, and the text loop.
- :mod:`.result`: the ``GpuWatch`` object ``%gpuwatch`` returns and its display (the widget,
  replaced by a static snapshot when it stops).
- :mod:`.render`: the text and HTML of samples: the snapshot table (``text/plain``), GPU cards,
  charts, the static snapshot.
- :mod:`.widget`: the ipywidgets tree (``WatchView``) and its updates.
- :mod:`.style`: the look (bars, charts, tiles) on JupyterLab's theme variables, and the
    narrow-output layout.
- :mod:`.prometheus`, :mod:`.exporters`, :mod:`.cluster`, :mod:`.clusterview`: ``--source
    prometheus://`` (cluster).
"""
