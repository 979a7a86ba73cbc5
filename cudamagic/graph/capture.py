"""Running a ``%%autograd_graph`` cell like ``%%time`` and finding what to draw in its value.

:func:`capture` runs the cell (:func:`run_cell`) while a :class:`ModuleCallRecorder`
records every ``nn.Module`` call, names tensors and modules by where the user can
reach them (:func:`namespace_names`), flattens the value into tensors
(:func:`flatten_outputs`), explains a value with nothing to draw (:func:`diagnose`)
and hands the tensors to :func:`~cudamagic.graph.walk.walk`.

This module imports no IPython; :func:`run_cell` receives the shell. torch is
imported inside the functions that need it.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import threading
from collections.abc import Sequence
from typing import Any

from ..core.cell import compile_cell, run_code
from .model import AutogradGraph, ModuleCall
from .walk import walk

_SKIP_NAMES = {"In", "Out", "exit", "quit", "get_ipython"}


class NothingToDraw(Exception):
    """The cell's value holds no autograd graph; ``str(exc)`` says why and what to type instead."""


# ---- running the cell ---------------------------------------------------------------
def run_cell(shell, cell: str, magic_line: str = "") -> Any:
    """Run ``cell`` as ``%%time`` does and return its last expression.

    Run ``cell`` in the user namespace the way ``%%time`` does and return its last expression
    (:func:`cudamagic.core.cell.compile_cell` and :func:`~cudamagic.core.cell.run_code`).

    The cell goes through IPython's input transformers and AST transformers; its
    source is registered in ``linecache`` (with the magic line first, so line
    numbers match the notebook cell) and tracebacks show the real source lines.
    No cell events fire (the outer ``run_cell`` already fired them).

    Args:
        shell: The ``InteractiveShell``.
        cell: The cell body (without the ``%%autograd_graph`` line).
        magic_line: The arguments after ``%%autograd_graph``, for the line-number offset.

    Returns:
        The value of the cell's last line when it is an expression, else ``None``.

    Raises:
        Exception: whatever the user's code raises, untouched; ``SyntaxError`` for bad source.
    """
    __tracebackhide__ = True  # IPython hides this frame in tracebacks
    code = compile_cell(shell, cell, f"%%autograd_graph {magic_line}".rstrip())
    return run_code(code, shell.user_ns).value


class ModuleCallRecorder:
    """Context manager recording ``nn.Module`` calls of this thread with autograd sequence numbers.

    Each call keeps ``[module, parent, start_seq, end_seq]``: autograd nodes created
    during the call have ``start_seq <= node._sequence_nr() < end_seq``. Module
    objects are held only until :meth:`resolve` turns them into :class:`ModuleCall`.

    With ``modules=None`` it records every module through global module hooks; with a list, only
    those modules through their own hooks (an empty list records nothing): see :func:`recorder_for`,
    which keeps hooks away from ``torch.compile``.
    """

    def __init__(self, max_calls: int = 200_000, modules=None):
        self.raw = []
        self._stack = []
        self._max = max_calls
        self._thread = threading.get_ident()
        self._handles = []
        self._modules = modules

    def __enter__(self):
        import torch
        from torch.nn.modules import module as mod

        # private API; without it every call has an empty interval and nothing is grouped
        self._seq = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None) or (
            lambda: 0
        )
        if self._modules is None:
            self._handles = [
                mod.register_module_forward_pre_hook(self._pre),
                mod.register_module_forward_hook(self._post, always_call=True),
            ]
        else:
            for m in self._modules:
                self._handles += [
                    m.register_forward_pre_hook(self._pre),
                    m.register_forward_hook(self._post, always_call=True),
                ]
            self._modules = None
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack = []
        return False

    def _pre(self, module, args):
        if threading.get_ident() != self._thread or len(self.raw) >= self._max:
            return None
        parent = self._stack[-1] if self._stack else None
        self.raw.append([module, parent, self._seq(), None])
        self._stack.append(len(self.raw) - 1)
        return None

    def _post(self, module, args, output):
        if threading.get_ident() != self._thread or not self._stack:
            return None
        while self._stack:
            idx = self._stack.pop()
            self.raw[idx][3] = self._seq()
            if self.raw[idx][0] is module:
                break
        return None

    def resolve(self, module_paths: dict) -> tuple:
        """Turn the raw records into ``ModuleCall``s and interval arrays; drops the modules.

        Args:
            module_paths: ``id(module) -> path`` from :func:`namespace_names`.

        Returns:
            ``(calls, starts, ends)``: ``ModuleCall`` list and their sequence-number intervals.
        """
        calls, starts, ends = [], [], []
        for i, (module, parent, start, end) in enumerate(self.raw):
            depth = 1 if parent is None else calls[parent].depth + 1
            calls.append(
                ModuleCall(
                    i, module_paths.get(id(module), ""), type(module).__name__, parent, depth
                )
            )
            starts.append(start)
            ends.append(end if end is not None else start)
        self.raw = []
        return calls, starts, ends


def _is_compiled_module(m) -> bool:
    return (
        any(c.__name__ == "OptimizedModule" for c in type(m).__mro__)
        or getattr(m, "_compiled_call_impl", None) is not None
    )


def recorder_for(ns: dict, source: str) -> tuple:
    """A module-call recorder that ``torch.compile`` cannot see.

    A :class:`ModuleCallRecorder` that ``torch.compile`` cannot see, and a note when it records
    less.

    ``torch.compile`` traces global module hooks and hooks of the modules it compiles (graph breaks,
    recompiles, a warning on every call of a compiled module). So when nothing in the namespace is
    compiled and the cell does not mention ``compile``, global hooks record every call; when
    compiled modules are in the namespace, only the other namespace modules get hooks (none inside a
    compiled module); when a compiled function is there or the cell compiles something, nothing is
    hooked.

    Returns:
        ``(recorder, note)``; ``note`` is ``''`` or one sentence for the graph's notes.
    """
    import torch

    modules, compiled_fn = [], False
    for key in list(ns):
        if not isinstance(key, str) or key.startswith("_") or key in _SKIP_NAMES:
            continue
        value = ns[key]
        items = [value]
        if isinstance(value, (list, tuple)) and len(value) <= 10_000:
            items = list(value)
        elif isinstance(value, dict) and len(value) <= 10_000:
            items = list(value.values())
        for v in items:
            if isinstance(v, torch.nn.Module):
                modules.append(v)
            elif callable(v) and getattr(v, "_torchdynamo_orig_callable", None) is not None:
                compiled_fn = True
    excluded = set()
    for m in modules:
        for sub in m.modules():
            if _is_compiled_module(sub):
                excluded.update(id(s) for s in sub.modules())
                inner = getattr(sub, "_orig_mod", None)
                if isinstance(inner, torch.nn.Module):
                    excluded.update(id(s) for s in inner.modules())
    if not excluded and not compiled_fn and "compile" not in source:
        return ModuleCallRecorder(), ""
    note = (
        "Module calls are not grouped: hooks on modules would be traced by torch.compile "
        "(graph breaks, recompiles), so none were added."
    )
    if compiled_fn or "compile" in source:
        return ModuleCallRecorder(modules=[]), note
    seen, hooked = set(excluded), []
    for m in modules:
        for sub in m.modules():
            if id(sub) not in seen:
                seen.add(id(sub))
                hooked.append(sub)
    return ModuleCallRecorder(modules=hooked), (
        "Calls inside torch.compile'd modules are not grouped (the compiler would trace the hooks)."
    )


# ---- names ------------------------------------------------------------------------
def namespace_names(ns: dict) -> tuple:
    """Name tensors and modules by where the user can reach them.

    Parameters (and buffers) get their path inside every ``nn.Module`` in ``ns``
    (``model.encoder.0.weight``; the shortest path wins, then alphabetical);
    other tensors get their variable name. Names starting with ``_`` and
    IPython's ``In``/``Out`` are skipped. Modules inside a top-level list, tuple
    or dict are searched too (``layers[0].weight``).

    Args:
        ns: The user namespace.

    Returns:
        ``(tensor_names, module_paths)``: two dicts keyed by ``id()`` of live objects; only valid
        while those objects are alive (used within one walk).
    """
    import torch

    tensor_names, module_paths, var_names = {}, {}, {}

    def offer(table, obj, name):
        old = table.get(id(obj))
        if old is None or (len(name), name) < (len(old), old):
            table[id(obj)] = name

    def add_module(prefix, module):
        # what named_modules, named_parameters and named_buffers (remove_duplicate=False) yield,
        # in one pass over the module tree instead of three
        stack = [(prefix, module)]
        while stack:
            path, m = stack.pop()
            offer(module_paths, m, path)
            for table in (m._parameters, m._buffers):
                for name, t in table.items():
                    if t is not None:
                        offer(tensor_names, t, f"{path}.{name}")
            stack.extend(
                (f"{path}.{name}", sub) for name, sub in m._modules.items() if sub is not None
            )

    for key in sorted(k for k in ns if isinstance(k, str)):
        if key.startswith("_") or key in _SKIP_NAMES:
            continue
        value = ns[key]
        if isinstance(value, torch.nn.Module):
            add_module(key, value)
        elif isinstance(value, torch.Tensor):
            var_names.setdefault(id(value), key)
        elif isinstance(value, (list, tuple)) and 0 < len(value) <= 10_000:
            for i, item in enumerate(value):
                if isinstance(item, torch.nn.Module):
                    add_module(f"{key}[{i}]", item)
                elif isinstance(item, torch.Tensor):
                    var_names.setdefault(id(item), f"{key}[{i}]")
        elif isinstance(value, dict) and 0 < len(value) <= 10_000:
            for k, item in value.items():
                if isinstance(item, torch.nn.Module):
                    add_module(f"{key}[{k!r}]", item)
    for obj_id, name in var_names.items():
        tensor_names.setdefault(obj_id, name)
    return tensor_names, module_paths


# ---- outputs ----------------------------------------------------------------------
def flatten_outputs(value, prefix: str = "", _depth: int = 0, _seen=None) -> tuple:
    """Flatten a value into labelled tensors.

    Args:
        value: A Tensor, or any nesting of tuple/list/dict/namedtuple/dataclass of Tensors.
        prefix: Path prefix (a variable name with ``-o``, ``''`` for the last expression).

    Returns:
        ``(outputs, skipped)``: ``outputs`` is a list of ``(path, tensor)`` (path ``''`` for a bare
        tensor, else ``[0]``, ``['loss']``, ``.loss``, prefixed); ``skipped`` lists
        ``(path, type name)`` of non-tensor leaves.
    """
    import torch

    seen = set() if _seen is None else _seen
    if isinstance(value, torch.Tensor):
        return [(prefix, value)], []
    if _depth > 20 or id(value) in seen:
        return [], [(prefix, type(value).__name__)]
    outs, skipped = [], []
    items = None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f"{prefix}.{f.name}", getattr(value, f.name)) for f in dataclasses.fields(value)]
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        items = [(f"{prefix}.{f}", getattr(value, f)) for f in value._fields]
    elif isinstance(value, (list, tuple)):
        items = [(f"{prefix}[{i}]", v) for i, v in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{prefix}[{k!r}]", v) for k, v in value.items()]
    if items is None:
        return [], [(prefix, type(value).__name__)]
    seen.add(id(value))
    for path, item in items:
        o, s = flatten_outputs(item, path, _depth + 1, seen)
        outs.extend(o)
        skipped.extend(s)
    return outs, skipped


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _is_drawable(t) -> bool:
    return t.grad_fn is not None or t.requires_grad


def diagnose(
    value, source: str = "", ns: dict | None = None, what: str = "The cell's last expression"
) -> str:
    """Explain why ``value`` has nothing to draw, naming the likely cause and what to type instead.

    Args:
        value: What the cell returned (or the ``-o`` variables, as a dict).
        source: The cell source, scanned for ``no_grad``/``inference_mode``/``detach``/``.item()``.
        ns: The user namespace, scanned for tensors that require grad.
        what: How to refer to the value in the message.

    Returns:
        One paragraph for a ``UsageError``.
    """
    import torch

    if value is None:
        return (
            f"{what} has no value to draw: end the cell with the tensor to draw (for example a "
            "line "
            "with just `loss`), or name variables with `%%autograd_graph -o loss`."
        )
    if isinstance(value, torch.nn.Module):
        return (
            f"{what} is an nn.Module ({type(value).__name__}), not the output of a forward pass, "
            "so "
            "there is no autograd graph yet. Call the module and end the cell with its output, for "
            "example `out = model(x)` then `out` (or `loss = loss_fn(model(x), y)` then `loss`)."
        )
    outs, skipped = flatten_outputs(value)
    if not outs:
        kind = type(value).__name__
        hint = ""
        if isinstance(value, (int, float, complex, bool)) or ".item()" in source:
            hint = (
                " A Python number usually comes from `.item()` or `float(t)`, which leave the "
                "graph: "
                "end the cell with the tensor itself (`loss`, not `loss.item()`)."
            )
        return (
            f"{what} is {_article(kind)} {kind}, not a tensor (or a tuple/list/dict/dataclass of "
            f"tensors), so there is nothing to draw.{hint}"
        )
    causes = []
    inference_inputs = sorted(
        k
        for k, v in (ns or {}).items()
        if isinstance(k, str)
        and isinstance(v, torch.Tensor)
        and v.is_inference()
        and re.search(rf"\b{re.escape(k)}\b", source)
    )
    if all(not (t.is_floating_point() or t.is_complex()) for _, t in outs):
        dtypes = ", ".join(sorted({str(t.dtype).replace("torch.", "") for _, t in outs}))
        causes.append(
            f"its dtype is {dtypes}: only floating-point and complex tensors carry gradients, so "
            "integer or bool results (token ids, `argmax`, comparisons, `tok.sum()`) never have a "
            "grad_fn. Draw a floating-point result instead, for example the loss or the logits"
        )
    elif any(t.is_inference() for _, t in outs):
        causes.append(
            "it was made under `torch.inference_mode()`: run the forward pass outside that block "
            "(inference tensors can never join an autograd graph)"
        )
    elif inference_inputs:
        causes.append(
            f"`{inference_inputs[0]}` was made under `torch.inference_mode()` (in an earlier "
            "cell): "
            "inference tensors can never join an autograd graph; recompute it outside that block, "
            f"or use `{inference_inputs[0]}.clone()` made outside it as the input"
        )
    elif re.search(r"checkpoint|ckpt", source) and re.search(r"reentrant\s*=\s*True", source):
        causes.append(
            "`torch.utils.checkpoint(..., use_reentrant=True)` returns a result without a graph "
            "when none of its tensor inputs requires grad, even if the block's parameters do: pass "
            "`use_reentrant=False`, or give it an input that requires grad"
        )
    elif re.search(
        r"\b(torch\.func|functorch)\b|\b(vmap|jacrev|jacfwd|vjp|jvp|hessian|functional_call|"
        r"grad_and_value)\(|\bfunc\.grad\(",
        source,
    ):
        causes.append(
            "a `torch.func` transform (`grad`, `vjp`, `jacrev`, `vmap`...) computes its gradients "
            "inside the transform, so what it returns has no graph of the outer code: draw the "
            "function's own computation with regular autograd (call it on a tensor that requires "
            "grad and draw the result)"
        )
    if causes:
        names = ", ".join(p or "the value" for p, _ in outs[:5])
        return (
            f"{what} ({names}) has no autograd graph: no grad_fn and requires_grad=False. Cause: "
            + causes[0]
            + "."
        )
    if re.search(r"\bno_grad\b|set_grad_enabled\(\s*False", source):
        causes.append("the cell uses `torch.no_grad()`: run the forward pass outside that block")
    if "inference_mode" in source and not causes:
        causes.append(
            "the cell uses `torch.inference_mode()`: run the forward pass outside that block"
        )
    if re.search(r"\.detach\(|\.data\b", source):
        causes.append(
            "`.detach()` (or `.data`) returns a tensor cut from the graph: draw the tensor before "
            "detaching it"
        )
    if ns is not None and not causes:
        any_grad = any(isinstance(v, torch.Tensor) and v.requires_grad for v in ns.values()) or any(
            isinstance(v, torch.nn.Module) and any(p.requires_grad for p in v.parameters())
            for v in ns.values()
        )
        if not any_grad:
            causes.append(
                "no input requires grad: create inputs with `requires_grad=True` (for example "
                "`x = torch.randn(3, requires_grad=True)`) or use an nn.Module's parameters"
            )
    if not causes:
        causes.append(
            "it was computed under `torch.no_grad()`/`inference_mode()`, detached "
            "(`.detach()`), or from inputs none of which requires grad"
        )
    names = ", ".join(p or "the value" for p, _ in outs[:5])
    return (
        f"{what} ({names}) has no autograd graph: no grad_fn and requires_grad=False. Likely "
        "cause: " + "; ".join(causes) + "."
    )


# ---- one call from the magic --------------------------------------------------------
def capture(
    shell,
    cell: str,
    magic_line: str = "",
    output_names: Sequence[str] = (),
    *,
    show_saved: bool = False,
    show_attrs: bool = False,
    shared_params: bool = False,
    with_tensors=None,
) -> AutogradGraph:
    """Run the cell (see :func:`run_cell`) and walk the autograd graph of its value.

    Args:
        shell: The ``InteractiveShell``.
        cell: The cell body.
        magic_line: The magic's arguments (only for the traceback line offset).
        output_names: Variables to draw instead of the last expression (``-o loss,logits``).
        show_saved: Draw every saved tensor (see :func:`walk`).
        show_attrs: Keep non-tensor saved attributes (see :func:`walk`).
        shared_params: One node per leaf tensor (see :func:`walk`).
        with_tensors: Called as ``with_tensors(outputs, tensor_names, graph)`` after the walk, while
            the output tensors are alive (the torchviz engine); must keep no reference to them.

    Returns:
        The full graph, with module calls recorded while the cell ran.

    Raises:
        NothingToDraw: The value holds no autograd graph (message names the likely cause).
            Also when ``output_names`` names a variable the cell did not define.
        Exception: Any exception of the user's cell, untouched.
    """
    __tracebackhide__ = True
    importlib.import_module("torch")  # the recorder needs torch loaded before the cell runs

    recorder, compile_note = recorder_for(shell.user_ns, cell)
    with recorder as rec:
        value = run_cell(shell, cell, magic_line)
    ns = shell.user_ns
    try:
        if output_names:
            missing = [n for n in output_names if n not in ns]
            if missing:
                raise NothingToDraw(
                    f"-o {','.join(output_names)}: the cell did not define a variable named "
                    f"{missing[0]!r}. "
                    "Give names of variables the cell assigns, for example `-o loss`."
                )
            value = {n: ns[n] for n in output_names}
            outputs, skipped = [], []
            for n in output_names:
                o, s = flatten_outputs(ns[n], n)
                outputs += o
                skipped += s
            what = "The variable(s) " + ", ".join(f"`{n}`" for n in output_names)
        else:
            outputs, skipped = flatten_outputs(value)
            what = "The cell's last expression"
        notes = [
            f"`{p or 'value'}` is {_article(t)} {t}, not a tensor: skipped." for p, t in skipped
        ]
        notes += [compile_note] if compile_note else []
        drawable = []
        for p, t in outputs:
            if _is_drawable(t):
                drawable.append((p, t))
            else:
                why = (
                    (
                        "its dtype is "
                        + str(t.dtype).replace("torch.", "")
                        + ": only floating-point and "
                        "complex tensors carry gradients"
                    )
                    if not (t.is_floating_point() or t.is_complex())
                    else "no_grad, inference_mode, detach, or no input requires grad"
                )
                notes.append(
                    f"`{p or 'output'}` has no grad_fn and does not require grad ({why}): skipped."
                )
        if not drawable:
            raise NothingToDraw(
                diagnose(
                    value
                    if not output_names
                    else (value if len(value) > 1 else next(iter(value.values()))),
                    cell,
                    ns,
                    what,
                )
            )
        if all(t.grad_fn is None for _, t in drawable):
            raise NothingToDraw(
                f"{what} is a leaf tensor that requires grad "
                f"({', '.join(p or 'output' for p, _ in drawable)}): "
                "no operation has been recorded on it yet. Draw a result computed from it, for "
                "example "
                "`y = (x * 2).sum()` then `y`."
            )
        tensor_names, module_paths = namespace_names(ns)
        calls, starts, ends = rec.resolve(module_paths)
        graph = walk(
            drawable,
            tensor_names=tensor_names,
            show_saved=show_saved,
            show_attrs=show_attrs,
            shared_params=shared_params,
            calls=calls,
            call_starts=starts,
            call_ends=ends,
            notes=notes,
        )
        if with_tensors is not None:
            with_tensors(drawable, tensor_names, graph)
        return graph
    finally:
        rec.raw = []
        value = outputs = drawable = None  # drop references to user tensors
