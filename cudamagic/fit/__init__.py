"""``%%cudafit``: will a training step fit on the GPU.

Estimated on fake tensors before anything runs, with the largest batch that fits: no GPU memory is
used and the user's objects are left untouched.
"""
