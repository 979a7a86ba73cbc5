"""The README tells the truth: its magic examples run as written in a real shell.

Every fenced block of the README without a language that uses a magic is run in a real
``InteractiveShell`` with the extension loaded and a fake NVML (one H100) where NVML is read: a
``%%`` line and the lines below it up to the next magic line are one cell, every other line is a
cell of its own, in order, as a user pastes them. A line that cannot run here is listed in
``CANNOT_RUN_HERE`` with the reason (and skipped); every other line must run without any error.
"""

from __future__ import annotations

import os
import re
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")

#: README lines that cannot run on this machine, each with the reason (matched on the line's start).
CANNOT_RUN_HERE = {
    "%gpuwatch --text --loop": "runs until Ctrl-C (tests/watch/test_magic.py tests the loop)",
    "%%cuda --torch": "builds a PyTorch extension with ninja (minutes; tests/cuda build one)",
}
if shutil.which("nvcc") is None:
    CANNOT_RUN_HERE["%%cuda"] = CANNOT_RUN_HERE["%cuda"] = "needs nvcc (not on PATH here)"

#: Bodies for the README's cell-magic lines shown without one (matched on the line's start).
BODY = {
    "%%cudamem": "import torch\nkept = torch.zeros(256, 1024)",
    "%%torchprof": "for _ in range(3):\n    loss_fn(model(x), y).backward()",
    "%%cuda --save": "#pragma once\ninline int two() { return 2; }",
    "%%cuda": (
        "#include <cstdio>\n"
        'int main(int argc, char** argv) { std::printf("args %d\\n", argc); return 0; }'
    ),
}

# : What the README says comes before a line (matched on the whole line): a cell run first,
# expected to fail.
BEFORE = {
    # a known error: BatchNorm with a batch of one
    "%cudaexplain": "torch.nn.BatchNorm1d(3).train()(torch.randn(1, 3))",
}

#: Names the README's examples assume the user has (a model, its input and loss).
PRELUDE = (
    "import torch\ntorch.manual_seed(0)\nmodel = torch.nn.Sequential(torch.nn.Linear(4, 8), "
    "torch.nn.ReLU(), "
    "torch.nn.Linear(8, 1))\nx, y = torch.randn(16, 4), torch.randn(16, 1)\n"
    "loss_fn = torch.nn.functional.mse_loss"
)


def readme_blocks(path: str = README, langs: tuple = ("",)) -> list:
    """``[(first line number, [lines])]`` of the fenced blocks that use a magic.

    Args:
        path: a Markdown file (the README, or a page of the manual under docs/).
        langs: the fence languages that hold magic lines (the README's are plain fences, the
            manual's are ``ipython`` fences).
    """
    blocks, cur, lang, start = [], None, "", 0
    with open(path, encoding="utf-8") as fh:
        for no, line in enumerate(fh, 1):
            if line.startswith("```"):
                if cur is None:
                    cur, lang, start = [], line[3:].strip(), no + 1
                    continue
                if lang in langs and any(x.lstrip().startswith("%") for x in cur):
                    blocks.append((start, cur))
                cur = None
            elif cur is not None:
                cur.append(line.rstrip("\n"))
    return blocks


def readme_cells(path: str = README, langs: tuple = ("",)) -> list:
    """``[(line number, cell source)]`` in the file's order."""
    cells = []
    for start, lines in readme_blocks(path, langs):
        i = 0
        while i < len(lines):
            if lines[i].startswith("%%"):  # a cell magic: its body runs to the next magic line
                j = i + 1
                while j < len(lines) and not lines[j].startswith("%"):
                    j += 1
                cells.append((start + i, "\n".join(lines[i:j])))
                i = j
                continue
            if lines[i].strip():
                cells.append((start + i, lines[i]))
            i += 1
    return cells


def test_readme_has_magic_blocks():
    cells = readme_cells()
    sources = [c for _n, c in cells]
    for magic in (
        "%cudainfo",
        "%gpuwatch",
        "%%autograd_graph",
        "%%cudamem",
        "%cudamem on",
        "%cudaexplain",
    ):
        assert any(c.startswith(magic) for c in sources), magic
    assert len(cells) >= 20


def run_cells(ip, cells: list, where: str, cannot_run: dict | None = None) -> tuple:
    """Run ``[(line number, source)]`` in ``ip`` as a user pastes them: ``(ran, skipped)``.

    Each cell must run without any error; a cell in ``cannot_run`` (default
    ``CANNOT_RUN_HERE``) is skipped with its reason, one in ``BEFORE`` has its failing cell run
    first, a cell magic shown without a body gets the one in ``BODY``. The monitor is stopped at
    the end.
    """
    cannot_run = CANNOT_RUN_HERE if cannot_run is None else cannot_run
    ran, skipped = [], []
    try:
        for no, source in cells:
            why = next((r for start, r in cannot_run.items() if source.startswith(start)), None)
            if why:
                skipped.append((no, source, why))
                continue
            before = BEFORE.get(source)
            if before:
                assert ip.run_cell(before).error_in_exec is not None
            if source.startswith("%%") and "\n" not in source.strip():
                body = next((b for start, b in BODY.items() if source.startswith(start)), None)
                assert body is not None, (
                    f"{where}:{no}: {source!r} has no body here: add one to BODY"
                )
                source += "\n" + body
            result = ip.run_cell(source)
            err = result.error_before_exec or result.error_in_exec
            assert err is None, f"{where}:{no}: {source!r} failed: {err!r}"
            ran.append(no)
    finally:
        ip.run_line_magic("gpuwatch", "--stop")
    return ran, skipped


def prepare_shell(ip, fake_nvml, tmp_path, monkeypatch) -> None:
    """The user's state the examples assume: one H100 on the fake NVML, a model, the demo trace."""
    import copy

    from tests.fake_nvml import SCENARIOS

    h100 = copy.deepcopy(
        SCENARIOS["one_gpu"]
    )  # a driver new enough for this machine's nvcc (13.0): %%cuda runs
    h100.update(driver_version="580.65.06", cuda_driver_version=13000, nvml_version="13.580.65.06")
    fake_nvml(h100)
    os.makedirs(tmp_path / "examples")
    shutil.copy(os.path.join(ROOT, "examples", "trace_demo.jsonl"), tmp_path / "examples")
    monkeypatch.chdir(tmp_path)  # --log files land here; --replay examples/... finds the demo trace
    assert not ip.run_cell(PRELUDE).error_in_exec
    ip.run_line_magic("config", f"CudaMagics.cuda_cache_dir = {str(tmp_path / 'cuda-cache')!r}")


def test_readme_magic_examples_run_as_written(ip, fake_nvml, tmp_path, monkeypatch, capsys):
    prepare_shell(ip, fake_nvml, tmp_path, monkeypatch)
    ran, skipped = run_cells(ip, readme_cells(), "README.md")
    out = capsys.readouterr().out
    assert "UsageError" not in out
    assert len(ran) >= 17 and {s for _n, s, _w in skipped} <= {s for _n, s in readme_cells()}
    assert os.path.getsize(tmp_path / "run1.jsonl") > 0  # the --log line really recorded


def site_cells() -> list:
    """``[(page, line number, cell source)]`` of the manual's ``ipython`` blocks (docs/**/*.md)."""
    import glob

    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)):
        rel = os.path.relpath(path, ROOT)
        if not rel.startswith(os.path.join("docs", "_build")):
            out += [(rel, no, src) for no, src in readme_cells(path, ("ipython",))]
    return out


def test_every_cannot_run_entry_matches_a_readme_line():
    # a line of the README or of the manual (tests/test_docs.py runs the manual's)
    sources = [c for _n, c in readme_cells()] + [c for _p, _n, c in site_cells()]
    for start in list(CANNOT_RUN_HERE) + list(BEFORE) + list(BODY):
        assert any(s.startswith(start) for s in sources), start


def test_autograd_graph_usage_line_is_a_cell_magic(ip, capsys):
    ip.run_line_magic("pinfo", "%%autograd_graph")
    out = capsys.readouterr().out
    assert re.search(r"^\s*%%autograd_graph \[-o", out, re.M)


def test_quiet_semicolon(ip, fake_nvml, capsys):
    fake_nvml("one_gpu")
    assert ip.run_cell("%cudainfo ;").error_in_exec is None
    assert capsys.readouterr().out == "" and ip.user_ns["_cudainfo"].verdict
