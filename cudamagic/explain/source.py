"""Reading the user's source text with :mod:`ast`.

Which tensors ``.backward()`` is called on, which names a loop carries from one iteration into the
next, in-place operations, the calls and arguments on one line, the cell of the input history that
assigned a name.

Text only: nothing here looks at live objects. Source that does not parse (an IPython magic
line, a fragment of a multi-line statement) is repaired where possible, else skipped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence


def _parse_tree(src: str) -> ast.Module:
    """The module of ``src``; an empty one when it does not parse, even without magic lines."""
    try:
        return ast.parse(src)
    except SyntaxError:
        # IPython magics in the cell: blank out lines that are not Python
        lines = [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in src.splitlines()]
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            return ast.Module(body=[], type_ignores=[])


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


def _root_name_of(expr: str):
    try:
        return _root_name(ast.parse(expr, mode="eval").body)
    except SyntaxError:
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
    calls = [
        n
        for n in ast.walk(_parse_tree(src))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "backward"
    ]
    out = [(ast.unparse(n.func.value), _root_name(n.func.value)) for n in calls]
    # torch.autograd.backward(x)
    out += [
        (ast.unparse(n.args[0]), _root_name(n.args[0]))
        for n in calls
        if _root_name(n.func) == "torch" and n.args
    ]
    return [item for item in out if item[1] not in (None, "torch")]


def carried_names(src: str) -> list:
    """Names assigned inside a ``for``/``while`` loop from an expression that reads them.

    ``h = rnn(x, h)``, ``out, h = cell(x, h)`` and ``total += loss`` all carry a value
    (and its autograd graph) from one iteration into the next.
    """
    out = []
    for loop in ast.walk(_parse_tree(src)):
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
    out = []
    for node in ast.walk(_parse_tree(src)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if (
                attr.endswith("_")
                and not attr.endswith("__")
                and not attr.startswith("_")
                and attr != "backward_"
            ):
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


def _method_calls(src, method):
    return [
        (ast.unparse(n.func.value), n)
        for n in ast.walk(_parse_tree(src))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == method
    ]


def _last_cell_assigning(history: Sequence[str], name: str):
    """1-based ``In`` index of the last cell before the failing one that assigns ``name``."""
    cells = list(history[:-1])
    for index in range(len(cells) - 1, 0, -1):  # In[0] is ''
        for stmt in ast.walk(_parse_tree(cells[index] or "")):
            if name in _assigned_names(stmt):
                return index
    return None


def _assigns_in(src: str, name: str) -> bool:
    return any(name in _assigned_names(s) for s in ast.walk(_parse_tree(src)))


_IDENT = re.compile(r"(?<![\w.])([A-Za-z_]\w*)")


def _parse_line(line: str):
    """An AST for one source line that may be a fragment, or None.

    A fragment is ``for x in y:``, ``with ...:`` or a line of a multi-line call; None when no
    repair makes it parse.
    """
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
        nodes = sorted(
            (n for n in ast.walk(tree) if isinstance(n, ast.Name)),
            key=lambda n: (n.lineno, n.col_offset),
        )
        names = [n.id for n in nodes]
    else:
        names = _IDENT.findall(line)
    out = []
    for name in names:
        if name not in out:
            out.append(name)
    return out


def call_arguments(line: str) -> list:
    """Calls on one source line, outermost first.

    Returns:
        list of ``(callee source, [argument source, ...], {keyword: source})``.
    """
    tree = _parse_line(line)
    if tree is None:
        return []
    calls = sorted(
        (n for n in ast.walk(tree) if isinstance(n, ast.Call)),
        key=lambda n: (n.lineno, n.col_offset, -(n.end_col_offset or 0)),
    )
    return [
        (
            ast.unparse(c.func),
            [ast.unparse(a) for a in c.args],
            {k.arg: ast.unparse(k.value) for k in c.keywords if k.arg},
        )
        for c in calls
    ]


def step_calls(src: str) -> list:
    """``optimizer.step()`` calls as ``(receiver source, 1-based line)``, in source order."""
    return sorted(
        ((recv, node.lineno) for recv, node in _method_calls(src, "step")), key=lambda c: c[1]
    )


def assignments_from_call(src: str, callee: str) -> list:
    """Names assigned from a call of ``callee``.

    ``out = netD(fake)`` gives ``[("out", "netD(fake)", line)]``.
    """
    calls = [
        stmt
        for stmt in ast.walk(_parse_tree(src))
        if isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Name)
        and stmt.value.func.id == callee
    ]
    out = [(n, ast.unparse(s.value), s.lineno) for s in calls for n in sorted(_assigned_names(s))]
    return sorted(out, key=lambda a: a[2])


def apply_calls(src: str, function: str) -> list:
    """Argument sources of each ``function.apply(...)`` call in ``src`` (``[["x", "s"], ...]``)."""
    return [
        [ast.unparse(a) for a in node.args]
        for recv, node in _method_calls(src, "apply")
        if recv == function
    ]


def line_of(src: str, text: str):
    """1-based line of the first line of ``src`` containing ``text`` (stripped), or None."""
    return next((i for i, line in enumerate(src.splitlines(), 1) if text and text in line), None)


def grads_without_create_graph(src: str) -> list:
    """Names assigned from ``torch.autograd.grad(...)`` without ``create_graph=True``.

    Their values carry no graph, so a second backward through them fails:
    ``g, = torch.autograd.grad(y, x)`` gives ``["g"]``.
    """
    out = []
    for stmt in ast.walk(_parse_tree(src)):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            func = ast.unparse(stmt.value.func)
            if func in ("torch.autograd.grad", "autograd.grad", "grad") or func.endswith(
                ".autograd.grad"
            ):
                create = [k for k in stmt.value.keywords if k.arg == "create_graph"]
                if not create or (
                    isinstance(create[0].value, ast.Constant) and not create[0].value.value
                ):
                    out.extend(sorted(_assigned_names(stmt)))
    return out
