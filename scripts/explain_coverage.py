"""Coverage of the error explainer, as figures.

Per family, how many messages a test raises and how many of those get their family's box.

Runs what the tests run, in one real IPython ``InteractiveShell`` with cudamagic loaded:
- CUDA families: every message of :func:`cudamagic.explain.cudaerrors.messages` (each CUDA runtime
    error code
  and each cuBLAS / cuSPARSE / cuDNN / cuFFT / NCCL status, PyTorch's wording and exception type) is
  raised;
- autograd engine: every cell of ``tests/explain/autograd_cases.py`` makes the engine raise for real
    on the CPU;
  a message pattern of the family's entries counts as covered when one of those real errors matches
  it.

Usage (from the project root)::

    python scripts/explain_coverage.py
"""

from __future__ import annotations

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def measure():
    """``(counts, uncovered)``.

    Counts ``{family: [messages in the data, raised by a test, matched to the family]}``, uncovered
    the autograd-engine patterns no real error matched.
    """
    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic import extension
    from cudamagic.explain import cudaerrors
    from cudamagic.explain.catalogue import CATALOGUE
    from tests.explain.autograd_cases import CASES

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "cudamagic")
    magics = extension.current().magics["explain"]
    kinds = {
        "AcceleratorError": "torch.AcceleratorError",
        "RuntimeError": "RuntimeError",
        "DistBackendError": "torch.distributed.DistBackendError",
    }
    shell.run_cell("import torch, torch.nn as nn, torch.distributed")
    counts = {}
    for family, kind, message, _ in cudaerrors.messages():
        shell.run_cell(f"raise {kinds[kind]}({message!r})")
        expl = magics.last_explanation
        row = counts.setdefault(family, [0, 0, 0])
        row[0] += 1
        row[1] += 1
        row[2] += int(expl is not None and expl.entry.family == family)
    # autograd engine: message patterns of the family's entries, and which real errors match them
    patterns = [(e.id, p) for e in CATALOGUE if e.family == "autograd-engine" for p in e.patterns]
    raised, matched = set(), set()
    for entry_id, code in CASES:
        shell.run_cell("import torch, torch.nn as nn")
        result = shell.run_cell(code)
        exc = result.error_in_exec
        if exc is None:
            continue
        hit = [(i, p) for i, p in patterns if re.search(p, str(exc), re.S)]
        raised.update(hit[:1])  # the pattern that decides the box: the first matching one
        expl = magics.last_explanation
        if hit and expl is not None and expl.entry.id == hit[0][0] == entry_id:
            matched.add(hit[0])
    counts["autograd-engine"] = [len(patterns), len(raised), len(matched)]
    shell.run_line_magic("unload_ext", "cudamagic")
    return counts, [f"{i}: {p[:70]}" for i, p in patterns if (i, p) not in matched]


def main():
    import contextlib
    import io

    from cudamagic.core.fmt import text_table

    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):  # tracebacks, boxes
        counts, uncovered = measure()
    rows = [
        (family, str(n), str(r), str(m), f"{100 * m / n:.0f}%")
        for family, (n, r, m) in counts.items()
    ]
    total = [sum(v[i] for v in counts.values()) for i in range(3)]
    rows.append(("all", *map(str, total), f"{100 * total[2] / total[0]:.0f}%"))
    print(
        text_table(
            ("family", "messages", "raised by a test", "matched to the family", "covered"), rows
        )
    )
    print(
        "CUDA families: one message per runtime error code / library status. autograd-engine: "
        "message patterns "
        "of the family's catalogue entries; a pattern counts when a real CPU error matches it."
    )
    print("autograd-engine patterns no test raises:")
    for line in uncovered:
        print("  " + line)


if __name__ == "__main__":
    main()
