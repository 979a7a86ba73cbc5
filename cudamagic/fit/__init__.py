"""``%%cudafit``: will this training step fit on the GPU, and what is the largest batch, estimated on
fake tensors before anything runs (no GPU memory used, the user's objects untouched).
"""
