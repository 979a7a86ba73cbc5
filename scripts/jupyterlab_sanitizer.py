"""Write tests/data/jupyterlab_sanitizer.json from the installed JupyterLab's own sanitiser.

JupyterLab's ``Sanitizer`` (apputils) is bundled into ``jlab_core.*.js``: this script cuts out its
CSS-value class and its options, evaluates them with ``node`` and keeps the allowed tags,
attributes and per-property value patterns that ``tests/sanitise.py`` models with nh3. Run it
after a JupyterLab upgrade: ``.venv/bin/python scripts/jupyterlab_sanitizer.py``.
"""

import glob
import json
import os
import subprocess
import sys

import jupyterlab

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "jupyterlab_sanitizer.json")
LONG = 2000  # patterns longer than this (backgrounds, grid templates) are left out: dropped


def main() -> int:
    static = os.path.join(os.path.dirname(jupyterlab.__file__), "static")
    (bundle,) = glob.glob(os.path.join(static, "jlab_core.*.js"))
    src = open(bundle, encoding="utf-8").read()
    start = src.index("class ef{static reg")  # the CSS-value patterns (minified name)
    stop = src.index("class ev{", start)
    patterns = src[start : src.rindex(";", start, stop) + 1]
    at = src.index("return{allowedTags", stop)
    options = src[at + len("return") : src.index(",transformTags", at)] + "}"
    # JupyterLab's defaults: no named properties (name=), command links allowed
    for flag, value in (("_allowNamedProperties", "false"), ("_allowCommandLinker", "true")):
        options = options.replace(f"this.{flag}?", f"({value})?")
    js = (
        patterns + "\nconst o=" + options + ";const st={};"
        "for(const [k,v] of Object.entries(o.allowedStyles['*'])){st[k]=v[0].source}"
        "console.log(JSON.stringify({tags:o.allowedTags,attributes:o.allowedAttributes,styles:st}))"
    )
    spec = json.loads(subprocess.run(["node", "-e", js], capture_output=True, check=True).stdout)
    spec["styles"] = {k: v for k, v in spec["styles"].items() if len(v) <= LONG}
    spec["source"] = (
        f"JupyterLab {jupyterlab.__version__} apputils Sanitizer options (allowedTags, "
        "allowedAttributes, allowedStyles['*'] value patterns, matched whole-value and "
        f"case-insensitive); patterns over {LONG} characters (background, grid-template, shadows, "
        "list-style images) left out, so those properties count as dropped"
    )
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=0, sort_keys=True)
    print(f"wrote {OUT}: {len(spec['tags'])} tags, {len(spec['styles'])} style properties")
    return 0


if __name__ == "__main__":
    sys.exit(main())
