"""``%%cuda``: CUDA C++ in a cell (compile for this GPU, cache, stream, fail loudly, PyTorch extensions)."""
