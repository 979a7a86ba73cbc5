# cudamagic: one entry point for set-up, the example notebooks, the tests and the benchmarks.
#   make demo   set up .venv, install the system programs the demo needs if missing (`scripts/system_deps.sh
#               demo`: dot, prometheus; no browser), execute examples/*.ipynb for real, save the executed
#               notebooks and HTML under examples/out/, print the %cudainfo report
#   make test   the same set-up plus the test programs (`scripts/system_deps.sh test`: also gcc, openssl and
#               Chromium), then the lint (as make lint), then the whole test suite (what .ci/run runs)
#   make lint   ruff: format check and lint (pyproject.toml)
#   make docs   the manual site (docs/, Sphinx + MyST-NB) into docs/_build/html, offline, warnings as errors,
#               then every internal link and anchor checked (docs/check_links.py)
#   make lab    JupyterLab on examples/ (as root too)
#   make bench  the benchmarks, with the peers of the `bench` extra beside cudamagic on the same work
#   make mutation  mutation testing of the core modules (mutmut; slow, not part of make test): score per module
#   make docs-images  the README's pictures (docs/images/*.png) from a real JupyterLab in Chromium
#   make dist   the sdist and the wheel under dist/ (python -m build), checked by twine
#   make clean  remove .venv and the generated outputs
# PyTorch: TORCH is part of what decides a reinstall, so switching builds is one command, e.g.
#   make demo TORCH="torch==2.6.0 --index-url https://download.pytorch.org/whl/cu126"
#   make demo                       # back to the default pin, torch==2.13.0

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cudamagic-installed
TORCH_SPEC := $(VENV)/.cudamagic-torch
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: setup demo test lint docs lab bench mutation system-deps clean FORCE

# The requested torch is written to a file that changes only when TORCH changes, so a new TORCH reinstalls.
# pip counts any local build of a version as that version (torch==2.13.0 is met by 2.13.0+cpu and by
# 2.13.0+cu128), so when TORCH changes the torch installed before is uninstalled first; only then, so a changed
# setup.cfg alone reinstalls the package and leaves torch as it is (a first set-up has nothing to uninstall).
$(TORCH_SPEC): FORCE
	@bash scripts/make_venv.sh "$(PYTHON)" "$(VENV)"
	@if ! echo '$(TORCH)' | cmp -s - $@; then \
	  if [ -f $@ ] || [ -f $(STAMP) ]; then echo "TORCH changed: uninstalling the torch installed before"; \
	    $(PY) -m pip uninstall --yes --quiet torch || exit 1; fi; \
	  echo '$(TORCH)' > $@; fi

$(STAMP): setup.cfg pyproject.toml $(TORCH_SPEC)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

# demo, lab, bench: dot and prometheus; test and docs-images also need gcc, openssl and Chromium
system-deps:
	@bash scripts/system_deps.sh demo

system-deps-test:
	@bash scripts/system_deps.sh test

setup: system-deps $(STAMP)

demo: setup
	$(PY) scripts/run_demo.py

# the lint first: a lint error fails the run before any test starts. The suite runs on
# TEST_WORKERS processes (pytest-xdist), each test file whole in one of them; TEST_WORKERS=0 runs
# it in this process, one test after the other.
TEST_WORKERS ?= 2
test: system-deps-test lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# ruff: the format check and the lint rules configured in pyproject.toml
lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# the docs extra is in the test extra too (tests/test_docs.py runs this build in make test)
docs: setup
	$(PY) docs/build.py docs/_build

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=examples $(LAB_ROOT)

bench: setup
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) benchmarks/run_all.py

# mutmut 3, one module at a time (scripts/mutation.py); MUTATE="versions match" runs those modules only.
mutation: setup
	$(PY) -m pip install --quiet "mutmut>=3.2"
	$(PY) scripts/mutation.py $(MUTATE)

.PHONY: system-deps-test docs-images dist

# the pictures of the README, cropped outputs of one notebook run in JupyterLab's light theme
docs-images: system-deps-test setup
	$(PY) scripts/docs_images.py

# sdist and wheel into dist/ (emptied first); the sdist also carries docs/images, so the long description's
# relative picture links resolve in it
dist: setup
	$(PY) -m pip install --quiet "build>=1.2" "twine>=5"
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

clean:
	rm -rf $(VENV) examples/out build *.egg-info mutants mutants-work docs/_build docs/examples
