# Two commands for a fresh machine:  make demo   and   make test
# Each creates .venv if missing, installs torch==$(TORCH_VERSION) first (a CPU wheel here;
# an unpinned torch would pull a multi-GB CUDA build), then the project with dev extras.
TORCH_VERSION ?= 2.13.0
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.seqlab-installed
LINT_PATHS := $(wildcard seqlab tests benchmarks)

.PHONY: demo test lint format install clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/seqlab demo

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)

format: $(STAMP)
	$(VENV)/bin/ruff format $(LINT_PATHS)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)

test: lint
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
