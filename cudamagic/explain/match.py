"""The CUDA / autograd error catalogue and the matcher behind ``%cudaexplain``.

The catalogue is data: one :class:`Entry` per known failure, with the exception
type(s) PyTorch raises, message patterns copied from PyTorch's own source, what
happened, why, the fix and an optional *context* function. A context function
looks at the live scene (the user's namespace, the local variables of the
failing user frames, the failing cell's source and the input history) and
turns a generic explanation into a specific one: which variable, which shapes,
which module.

Nothing here imports IPython, and nothing imports torch: context functions use
``sys.modules.get("torch")`` (an error raised by PyTorch means torch is
imported already) and never create a CUDA context (every ``torch.cuda.memory_*``
call is gated by ``torch.cuda.is_initialized()``).

The explainer keeps no reference to the exception, its traceback or its frames
after :func:`explain` returns: the result holds strings and numbers only, so
it cannot keep GPU memory alive (field report F22).
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

# --------------------------------------------------------------------------------------
# data model
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a context function found.

    Attributes:
        notes: plain-text sentences about the user's own objects ("`h` is carried ...").
        facts: machine-readable findings for tests and callers (byte counts in ``*_bytes``,
            shapes as tuples of ints, variable names as str).
        fix: a fix specialised with the user's names; replaces the entry's generic fix
            when not empty (the generic fix is still shown below it).
    """

    notes: tuple = ()
    facts: Mapping = field(default_factory=dict)
    fix: str = ""


@dataclass(frozen=True)
class Entry:
    """One known failure.

    Attributes:
        id: short stable name (``"cuda-oom"``), used by ``%cudaexplain --list``.
        title: one-line name of the case.
        types: exception class names that PyTorch raises for it, matched against the
            exception's MRO by bare name (``"RuntimeError"`` also matches
            ``torch.OutOfMemoryError``, a subclass).
        patterns: regular expressions searched (``re.S``) in ``str(exc)``; taken from
            PyTorch's messages; named groups feed the context function.
        what, why, fix: the explanation in plain words.
        source: where PyTorch raises it (file / function), for maintainers and tests.
        reports: field-report ids (``"F22"``) the entry answers.
        context: optional ``context(match, scene) -> Context``.
    """

    id: str
    title: str
    types: tuple
    patterns: tuple
    what: str
    why: str
    fix: str
    source: str
    reports: tuple = ()
    context: Callable | None = None

    def match(self, exc: BaseException):
        """Return the ``re.Match`` of the first pattern found in ``str(exc)``, or None."""
        names = {cls.__name__ for cls in type(exc).__mro__}
        if not names.intersection(self.types):
            return None
        message = _message(exc)
        for pattern in self.patterns:
            found = re.search(pattern, message, re.S)
            if found:
                return found
        return None


@dataclass(frozen=True)
class Explanation:
    """The result of :func:`explain`: an entry plus the live context. Holds no exception object.

    Attributes:
        entry: the matched :class:`Entry`.
        exc_type: the exception's class name (``"OutOfMemoryError"``).
        message: the first line of the message, at most 300 characters.
        context: the :class:`Context` found (empty if the context function failed).
        context_error: why gathering context failed, or ``""``.
    """

    entry: Entry
    exc_type: str
    message: str
    context: Context = Context()
    context_error: str = ""

    # rendering lives in explain_render; these delegate so the object displays itself
    def text(self) -> str:
        """The box as plain text."""
        from .box import explanation_text

        return explanation_text(self)

    def __repr__(self):
        return self.text()

    def _repr_pretty_(self, p, cycle):
        p.text(self.text())

    def _repr_html_(self):
        from .box import explanation_html

        return explanation_html(self)


@dataclass
class Scene:
    """The live state a context function may look at. Built by :func:`scene_from_shell`.

    Attributes:
        user_ns: the user's global namespace (hidden IPython names removed).
        frames: ``(function name, locals dict)`` for the user's own frames in the
            traceback (functions defined in cells), innermost last.
        sources: source text of the failing cell (from the traceback's cell frame, else
            ``In[-1]``), then of the user functions in the traceback.
        history: the input history (``In``), oldest first; the failing cell is last.
        line_magics: names of the line magics registered (to mention ``%cudamem``).
        failing_lines: the source line being executed in each user frame of the traceback
            (the cell's line first), stripped.
    """

    user_ns: Mapping = field(default_factory=dict)
    frames: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    history: list = field(default_factory=list)
    line_magics: frozenset = frozenset()
    failing_lines: list = field(default_factory=list)

    def variables(self):
        """Yield ``(name, value)``: locals of the user frames (innermost first), then globals.

        Names starting with ``_`` are skipped, except none are needed here; IPython's
        output cache is looked at separately by :func:`_output_cache_tensors`.
        """
        seen = set()
        for func_name, local_vars in reversed(self.frames):
            for name, value in list(local_vars.items()):
                if name.startswith("_") or name in seen:
                    continue
                seen.add(name)
                yield name, value
        for name, value in list(self.user_ns.items()):
            if name.startswith("_") or name in seen or name in ("In", "Out", "exit", "quit", "get_ipython"):
                continue
            seen.add(name)
            yield name, value


# --------------------------------------------------------------------------------------
# matching
# --------------------------------------------------------------------------------------


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not break the explainer
        return ""


def _chain(exc: BaseException, depth: int = 5):
    """The exception, then its ``__cause__``/``__context__`` chain (at most ``depth`` links)."""
    seen = set()
    while exc is not None and id(exc) not in seen and depth > 0:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__
        depth -= 1


def find_entry(exc: BaseException):
    """Return ``(entry, match)`` for the first catalogue entry matching ``exc``, or ``(None, None)``.

    The exception itself is tried first, then its ``__cause__``/``__context__`` chain, so
    an error re-raised by user code (``raise ValueError(...) from e``) is still explained.
    """
    for link in _chain(exc):
        for entry in CATALOGUE:
            found = entry.match(link)
            if found:
                return entry, found
    return None, None


def explain(exc: BaseException, scene: Scene | None = None):
    """Explain ``exc`` with the live ``scene``.

    Args:
        exc: any exception instance.
        scene: the state to draw context from; ``None`` means no context.

    Returns:
        An :class:`Explanation`, or ``None`` when no entry matches or ``exc`` is not an
        ``Exception`` (a KeyboardInterrupt raised while handling a CUDA error is an interrupt,
        not that error): no box is shown.
        A failing context function never raises: its error is kept in
        ``Explanation.context_error`` and the generic text is shown.
    """
    if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit, GeneratorExit: never a box
        return None
    entry, found = find_entry(exc)
    if entry is None:
        return None
    message = _message(exc).strip().splitlines()
    first = message[0][:300] if message else ""
    context, error = Context(), ""
    if entry.context is not None and scene is not None:
        try:
            context = entry.context(found, scene) or Context()
        except Exception as ctx_exc:  # context is a bonus; never break the box
            error = f"{type(ctx_exc).__name__}: {ctx_exc}"
    return Explanation(entry=entry, exc_type=type(exc).__name__, message=first, context=context,
                       context_error=error)


def scene_from_shell(shell, exc: BaseException | None = None) -> Scene:
    """Build a :class:`Scene` from an IPython shell and the exception's traceback.

    Args:
        shell: an ``InteractiveShell`` (duck-typed: ``user_ns``, ``user_ns_hidden``,
            ``magics_manager``).
        exc: the exception; its traceback gives the user frames (those whose globals are
            the user namespace) and their sources. The frames are not kept: their locals
            are copied into plain dicts.
    """
    user_ns = getattr(shell, "user_ns", {}) or {}
    hidden = getattr(shell, "user_ns_hidden", {}) or {}
    visible = {k: v for k, v in user_ns.items() if k not in hidden or hidden[k] is not v}
    history = list(user_ns.get("In", []) or [])
    cells, sources, frames, lines = [], [], [], []
    tb = getattr(exc, "__traceback__", None)
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals is user_ns:
            lines.append(linecache.getline(frame.f_code.co_filename, tb.tb_lineno).strip())
            if frame.f_code.co_name == "<module>":  # the cell itself
                cells.append("".join(linecache.getlines(frame.f_code.co_filename)))
            else:  # a function defined in a cell
                frames.append((frame.f_code.co_name, dict(frame.f_locals)))
                try:
                    sources.append(inspect.getsource(frame.f_code))
                except (OSError, TypeError):
                    pass
        tb = tb.tb_next
    tb = frame = None
    if not cells and history:
        cells.append(history[-1])
    sources = cells[:1] + sources
    try:
        magics = frozenset(shell.magics_manager.magics["line"])
    except Exception:
        magics = frozenset()
    return Scene(user_ns=visible, frames=frames, sources=sources, history=history, line_magics=magics,
                 failing_lines=[ln for ln in lines if ln])


# --------------------------------------------------------------------------------------
# helpers for context functions (torch looked up, never imported)
# --------------------------------------------------------------------------------------


def _torch():
    return sys.modules.get("torch")


def _is_tensor(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _is_module(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.nn.Module)


def _tensor_bytes(t) -> int:
    try:
        return int(t.element_size() * t.nelement())
    except Exception:
        return 0


def _shape(t) -> tuple:
    return tuple(int(s) for s in t.shape)


def _module_device(module):
    for p in module.parameters():
        return str(p.device)
    return None


def _module_dtype(module):
    for p in module.parameters():
        return str(p.dtype).replace("torch.", "")
    return None


def _fmt_bytes(n) -> str:
    from ..core.fmt import format_bytes

    return format_bytes(n)


_UNITS = {"B": 1, "bytes": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3, "TiB": 1024 ** 4}


def parse_size(text: str) -> int:
    """Parse PyTorch's ``format_size`` output (``'20.00 MiB'``, ``'0 bytes'``) into bytes."""
    m = re.match(r"\s*([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB)", text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(round(float(m.group(1)) * _UNITS[m.group(2)]))


def _parse_tree(src: str):
    try:
        return ast.parse(src)
    except SyntaxError:
        # IPython magics in the cell: blank out lines that are not Python
        lines = [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in src.splitlines()]
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            return None


def _root_name(node):
    """``a.b[0].c()`` -> ``'a'``; None if the expression does not start from a name."""
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        else:
            return None


def _names_loaded(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _assigned_names(stmt) -> set:
    out = set()
    targets = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    for target in targets:
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                out.add(n.id)
    return out


def backward_calls(src: str):
    """Expressions on which ``.backward()`` is called in ``src``.

    Returns:
        list of ``(expression source, root variable name)``; e.g. ``h.sum().backward()``
        gives ``("h.sum()", "h")``.
    """
    tree = _parse_tree(src)
    if tree is None:
        return []
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "backward"):
            target = node.func.value
            out.append((ast.unparse(target), _root_name(target)))
    # torch.autograd.backward(x)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
                and _root_name(node.func) == "torch" and node.args):
            out.append((ast.unparse(node.args[0]), _root_name(node.args[0])))
    return [item for item in out if item[1] not in (None, "torch")]


def carried_names(src: str) -> list:
    """Names assigned inside a ``for``/``while`` loop from an expression that reads them.

    ``h = rnn(x, h)``, ``out, h = cell(x, h)`` and ``total += loss`` all carry a value
    (and its autograd graph) from one iteration into the next.
    """
    tree = _parse_tree(src)
    if tree is None:
        return []
    out = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.For, ast.While, ast.AsyncFor)):
            continue
        for stmt in ast.walk(loop):
            if stmt is loop:
                continue
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                name = stmt.target.id
                if name not in out:
                    out.append(name)
            elif isinstance(stmt, ast.Assign):
                reads = _names_loaded(stmt.value)
                for name in _assigned_names(stmt):
                    if name in reads and name not in out:
                        out.append(name)
    return out


def inplace_uses(src: str) -> list:
    """In-place operations in ``src`` as ``(variable, operation)``.

    Finds ``x.add_(...)``-style calls (a method ending in one underscore), augmented
    assignments (``x += 1``) and item assignments (``x[0] = 1``).
    """
    tree = _parse_tree(src)
    if tree is None:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr.endswith("_") and not attr.endswith("__") and not attr.startswith("_") and attr != "backward_":
                name = _root_name(node.func.value)
                if name and name not in ("torch", "nn", "F", "init"):
                    out.append((name, f"{ast.unparse(node.func.value)}.{attr}()"))
                elif name in ("init", "nn", "torch") and node.args:  # nn.init.normal_(w)
                    arg = _root_name(node.args[0])
                    if arg:
                        out.append((arg, f"{ast.unparse(node.func)}({ast.unparse(node.args[0])})"))
        elif isinstance(node, ast.AugAssign):
            name = _root_name(node.target)
            if name:
                op = type(node.op).__name__
                sym = {"Add": "+=", "Sub": "-=", "Mult": "*=", "Div": "/="}.get(op, "op=")
                out.append((name, f"{ast.unparse(node.target)} {sym} ..."))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Subscript):
                    name = _root_name(target)
                    if name:
                        out.append((name, f"{ast.unparse(target)} = ..."))
    return out


def _last_cell_assigning(history: Sequence[str], name: str, skip_last: bool = True):
    """1-based ``In`` index of the last cell before the failing one that assigns ``name``."""
    cells = list(history[:-1] if skip_last else history)
    for index in range(len(cells) - 1, 0, -1):  # In[0] is ''
        tree = _parse_tree(cells[index] or "")
        if tree is None:
            continue
        for stmt in ast.walk(tree):
            if name in _assigned_names(stmt):
                return index
    return None


def _assigns_in(src: str, name: str) -> bool:
    tree = _parse_tree(src)
    return tree is not None and any(name in _assigned_names(s) for s in ast.walk(tree))


def _lookup(scene: Scene, name):
    if not name:
        return None
    for _fname, local_vars in reversed(scene.frames):
        if name in local_vars:
            return local_vars[name]
    return scene.user_ns.get(name)


def _named_modules(scene: Scene):
    """Yield ``(qualified name, module)`` for every nn.Module reachable from a variable."""
    seen = set()
    for name, value in scene.variables():
        if _is_module(value):
            try:
                items = list(value.named_modules())
            except Exception:
                continue
            for sub, module in items:
                if id(module) in seen:
                    continue
                seen.add(id(module))
                yield (f"{name}.{sub}" if sub else name), module


def _tensors(scene: Scene):
    """Yield ``(name, tensor)`` for tensors held directly by variables."""
    for name, value in scene.variables():
        if _is_tensor(value):
            yield name, value


def _output_cache_tensors(scene: Scene):
    """Names under which IPython's output cache (``_``, ``__``, ``___``, ``Out[n]``) holds tensors."""
    ns = scene.user_ns
    hits = []
    for key in ("_", "__", "___"):
        if _is_tensor(ns.get(key)) and getattr(ns.get(key), "is_cuda", False):
            hits.append(key)
    out = ns.get("Out")
    if isinstance(out, dict):
        for k, v in out.items():
            if _is_tensor(v) and getattr(v, "is_cuda", False):
                hits.append(f"Out[{k}]")
    return hits


def _source_text(scene: Scene) -> str:
    return "\n".join(s for s in scene.sources if s)


_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


def _parse_line(line: str):
    """An AST for one source line that may be a fragment (``for x in y:``, ``with ...:``, a
    line of a multi-line call); None when no repair makes it parse."""
    text = line.strip()
    for candidate in (text, text + " pass", text + ")", text + "))", text.rstrip(",") + ")"):
        try:
            return ast.parse(candidate)
        except SyntaxError:
            continue
    return None


def _line_names(line: str) -> list:
    """Names read on one source line, in order of appearance, without repeats."""
    tree = _parse_line(line)
    if tree is not None:
        nodes = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Name)),
                       key=lambda n: (n.lineno, n.col_offset))
        names = [n.id for n in nodes]
    else:
        names = _IDENT.findall(line)
    out = []
    for name in names:
        if name not in out:
            out.append(name)
    return out


def failing_names(scene: Scene) -> list:
    """Names on the lines that were executing when the error was raised (the user's own
    frames, innermost first), in order, without repeats. Only these are certain to be
    involved; a name that merely exists in the namespace may have nothing to do with it."""
    out = []
    for line in reversed(scene.failing_lines):
        for name in _line_names(line):
            if name not in out:
                out.append(name)
    return out


def _failing_values(scene: Scene):
    """``(name, value)`` for the names on the failing lines that resolve to a value."""
    for name in failing_names(scene):
        value = _lookup(scene, name)
        if value is not None:
            yield name, value


def _failing_tensors(scene: Scene):
    return [(n, v) for n, v in _failing_values(scene) if _is_tensor(v)]


def _failing_modules(scene: Scene):
    """``(qualified name, module)`` for modules named on the failing lines and their submodules."""
    out, seen = [], set()
    for name, value in _failing_values(scene):
        if not _is_module(value):
            continue
        try:
            items = list(value.named_modules())
        except Exception:
            continue
        for sub, module in items:
            if id(module) not in seen:
                seen.add(id(module))
                out.append(((f"{name}.{sub}" if sub else name), module))
    return out


def call_arguments(line: str) -> list:
    """Calls on one source line as ``(callee source, [argument source, ...], {keyword: source})``,
    outermost call first."""
    tree = _parse_line(line)
    if tree is None:
        return []
    calls = sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset, -(n.end_col_offset or 0)))
    return [(ast.unparse(c.func), [ast.unparse(a) for a in c.args],
             {k.arg: ast.unparse(k.value) for k in c.keywords if k.arg}) for c in calls]


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _argument_tensor(scene: Scene, expr: str):
    """The tensor an argument expression names: the variable itself for a plain name, else None
    (an expression such as ``y.float()`` is not evaluated)."""
    if re.fullmatch(r"[A-Za-z_]\w*", expr or ""):
        value = _lookup(scene, expr)
        if _is_tensor(value):
            return value
    return None


def _target_arguments(scene: Scene, *, indices: bool = False) -> list:
    """Expressions passed as the *target* of a loss on the failing lines (innermost first): the
    ``target=`` keyword or the second positional argument of a two-argument call. With
    ``indices``, the first argument of a call to an embedding instead.

    Returns:
        list of ``(callee source, argument source)``.
    """
    torch = _torch()
    out = []
    for line in reversed(scene.failing_lines):
        for callee, args, kwargs in call_arguments(line):
            if indices:
                target = _lookup(scene, _root_name_of(callee))
                is_embedding = "embedding" in callee.lower()
                if torch is not None and _is_module(target):
                    try:
                        is_embedding = is_embedding or any(isinstance(m, torch.nn.Embedding)
                                                           for m in target.modules())
                    except Exception:
                        pass
                expr = kwargs.get("input") or (args[0] if args else None)
                if is_embedding and expr:
                    out.append((callee, expr))
            else:
                expr = kwargs.get("target") or (args[1] if len(args) >= 2 else None)
                if expr:
                    out.append((callee, expr))
    return out


def _root_name_of(expr: str):
    try:
        return _root_name(ast.parse(expr, mode="eval").body)
    except SyntaxError:
        return None


# --------------------------------------------------------------------------------------
# context functions
# --------------------------------------------------------------------------------------


def _nvidia_driver_present() -> bool:
    return os.path.exists("/proc/driver/nvidia/version") or bool(
        __import__("shutil").which("nvidia-smi"))


def ctx_not_compiled(match, scene):
    torch = _torch()
    facts, notes = {}, []
    if torch is not None:
        facts["torch_version"] = torch.__version__
        facts["torch_cuda"] = torch.version.cuda
        notes.append(f"This PyTorch is {torch.__version__}; torch.version.cuda is {torch.version.cuda!r} "
                     "(None means a CPU-only build).")
    driver = _nvidia_driver_present()
    facts["nvidia_driver_found"] = driver
    if driver:
        notes.append("An NVIDIA driver is installed on this machine, so the GPU is there: only the PyTorch "
                     "build lacks CUDA support.")
    else:
        notes.append("No NVIDIA driver was found on this machine (no /proc/driver/nvidia, no nvidia-smi): "
                     "if you expected a GPU here, the kernel may run on another machine or container.")
    return Context(notes=tuple(notes), facts=facts)


def ctx_program_driver(match, scene):
    driver = _nvidia_driver_present()
    notes = (("No NVIDIA driver was found on this machine (no /proc/driver/nvidia, no nvidia-smi): host code "
              "runs here, kernels cannot.",) if not driver else
             ("An NVIDIA driver is installed: it supports an older CUDA than the nvcc that built the program "
              "(`%cudainfo` shows both).",))
    return Context(notes=notes, facts={"nvidia_driver_found": driver})


def decode_cuda_version(code: int) -> str:
    """CUDA's integer version (``11040``) as ``'11.4'`` (major = code // 1000, minor = code % 1000 // 10)."""
    return f"{code // 1000}.{code % 1000 // 10}"


def ctx_driver_old(match, scene):
    torch = _torch()
    facts, notes = {}, []
    found = match.groupdict().get("found") if match.re.groupindex else None
    built = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    facts["torch_cuda"] = built
    if found:
        driver_cuda = decode_cuda_version(int(found))
        facts["driver_cuda"] = driver_cuda
        notes.append(f"The driver reports version {found}, which means it supports CUDA up to {driver_cuda}.")
    if built:
        notes.append(f"This PyTorch was built for CUDA {built}.")
    fix = ""
    if found and built:
        fix = (f"Either install an NVIDIA driver that supports CUDA {built} or newer, or install a PyTorch wheel "
               f"built for CUDA {facts['driver_cuda']} or older (pick the matching index URL on "
               "https://pytorch.org/get-started/previous-versions/).")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def _dataloaders(scene):
    torch = _torch()
    if torch is None:
        return []
    DataLoader = torch.utils.data.DataLoader
    return [(n, v) for n, v in scene.variables() if isinstance(v, DataLoader)]


def _cuda_tensors_in_dataset(dataset):
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, (tuple, list)):
        return [i for i, t in enumerate(tensors) if _is_tensor(t) and t.device.type != "cpu"]
    return []


def ctx_pin_cuda(match, scene):
    notes, facts = [], {"tensor_type": match.group("type")}
    culprits = []
    for name, loader in _dataloaders(scene):
        if getattr(loader, "pin_memory", False):
            idx = _cuda_tensors_in_dataset(loader.dataset)
            if idx:
                culprits.append(name)
                devices = sorted({str(loader.dataset.tensors[i].device) for i in idx})
                notes.append(f"`{name}` is a DataLoader with pin_memory=True whose dataset holds tensors that are "
                             f"not on the CPU (TensorDataset tensors {idx}, on {', '.join(devices)}).")
    for name, t in _tensors(scene):
        if t.device.type != "cpu" and len(culprits) < 3 and name not in culprits:
            notes.append(f"`{name}` is on {t.device} (shape {list(_shape(t))}).")
            culprits.append(name)
    facts["culprits"] = culprits
    return Context(notes=tuple(notes[:4]), facts=facts)


def ctx_no_accelerator(match, scene):
    torch = _torch()
    notes = []
    if torch is not None:
        notes.append(f"torch.cuda.is_available() is {torch.cuda.is_available()} and torch.version.cuda is "
                     f"{torch.version.cuda!r} in this kernel.")
    pins = [f"{n}.pin_memory()" for line in scene.failing_lines for n, _ in _method_calls(line, "pin_memory")]
    if not pins:
        pins = [f"{n}.pin_memory()" for n, _ in _method_calls(_source_text(scene), "pin_memory")]
    if pins:
        notes.append("The failing code pins memory: " + ", ".join(f"`{p}`" for p in pins[:3]) + ".")
    return Context(notes=tuple(notes), facts={"pin_calls": pins})


def _method_calls(src, method):
    tree = _parse_tree(src)
    if tree is None:
        return []
    return [(ast.unparse(n.func.value), n) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == method]


def ctx_workers(match, scene):
    notes, workers = [], []
    for name, loader in _dataloaders(scene):
        n = getattr(loader, "num_workers", 0)
        if n:
            workers.append(name)
            notes.append(f"`{name}` uses num_workers={n}.")
    notes.append(f"This kernel runs on {sys.platform}.")
    return Context(notes=tuple(notes), facts={"loaders_with_workers": workers, "platform": sys.platform})


def parse_oom(message: str) -> dict:
    """Numbers from a CUDA out-of-memory message, in bytes.

    Understands the current caching-allocator message (``c10/cuda/CUDACachingAllocator.cpp``,
    ``DeviceCachingAllocator::malloc``: "Tried to allocate X. GPU 0 has a total capacity of T of
    which F is free. ... Of the allocated memory A is allocated by PyTorch, and R is reserved by
    PyTorch but unallocated.") and the pre-2.1 one ("(GPU 0; T total capacity; A already
    allocated; F free; R reserved in total by PyTorch)").

    Returns:
        dict with any of ``requested_bytes``, ``gpu`` (CUDA ordinal), ``total_bytes``,
        ``free_bytes``, ``process_bytes``, ``allocated_bytes``, ``reserved_bytes`` (total
        reserved by PyTorch) and ``reserved_unallocated_bytes``.
    """
    size = r"([\d.]+ (?:bytes|B|KiB|MiB|GiB|TiB))"
    out = {}
    m = re.search(r"Tried to allocate " + size, message)
    if m:
        out["requested_bytes"] = parse_size(m.group(1))
    m = re.search(r"GPU (\d+) has a total capac\w* of " + size + r" of which " + size + " is free", message)
    if m:
        out["gpu"] = int(m.group(1))
        out["total_bytes"] = parse_size(m.group(2))
        out["free_bytes"] = parse_size(m.group(3))
    m = re.search(r"this process has " + size + " memory in use", message)
    if m:
        out["process_bytes"] = parse_size(m.group(1))
    m = re.search(size + r" is allocated by PyTorch", message)
    if m:
        out["allocated_bytes"] = parse_size(m.group(1))
    m = re.search(size + r" is reserved by PyTorch but unallocated", message)
    if m:
        out["reserved_unallocated_bytes"] = parse_size(m.group(1))
        if "allocated_bytes" in out:
            out["reserved_bytes"] = out["allocated_bytes"] + out["reserved_unallocated_bytes"]
    m = re.search(r"\(GPU (\d+); " + size + " total capacity; " + size + " already allocated; " + size
                  + " free; " + size + " reserved in total by PyTorch", message)
    if m:
        out["gpu"] = int(m.group(1))
        out["total_bytes"] = parse_size(m.group(2))
        out["allocated_bytes"] = parse_size(m.group(3))
        out["free_bytes"] = parse_size(m.group(4))
        out["reserved_bytes"] = parse_size(m.group(5))
        out["reserved_unallocated_bytes"] = out["reserved_bytes"] - out["allocated_bytes"]
    return out


def biggest_tensors(scene: Scene, limit: int = 5, cuda_only: bool = False):
    """``(name, nbytes, shape, dtype, device)`` of the largest tensors in the scene, biggest first.

    Tensors held by nn.Modules are summed per module (parameters and buffers).
    """
    rows = []
    for name, value in scene.variables():
        if _is_tensor(value):
            if cuda_only and value.device.type == "cpu":
                continue
            rows.append((name, _tensor_bytes(value), _shape(value), str(value.dtype).replace("torch.", ""),
                         str(value.device)))
        elif _is_module(value):
            try:
                ts = list(value.parameters()) + list(value.buffers())
            except Exception:
                continue
            if cuda_only:
                ts = [t for t in ts if t.device.type != "cpu"]
            if ts:
                rows.append((name, sum(_tensor_bytes(t) for t in ts), None, "module", str(ts[0].device)))
    rows.sort(key=lambda r: -r[1])
    return rows[:limit]


def ctx_oom(match, scene):
    message = match.string
    numbers = parse_oom(message)
    notes = []
    if "requested_bytes" in numbers:
        line = f"PyTorch asked for {_fmt_bytes(numbers['requested_bytes'])}"
        if "free_bytes" in numbers:
            line += (f" while GPU {numbers.get('gpu', 0)} had {_fmt_bytes(numbers['free_bytes'])} free of "
                     f"{_fmt_bytes(numbers['total_bytes'])}")
        notes.append(line + ".")
    if "allocated_bytes" in numbers and "reserved_bytes" in numbers:
        notes.append(f"Tensors held {_fmt_bytes(numbers['allocated_bytes'])}; PyTorch's cache reserved "
                     f"{_fmt_bytes(numbers['reserved_bytes'])} in total "
                     f"({_fmt_bytes(numbers['reserved_unallocated_bytes'])} reserved but unused).")
    if "process_bytes" in numbers and "total_bytes" in numbers and "reserved_bytes" in numbers:
        other = numbers["total_bytes"] - numbers.get("free_bytes", 0) - numbers["process_bytes"]
        if other > 0.1 * numbers["total_bytes"]:
            notes.append(f"Other processes use about {_fmt_bytes(other)} of this GPU (another notebook?).")
    big = biggest_tensors(scene, limit=5, cuda_only=True) or biggest_tensors(scene, limit=5)
    if big:
        parts = []
        for name, nbytes, shape, dtype, device in big:
            desc = f"`{name}` {_fmt_bytes(nbytes)}"
            desc += f" ({dtype}, {list(shape)}, {device})" if shape is not None else f" (module, {device})"
            parts.append(desc)
        notes.append("Biggest tensors in your namespace: " + "; ".join(parts) + ".")
    cached = _output_cache_tensors(scene)
    if cached:
        notes.append("IPython's output cache also holds CUDA tensors: " + ", ".join(f"`{c}`" for c in cached)
                     + " (a cell that ends with a tensor keeps it alive in Out).")
    numbers["biggest"] = [r[0] for r in big]
    numbers["output_cache"] = cached
    if "cudamem" in scene.line_magics:
        fix = ("Run `%cudamem free` to drop the saved traceback and empty PyTorch's cache (it reports the bytes "
               "it freed; `%cudamem free --out` also releases the output cache `Out`/`_`); then `del` the big "
               "tensors you no longer need, or lower the batch size.")
    else:
        fix = ("Free what the notebook still holds: `import sys, gc; sys.last_value = sys.last_traceback = None` "
               "(the saved traceback keeps the failing frame's tensors alive), `del` the big tensors and "
               "`Out` entries you no longer need, then `gc.collect(); torch.cuda.empty_cache()`; or lower the "
               "batch size.")
    numbers["mentions_cudamem_free"] = "cudamem" in scene.line_magics
    return Context(notes=tuple(notes), facts=numbers, fix=fix)


def ctx_backward_twice(match, scene):
    src = _source_text(scene)
    calls = backward_calls(src)
    carried = carried_names(src)
    notes, facts, fix = [], {"backward_on": [c[1] for c in calls], "carried": None, "rerun_cell": None}, ""
    for expr, root in calls:
        # the loss often derives from the carried tensor: any carried name that has a graph
        for name in carried:
            value = _lookup(scene, name)
            if _is_tensor(value) and value.grad_fn is not None:
                facts["carried"] = name
                notes.append(f"`{name}` is carried from one loop iteration into the next and still has a "
                             f"grad_fn ({type(value.grad_fn).__name__}): each `{expr}.backward()` reaches back "
                             "into the previous iteration's graph, which the previous backward already freed.")
                fix = (f"Cut the graph at each iteration: `{name} = {name}.detach()` before using it in the next "
                       "step (truncated backpropagation through time). `retain_graph=True` would hide the error "
                       "but keep every iteration's graph in memory and backpropagate through all of them.")
                break
        if facts["carried"]:
            break
    if not facts["carried"] and calls:
        expr, root = calls[0]
        cell = scene.history[-1] if scene.history else (scene.sources[0] if scene.sources else "")
        if root and not _assigns_in(cell, root):
            index = _last_cell_assigning(scene.history, root)
            facts["rerun_cell"] = index
            where = f"In[{index}]" if index else "the cell that computes it"
            notes.append(f"This cell calls `{expr}.backward()` but does not compute `{root}`: `{root}` comes from "
                         f"{where}, and its graph was freed by the first backward.")
            fix = (f"Re-run the forward cell ({where}) before running this cell again, or compute `{root}` and "
                   "call backward in the same cell.")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


_NO_GRAD_SIGNS = (
    (r"torch\.no_grad\(\)", "a `with torch.no_grad():` block"),
    (r"inference_mode\(", "`torch.inference_mode()`"),
    (r"\.detach\(\)", "`.detach()`"),
    (r"\.item\(\)", "`.item()` (a Python number has no graph)"),
    (r"\.numpy\(\)|from_numpy\(|np\.", "a NumPy round trip"),
    (r"torch\.tensor\(", "`torch.tensor(...)` (a new leaf without a graph)"),
    (r"requires_grad_?\(?\s*=?\s*False", "`requires_grad=False`"),
)


def _param_counts(module):
    total = requiring = 0
    for p in module.parameters():
        total += 1
        requiring += bool(p.requires_grad)
    return total, requiring


def ctx_no_grad(match, scene):
    """Which tensor backward was called on, how it lost its graph, and whether the models it
    could come from have parameters that require grad.

    Models are looked for where the tensor was made (the failing lines, this cell, the cell
    that assigned the tensor), never in the whole namespace: a model that has nothing to do
    with the tensor says nothing about it.
    """
    src = _source_text(scene)
    calls = backward_calls(src)
    line_calls = [c for line in scene.failing_lines for c in backward_calls(line)]
    calls = line_calls + [c for c in calls if c not in line_calls]
    notes, facts = [], {"tensor": None, "requires_grad": None, "params_requiring_grad": None,
                        "params_total": None, "signs": [], "models": {}}
    origin = ""  # source of the cell that assigned the tensor, if earlier than this one
    root_module = None
    for expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value):
            facts["tensor"] = root
            facts["requires_grad"] = bool(value.requires_grad)
            how = ""
            try:
                if value.is_inference():
                    how = " It is an inference tensor (created under torch.inference_mode())."
            except Exception:
                pass
            notes.append(f"`{root}.requires_grad` is {value.requires_grad} and `{root}.grad_fn` is "
                         f"{value.grad_fn!r}: autograd recorded nothing for it.{how}")
            index = _last_cell_assigning(scene.history, root) if not _assigns_in(src, root) else None
            if index:
                origin = scene.history[index] or ""
                facts["assigned_in"] = index
            break
        if _is_module(value):  # model(x).sum().backward()
            root_module = root
            facts["tensor"] = expr
            break
    # the models that can have produced it: on the failing line, in this cell, in the cell that made it
    model_text = "\n".join([*scene.failing_lines, src, origin])
    mentioned = set(_IDENT.findall(model_text))
    for name, value in scene.variables():
        if _is_module(value) and name in mentioned:
            try:
                facts["models"][name] = _param_counts(value)
            except Exception:
                continue
    total = sum(t for t, _ in facts["models"].values())
    requiring = sum(r for _, r in facts["models"].values())
    if facts["models"]:
        facts["params_total"], facts["params_requiring_grad"] = total, requiring
    for name, (t, r) in list(facts["models"].items())[:3]:
        if not t:
            continue
        if r == 0:
            notes.append(f"None of the {t} parameters of `{name}` requires grad (frozen with "
                         "requires_grad_(False)?), so nothing computed from it is tracked.")
        elif facts["tensor"] and root_module is None:
            notes.append(f"{r} of the {t} parameters of `{name}` require grad: if `{facts['tensor']}` comes from "
                         f"`{name}`, the graph was cut between them.")
        else:
            notes.append(f"{r} of the {t} parameters of `{name}` require grad.")
    value = _lookup(scene, facts["tensor"]) if facts["tensor"] and root_module is None else None
    for pattern, label in _NO_GRAD_SIGNS:
        if re.search(pattern, src + "\n" + origin):
            facts["signs"].append(label)
    if _is_tensor(value) and value.grad_fn is None and not facts["models"] and not facts["signs"]:
        notes.append(f"`{facts['tensor']}` is a leaf: no operation that autograd recorded produced it. If you "
                     "want gradients, create it (or the tensors it is computed from) with requires_grad=True.")
    if facts["signs"]:
        where = "this cell" + (f" and In[{facts['assigned_in']}], where `{facts['tensor']}` was computed"
                               if origin else "")
        notes.append(f"Likely culprit in {where}: " + ", ".join(facts["signs"]) + ".")
    return Context(notes=tuple(notes), facts=facts)


def ctx_scalar(match, scene):
    calls = backward_calls(_source_text(scene))
    for expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value) and value.dim() > 0:
            shape = list(_shape(value))
            fix = (f"Reduce `{root}` to one number first: `{root}.mean().backward()` or `{root}.sum().backward()`; "
                   f"or pass the upstream gradient: `{root}.backward(torch.ones_like({root}))`.")
            return Context(notes=(f"`{root}` has shape {shape}, not a single number.",),
                           facts={"tensor": root, "shape": tuple(shape)}, fix=fix)
    return Context()


def ctx_devices(match, scene):
    found = set(d for d in match.groups() if d and re.match(r"^(cpu|cuda|mps|meta|xpu)", d)) if match.groups() else set()
    def by_device(pairs):
        where = {}
        for name, value in pairs:
            if _is_tensor(value):
                where.setdefault(str(value.device), []).append(name)
            elif _is_module(value):
                dev = _module_device(value)
                if dev:
                    where.setdefault(dev, []).append(f"{name} (model)")
        return where

    # the failing line's own tensors and models first: only they are certainly involved
    where, scope = by_device(_failing_values(scene)), "On the failing line"
    if len(where) < 2:
        where, scope = by_device(scene.variables()), "In your namespace"
    notes = []
    if len(where) > 1:
        for dev, names in sorted(where.items()):
            notes.append(f"{scope}, on {dev}: " + ", ".join(f"`{n}`" for n in names[:6]) + ".")
    return Context(notes=tuple(notes), facts={"devices": sorted(found), "by_device": where,
                                              "scope": "failing line" if scope.startswith("On") else "namespace"})


def ctx_arch(match, scene):
    torch = _torch()
    notes, facts = [], {}
    if torch is not None:
        try:
            arches = torch.cuda.get_arch_list()
        except Exception:
            arches = []
        facts["arch_list"] = arches
        notes.append(f"This PyTorch {torch.__version__} contains kernels for: {', '.join(arches) or 'none'}.")
        if torch.cuda.is_initialized():
            try:
                major, minor = torch.cuda.get_device_capability()
                facts["device_capability"] = f"sm_{major}{minor}"
                notes.append(f"Your GPU is sm_{major}{minor} ({torch.cuda.get_device_name()}).")
            except Exception:
                pass
    return Context(notes=tuple(notes), facts=facts)


def ctx_index_tensors(match, scene):
    """Integer tensors (labels, indices) with their range, and embeddings to compare.

    On the CPU the error is raised by the failing line, so only its tensors and modules are
    looked at. A CUDA device-side assert is reported later than the kernel that failed, so
    there the integer tensors of the whole namespace are listed, labelled as such.
    """
    notes, facts = [], {"int_tensors": {}, "scope": "failing line"}
    torch = _torch()
    int_dtypes = _int_dtypes()
    tensors = _failing_tensors(scene)
    modules = _failing_modules(scene)
    if not any(t.dtype in int_dtypes for _, t in tensors) and "device-side assert" in match.string:
        tensors, modules, facts["scope"] = list(_tensors(scene)), list(_named_modules(scene)), "namespace"
    limits = []
    for name, module in modules:
        if torch is not None and isinstance(module, torch.nn.Embedding):
            limits.append(f"`{name}` = Embedding({module.num_embeddings}, ...) accepts indices "
                          f"0..{module.num_embeddings - 1}")
    found = []
    for name, t in tensors:
        if t.dtype in int_dtypes and t.numel() and t.device.type == "cpu":
            lo, hi = int(t.min()), int(t.max())
            facts["int_tensors"][name] = (lo, hi)
            found.append(f"`{name}` holds integers from {lo} to {hi} (shape {list(_shape(t))})")
    if found:
        where = "in your namespace (the failing line may be later than the one that failed)" \
            if facts["scope"] == "namespace" else "on the failing line"
        notes.append(f"Integer tensors {where}: " + "; ".join(found[:5]) + ".")
    bad = match.groupdict().get("target")
    if bad is not None:
        facts["target"] = int(bad)
        for name, t in tensors:
            if t.is_floating_point() and t.dim() >= 2:
                classes = int(t.shape[1])
                facts.setdefault("classes", {})[name] = classes
                notes.append(f"`{name}` (shape {list(_shape(t))}) scores {classes} classes, so labels must be "
                             f"0..{classes - 1}; the label {bad} is not.")
                break
    notes.extend(limits[:3])
    return Context(notes=tuple(notes), facts=facts)


def ctx_ordinal(match, scene):
    torch = _torch()
    notes, facts = [], {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    facts["CUDA_VISIBLE_DEVICES"] = visible
    if torch is not None:
        try:
            count = torch.cuda.device_count()
        except Exception:
            count = None
        facts["device_count"] = count
        if count is not None:
            valid = f"cuda:0 .. cuda:{count - 1}" if count else "none"
            notes.append(f"This process sees {count} GPU(s); valid devices: {valid}.")
    if visible is not None:
        notes.append(f"CUDA_VISIBLE_DEVICES={visible!r}: the listed GPUs are renumbered from 0 in this process.")
    asked = re.findall(r"cuda:(\d+)|set_device\((\d+)\)|device=(\d+)", _source_text(scene))
    asked = sorted({int(a or b or c) for a, b, c in asked})
    if asked:
        facts["asked"] = asked
        notes.append("The failing code asks for ordinal(s) " + ", ".join(map(str, asked)) + ".")
    return Context(notes=tuple(notes), facts=facts)


def ctx_gpu_memory(match, scene):
    torch = _torch()
    notes, facts = [], {}
    if torch is not None and torch.cuda.is_initialized():
        try:
            facts["allocated_bytes"] = torch.cuda.memory_allocated()
            facts["reserved_bytes"] = torch.cuda.memory_reserved()
            free, total = torch.cuda.mem_get_info()
            facts["free_bytes"], facts["total_bytes"] = free, total
            notes.append(f"GPU memory now: {_fmt_bytes(free)} free of {_fmt_bytes(total)}; your tensors hold "
                         f"{_fmt_bytes(facts['allocated_bytes'])}, PyTorch's cache {_fmt_bytes(facts['reserved_bytes'])}.")
        except Exception:
            pass
    big = biggest_tensors(scene, limit=3, cuda_only=True)
    if big:
        notes.append("Biggest GPU tensors: " + "; ".join(f"`{n}` {_fmt_bytes(b)}" for n, b, *_ in big) + ".")
    return Context(notes=tuple(notes), facts=facts)


def ctx_leaf_inplace(match, scene):
    uses = inplace_uses(_source_text(scene))
    for name, op in uses:
        value = _lookup(scene, name)
        if _is_tensor(value) and value.requires_grad and value.grad_fn is None:
            return Context(
                notes=(f"`{op}` changes `{name}` in place; `{name}` is a leaf that requires grad "
                       f"(a parameter or a tensor created with requires_grad=True).",),
                facts={"tensor": name, "op": op},
                fix=(f"If this is an initialisation or a manual update, do it under `with torch.no_grad():` "
                     f"(`with torch.no_grad(): {op.replace(' ...', ' <value>')}`); if it is part of the "
                     f"computation, write it out of place: `y = {name} + ...` instead of changing `{name}`."))
    return Context(facts={"tensor": None, "op": None})


def ctx_modified_inplace(match, scene):
    gd = match.groupdict()
    shape = tuple(int(s) for s in re.findall(r"\d+", gd.get("shape") or ""))
    notes = [f"The tensor is a {gd.get('ttype')} of shape {list(shape)}, output {gd.get('output')} of "
             f"`{gd.get('op')}`; it was changed {int(gd.get('version') or 0) - int(gd.get('expected') or 0)} "
             "time(s) after the forward pass saved it."]
    facts = {"shape": shape, "op": gd.get("op"), "tensor_type": gd.get("ttype"), "suspects": []}
    for name, op in inplace_uses(_source_text(scene)):
        value = _lookup(scene, name)
        if _is_tensor(value) and _shape(value) == shape:
            facts["suspects"].append(name)
            notes.append(f"`{op}` changes `{name}` (shape {list(shape)}) in place: that is the likely culprit.")
    torch = _torch()
    for name, module in _named_modules(scene):
        if getattr(module, "inplace", False) is True:
            facts["suspects"].append(name)
            notes.append(f"`{name}` is {module!r}: an in-place activation overwrites its input.")
            if len(notes) > 4:
                break
    fix = ""
    if facts["suspects"]:
        s = facts["suspects"][0]
        fix = (f"Make the change to `{s}` out of place (`{s} = {s} * 2` instead of `{s} *= 2` / `{s}.mul_(2)`), "
               f"or set `inplace=False` on the module.")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_matmul(match, scene):
    torch = _torch()
    a = (int(match.group("a0")), int(match.group("a1")))
    b = (int(match.group("b0")), int(match.group("b1")))
    notes, facts = [f"The left matrix is {a[0]}x{a[1]}, the right one {b[0]}x{b[1]}: "
                    f"{a[1]} columns cannot meet {b[0]} rows."], {"left": a, "right": b, "module": None,
                                                                  "input": None}
    fix = ""
    modules = _failing_modules(scene)
    modules += [m for m in _named_modules(scene) if all(m[1] is not k for _, k in modules)]
    for name, module in modules:
        if torch is not None and isinstance(module, torch.nn.Linear) and \
                (module.in_features, module.out_features) == b:
            facts["module"] = name
            notes.append(f"`{name}` is Linear(in_features={b[0]}, out_features={b[1]}): it expects {b[0]} "
                         f"features per row, the input has {a[1]}.")
            fix = (f"Make the sizes agree: build `{name}` as `nn.Linear({a[1]}, {b[1]})` (or use "
                   f"`nn.LazyLinear({b[1]})`), or fix the input so its last dimension is {b[0]} "
                   "(did you forget `nn.Flatten()` / `{x}.view({x}.size(0), -1)`?).")
            break
    # tensors on the failing line first; the namespace only when the line names none that fits
    on_line = _failing_tensors(scene)
    for side, want in (("input", a), ("right", b)):
        for pool in (on_line, [] if on_line else list(_tensors(scene))):
            hit = None
            for name, t in pool:
                shape = _shape(t)
                if side == "input" and shape and shape[-1] == a[1] and _prod(shape[:-1]) == a[0]:
                    hit = (name, shape)
                elif side == "right" and shape == b and facts["module"] is None:
                    hit = (name, shape)
                if hit:
                    break
            if hit:
                facts[side if side == "input" else "right_name"] = hit[0]
                which = "left" if side == "input" else "right"
                notes.append(f"`{hit[0]}` has shape {list(hit[1])}: it matches the {which} matrix.")
                break
    fix = fix.replace("{x}", facts["input"] or "x")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def _prod(xs):
    out = 1
    for x in xs:
        out *= x
    return out


def ctx_dtype(match, scene):
    """The dtypes of the tensors, arrays and models on the failing lines (not the whole namespace:
    a float64 tensor elsewhere may have nothing to do with the error)."""
    notes, facts = [], {"float64": [], "model_dtype": {}, "tensor_dtype": {}}
    for name, value in _failing_values(scene):
        if _is_tensor(value):
            dt = _dtype_name(value)
            facts["tensor_dtype"][name] = dt
            if dt == "float64":
                facts["float64"].append(name)
            notes.append(f"`{name}` is {dt} (shape {list(_shape(value))}).")
        elif _is_module(value):
            dt = _module_dtype(value)
            if dt:
                facts["model_dtype"][name] = dt
                notes.append(f"`{name}`'s parameters are {dt}.")
        elif type(value).__module__ == "numpy" and hasattr(value, "dtype") and hasattr(value, "shape"):
            facts["tensor_dtype"][name] = str(value.dtype)
            if str(value.dtype) == "float64":
                facts["float64"].append(name)
            notes.append(f"`{name}` is a NumPy array of {value.dtype} (NumPy's default; torch.from_numpy keeps it).")
    fix = ""
    if facts["float64"] and (facts["model_dtype"] or len(facts["tensor_dtype"]) > len(facts["float64"])):
        first = facts["float64"][0]
        if first in facts["tensor_dtype"] and _is_tensor(_lookup(scene, first)):
            fix = f"Convert the data once: `{first} = {first}.float()` (or build it with dtype=torch.float32)."
        else:
            fix = f"Convert the array when you make the tensor: `torch.from_numpy({first}).float()`."
    return Context(notes=tuple(notes[:6]), facts=facts, fix=fix)


def _targets_context(scene, *, wrong, convert, indices=False, purpose=""):
    """Context for a loss / embedding that got targets of the wrong dtype.

    Only the arguments on the failing lines are looked at (a variable that merely exists in
    the namespace may have nothing to do with the error). ``wrong(tensor)`` says whether a
    tensor has the dtype the error complains about; ``convert`` is ``"long"`` or ``"float"``.
    """
    notes, facts = [], {"targets": [], "expressions": []}
    for callee, expr in _target_arguments(scene, indices=indices):
        role = "indices" if indices else "targets"
        value = _argument_tensor(scene, expr)
        if value is not None:
            if wrong(value):
                facts["targets"].append(expr)
                notes.append(f"`{expr}`, the {role} passed to `{callee}`, is {_dtype_name(value)} with shape "
                             f"{list(_shape(value))}.")
        elif not re.fullmatch(r"[A-Za-z_]\w*", expr):
            facts["expressions"].append(expr)
            notes.append(f"The {role} passed to `{callee}` are `{expr}`.")
            root = _root_name_of(expr)
            value = _argument_tensor(scene, root) if root else None
            if value is not None and wrong(value):
                facts["targets"].append(root)
                notes.append(f"`{root}` is {_dtype_name(value)} with shape {list(_shape(value))}.")
        if notes:
            break
    fix = ""
    if facts["targets"]:
        n = facts["targets"][0]
        fix = f"`{n} = {n}.{convert}()` before the call{purpose}."
    elif facts["expressions"]:
        fix = f"Pass `({facts['expressions'][0]}).{convert}()` instead{purpose}."
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_targets(match, scene):
    indices = "indices" in match.re.pattern
    return _targets_context(scene, wrong=lambda t: t.dtype not in _int_dtypes(), convert="long",
                            indices=indices, purpose=" (embedding indices must be integers)" if indices
                            else " (class indices must be int64)")


def _int_dtypes():
    torch = _torch()
    if torch is None:
        return ()
    return (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def ctx_float_targets(match, scene):
    return _targets_context(scene, wrong=lambda t: not t.is_floating_point(), convert="float",
                            purpose=" (this loss compares real numbers)")


def ctx_result_cast(match, scene):
    """A float result written into an integer tensor: a BCE-with-logits target, or an in-place op."""
    context = ctx_float_targets(match, scene)
    if context.facts.get("targets"):
        return context
    notes, facts = [], {"targets": [], "inplace": []}
    for line in reversed(scene.failing_lines):
        for name, op in inplace_uses(line):
            value = _lookup(scene, name)
            if _is_tensor(value) and not value.is_floating_point() and name not in facts["inplace"]:
                facts["inplace"].append(name)
                notes.append(f"`{op}` writes into `{name}`, which is {_dtype_name(value)} "
                             f"(shape {list(_shape(value))}).")
    fix = ""
    if facts["inplace"]:
        n = facts["inplace"][0]
        fix = f"Make `{n}` float first (`{n} = {n}.float()`), or write the result to a new tensor instead of in place."
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_fork(match, scene):
    import multiprocessing

    torch = _torch()
    notes = []
    try:
        method = multiprocessing.get_start_method(allow_none=True) or "default (fork on Linux)"
    except Exception:
        method = "unknown"
    notes.append(f"The multiprocessing start method is {method}.")
    if torch is not None and torch.cuda.is_initialized():
        notes.append("CUDA is already initialised in this kernel, so forked workers inherit a CUDA state they "
                     "cannot use.")
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={"start_method": method, **ctx.facts})


def ctx_shm(match, scene):
    notes, facts = [], {}
    try:
        st = os.statvfs("/dev/shm")
        facts["shm_total_bytes"] = st.f_blocks * st.f_frsize
        facts["shm_free_bytes"] = st.f_bavail * st.f_frsize
        notes.append(f"/dev/shm here is {_fmt_bytes(facts['shm_total_bytes'])} "
                     f"({_fmt_bytes(facts['shm_free_bytes'])} free); Docker's default is 64 MiB.")
    except (OSError, AttributeError):
        pass
    ctx = ctx_workers(match, scene)
    return Context(notes=tuple(notes) + ctx.notes[:-1], facts={**facts, **ctx.facts})


def ctx_numpy(match, scene):
    return Context()


def ctx_broadcast(match, scene):
    gd = match.groupdict()
    a, b = int(gd["a"]), int(gd["b"])
    names = [f"`{name}` {list(_shape(t))}" for name, t in _failing_tensors(scene)]
    notes = [f"Dimension {gd['dim']} is {a} on one side and {b} on the other; broadcasting needs equal sizes "
             "or a 1."]
    if names:
        notes.append("Tensors on the failing line: " + ", ".join(names[:6]) + ".")
    return Context(notes=tuple(notes), facts={"sizes": (a, b), "dim": int(gd["dim"]),
                                              "tensors": [n.split("`")[1] for n in names]})


# --------------------------------------------------------------------------------------
# the catalogue
# --------------------------------------------------------------------------------------

_CUDA_SUFFIX = ("CUDA reports kernel errors asynchronously, so the line in the traceback may be later than the one "
                "that failed.")

CATALOGUE: tuple = (
    Entry(
        id="not-compiled-with-cuda", title="This PyTorch has no CUDA support", reports=("F17",),
        types=("AssertionError",), patterns=(r"Torch not compiled with CUDA enabled",),
        what="You asked for a CUDA device, but the installed PyTorch is a CPU-only build.",
        why=("CPU-only wheels (versions ending in +cpu, or the default wheel on some platforms) contain no CUDA "
             "code at all. This says nothing about your GPU or driver: they may be perfectly fine."),
        fix=("Reinstall PyTorch with CUDA in the kernel's environment, e.g. `%pip install torch --index-url "
             "https://download.pytorch.org/whl/cu121` (choose the CUDA version your driver supports: `%cudainfo` "
             "shows it), then restart the kernel."),
        source="torch/cuda/__init__.py: _lazy_init", context=ctx_not_compiled),
    Entry(
        id="cuda-program-no-driver", title="A %%cuda program found no usable NVIDIA driver",
        types=("CudaProgramError",),
        patterns=(r"cudaErrorInsufficientDriver|CUDA driver version is insufficient",
                  r"cudaErrorNoDevice|no CUDA-capable device"),
        what="The program compiled, but its first CUDA call (here the kernel launch) could not reach a GPU.",
        why=("Host code runs anywhere; device code needs the NVIDIA kernel driver (libcuda) and a GPU. Without a "
             "driver the CUDA runtime reports 'driver version is insufficient' (cudaErrorInsufficientDriver); with "
             "a driver older than the toolkit that compiled the program it reports the same."),
        fix=("Run the notebook on a machine with an NVIDIA GPU and driver (`%cudainfo` shows what this one has), or "
             "update the driver to one that supports the toolkit's CUDA version."),
        source="CUDA runtime: cudaErrorInsufficientDriver (35), cudaErrorNoDevice (100); cudamagic/cuda/run.py",
        context=ctx_program_driver),
    Entry(
        id="driver-too-old", title="NVIDIA driver too old for this PyTorch build", reports=("F19", "F23"),
        types=("RuntimeError", "AssertionError"),
        patterns=(r"NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)",
                  r"CUDA driver version is insufficient for CUDA runtime version"),
        what="PyTorch could not start CUDA because the driver supports an older CUDA than PyTorch was built for.",
        why=("Each PyTorch wheel is built against one CUDA version and needs a driver at least that new. The "
             "driver's version number encodes the newest CUDA it supports (11040 = CUDA 11.4). Installing a CUDA "
             "toolkit does not help: the wheel ships its own CUDA runtime; only the driver matters."),
        fix=("Update the NVIDIA driver, or install a PyTorch wheel built for the CUDA version your driver supports "
             "(https://pytorch.org/get-started/previous-versions/)."),
        source="c10/cuda/CUDAFunctions.cpp: device_count_impl (cudaErrorInsufficientDriver)",
        context=ctx_driver_old),
    Entry(
        id="pin-cuda-tensor", title="Pinning a tensor that is already on the GPU", reports=("F20",),
        types=("RuntimeError",),
        patterns=(r"cannot pin '(?P<type>[\w.]+)' only dense CPU tensors can be pinned",),
        what="`pin_memory` was asked to pin a tensor that is not a CPU tensor.",
        why=("Pinned (page-locked) memory is a CPU-side buffer that makes copies to the GPU faster. A tensor "
             "already on the GPU has nothing to pin. Usually the dataset was moved to the GPU and then wrapped in a "
             "DataLoader(..., pin_memory=True)."),
        fix=("Keep the dataset on the CPU, keep pin_memory=True, and move each batch inside the loop with "
             "`x = x.to(device, non_blocking=True)`; or, if the data must stay on the GPU, drop pin_memory."),
        source="aten/src/ATen/native/Memory.cpp: _pin_memory", context=ctx_pin_cuda),
    Entry(
        id="pin-no-accelerator", title="Pinning memory on a machine without a GPU",
        types=("RuntimeError",), patterns=(r"Cannot access accelerator device when none is available",),
        what="PyTorch needed a GPU (or other accelerator) for this call, and this kernel has none.",
        why=("`tensor.pin_memory()` (and torch.accelerator calls) allocate through the accelerator's driver: page-"
             "locked memory only exists to speed up copies to a GPU. On a CPU-only build or machine there is no "
             "accelerator to ask. (DataLoader's pin_memory=True only warns in that case; a direct .pin_memory() "
             "raises.)"),
        fix=("Pin only when a GPU is there: `x = x.pin_memory() if torch.cuda.is_available() else x`, or use "
             "`DataLoader(..., pin_memory=torch.cuda.is_available())`."),
        source="aten/src/ATen/DeviceAccelerator.cpp: getAccelerator(checked=true)", context=ctx_no_accelerator),
    Entry(
        id="cuda-801-workers", title="CUDA error 801 with DataLoader workers (Windows)", reports=("F21",),
        types=("RuntimeError",),
        patterns=(r"cuda runtime error \(801\)", r"operation not supported.*StorageSharing",
                  r"CUDA error: operation not supported"),
        what="A CUDA tensor was sent between processes, and CUDA refused (error 801: operation not supported).",
        why=("With num_workers > 0 the DataLoader runs your Dataset in worker processes and ships each batch back "
             "through shared memory. On Windows, CUDA tensors cannot be shared between processes, so a Dataset "
             "that returns CUDA tensors fails there (on Linux, vGPUs show the same error)."),
        fix=("Return CPU tensors from the Dataset (no `.cuda()`/`.to(device)` in `__getitem__` or in the dataset "
             "tensors), move each batch to the GPU in the training loop, and use pin_memory=True for speed; or set "
             "num_workers=0."),
        source="torch/csrc/StorageSharing.cpp: THPStorage_shareCuda (cudaIpcGetMemHandle)", context=ctx_workers),
    Entry(
        id="cuda-oom", title="CUDA out of memory", reports=("F22",),
        types=("OutOfMemoryError", "RuntimeError"),
        patterns=(r"(?:CUDA|HIP) out of memory\. Tried to allocate", r"CUDA error: out of memory"),
        what="The GPU did not have enough free memory for the next allocation.",
        why=("Everything still referenced stays on the GPU: your variables, the model and optimizer state, and "
             "in a notebook also the output cache (`_`, `Out[n]`) and the saved traceback of the last error "
             "(sys.last_traceback), which keeps the failing function's tensors alive. That is why memory often "
             "'never comes back' after an OOM until they are cleared."),
        fix="Free memory you no longer need, then retry with a smaller batch.",
        source="c10/cuda/CUDACachingAllocator.cpp: DeviceCachingAllocator::malloc (torch.OutOfMemoryError)",
        context=ctx_oom),
    Entry(
        id="backward-twice", title="Backward through the graph a second time", reports=("F24",),
        types=("RuntimeError",), patterns=(r"Trying to backward through the graph a second time",),
        what="`.backward()` ran through part of a graph whose saved tensors an earlier backward already freed.",
        why=("To save memory, backward frees the intermediate values of the graph it went through. Two common "
             "causes: a tensor carried across loop iterations (an RNN hidden state `h`, a running total) links "
             "each step's graph to the previous one; or a cell that only calls `loss.backward()` is re-run without "
             "re-running the cell that computed `loss`."),
        fix=("Detach what you carry between iterations (`h = h.detach()`), or recompute the forward pass before "
             "each backward. Prefer this to retain_graph=True, which keeps every graph alive."),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack (ERR_BACKWARD_TWICE)",
        context=ctx_backward_twice),
    Entry(
        id="no-grad", title="Tensor does not require grad", reports=("F25",),
        types=("RuntimeError",), patterns=(r"element \d+ of tensors does not require grad and does not have a grad_fn",),
        what="`.backward()` was called on a tensor that autograd did not track.",
        why=("Autograd only records operations on tensors that require grad. The tensor you call backward on was "
             "computed under `torch.no_grad()` or `torch.inference_mode()`, from `.detach()`ed data, via `.item()` "
             "or NumPy, or from a model whose parameters all have requires_grad=False."),
        fix=("Compute the loss outside `torch.no_grad()`/`inference_mode()` and without `.detach()`/`.item()`/"
             "NumPy, from a model whose parameters require grad (`any(p.requires_grad for p in "
             "model.parameters())`)."),
        source="torch/csrc/autograd/engine.cpp / python_engine.cpp: run_backward", context=ctx_no_grad),
    Entry(
        id="grad-not-scalar", title="Backward on a non-scalar tensor",
        types=("RuntimeError",), patterns=(r"grad can be implicitly created only for scalar outputs",),
        what="`.backward()` without an argument needs a single number, and this tensor has several elements.",
        why=("The gradient of a vector is a matrix (a Jacobian); backward needs a scalar loss, or an explicit "
             "upstream gradient with the tensor's shape."),
        fix="Reduce to a scalar first (`.sum()` or `.mean()`), or call `t.backward(gradient)` with a tensor of t's shape.",
        source="torch/autograd/__init__.py: _make_grads", context=ctx_scalar),
    Entry(
        id="different-devices", title="Tensors on different devices",
        types=("RuntimeError",),
        patterns=(r"Expected all tensors to be on the same device, but (?:found at least two devices, "
                  r"(?P<d1>[\w:]+) and (?P<d2>[\w:]+)|got)",
                  r"Tensor on device (?P<d3>[\w:]+) is not on the expected device (?P<d4>[\w:]+)",
                  r"Input type \(torch\.(?:cuda\.)?\w+\) and weight type \(torch\.cuda\.\w+\) should be the same",
                  r"Input type \(torch\.cuda\.\w+\) and weight type \(torch\.\w+\) should be the same"),
        what="One operation got tensors that live on different devices (for example the GPU and the CPU).",
        why=("PyTorch never moves data implicitly. `model.to(device)` moves parameters, but inputs, targets and "
             "tensors created inside forward (`torch.zeros(...)` without device=) stay on the CPU."),
        fix=("Pick one `device` and move everything to it: `model.to(device)`, `x, y = x.to(device), y.to(device)`, "
             "and create new tensors with `device=x.device`."),
        source="aten/src/ATen/core/op_registration/adaption.cpp: common_device_check_failure; "
               "aten/src/ATen/TensorIterator.cpp",
        context=ctx_devices),
    Entry(
        id="no-kernel-image", title="No kernel for this GPU's architecture",
        types=("RuntimeError",), patterns=(r"no kernel image is available for execution on the device",),
        what="This PyTorch build has no compiled code for your GPU's compute capability.",
        why=("Wheels include kernels for a list of architectures (torch.cuda.get_arch_list()). A GPU newer than the "
             "wheel (e.g. sm_120 with an old wheel) or older than it supports (e.g. sm_35 with a recent wheel) has "
             "no kernels to run."),
        fix=("Install a PyTorch wheel whose arch list includes your GPU: a newer release (and CUDA version) for new "
             "GPUs, an older release for old ones. `%cudainfo` shows both sides."),
        source="CUDA runtime cudaErrorNoKernelImageForDevice via C10_CUDA_CHECK (c10/cuda/CUDAException.h)",
        context=ctx_arch),
    Entry(
        id="device-side-assert", title="CUDA device-side assert",
        types=("RuntimeError",), patterns=(r"device-side assert triggered",),
        what="A check inside a GPU kernel failed: almost always an index out of range.",
        why=("Typical causes: a class label >= number of classes (or negative) in cross_entropy/nll_loss, an "
             "index >= num_embeddings in nn.Embedding, bad indices in gather/index_select, or BCE inputs outside "
             "[0, 1]. " + _CUDA_SUFFIX + " After a device-side assert the CUDA context is unusable: every later "
             "CUDA call fails until the kernel restarts."),
        fix=("Restart the kernel. To find the failing line, set `CUDA_LAUNCH_BLOCKING=1` before CUDA starts "
             "(`import os; os.environ['CUDA_LAUNCH_BLOCKING'] = '1'` as the first cell): every kernel launch then "
             "waits for completion, so the error is raised at the real operation (slower; for debugging only). Or "
             "run the same step on the CPU, which names the bad index."),
        source="c10/cuda/CUDAException.cpp: c10_cuda_check_implementation (cudaErrorAssert)",
        context=ctx_index_tensors),
    Entry(
        id="index-out-of-range", title="Index or class label out of range",
        types=("IndexError", "RuntimeError"),
        patterns=(r"Target (?P<target>-?\d+) is out of bounds", r"index out of range in self"),
        what="A class label or an embedding index is outside the valid range.",
        why=("cross_entropy/nll_loss need labels in 0..C-1 for C output classes; nn.Embedding(n, d) accepts indices "
             "0..n-1. Labels numbered from 1, or a vocabulary larger than the embedding, cause this (on the GPU the "
             "same mistake shows up as a 'device-side assert')."),
        fix=("Check `labels.min()`, `labels.max()` against the number of classes / num_embeddings: remap labels to "
             "0..C-1 or make the output layer / embedding larger."),
        source="aten/src/ATen/native/LossNLL.cpp: nll_loss_out_frame; aten/src/ATen/native/Embedding.cpp (index_select)",
        context=ctx_index_tensors),
    Entry(
        id="invalid-device-ordinal", title="Invalid CUDA device ordinal",
        types=("RuntimeError", "AssertionError"),
        patterns=(r"invalid device ordinal", r"^Invalid device id$"),
        what="The code asked for a GPU number that does not exist in this process.",
        why=("CUDA ordinals count from 0 and only over the GPUs this process can see: with "
             "CUDA_VISIBLE_DEVICES=2 the only GPU is cuda:0. Code written for a multi-GPU machine often asks for "
             "cuda:1."),
        fix="Use `cuda:0` (or `torch.device('cuda')`), or check `torch.cuda.device_count()` and CUDA_VISIBLE_DEVICES.",
        source="CUDA runtime cudaErrorInvalidDevice via C10_CUDA_CHECK; torch/cuda/__init__.py: get_device_properties",
        context=ctx_ordinal),
    Entry(
        id="cublas-cudnn-init", title="cuBLAS / cuDNN could not start",
        types=("RuntimeError",),
        patterns=(r"CUBLAS_STATUS_NOT_INITIALIZED", r"CUBLAS_STATUS_ALLOC_FAILED", r"CUDNN_STATUS_NOT_INITIALIZED",
                  r"CUDNN_STATUS_ALLOC_FAILED"),
        what="The CUDA math library (cuBLAS or cuDNN) failed to create its handle.",
        why=("Creating a handle allocates GPU workspace; the usual cause is that GPU memory is already full (your "
             "own tensors, another notebook, another process). Less often: a broken or mismatched CUDA install, or "
             "an earlier CUDA error that left the context unusable."),
        fix=("Free GPU memory (see `nvidia-smi` / `%gpuwatch` for other processes, `del` big tensors, restart other "
             "kernels) and restart this kernel; if memory is free, reinstall PyTorch for your driver."),
        source="aten/src/ATen/cuda/CublasHandlePool.cpp: getCurrentCUDABlasHandle; aten/src/ATen/cudnn/Handle.cpp",
        context=ctx_gpu_memory),
    Entry(
        id="leaf-inplace", title="In-place change of a leaf that requires grad",
        types=("RuntimeError",),
        patterns=(r"a (?:view of a )?leaf Variable that requires grad (?:is being|has been) used in an in-place "
                  r"operation",),
        what="A tensor that autograd must differentiate against (a parameter / requires_grad leaf) was changed in place.",
        why=("Gradients are computed with respect to leaves; changing a leaf in place while tracking would lose "
             "the value the gradient refers to. Typical cases: initialising weights with `w.normal_()` or updating "
             "them with `w -= lr * w.grad` outside `torch.no_grad()`."),
        fix="Do manual initialisation and updates under `with torch.no_grad():`, or use an optimizer.",
        source="torch/csrc/autograd/VariableTypeUtils.h: check_inplace", context=ctx_leaf_inplace),
    Entry(
        id="modified-inplace", title="A tensor needed for backward was modified in place",
        types=("RuntimeError",),
        patterns=(r"one of the variables needed for gradient computation has been modified by an inplace "
                  r"operation: \[(?P<ttype>[\w.]+) \[(?P<shape>[\d, ]*)\]\], which is output (?P<output>\d+) of "
                  r"(?P<op>\w+), is at version (?P<version>\d+); expected version (?P<expected>\d+)",
                  r"one of the variables needed for gradient computation has been modified by an inplace operation"),
        what="Backward needed a value saved in the forward pass, but that tensor was overwritten in place afterwards.",
        why=("Operations save their inputs or outputs for backward (sigmoid saves its output, mul its inputs). An "
             "in-place op (`x += 1`, `x.relu_()`, `nn.ReLU(inplace=True)`, `x[idx] = ...`) on such a tensor bumps its "
             "version counter, and autograd refuses to use the stale value."),
        fix=("Replace the in-place operation by its out-of-place form (`y = y * 2`, `torch.relu(x)`), or `.clone()` "
             "before modifying. `torch.autograd.set_detect_anomaly(True)` shows the forward line that saved it."),
        source="torch/csrc/autograd/saved_variable.cpp: SavedVariable::unpack", context=ctx_modified_inplace),
    Entry(
        id="matmul-shapes", title="Matrix shapes cannot be multiplied",
        types=("RuntimeError",),
        patterns=(r"mat1 and mat2 shapes cannot be multiplied \((?P<a0>\d+)x(?P<a1>\d+) and (?P<b0>\d+)x(?P<b1>\d+)\)",),
        what="A matrix product got operands whose inner sizes differ.",
        why=("For A @ B the columns of A must equal the rows of B. In nn.Linear(in, out) the input's last dimension "
             "must be `in`; after convolutions it is easy to get the flattened size wrong."),
        fix="Make the input's last dimension equal the layer's in_features (or change in_features; nn.LazyLinear infers it).",
        source="aten/src/ATen/native/LinearAlgebra.cpp: addmm_impl_cpu_ / TORCH_META_FUNC(addmm)",
        context=ctx_matmul),
    Entry(
        id="dtype-mismatch", title="Mixed dtypes (float32 vs float64 ...)",
        types=("RuntimeError", "ValueError"),
        patterns=(r"expected scalar type (?P<x>Float|Double|Half|BFloat16) but found (?P<y>\w+)",
                  r"(?:mat1 and mat2|self and mat2) must have the same dtype, but got (?P<x2>\w+) and (?P<y2>\w+)",
                  r"Input type \((?P<x3>\w+)\) and (?:bias|weight) type \((?P<y3>\w+)\) should be the same",
                  r"Input type \(torch\.(?P<x4>\w+)\) and weight type \(torch\.(?P<y4>\w+)\) should be the same",
                  r"RNN input dtype \([\w.]+\) does not match weight dtype",
                  r"expected both vectors to have same dtype, but found \w+ and \w+",
                  r"expected m1 and m2 to have the same dtype, but got: (?P<x5>\w+) != (?P<y5>\w+)",
                  r"input tensors must have the same dtype, but got \w+"),
        what="An operation got tensors of different floating-point types (typically float64 data into a float32 model).",
        why=("PyTorch models are float32 by default, but NumPy arrays are float64, and `torch.from_numpy` / "
             "`torch.tensor(array)` keep float64. Matrix products and layers do not convert for you."),
        fix="Convert the data to the model's dtype (`x = x.float()`), or the model to the data's (`model.double()`).",
        source="aten/src/ATen/native/LinearAlgebra.cpp: TORCH_META_FUNC(addmm) (mat1 and mat2 must have the "
               "same dtype), TORCH_META_FUNC(mm) (expected m1 and m2 to have the same dtype), addmv; "
               "aten/src/ATen/native/Convolution.cpp: check_input_same_type_as_parameters",
        context=ctx_dtype),
    Entry(
        id="target-dtype-long", title="Class labels must be integers (Long)",
        types=("RuntimeError",),
        patterns=(r"expected target dtype to be Long or Byte, but got (?P<t>\w+)",
                  r"expected scalar type Long but found (?P<t2>\w+)",
                  r"Expected tensor for argument #1 'indices' to have one of the following scalar types: Long, Int"),
        what="A loss or embedding that needs integer class indices got floating-point values.",
        why=("cross_entropy / nll_loss with class labels, and nn.Embedding, index with the targets: they must be "
             "int64 (Long). Labels built with torch.tensor([0., 1.]) or from a float array are float."),
        fix="Convert the labels (or embedding indices) to int64: `y = y.long()`.",
        source="aten/src/ATen/native/LossNLL.cpp: nll_loss_forward_out_cpu_template; "
               "aten/src/ATen/native/Embedding.cpp: checkScalarTypes",
        context=ctx_targets),
    Entry(
        id="target-dtype-float", title="Regression / BCE targets must be float",
        types=("RuntimeError",), patterns=(r"Found dtype (?P<found>Long|Int|Bool|Byte) but expected (?P<exp>Float|Double|Half)",),
        what="A loss that compares real numbers (MSE, BCE, L1) got integer targets.",
        why=("Losses like mse_loss and binary_cross_entropy need targets of the same floating dtype as the "
             "prediction; integer labels (from torch.tensor([0, 1, 1])) do not convert by themselves."),
        fix="Convert the targets: `y = y.float()`.",
        source="torch/csrc/autograd/engine.cpp: validate_outputs / aten binary_cross_entropy dtype check",
        context=ctx_float_targets),
    Entry(
        id="result-type-cast", title="A float result cannot be stored in an integer tensor",
        types=("RuntimeError",),
        patterns=(r"result type (?P<result>\w+) can't be cast to the desired output type (?P<output>\w+)",),
        what="An operation produced floating-point values that had to be written into an integer tensor.",
        why=("An in-place operation (`x += 0.5`, `x.mul_(0.9)`, `out=`) keeps the dtype of the tensor it writes "
             "into, and PyTorch will not silently truncate floats to integers. BCEWithLogitsLoss with integer "
             "targets (labels from torch.tensor([0, 1, 1])) fails the same way: it computes in the targets' dtype."),
        fix=("Make the integer tensor float first (`y = y.float()` for BCE targets), or write the result to a new "
             "tensor (`x = x + 0.5`) instead of in place."),
        source="aten/src/ATen/TensorIterator.cpp: TensorIteratorBase::compute_types (canCast check)",
        context=ctx_result_cast),
    Entry(
        id="cuda-fork", title="CUDA in a forked subprocess",
        types=("RuntimeError",), patterns=(r"Cannot re-initialize CUDA in forked subprocess",),
        what="A child process created with fork (DataLoader workers, multiprocessing) tried to use CUDA.",
        why=("CUDA cannot be used in a process forked from one where CUDA was already initialised. DataLoader "
             "workers are forked on Linux; moving data to the GPU inside the Dataset (or collate_fn) does this."),
        fix=("Keep CUDA work in the main process: return CPU tensors from the Dataset and move batches in the training "
             "loop. If workers really need CUDA, use `DataLoader(..., multiprocessing_context='spawn')` (in a notebook "
             "the Dataset class must then live in an importable .py file)."),
        source="torch/cuda/__init__.py: _lazy_init (_is_in_bad_fork)", context=ctx_fork),
    Entry(
        id="dataloader-shm", title="DataLoader worker killed: shared memory too small",
        types=("RuntimeError",),
        patterns=(r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
                  r"dataloader's workers are out of shared memory",
                  r"unable to (?:write to file|open shared memory object|allocate shared memory)"),
        what="A DataLoader worker crashed with a bus error while passing a batch to the main process.",
        why=("Workers hand batches over through shared memory (/dev/shm). Containers often have a tiny /dev/shm "
             "(Docker's default is 64 MiB), which large batches or many workers exhaust."),
        fix=("Give the container more shared memory (`docker run --shm-size=8g` or `--ipc=host`; in Kubernetes an "
             "emptyDir with medium: Memory on /dev/shm), or lower num_workers / batch size, or "
             "`torch.multiprocessing.set_sharing_strategy('file_system')`."),
        source="torch/csrc/DataLoader.cpp: handler_SIGBUS / _error_if_any_worker_fails", context=ctx_shm),
    Entry(
        id="numpy-conversion", title="Converting a tensor to NumPy",
        types=("RuntimeError", "TypeError"),
        patterns=(r"Can't call numpy\(\) on Tensor that requires grad",
                  r"can't convert (?P<device>[\w:]+) device type tensor to numpy"),
        what="`.numpy()` was called on a tensor that tracks gradients or lives off the CPU.",
        why=("A NumPy array shares the tensor's CPU memory and knows nothing of autograd, so PyTorch refuses to hand "
             "out a tracked tensor or GPU memory."),
        fix="Use `t.detach().cpu().numpy()` (detach from the graph, copy to the CPU, then convert).",
        source="torch/csrc/utils/tensor_numpy.cpp: tensor_to_numpy", context=ctx_numpy),
    Entry(
        id="broadcast-size", title="Tensor sizes do not match",
        types=("RuntimeError",),
        patterns=(r"The size of tensor a \((?P<a>\d+)\) must match the size of tensor b \((?P<b>\d+)\) at "
                  r"non-singleton dimension (?P<dim>\d+)",),
        what="An element-wise operation got tensors whose shapes cannot be broadcast together.",
        why=("Element-wise ops line shapes up from the right; each dimension must be equal or 1. Frequent causes: a "
             "prediction of shape [N, 1] against targets of shape [N], or a batch whose last element is smaller."),
        fix="Print both shapes and reshape one (`pred.squeeze(1)`, `y.unsqueeze(1)`, `.view(...)`).",
        source="aten/src/ATen/ExpandUtils.cpp: infer_size_impl", context=ctx_broadcast),
    Entry(
        id="batchnorm-one-sample", title="BatchNorm with a batch of one",
        types=("ValueError",), patterns=(r"Expected more than 1 value per channel when training",),
        what="A BatchNorm layer in training mode got a batch with a single sample.",
        why=("Training-mode BatchNorm normalises with the batch's own mean and variance, which one sample cannot "
             "provide. A last DataLoader batch of size 1 often causes it."),
        fix="Use `model.eval()` for single-sample inference, or `DataLoader(..., drop_last=True)` for training.",
        source="torch/nn/functional.py: _verify_batch_size", context=None),
)


def entry_by_id(entry_id: str):
    """The catalogue entry with this id, or None."""
    for entry in CATALOGUE:
        if entry.id == entry_id:
            return entry
    return None
