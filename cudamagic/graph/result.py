"""What ``%%autograd_graph`` returns: :class:`GraphResult`."""

from __future__ import annotations

import dataclasses
import os

from ..core.display import Displayed
from . import render
from .dot import dot_sources, to_dot
from .layout import run_dot

#: ``--save`` and :meth:`GraphResult.save`: file extension -> format written.
SAVE_EXTENSIONS = {"svg": "svg", "png": "png", "pdf": "pdf", "dot": "dot", "gv": "dot"}


@dataclasses.dataclass(repr=False)
class GraphResult(Displayed):
    """What ``%%autograd_graph`` returns: the graph data, its DOT source and the picture.

    Attributes:
        graph: The full :class:`~cudamagic.graph.AutogradGraph` (all nodes, each leaf once, before
            collapsing).
        drawn: The graph that was drawn (``graph`` itself, a collapsed view, or leaves drawn once
            per use).
        dot: DOT source of ``drawn`` for a standalone file (with a legend and the caption).
        format: ``'svg'``, ``'png'``, ``'pdf'`` or ``'dot'``.
        image: Rendered bytes (the picture in the notebook: no legend or caption inside, the page
            shows them), ``None`` when not rendered.
        notes: What happened (collapsing, skipped outputs, timeouts), one sentence each.
        problem: Why there is no picture (``'dot missing'``, ``'dot timeout'``, ``'too big'``...),
            or ``''``.
        saved_to: Path written by ``--save``, or ``''``.
        view_notes: The notes among ``notes`` that say how the view was chosen (shown under
            "details").
        group: Module calls drawn as clusters (``--group``).
        engine: ``'cudamagic'`` or ``'torchviz'`` (then ``dot`` is torchviz's source, drawn as it
            is).
    """

    graph: object
    drawn: object
    dot: str
    format: str = "svg"
    image: bytes | None = None
    notes: list = dataclasses.field(default_factory=list)
    problem: str = ""
    saved_to: str = ""
    view_notes: list = dataclasses.field(default_factory=list)
    group: bool = False
    engine: str = "cudamagic"
    #: ``(drawn, group, source)``: the notebook's DOT source, written with ``dot`` (write_dot).
    _inline: tuple = dataclasses.field(default=(), init=False, repr=False, compare=False)

    @property
    def nodes(self):
        """Nodes of the full graph."""
        return self.graph.nodes

    @property
    def edges(self):
        """Edges of the full graph."""
        return self.graph.edges

    @property
    def svg(self) -> str | None:
        """The SVG text (``None`` unless rendered as SVG)."""
        if self.format == "svg" and self.image is not None:
            return self.image.decode("utf-8", "replace")
        return None

    def inline_dot(self) -> str:
        """DOT source of the picture shown in the notebook.

        ``drawn`` without legend or caption (the page shows them as text, in the theme's colours);
        torchviz's source as it is.
        """
        if self.engine == "torchviz":
            return self.dot
        if self._inline and self._inline[0] is self.drawn and self._inline[1] == self.group:
            return self._inline[2]
        return to_dot(self.drawn, group=self.group, legend=False)

    def write_dot(self) -> None:
        """Set ``dot`` from ``drawn``, with the caption; the inline source is made with it."""
        self.dot, inline = dot_sources(self.drawn, group=self.group, caption=self.caption())
        self._inline = (self.drawn, self.group, inline)

    def save(self, path: str, timeout_s: float = 60.0) -> str:
        """Write the picture, with legend and caption, to ``path``.

        Write the picture, with its legend and caption, to ``path``; format from the extension
        (``.svg .png .pdf .dot .gv``).

        Returns:
            ``path``.

        Raises:
            ValueError: no or unknown extension.
            DotMissing, DotTimeout, DotFailed: when a picture has to be rendered and ``dot`` cannot.
        """
        ext = os.path.splitext(path)[1].lower().lstrip(".")
        if ext not in SAVE_EXTENSIONS:
            raise ValueError(f"{path}: the file name must end in .svg, .png, .pdf or .dot")
        fmt = SAVE_EXTENSIONS[ext]
        if fmt == "dot":
            data = self.dot.encode("utf-8")
        elif self.engine == "torchviz" and fmt == self.format and self.image is not None:
            data = self.image
        else:
            data = run_dot(self.dot, fmt, timeout_s)
        with open(path, "wb") as fh:
            fh.write(data)
        return path

    def caption(self) -> str:
        """The one-line caption: the node count, saved bytes, what is drawn."""
        return render.caption(self)

    #: The caption under its first name (0.1.0 notebooks call ``r.summary_line()``).
    summary_line = caption
    to_text = render.result_text
    to_html = render.result_html
