"""Print mutmut's score per mutated module (what `make mutation` prints after `mutmut run`).

Reads mutmut 3's ``mutants/<module>.py.meta`` files (JSON: ``exit_code_by_key`` per mutant). Exit
codes as in
mutmut: 1 (or any non-zero but 33/34/36/152/-24/24) killed, 0 survived, 33 no tests, 36/24/-24/152
    timeout,
None not run. Score = killed / (killed + survived + no tests); timeouts count as killed, as mutmut
does; mutants listed with their reason in scripts/mutation_equivalent.txt are counted apart (column
"equiv.") and left out of the score. Survivors are split into "wording" (the mutant differs from the
original only inside string literals: a message's text, "XX"-wrapped or upper-cased) and "logic"
    (anything else: a condition, a number, a code, a missing argument),
and the logic ones are listed first, since they are where a real bug would hide.
Usage: python scripts/mutation_score.py [mutants_dir]
"""

from __future__ import annotations

import ast
import copy
import glob
import json
import os
import sys


def classify(code):
    if code is None:
        return "not run"
    if code == 0:
        return "survived"
    if code == 33:
        return "no tests"
    if code == 34:
        return "skipped"
    if code in (24, -24, 36, 152):
        return "timeout"
    return "killed"


def equivalents():
    """Names listed in scripts/mutation_equivalent.txt (each with its reason there)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mutation_equivalent.txt")
    with open(path) as fh:
        return {ln.split("#")[0].strip() for ln in fh if ln.strip() and not ln.startswith("#")}


def _norm(func) -> str:
    """A function's AST with its name and every string constant blanked."""
    node = copy.deepcopy(func)
    node.name = ""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            sub.value = ""
    return ast.dump(node)


def wording_only(source_path, keys) -> set:
    """The mutants among ``keys`` that change only string text.

    Their function differs from mutmut's ``..._mutmut_orig`` only in string constants.
    """
    try:
        with open(source_path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError):
        return set()
    funcs = {
        n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    out = set()
    for key in keys:
        name = key.rsplit(".", 1)[-1]
        orig = funcs.get(name.rsplit("__mutmut_", 1)[0] + "__mutmut_orig")
        mutant = funcs.get(name)
        if orig is not None and mutant is not None and _norm(orig) == _norm(mutant):
            out.add(key)
    return out


def main(root="mutants"):
    equivalent = equivalents()
    rows, total = (
        [],
        {
            "killed": 0,
            "timeout": 0,
            "survived": 0,
            "no tests": 0,
            "not run": 0,
            "skipped": 0,
            "equivalent": 0,
        },
    )
    for meta in sorted(glob.glob(os.path.join(root, "**", "*.meta"), recursive=True)):
        with open(meta) as fh:
            codes = json.load(fh).get("exit_code_by_key", {})
        counts = dict.fromkeys(total, 0)
        survivors = []
        for key, code in codes.items():
            kind = classify(code)
            if kind in ("survived", "no tests") and key in equivalent:
                kind = "equivalent"
            counts[kind] += 1
            if kind in ("survived", "no tests"):
                survivors.append(key)
        for k in total:
            total[k] += counts[k]
        wording = wording_only(meta[:-5], survivors)
        survivors = sorted(survivors, key=lambda k: (k in wording, k))
        counts["wording"] = len(wording)
        rows.append((os.path.relpath(meta, root)[:-5], counts, survivors, wording))
    if not rows:
        print("no mutmut results under", root, "- run `mutmut run` first")
        return 1
    print(
        f"{'module':40} {'killed':>7} {'survived':>9} {'no tests':>9} {'equiv.':>7} {'not run':>8} "
        " score (goal >= 90 %)"
        "   (killed includes time-outs, shown apart)"
    )
    total["wording"] = sum(c["wording"] for _, c, _, _ in rows)
    for name, c, survivors, wording in rows + [("TOTAL", total, [], set())]:
        judged = c["killed"] + c["timeout"] + c["survived"] + c["no tests"]
        score = f"{(c['killed'] + c['timeout']) / judged:6.1%}" if judged else "   n/a"
        print(
            f"{name:40} {c['killed'] + c['timeout']:7} {c['survived']:9} {c['no tests']:9} "
            f"{c['equivalent']:7} "
            f"{c['not run']:8}  {score}   ({c['timeout']} time-outs)"
        )
        left = c["survived"] + c["no tests"]
        if left:
            print(
                f"    of the {left} survivors: {left - c['wording']} logic, {c['wording']} wording "
                "only"
            )
        for key in survivors[:40]:
            kind = "wording" if key in wording else "logic"
            print(f"    survivor ({kind}): {key}   (mutmut show {key})")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
