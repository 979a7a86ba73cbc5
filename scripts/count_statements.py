"""Count the Python statements of a package: ``ast.stmt`` nodes, docstrings not counted.

Usage: ``python scripts/count_statements.py [PACKAGE_DIR]`` (default ``cudamagic``). Prints the
total and the count per area (top-level folder). A docstring is the first statement of a module,
class or function when it is a string constant.
"""

from __future__ import annotations

import ast
import collections
import pathlib
import sys


def count(source: str) -> int:
    """Statements in one module's source, docstrings excluded."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.add(id(first))
    return sum(
        1 for node in ast.walk(tree) if isinstance(node, ast.stmt) and id(node) not in docstrings
    )


def main(root: str = "cudamagic") -> None:
    """Print the total and per-area statement counts under ``root``."""
    base = pathlib.Path(root)
    per_area: collections.Counter[str] = collections.Counter()
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(base)
        area = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        per_area[area] += count(path.read_text(encoding="utf-8"))
    for area, n in sorted(per_area.items()):
        print(f"{area:<10} {n:>6}")
    print(f"{'total':<10} {sum(per_area.values()):>6}")


if __name__ == "__main__":
    main(*sys.argv[1:])
