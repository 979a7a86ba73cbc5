"""cudamagic: the PyTorch + CUDA notebook companion.

``%load_ext cudamagic`` registers the magics. Loading imports neither torch nor pynvml; each magic
imports what it needs when it first runs.
"""

from .core.version import __version__ as __version__


def load_ipython_extension(ipython):
    """Register every area's magics and the ``CudaMagics`` settings on ``ipython``."""
    from .extension import load

    load(ipython)


def unload_ipython_extension(ipython):
    """Stop every thread and remove every event callback cudamagic installed."""
    from .extension import unload

    unload(ipython)
