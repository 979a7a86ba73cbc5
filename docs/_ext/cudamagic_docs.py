"""Sphinx extension: the manual's option and setting tables, and the example notebooks.

- ``{cudamagic-options} NAME`` renders every option of the magic ``NAME`` (``cudafit``) from
  :func:`cudamagic.core.manual.options`, the same rows its ``%NAME?`` page shows, followed by the
  ``CudaMagics`` settings its area declares (the traits of the settings class in its module).
- ``{cudamagic-settings}`` renders every ``CudaMagics`` setting from the traits.
- On ``config-inited`` the example notebooks are copied into ``docs/examples/`` (generated, not
  committed): the executed copies under ``examples/out/`` where ``make demo`` wrote them, else the
  committed notebooks from ``examples/`` (without outputs). Nothing is executed.

No table is written by hand, so the site cannot drift from the code.
"""

from __future__ import annotations

import inspect
import json
import os

from docutils import nodes
from docutils.parsers.rst import Directive
from traitlets import HasTraits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = (
    "quickstart",
    "autograd_tour",
    "memory_growth",
    "cudafit_tour",
    "profile_tour",
    "dataloader",
    "cuda_cells",
    "cluster_watch",
)


def magic_function(name: str):
    """The method behind ``%name`` / ``%%name`` (the one holding its parser)."""
    from cudamagic.extension import AREAS

    for cls in AREAS.values():
        for kind in ("cell", "line"):
            method = cls.magics.get(kind, {}).get(name)
            if method is not None:
                return getattr(cls, method)
    raise KeyError(f"no magic named {name!r}")


def area_settings(func) -> list:
    """``[(name, trait)]`` of the settings declared in the module of ``func``."""
    module = inspect.getmodule(func)
    out = []
    for _name, cls in vars(module).items():
        if (
            isinstance(cls, type)
            and issubclass(cls, HasTraits)
            and cls.__module__ == module.__name__
        ):
            out += sorted(cls.class_own_traits(config=True).items())
    return out


def all_settings() -> list:
    """``[(name, trait)]`` of every ``CudaMagics`` setting, by name."""
    from cudamagic.extension import CudaMagics

    return sorted(CudaMagics.class_traits(config=True).items())


def option_rows(name: str) -> list:
    """``[(form, default, meaning)]`` of the magic ``name``, as its ``%name?`` page gives them."""
    from cudamagic.core.manual import options
    from cudamagic.extension import CudaMagics

    func = magic_function(name)
    traits = CudaMagics.class_traits(config=True)
    return [(o.form, o.default, o.meaning) for o in options(func.parser, traits)]


def setting_rows(settings) -> list:
    """``[(name, default, meaning)]`` of the given ``[(name, trait)]``."""
    rows = []
    for name, trait in settings:
        values = getattr(trait, "values", None)
        meaning = trait.help + (f" One of: {', '.join(map(str, values))}." if values else "")
        rows.append((f"CudaMagics.{name}", repr(trait.default_value), meaning))
    return rows


def _table(head, rows, ids_prefix="") -> nodes.table:
    table = nodes.table(classes=["cudamagic-options"])
    group = nodes.tgroup(cols=len(head))
    table += group
    for width in (30, 20, 50)[: len(head)]:
        group += nodes.colspec(colwidth=width)
    thead = nodes.thead()
    group += thead
    row = nodes.row()
    for text in head:
        row += nodes.entry("", nodes.paragraph(text=text))
    thead += row
    tbody = nodes.tbody()
    group += tbody
    for form, default, meaning in rows:
        row = nodes.row()
        first = nodes.entry("", nodes.paragraph("", "", nodes.literal(text=form)))
        if ids_prefix:
            key = form.split()[0].split(",")[-1].strip("-[]") or "arg"
            first["ids"].append(nodes.make_id(f"{ids_prefix}-{key}"))
        row += first
        row += nodes.entry("", nodes.paragraph("", "", nodes.literal(text=default)))
        row += nodes.entry("", nodes.paragraph(text=meaning))
        tbody += row
    return table


class OptionsDirective(Directive):
    """``{cudamagic-options} NAME``: every option of a magic, then its area's settings."""

    required_arguments = 1

    def run(self):
        """The options table and the settings table."""
        name = self.arguments[0].lstrip("%")
        func = magic_function(name)
        out = [_table(("option", "default", "meaning"), option_rows(name), f"option-{name}")]
        settings = area_settings(func)
        if settings:
            para = nodes.paragraph(
                text="Settings of this magic (%config CudaMagics.<name> = value):"
            )
            out += [para, _table(("setting", "default", "meaning"), setting_rows(settings))]
        return out


class SettingsDirective(Directive):
    """``{cudamagic-settings}``: every ``CudaMagics`` setting."""

    def run(self):
        """The settings table."""
        return [_table(("setting", "default", "meaning"), setting_rows(all_settings()), "setting")]


def notebook_source(name: str) -> str:
    """The notebook the site renders: ``examples/out/NAME.ipynb`` if present, else the committed."""
    executed = os.path.join(ROOT, "examples", "out", f"{name}.ipynb")
    return executed if os.path.exists(executed) else os.path.join(ROOT, "examples", f"{name}.ipynb")


def copy_notebooks(app, config=None) -> None:
    """Copy each example notebook into ``docs/examples/`` (only when its content changed)."""
    folder = os.path.join(app.srcdir, "examples")
    os.makedirs(folder, exist_ok=True)
    for name in NOTEBOOKS:
        src = notebook_source(name)
        dst = os.path.join(folder, f"{name}.ipynb")
        with open(src, encoding="utf-8") as fh:
            nb = json.load(fh)
        # cells hold magics: highlight them as IPython, not as plain Python
        info = nb.setdefault("metadata", {}).setdefault("language_info", {"name": "python"})
        info["pygments_lexer"] = "ipython3"
        text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
        if os.path.exists(dst):
            with open(dst, encoding="utf-8") as fh:
                if fh.read() == text:
                    continue
        tmp = f"{dst}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, dst)


def setup(app):
    """Register the directives and the notebook copy."""
    app.add_directive("cudamagic-options", OptionsDirective)
    app.add_directive("cudamagic-settings", SettingsDirective)
    app.connect("config-inited", copy_notebooks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
