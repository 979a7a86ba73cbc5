"""``%%cuda``: CUDA C++ in a cell, compiled for this GPU, cached, run; or a PyTorch extension."""
