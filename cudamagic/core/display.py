"""How a result object shows itself in a terminal and in a notebook."""

from __future__ import annotations


class Displayed:
    """Mixin: ``repr``, IPython's pretty printer and the notebook's HTML from two methods.

    A subclass defines ``to_text()`` and ``to_html()``, usually one call into its area's
    ``render.py``, so the data class holds no rendering code.
    """

    def to_text(self) -> str:
        """The object as plain text (terminal, ``text/plain``)."""
        raise NotImplementedError

    def to_html(self) -> str:
        """The object as HTML (notebook)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.to_text())

    def _repr_html_(self) -> str:
        return self.to_html()
