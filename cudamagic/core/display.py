"""One display mixin for every result object: text in a terminal, HTML in a notebook."""

from __future__ import annotations


class Rendered:
    """Shows an object through its ``_text()`` and ``_html()`` methods.

    A subclass names its renderer's functions, for example ``_text = render.report_text``; a
    dataclass subclass passes ``repr=False`` so that this ``__repr__`` stays.
    """

    def _text(self) -> str:
        raise NotImplementedError

    def _html(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        """The text form."""
        return self._text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self._text())

    def _repr_html_(self) -> str:
        return self._html()
