"""``%%autograd_graph``: the IPython front of the graph drawer."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Enum, Float, HasTraits, Int, TraitError, validate

from ..core.magic import AreaMagics
from ..core.manual import manual
from ..core.progress import ProgressLine
from . import capture, draw, options, torchviz_engine


class GraphSettings(HasTraits):
    """``%%autograd_graph`` settings, reachable as ``%config CudaMagics.<name>``."""

    graph_dot_timeout_s = Float(
        20.0,
        help="Seconds one %%autograd_graph picture may spend in the Graphviz `dot` program, "
        "fallback included: past 80 % of them the picture is given up for a small collapsed view "
        "(at most 60 boxes), and when time runs out a summary is shown instead.",
    ).tag(config=True)
    graph_node_budget = Int(
        150,
        min=1,
        help="Most boxes (count) one %%autograd_graph picture holds (150: about three screens of a "
        "1400 px "
        "window); bigger graphs are drawn as the deepest collapsed module view that fits, repeated "
        "calls folded.",
    ).tag(config=True)
    graph_format = Enum(
        options.FORMATS,
        default_value="svg",
        help="Default picture format of %%autograd_graph: svg, png, pdf or dot (DOT source only).",
    ).tag(config=True)

    @validate("graph_dot_timeout_s")
    def _usable_dot_timeout(self, proposal):
        # the bound --timeout has, so a value %config accepts is one every cell accepts
        try:
            return options.check_timeout(proposal["value"], "CudaMagics.graph_dot_timeout_s")
        except UsageError as exc:
            fix = "`%config CudaMagics.graph_dot_timeout_s = 60`"
            raise TraitError(str(exc).replace("`%%autograd_graph --timeout 60`", fix)) from None


@magics_class
class GraphMagics(AreaMagics):
    """``%%autograd_graph``."""

    @manual(GraphSettings, "%%")
    @magic_arguments()
    @argument(
        "-o",
        "--output",
        default=None,
        metavar="NAME[,NAME...]",
        help="Draw these variables instead of the cell's last expression.",
    )
    @argument(
        "--show-saved", action="store_true", help="Draw the tensors each op saves for backward."
    )
    @argument(
        "--show-attrs",
        action="store_true",
        help="Show non-tensor saved attributes (alpha, dim, sizes).",
    )
    @argument(
        "--group", action="store_true", help="Draw each nn.Module call as a labelled cluster."
    )
    @argument(
        "--depth",
        type=int,
        default=None,
        metavar="D",
        help="Collapse module calls deeper than D into single boxes (0: one box per top-level "
        "call) (default: automatic, the deepest view that fits "
        "--max-nodes).",
    )
    @argument(
        "--no-fold",
        action="store_true",
        help="With --depth, keep repeated identical blocks separate instead of one box 'x N'.",
    )
    @argument(
        "--shared-params",
        action="store_true",
        help="One node per leaf tensor always (without it: one per leaf, but one per use in full "
        "pictures of over 60 boxes, where it keeps dot fast).",
    )
    @argument(
        "--format",
        default=None,
        choices=options.FORMATS,
        help="Picture format (default: CudaMagics.graph_format).",
    )
    @argument(
        "--save",
        default=None,
        metavar="PATH",
        help="Also write the picture to PATH (format from the extension: .svg .png .pdf .dot).",
    )
    @argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Seconds dot may run in all, fallback view included (default: "
        "CudaMagics.graph_dot_timeout_s).",
    )
    @argument(
        "--max-nodes",
        type=int,
        default=None,
        metavar="N",
        help="Most boxes (a count) drawn before collapsing "
        "(default: CudaMagics.graph_node_budget).",
    )
    @argument(
        "--engine",
        default="cudamagic",
        choices=["cudamagic", "torchviz"],
        help="Who draws: cudamagic (module names, saved bytes, collapsing) or torchviz "
        "(torchviz's own make_dot, as its docs show).",
    )
    @cell_magic
    def autograd_graph(self, line, cell):
        r"""Run the cell and draw the autograd graph (grad_fn DAG) of its result.

        The cell runs like a normal cell (its variables stay; your own errors show
        your source). The last expression, or the ``-o`` variables, may be a
        tensor or a tuple/list/dict/namedtuple/dataclass of tensors. Parameters are
        named by their module path, ops show the bytes they save for backward, and
        big graphs collapse into module boxes (past ``--max-nodes`` boxes, default
        150, about three screens, or 40 boxes high), repeated calls of one module
        folded into one box with the count (``rnn (RNNCell) x 400``), then a summary
        table and the DOT source. ``--timeout`` bounds all the time spent in ``dot``:
        past 80 % of it the picture is given up for a view of at most 60 boxes, and
        then for the summary. While ``dot`` runs past a second a line counts the
        seconds; it is gone when the picture comes.
        Small graphs draw each leaf once; full pictures of over 60 boxes draw a leaf
        once per use (faster for ``dot``), unless ``--shared-params``. Returns a
        ``GraphResult`` with ``.nodes``, ``.edges``, ``.dot`` and ``.save(path)``.

        In a notebook the result is one caption, the picture (an image, so it shows
        in untrusted notebooks too) scaled to the output width (in a trusted notebook
        the "show at 1:1 size" line above it shows it at full size with scroll bars)
        and below it a legend of the node kinds drawn; how the view was chosen,
        op counts and the DOT source are under "details". The caption's one count
        is autograd nodes: the grad_fn nodes backward() runs (backward ops and
        AccumulateGrad) in the whole graph, whatever is drawn. In a terminal it
        prints the same caption, the notes and a text outline of the drawn graph,
        inputs first, one box a line (``id  label  <- input ids``), at most 40
        lines (the last says how many boxes are left out).

        Without the Graphviz ``dot`` program (``pip install graphviz`` installs only
        the Python wrapper) nothing is drawn: the result shows the install command, an
        op-count table, a text outline of the view that would have been drawn (every box of
        it up to 300 lines in a notebook, at most 40 lines in a terminal) and the DOT source
        (``_.dot``); ``--format dot`` and ``--save x.dot`` still work. Install Graphviz,
        then restart the kernel: Debian/Ubuntu ``sudo apt-get install graphviz``;
        Fedora/RHEL ``sudo dnf install graphviz``; macOS ``brew install graphviz``; conda
        ``conda install -c conda-forge graphviz``; Windows ``winget install graphviz``
        (or ``choco install graphviz``), with ``C:\Program Files\Graphviz\bin`` on PATH.

        ``--save PATH``: the format comes from the extension (``.svg``, ``.png``,
        ``.pdf``, ``.dot`` or ``.gv``), the folder must exist and PATH must not be a
        folder; all checked before the cell runs (a mistake is a one-line error and
        the cell does not run). A file that cannot be written afterwards (``dot``
        missing, timed out, disk error) becomes a note ``Not saved to PATH: why``
        on the result; ``.dot`` is always written.

        Process stack limit: PyTorch frees an autograd graph that Python has
        inspected recursively, and freeing a chain of about 30,000-50,000 ops
        overflows the default 8 MiB C stack and ends the kernel (pytorch#109948).
        For graphs over 10,000 nodes the magic therefore raises this kernel
        process's soft ``RLIMIT_STACK`` to at most 120 MiB (process-wide, only
        then, never above the hard limit), which covers about 200,000 chained ops;
        past that, or off the main thread, the result carries a warning note.

        Examples:
        --------
        ::

            %%autograd_graph
            loss = loss_fn(model(x), y)
            loss

            %%autograd_graph -o logits,loss --show-saved
            logits = model(x); loss = logits.sum()

            %%autograd_graph --group --depth 1 --save encoder.svg
            encoder(src)

            g = _          # the GraphResult: g.nodes, g.edges, g.dot, g.save("graph.pdf")
            %config CudaMagics.graph_dot_timeout_s = 60

            %%autograd_graph --engine torchviz --show-saved
            loss          # torchviz's make_dot picture
        """
        args = self.parse(self.autograd_graph, line, prefix="%%")
        opts = options.resolve(args, self.settings)
        __tracebackhide__ = True  # the user's error shows their cell, not this frame
        engine = torchviz_engine if opts.engine == "torchviz" else draw
        step = f"Graphviz dot is laying out the picture (time limit {opts.timeout_s:g} s)"
        with ProgressLine("%%autograd_graph", "graph") as progress:
            try:
                return engine.draw_cell(self.shell, cell, line, opts, lambda: progress.say(step))
            except capture.NothingToDraw as exc:
                raise UsageError(str(exc)) from exc
            except SyntaxError as exc:  # the cell did not run: shown without our parser frames
                raise exc.with_traceback(None) from None
