# Two entry points that work on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test lint typecheck unit bench clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.core: $(VENV)/bin/python pyproject.toml
	$(PIP) install --quiet -e .
	touch $@

$(VENV)/.test: $(VENV)/.core
	$(PIP) install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.core
	$(PY) examples/demo.py

lint: $(VENV)/.test
	$(PY) -m ruff check dataio tests examples benchmarks
	$(PY) -m ruff format --check dataio tests examples benchmarks

typecheck: $(VENV)/.test
	$(PY) -m mypy

unit: $(VENV)/.test
	$(PY) -m pytest

test: lint typecheck unit

bench: $(VENV)/.test
	$(PY) benchmarks/image_pipeline.py

clean:
	rm -rf $(VENV) .demo-data .bench-data
