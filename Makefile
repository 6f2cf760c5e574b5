# The two commands (see README):  make lab   (or: make demo)   and   make test
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
LAB_PORT ?= 8888
PYTEST_ARGS ?=

.PHONY: setup lab demo check test fuzz browser bench clean

# A virtual environment with torch pinned to the CPU wheel this machine installs, and the package
# (its labextension is built by hatch-jupyter-builder during the install) with test extras.
$(VENV)/.installed: pyproject.toml labextension/package.json
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_PIN)"
	$(PY) -m pip install -q -e ".[test,kubernetes]" "$(TORCH_PIN)"
	touch $@

setup: $(VENV)/.installed

# JupyterLab with the extension, opened on the quickstart notebook.
lab: setup
	$(VENV)/bin/jupyter lab notebooks/01-quickstart.ipynb --allow-root --no-browser --ip=127.0.0.1 --port=$(LAB_PORT)

# Headless: execute the quickstart notebook in a real kernel and print what it did.
demo: setup
	$(VENV)/bin/gpugeek-jupyter demo notebooks/01-quickstart.ipynb

# Debian's chromium for the side-panel browser tests (never a downloaded browser).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# Static checks first (seconds), then the tests: lint and types of both halves, the layers contract.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check gpugeek_jupyter tests bench
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	cd labextension && ../$(VENV)/bin/jlpm typecheck && ../$(VENV)/bin/jlpm lint

test: setup browser check
	cd labextension && ../$(VENV)/bin/jlpm test
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The property tests with fresh random examples (make test runs them derandomized, the same every time).
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider tests/faults/test_bad_magic_input.py tests/server/test_bad_input.py tests/cost/test_ledger.py

bench: setup
	bench/run

clean:
	rm -rf $(VENV) labextension/node_modules labextension/lib gpugeek_jupyter/labextension
