"""What a ``%%cuda`` cell returns: data only (text and HTML are in :mod:`.render`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.display import Displayed
from . import render


@dataclass(frozen=True, repr=False)
class Saved(Displayed):
    """``%%cuda --save NAME``: the cell stored as a header.

    Attributes:
        name: the header's name (``vec.cuh``).
        path: where it is saved.
    """

    name: str
    path: str

    def to_text(self) -> str:
        """Plain text."""
        return render.saved_text(self)

    def to_html(self) -> str:
        """HTML."""
        return render.saved_html(self)


@dataclass(frozen=True, repr=False)
class Skipped(Displayed):
    """``%%cuda --skip-without``: the cell did not run.

    Attributes:
        reason: what is missing here.
    """

    reason: str

    def to_text(self) -> str:
        """Plain text."""
        return render.skipped_text(self)

    def to_html(self) -> str:
        """HTML."""
        return render.skipped_html(self)


@dataclass(frozen=True, repr=False)
class TorchBuild(Displayed):
    """``%%cuda --torch``: a PyTorch extension built or loaded.

    Attributes:
        names: the functions bound in the user's namespace.
        module: the imported extension.
        cached: True when no build ran.
        archs: the architecture digits built for (``("90",)``).
        elapsed_s: seconds to build or load it.
    """

    names: tuple
    module: object
    cached: bool
    archs: tuple
    elapsed_s: float

    def to_text(self) -> str:
        """Plain text."""
        return render.torch_text(self)

    def to_html(self) -> str:
        """HTML."""
        return render.torch_html(self)


@dataclass(frozen=True)
class ProgramRun:
    """A program compiled (or found in the cache) and run; the magic shows nothing for it.

    Attributes:
        path: the program's path in the cache.
        cached: True when nvcc was not called.
        archs: the architecture digits built for; ``()``: nvcc's default.
        compile_s: seconds spent compiling (or looking up the cache).
        run_s: seconds the program ran.
    """

    path: str
    cached: bool
    archs: tuple
    compile_s: float
    run_s: float
