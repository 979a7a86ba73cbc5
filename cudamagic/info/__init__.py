"""``%cudainfo``: facts about PyTorch, CUDA, the driver and the GPUs (:mod:`.facts`), findings, and the report
(:mod:`.report`); the IPython front is :mod:`.magic`."""
