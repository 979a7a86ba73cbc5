"""cudamagic: the PyTorch + CUDA notebook companion.

``%load_ext cudamagic`` registers the magics. Loading imports neither torch nor
pynvml; each magic imports what it needs when it first runs.
"""

__version__ = "0.1.0"


def load_ipython_extension(ipython):
    """Register :class:`cudamagic.magics.CudaMagics` on ``ipython``."""
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython):
    """Stop every thread and remove every event callback cudamagic installed."""
    from .magics import unload

    unload(ipython)
