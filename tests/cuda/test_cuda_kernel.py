"""%%cuda in a real Jupyter kernel (nbclient).

%%cuda in a real Jupyter kernel (nbclient): examples/cuda_cells.ipynb top to bottom, and Run All
stopping at a cell that does not compile.
"""

from __future__ import annotations

import os

import pytest
import run_demo  # scripts/run_demo.py (on sys.path via conftest): the one notebook runner

from .conftest import needs_nvcc, path_without_nvcc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.kernel]


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@needs_nvcc
def test_example_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a cold cache: every cell compiles
    nb = run_demo.execute(os.path.join(run_demo.EXAMPLES, "cuda_cells.ipynb"), timeout_s=300)
    code = [c for c in nb.cells if c.cell_type == "code"]
    stream = next(c for c in code if "step %d of %d" in c.source)
    assert [ln for ln in _text(stream).splitlines() if ln.strip()] == [
        "step 1 of 3",
        "step 2 of 3",
        "step 3 of 3",
    ]
    progress = [o for o in stream.outputs if o.output_type == "display_data"]
    # progress shows only for builds over 1 s (an idle machine compiles this cell faster): when
    # shown, it ends with the final state (the deterministic test, with a slow nvcc wrapper, is in
    # test_progress.py)
    assert not progress or "nvcc build done after" in progress[-1].data["text/plain"]
    failing = next(c for c in code if "missing_value" in c.source)
    errors = [o for o in failing.outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "CudaCompileError"
    assert 'cell line 4: error: identifier "missing_value" is undefined' in errors[0].evalue
    vec = next(c for c in code if "vec_add<<<" in c.source)
    torch_cell = next(c for c in code if "ADD_ONE" in c.source)
    if "none (no GPU or driver)" in _text(code[0]):
        assert _text(vec).startswith("skipped: this cell needs an NVIDIA GPU")
        assert _text(torch_cell).startswith("skipped: needs a GPU")
    else:  # pragma: no cover - GPU machines
        assert "0 of 8 elements wrong" in _text(vec)


@needs_nvcc
def test_run_all_stops_at_a_cell_that_does_not_compile(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cells = [
        "%load_ext cudamagic",
        "%%cuda\nint main() {\n  return undefined_name;\n}",
        "after = 1",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    with pytest.raises(
        CellExecutionError, match=r"cell line 3: error: identifier \"undefined_name\""
    ):
        run_demo.execute_nb(nb, cwd=ROOT, timeout_s=120)
    error = nb.cells[1].outputs[-1]
    assert error.output_type == "error" and error.ename == "CudaCompileError"
    assert 'cell line 3: error: identifier "undefined_name" is undefined' in error.evalue
    shown = "\n".join(error.traceback)  # what the notebook shows: the message, no cudamagic frame
    assert 'cell line 3: error: identifier "undefined_name"' in shown
    assert "cudamagic/" not in shown and "run_cell_magic" not in shown
    assert nb.cells[2].execution_count is None and not nb.cells[2].outputs  # Run All stopped


def test_example_notebook_without_nvcc(tmp_path, monkeypatch):
    # `make demo` on a machine with no CUDA toolkit: every %%cuda cell says why and is skipped,
    # nothing fails
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", path_without_nvcc(tmp_path))
    nb = run_demo.execute(os.path.join(run_demo.EXAMPLES, "cuda_cells.ipynb"), timeout_s=300)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "nvcc: none found" in _text(code[0])
    runs = [
        c
        for c in code
        if c.source.startswith("%%cuda") and "--save" not in c.source.splitlines()[0]
    ]
    assert len(runs) == 3
    for cell in runs:
        assert "--skip-without nvcc" in cell.source.splitlines()[0]
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
        shown = [o.data["text/plain"] for o in cell.outputs if o.output_type == "execute_result"]
        assert len(shown) == 1 and shown[0].startswith(
            "skipped: this cell needs nvcc (the CUDA compiler)"
        )
    torch_cell = next(c for c in code if "ADD_ONE" in c.source)
    assert _text(torch_cell).startswith("skipped: needs a GPU")


ENDLESS = r"""%%cuda
#include <cstdio>
#include <unistd.h>
int main() { for (;;) { printf("tick\n"); fflush(stdout); sleep(1); } }
"""


@needs_nvcc
def test_a_program_ends_with_its_kernel_even_after_kill_9(tmp_path):
    """Do no harm: a %%cuda program still running when its kernel is killed -9 is killed too."""
    psutil = pytest.importorskip("psutil")
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=ROOT, env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path)))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        kc.execute_interactive("%load_ext cudamagic", timeout=120)
        kc.execute(ENDLESS)
        while True:  # the first line printed: the program runs
            msg = kc.get_iopub_msg(timeout=300)
            if msg["msg_type"] == "error":
                pytest.fail(f"%%cuda failed: {msg['content']['evalue']}")
            if msg["msg_type"] == "stream" and "tick" in msg["content"]["text"]:
                break
        kernel = psutil.Process(km.provisioner.pid)
        programs = [p for p in kernel.children(recursive=True) if "python" not in p.name()]
        assert programs, "the running program is not a child of the kernel"
        os.kill(kernel.pid, 9)  # kill -9: no exit hook runs
        gone, alive = psutil.wait_procs(programs, timeout=60)
        assert not alive, f"{[p.cmdline() for p in alive]} outlived the kernel"
    finally:
        kc.stop_channels()
        if km.has_kernel:
            km.shutdown_kernel(now=True)
