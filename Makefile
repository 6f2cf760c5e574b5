# The two commands (see README):  make lab   (or: make demo)   and   make test
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_PIN ?= torch==2.13.0
LAB_PORT ?= 8888
PYTEST_ARGS ?=

.PHONY: setup lab demo check docs labextension-build dist wheel-smoke test fuzz browser slurm services mlflow-server bench screenshots clean

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

# Debian's Slurm and munge for the slurm backend's tests (tests/slurm starts a one-host Slurm from them).
slurm:
	@command -v slurmctld >/dev/null && command -v munged >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; }

# Debian's PostgreSQL (tests/support/postgres.py starts a server of its own from it, for the team
# ledger) and npm (the JupyterHub test installs configurable-http-proxy with it).
services:
	@{ ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && command -v npm >/dev/null; } || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql npm >/dev/null; }

# MLflow's tracking server in a venv of its own (the package needs only the client, mlflow-skinny):
# tests/jobs/test_mlflow_tracking.py starts it (GPUGEEK_TEST_MLFLOW_SERVER) and stops it by pid.
MLFLOW_VENV := .mlflow-venv
$(MLFLOW_VENV)/bin/mlflow:
	python3 -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/pip install -q "mlflow==3.17.*"

mlflow-server: $(MLFLOW_VENV)/bin/mlflow

# Static checks first (seconds), then the tests: lint and types of both halves, the layers contract.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check gpugeek_jupyter tests bench docs/griffe_docstrings.py
	$(PY) -m mypy
	$(VENV)/bin/lint-imports
	PYTHONPATH=bench $(PY) bench/readme_tables.py --check
	cd labextension && ../$(VENV)/bin/jlpm typecheck && ../$(VENV)/bin/jlpm lint

# The API reference from the docstrings, with the docs/ pages, into site/ (warnings are errors).
docs: setup
	$(VENV)/bin/mkdocs build --strict

# The labextension the wheel ships, rebuilt when its sources are newer than the last build
# (pip install builds it only when it is missing, so an edited panel would ship stale otherwise).
LABEXT_BUILT := gpugeek_jupyter/labextension/package.json
labextension-build: setup
	@if [ ! -e $(LABEXT_BUILT) ] || [ -n "$$(find labextension/src labextension/style labextension/schema labextension/package.json labextension/tsconfig.json -newer $(LABEXT_BUILT) -print -quit)" ]; then \
		echo "building the labextension (its sources changed)"; \
		cd labextension && export PATH="$(abspath $(VENV))/bin:$$PATH" && jlpm install && jlpm build:prod && touch ../$(LABEXT_BUILT) \
			&& rm -f ../gpugeek_jupyter/labextension/install.json; \
	fi
# (the rebuild copies install.json into the built folder; the wheel takes it from labextension/,
# and a second copy makes the next editable install fail: "A second file is being added")

# The product: sdist and wheel in dist/, metadata checked, and the wheel holding the built
# labextension and the server config (tests/packaging/dist_contents.py says what is missing).
dist: setup labextension-build
	rm -rf dist
	@# never a build output: an editable install writes it there through the symlink that
	@# `jupyter labextension develop` makes, and the wheel would then hold labextension/install.json twice
	rm -f gpugeek_jupyter/labextension/install.json
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*
	$(PY) tests/packaging/dist_contents.py dist

# The wheel alone in a clean venv: JupyterLab lists both extensions enabled, a real kernel runs
# %gpugeek_launch, a %%gpugeek_run cell on 2 ranks and %gpugeek_stop (about 2 minutes; make test runs it).
wheel-smoke: dist
	GPUGEEK_WHEEL="$$(ls dist/gpugeek_jupyter-*.whl)" TORCH_PIN="$(TORCH_PIN)" $(PY) -m pytest -q -p no:cacheprovider tests/packaging

test: setup browser slurm services mlflow-server check docs dist
	cd labextension && ../$(VENV)/bin/jlpm test
	GPUGEEK_WHEEL="$$(ls dist/gpugeek_jupyter-*.whl)" TORCH_PIN="$(TORCH_PIN)" \
		GPUGEEK_TEST_MLFLOW_SERVER="$(abspath $(MLFLOW_VENV))/bin/mlflow" $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The property tests with fresh random examples (make test runs them derandomized, the same every time).
fuzz: setup
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -p no:cacheprovider tests/faults/test_bad_magic_input.py tests/server/test_bad_input.py tests/cost/test_ledger.py

# Every benchmark, its output kept in bench/results/; exits 1 when a ratio is past its tolerance in
# bench/expected.toml. Then bench/readme_tables.py writes the kept tables into README.md.
bench: setup
	status=0; bench/run --check || status=$$?; PYTHONPATH=bench $(PY) bench/readme_tables.py; exit $$status

# The README's screenshots (docs/images/), taken again by the browser tests that check what they
# show (tests/support/docs_images.py): only those tests run, each replacing its image.
screenshots: setup browser
	GPUGEEK_UPDATE_DOCS_SCREENSHOT=1 $(PY) -m pytest -q -p no:cacheprovider $$(grep -l 'keep_for_docs(' tests/browser/test_*.py)

clean:
	rm -rf $(VENV) labextension/node_modules labextension/lib gpugeek_jupyter/labextension dist site
