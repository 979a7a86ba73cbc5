"""The import graph of cudamagic has no cycle and ``core`` imports no area.

Every ``import`` statement counts, also one inside a function (a cycle hidden there fails no import
and no linter, yet ties two modules together). The graph is read from the source with ``ast``;
``from .x import y`` is an edge to ``x.y`` when that is a module, else to ``x``.
"""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parents[1] / "cudamagic"


def modules() -> dict:
    """Module name -> its file, for every module of the package."""
    found = {}
    for path in PKG.rglob("*.py"):
        parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node, name: str, is_package: bool, known: dict) -> list:
    """The package modules one import statement of module ``name`` names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    subs = [f"{module}.{alias.name}" for alias in node.names]
    return [s for s in subs if s in known] or [module]


def import_graph() -> dict:
    """Module -> the set of package modules it imports anywhere in its body."""
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = _targets(node, name, path.name == "__init__.py", known)
                edges.update(t for t in targets if t in known and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read_right():
    graph = import_graph()
    assert "cudamagic.core.na" in graph["cudamagic.core.nvml"]  # from .na import NA
    assert "cudamagic.extension" in graph["cudamagic"]  # inside load_ipython_extension
    assert "cudamagic.cuda.build" in graph["cudamagic.cuda.cell"]  # from . import build
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_core_imports_no_area():
    graph = import_graph()
    wrong = [
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name.startswith("cudamagic.core")
        for target in sorted(targets)
        if not target.startswith("cudamagic.core")
    ]
    assert wrong == []


#: The roles every area has (CONTRIBUTING.md, "Where code goes"); logic modules come besides.
ROLES = ("magic.py", "options.py", "result.py", "render.py")


def test_every_area_has_the_same_roles():
    areas = sorted(p.name for p in PKG.iterdir() if (p / "magic.py").exists() and p.name != "core")
    assert areas == ["cuda", "explain", "fit", "graph", "info", "mem", "prof", "watch"]
    for area in areas:
        missing = {r for r in ROLES if not (PKG / area / r).exists()}
        assert not missing, f"{area} has no {sorted(missing)}"
