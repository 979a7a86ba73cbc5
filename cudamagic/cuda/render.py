"""Text and HTML of ``%%cuda``'s results (:mod:`.result`)."""

from __future__ import annotations

from ..core import style
from ..core.fmt import esc


def saved_text(saved) -> str:
    """``saved vec.cuh: #include "vec.cuh" in later %%cuda cells``."""
    return f'saved {saved.name}: #include "{saved.name}" in later %%cuda cells'


def saved_html(saved) -> str:
    """:func:`saved_text` as HTML."""
    name = esc(saved.name)
    return style.page(
        f"{style.badge('saved', 'ok')} <code>{name}</code>: <code>#include "
        f'"{name}"</code> in later <code>%%cuda</code> cells',
        "cuda",
    )


def skipped_text(skipped) -> str:
    """``skipped: <reason>``."""
    return f"skipped: {skipped.reason}"


def skipped_html(skipped) -> str:
    """:func:`skipped_text` as HTML."""
    return style.page(f"{style.badge('skipped', 'info')} {esc(skipped.reason)}", "cuda")


def _how(built) -> str:
    return "loaded from the cache" if built.cached else f"built in {built.elapsed_s:.1f} s"


def torch_text(built) -> str:
    """``add_one, scale: PyTorch extension built in 12.3 s; callable in this namespace``."""
    return f"{', '.join(built.names)}: PyTorch extension {_how(built)}; callable in this namespace"


def torch_html(built) -> str:
    """:func:`torch_text` as HTML."""
    names = ", ".join(f"<code>{esc(n)}</code>" for n in built.names)
    return style.page(
        f"{style.badge('built', 'ok')} {names}: PyTorch extension {esc(_how(built))}; "
        "callable in this namespace",
        "cuda",
    )
