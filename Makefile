# Two entry points that work on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test lint typecheck unit bench clean system-deps

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

# libfabric (RDMA tests over the loopback providers) from Debian's packages, when missing.
system-deps:
	@if ! dpkg -s libfabric-dev >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric1 libfabric-dev >/dev/null; \
		else \
			echo "make test needs libfabric1 and libfabric-dev: sudo apt-get install libfabric1 libfabric-dev"; exit 1; \
		fi; \
	fi

lint: $(VENV)/.test
	$(PY) -m ruff check dataio tests examples benchmarks
	$(PY) -m ruff format --check dataio tests examples benchmarks

typecheck: $(VENV)/.test
	$(PY) -m mypy

unit: $(VENV)/.test
	$(PY) -m pytest

test: system-deps lint typecheck unit

bench: $(VENV)/.test
	$(PY) benchmarks/image_pipeline.py

clean:
	rm -rf $(VENV) .demo-data .bench-data
