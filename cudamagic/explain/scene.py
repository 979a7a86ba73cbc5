"""The live scene a context function looks at.

The :class:`Scene` (the user's namespace, the local variables of the failing user frames, the
failing cell's source and the input history), built from an IPython shell by
:func:`scene_from_shell`, and the questions asked of it: which names are on the failing lines, which
tensors and modules they hold.

torch is never imported here: it is looked up in ``sys.modules`` (an error raised by PyTorch
means torch is imported already). The scene copies the frames' locals into plain dicts and
keeps no frame or traceback.
"""

from __future__ import annotations

import contextlib
import inspect
import linecache
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from .result import exception_chain, exception_text
from .source import _line_names, _root_name_of, call_arguments


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
        messages: ``str()`` of the exception and of each link of its ``__cause__``/``__context__``
            chain, outermost first (a DataLoader's "exited unexpectedly" wraps the exit code or
            signal).
    """

    user_ns: Mapping = field(default_factory=dict)
    frames: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    history: list = field(default_factory=list)
    line_magics: frozenset = frozenset()
    failing_lines: list = field(default_factory=list)
    messages: list = field(default_factory=list)

    def variables(self):
        """Yield ``(name, value)``: locals of the user frames (innermost first), then globals.

        Names starting with ``_`` are skipped, except none are needed here; IPython's
        output cache is looked at separately by :func:`_output_cache_tensors`.
        """
        seen = set()
        for _func_name, local_vars in reversed(self.frames):
            for name, value in list(local_vars.items()):
                if name.startswith("_") or name in seen:
                    continue
                seen.add(name)
                yield name, value
        for name, value in list(self.user_ns.items()):
            if (
                name.startswith("_")
                or name in seen
                or name in ("In", "Out", "exit", "quit", "get_ipython")
            ):
                continue
            seen.add(name)
            yield name, value


def scene_from_shell(shell, exc: BaseException | None = None) -> Scene:
    """Build a :class:`Scene` from an IPython shell and the exception's traceback.

    Args:
        shell: the ``InteractiveShell``.
        exc: the exception; its traceback gives the user frames (those whose globals are
            the user namespace) and their sources. The frames are not kept: their locals
            are copied into plain dicts.
    """
    user_ns, hidden = shell.user_ns, shell.user_ns_hidden
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
                with contextlib.suppress(OSError, TypeError):
                    sources.append(inspect.getsource(frame.f_code))
        tb = tb.tb_next
    tb = frame = None
    if not cells and history:
        cells.append(history[-1])
    sources = cells[:1] + sources
    messages = [exception_text(link) for link in exception_chain(exc)] if exc is not None else []
    return Scene(
        user_ns=visible,
        frames=frames,
        sources=sources,
        history=history,
        line_magics=frozenset(shell.magics_manager.magics["line"]),
        failing_lines=[ln for ln in lines if ln],
        messages=messages,
    )


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
        return _dtype_name(p)
    return None


def _dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _lookup(scene: Scene, name):
    if not name:
        return None
    for _fname, local_vars in reversed(scene.frames):
        if name in local_vars:
            return local_vars[name]
    return scene.user_ns.get(name)


def _submodules(named) -> list:
    """``(qualified name, module)`` of the modules in ``named`` and their submodules, no repeats."""
    out, seen = [], set()
    for name, value in named:
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


def _named_modules(scene: Scene) -> list:
    """``(qualified name, module)`` for every nn.Module reachable from a variable."""
    return _submodules(scene.variables())


def _tensors(scene: Scene):
    """Yield ``(name, tensor)`` for tensors held directly by variables."""
    for name, value in scene.variables():
        if _is_tensor(value):
            yield name, value


def _output_cache_tensors(scene: Scene):
    """Names under which IPython's output cache (``_``, ``Out[n]``, ...) holds CUDA tensors."""
    ns = scene.user_ns
    hits = [key for key in ("_", "__", "___") if _is_tensor(ns.get(key)) and ns[key].is_cuda]
    out = ns.get("Out")
    if isinstance(out, dict):
        hits += [f"Out[{k}]" for k, v in out.items() if _is_tensor(v) and v.is_cuda]
    return hits


def _source_text(scene: Scene) -> str:
    return "\n".join(s for s in scene.sources if s)


def failing_names(scene: Scene) -> list:
    """Names on the lines that were running when the error was raised.

    The user's own frames, innermost first, in order, without repeats. Only these are certain to be
    involved; a name that merely exists in the namespace may have nothing to do with it.
    """
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


def _failing_modules(scene: Scene) -> list:
    """``(qualified name, module)`` for modules named on the failing lines and their submodules."""
    return _submodules(_failing_values(scene))


def _argument_tensor(scene: Scene, expr: str):
    """The tensor an argument expression names.

    The variable itself for a plain name, else None (an expression such as ``y.float()`` is not
    evaluated).
    """
    if re.fullmatch(r"[A-Za-z_]\w*", expr or ""):
        value = _lookup(scene, expr)
        if _is_tensor(value):
            return value
    return None


def _target_arguments(scene: Scene, *, indices: bool = False) -> list:
    """Expressions passed as the *target* of a loss on the failing lines (innermost first).

    The ``target=`` keyword or the second positional argument of a two-argument call. With
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
                    with contextlib.suppress(Exception):
                        is_embedding = is_embedding or any(
                            isinstance(m, torch.nn.Embedding) for m in target.modules()
                        )
                expr = kwargs.get("input") or (args[0] if args else None)
                if is_embedding and expr:
                    out.append((callee, expr))
            else:
                expr = kwargs.get("target") or (args[1] if len(args) >= 2 else None)
                if expr:
                    out.append((callee, expr))
    return out
