"""``%gpuwatch``: samples, sources (live NVML, replay), the sampler thread and trace files (:mod:`.telemetry`), the
monitor object (:mod:`.monitor`), the widget and text view (:mod:`.widget`); the IPython front is :mod:`.magic`."""
