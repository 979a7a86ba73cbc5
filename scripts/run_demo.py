"""Execute the example notebooks in a real Jupyter kernel (the main job behind `make demo`).

For each notebook in examples/ (quickstart first): execute it top to bottom with nbclient, in
examples/ as the working directory, save the executed copy and an HTML export under examples/out/,
and finally print the text form of the %cudainfo cell of the quickstart. Exit status 1 if any
notebook fails.

Usage: python scripts/run_demo.py [NOTEBOOK ...]
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
OUT = os.path.join(EXAMPLES, "out")


@contextlib.contextmanager
def repo_on_pythonpath():
    """Put the repository first on PYTHONPATH for kernels started inside the block.

    Put the repository first on PYTHONPATH for kernels started inside the block (restored after), so
    they import this checkout's cudamagic even without `pip install -e .`.
    """
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def execute_nb(nb, cwd: str = EXAMPLES, timeout_s: int = 600, **client_kwargs):
    """Execute notebook node ``nb`` in place in a real ``python3`` kernel.

    The kernel's working directory is ``cwd``.

    ``client_kwargs`` go to ``nbclient.NotebookClient`` (e.g. ``allow_errors=True``,
    ``store_widget_state=True``). Returns ``nb``; raises CellExecutionError on an unexpected cell
    error.
    """
    client = NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        resources={"metadata": {"path": cwd}},
        **client_kwargs,
    )
    with repo_on_pythonpath():
        client.execute()
    return nb


def execute(path: str, timeout_s: int = 600):
    """Read and execute the notebook at ``path`` (cwd.

    Examples/, widget state stored); returns it.
    """
    nb = nbformat.read(path, as_version=4)
    return execute_nb(nb, timeout_s=timeout_s, store_widget_state=True)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def static_copy(nb):
    """A copy of ``nb`` for the HTML export.

    Live widget views dropped where the output also carries ``text/html`` (a widget view needs
    JavaScript from a CDN, which an offline reader does not have; the HTML snapshot shows the last
    state).
    """
    import copy

    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
    nb.metadata.pop("widgets", None)
    return nb


def cudainfo_text(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.strip().startswith("%cudainfo"):
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "text/plain" in data:
                    return data["text/plain"]
    return "(no %cudainfo output found)"


def main(argv):
    from nbconvert import HTMLExporter

    os.makedirs(OUT, exist_ok=True)
    names = argv or ["quickstart.ipynb"] + sorted(
        n for n in os.listdir(EXAMPLES) if n.endswith(".ipynb") and n != "quickstart.ipynb"
    )
    failed = []
    quick = None
    for name in names:
        src = os.path.join(EXAMPLES, name)
        t0 = time.perf_counter()
        try:
            nb = execute(src)
        except CellExecutionError as exc:
            print(f"FAILED {name}: {str(exc)[:2000]}", file=sys.stderr)
            failed.append(name)
            continue
        base = os.path.join(OUT, name[:-6])
        nbformat.write(nb, base + ".ipynb")
        body, _ = HTMLExporter().from_notebook_node(static_copy(nb))
        with open(base + ".html", "w", encoding="utf-8") as fh:
            fh.write(body)
        print(
            f"executed {name} in {time.perf_counter() - t0:.1f} s -> "
            f"{os.path.relpath(base, ROOT)}.ipynb/.html"
        )
        if name == "quickstart.ipynb":
            quick = nb
    if quick is not None:
        print("\n" + cudainfo_text(quick))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
