# cudamagic: one entry point for set-up, the example notebooks, the tests and the benchmarks.
#   make demo   set up .venv, install the `dot` program if missing, execute examples/*.ipynb for real,
#               save the executed notebooks and HTML under examples/out/, print the %cudainfo report
#   make test   the same set-up, then the whole test suite (what .ci/run runs)
#   make lab    JupyterLab on examples/
#   make bench  the benchmarks (ratios measured side by side)
# Override the PyTorch requirement with e.g.  make demo TORCH="torch==2.6.0 --index-url https://download.pytorch.org/whl/cu126"

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.cudamagic-installed

.PHONY: setup demo test lab bench system-deps clean

$(STAMP): setup.cfg pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

system-deps:
	@bash scripts/system_deps.sh

setup: $(STAMP) system-deps

demo: setup
	$(PY) scripts/run_demo.py

test: setup
	$(PY) -m pytest -q

lab: setup
	$(VENV)/bin/jupyter lab --notebook-dir=examples

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) examples/out build *.egg-info
