"""Mutation testing of the core modules with mutmut 3.

Mutation testing of the core modules with mutmut 3 (what `make mutation` runs; slow, not part of
`make test`).

mutmut 3 reads one ``[mutmut]`` section and its stats pass runs every test under ``tests_dir``, so
each core
module is run on its own: a copy of the tracked tree under ``mutants-work/<module>/`` with a
    ``setup.cfg`` naming
that module and the tests that are about it (MODULES below). Then the score per module is printed
(scripts/mutation_score.py) with the survivors (``cd mutants-work/<module> && mutmut show <name>``).

Usage: python scripts/mutation.py [MODULE_SUBSTRING ...] [--children N] [--timeout-s S]
    e.g. python scripts/mutation.py versions match      # two modules only
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import mutation_score

#: core module -> the tests that are about it (fast, no kernel, no browser)
MODULES = {
    "cudamagic/core/nvml.py": [
        "tests/core/test_nvml.py",
        "tests/core/test_nvml_reasons.py",
        "tests/core/test_nvml_stub.py",
        "tests/core/test_plausibility.py",
        "tests/watch/test_sources.py",
        "tests/watch/test_windows.py",
        "tests/watch/test_real_binding.py",
        "tests/watch/test_privacy.py",
        "tests/info/test_facts.py",
        "tests/info/test_health.py",
        "tests/info/test_windows.py",
    ],
    "cudamagic/info/versions.py": [
        "tests/info/test_versions.py",
        "tests/info/test_planted.py",
        "tests/test_properties.py",
    ],
    "cudamagic/info/findings.py": [
        "tests/info/test_findings.py",
        "tests/info/test_findings_cvd.py",
        "tests/info/test_findings_rules.py",
        "tests/info/test_windows.py",
        "tests/info/test_facts.py",
        "tests/info/test_health.py",
        "tests/info/test_planted.py",
        "tests/info/test_findings_windows_rules.py",
        "tests/info/test_findings_env.py",
    ],
    "cudamagic/watch/samples.py": [
        "tests/watch/test_samples.py",
        "tests/watch/test_trace.py",
        "tests/watch/test_sampler.py",
        "tests/watch/test_sources.py",
    ],
    "cudamagic/watch/sampler.py": ["tests/watch/test_sampler.py", "tests/watch/test_sources.py"],
    "cudamagic/mem/stats.py": [
        "tests/mem/test_stats.py",
        "tests/mem/test_shell.py",
        "tests/mem/test_fakegpu.py",
        "tests/mem/test_render.py",
        "tests/mem/test_history.py",
    ],
    "cudamagic/info/facts.py": [
        "tests/info/test_facts.py",
        "tests/info/test_facts_mapping.py",
        "tests/info/test_facts_sources.py",
        "tests/info/test_health.py",
        "tests/info/test_planted.py",
        "tests/info/test_report.py",
        "tests/info/test_windows.py",
    ],
    "cudamagic/graph/walk.py": [
        "tests/graph/test_walk.py",
        "tests/graph/test_saved.py",
        "tests/graph/test_hooks.py",
        "tests/graph/test_dot.py",
        "tests/graph/test_layouts.py",
    ],
    "cudamagic/graph/model.py": [
        "tests/graph/test_walk.py",
        "tests/graph/test_saved.py",
        "tests/graph/test_result.py",
        "tests/graph/test_views.py",
    ],
    # test_shell.py (a real shell, ~95 s a run) is left out: test_summary.py checks the same
    # summaries on real profiles against torch's key_averages() in seconds
    "cudamagic/prof/summary.py": ["tests/prof/test_summary.py", "tests/prof/test_logic.py"],
    "cudamagic/prof/result.py": ["tests/prof/test_summary.py", "tests/prof/test_logic.py"],
    # real nvcc/ld/nvlink messages captured as text (tests/cuda/test_run.py and test_link.py, which
    # call nvcc, are the same behaviours end to end: too slow per mutant, and the interrupt test
    # cannot pass under mutmut)
    "cudamagic/cuda/errors.py": [
        "tests/cuda/test_errors.py",
        "tests/cuda/test_link_messages.py",
        "tests/cuda/test_printed_errors.py",
        "tests/cuda/test_windows.py",
        "tests/explain/test_catalogue.py",
    ],
    "cudamagic/cuda/link.py": ["tests/cuda/test_link_messages.py"],
    "cudamagic/cuda/run.py": [
        "tests/cuda/test_run_program.py",
        "tests/cuda/test_printed_errors.py",
        "tests/cuda/test_errors.py",
        "tests/cuda/test_windows.py",
    ],
    "cudamagic/watch/prometheus.py": [
        "tests/watch/test_prometheus_client.py",
        "tests/watch/test_prometheus.py",
        "tests/watch/test_cluster.py",
    ],
    "cudamagic/explain/match.py": ["tests/explain/test_match.py"],
    "cudamagic/core/nvml_fields.py": [
        "tests/core/test_plausibility.py",
        "tests/core/test_nvml.py",
        "tests/core/test_nvml_reasons.py",
        "tests/core/test_gpu_check_fields.py",
        "tests/core/test_nvml_fields.py",
    ],
    # compiler messages mapped to cell lines; the nvcc tests (test_run.py) are too slow per mutant
    "cudamagic/cuda/build.py": ["tests/cuda/test_errors.py", "tests/cuda/test_link_messages.py"],
    "cudamagic/explain/catalogue.py": [
        "tests/explain/test_catalogue.py",
        "tests/explain/test_match.py",
        "tests/explain/test_cuda_families.py",
    ],
}

# : mutmut forks each mutant's tests from a process that has already run torch: a BLAS/OpenMP thread
# pool does not
# : survive fork, and the child's first multi-threaded op (an nn.Linear) waits forever; the wall
# timeout then
#: counted the mutant as killed. One thread per process avoids the pool.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}

CFG = """
[mutmut]
paths_to_mutate =
    {module}
tests_dir =
{tests}
also_copy =
    tests/
    scripts/
    examples/
    cudamagic/
pytest_add_cli_args =
    -p
    no:cacheprovider
    -m
    not browser and not kernel
"""


def tracked_copy(dest):
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)) or dest, exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def run_module(module, tests, children, timeout_s):
    name = module.replace("/", ".")[:-3]
    work = os.path.join(ROOT, "mutants-work", name)
    shutil.rmtree(work, ignore_errors=True)
    tracked_copy(work)
    with open(os.path.join(work, "setup.cfg"), "a") as fh:
        fh.write(CFG.format(module=module, tests="\n".join(f"    {t}" for t in tests)))
    mutmut = os.path.join(os.path.dirname(sys.executable), "mutmut")
    print(f"== {module} (tests: {' '.join(tests)})", flush=True)
    try:
        proc = subprocess.run(
            [mutmut, "run", "--max-children", str(children)],
            cwd=work,
            timeout=timeout_s,
            capture_output=True,
            text=True,
            env=dict(os.environ, **ONE_THREAD),
        )
        if proc.returncode:
            print(proc.stdout[-1500:], proc.stderr[-1500:])
    except subprocess.TimeoutExpired:
        print(f"   stopped after {timeout_s:g} s: the figures below count what ran")
    mutation_score.main(os.path.join(work, "mutants"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("only", nargs="*", help="substrings of the modules to run (default: all)")
    ap.add_argument("--children", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=1800.0, help="per module")
    a = ap.parse_args(argv)
    for module, tests in MODULES.items():
        if not a.only or any(s in module for s in a.only):
            run_module(module, tests, a.children, a.timeout_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
