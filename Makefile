# Two entry points that work on a fresh machine: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test lint typecheck unit ray-tests bench asan fuzz clean system-deps tools gpu-check gpu-wheels

# Azurite (the Azure Blob emulator) for the az:// tests, from npm into a git-ignored
# folder. 3.36+ needs node >= 21; Debian's node is 20.
AZURITE_VERSION := 3.35.0
TOOLS := .tools
AZURITE_STAMP := $(TOOLS)/.azurite-$(AZURITE_VERSION)

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.core: $(VENV)/bin/python pyproject.toml
	$(PIP) install --quiet -e .
	touch $@

# kvikio (the gds extra) with --no-deps: its own requirements pull CuPy and the CUDA
# toolkit wheels, which the GDS tests do not need (they check its API without a GPU).
KVIKIO_TEST := kvikio-cu12==26.10.* libkvikio-cu12==26.10.* rapids-logger==0.3.* cuda-pathfinder nvidia-cufile-cu12
$(VENV)/.test: $(VENV)/.core
	$(PIP) install --quiet -e '.[test]'
	$(PIP) install --quiet --no-deps $(KVIKIO_TEST)
	touch $@

demo: $(VENV)/.core
	$(PY) examples/demo.py

# From Debian's packages, when missing: libfabric (RDMA tests over the loopback
# providers) and libjpeg-turbo's headers (the region JPEG decoder, built with the package).
SYSTEM_PACKAGES := libfabric1 libfabric-dev libjpeg62-turbo-dev
system-deps:
	@if ! dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
		else \
			echo "make test needs $(SYSTEM_PACKAGES): sudo apt-get install $(SYSTEM_PACKAGES)"; exit 1; \
		fi; \
	fi

# node and npm from Debian's packages when missing, then azurite from npm.
$(AZURITE_STAMP):
	@if ! command -v npm >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
		else \
			echo "make test needs node and npm for azurite: sudo apt-get install nodejs npm"; exit 1; \
		fi; \
	fi
	mkdir -p $(TOOLS)
	npm install --prefix $(TOOLS) --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)
	touch $@

tools: $(AZURITE_STAMP)

lint: $(VENV)/.test
	$(PY) -m ruff check dataio tests examples benchmarks fuzz
	$(PY) -m ruff format --check dataio tests examples benchmarks fuzz
	$(VENV)/bin/lint-imports --no-cache  # the layer contracts in pyproject.toml

typecheck: $(VENV)/.test
	$(PY) -m mypy

unit: $(VENV)/.test tools
	$(PY) -m pytest

# Ray runs only inside a network namespace holding nothing but lo (it cannot be held to
# loopback otherwise; see tests/ray/conftest.py); never `ray stop` (it kills by name).
# Without root (no unshare -n) the Ray tests are skipped, and this says so.
RAY_PYTEST = RAY_USAGE_STATS_ENABLED=0 $(abspath $(PY)) -m pytest tests/ray -p no:cacheprovider
ray-tests: $(VENV)/.test
	@if unshare -n true 2>/dev/null; then \
		unshare -n -- sh -c 'ip link set lo up && $(RAY_PYTEST)'; \
	else \
		echo "make test: the Ray tests (tests/ray) are SKIPPED: they need a network namespace (unshare -n, as root)"; \
	fi

test: system-deps tools lint typecheck unit ray-tests

bench: $(VENV)/.test
	$(PY) benchmarks/image_pipeline.py

# On a host with an NVIDIA GPU, in under 8 minutes: benchmarks/gpu_check.py sets up
# .venv-gpu (torch's CUDA build: GPU_PYTHON's when it has one, else from PyPI, saying so;
# whatever else is missing from GPU_WHEELS, else PyPI: simplejpeg, DALI, kvikio), builds
# the C extensions, runs pytest -m gpu over the GPU test files and benchmarks/gpu.py
# (nvJPEG via DALI vs dataio's CPU kernels vs DataLoader; GDS vs kvikio compat vs pinned
# vs plain reads of a 2 GiB safetensors file) and prints one table. GPU_CHECK_OUT=DIR
# copies the logs, junit.xml and the table there. It does not use .venv: make test's
# extras install torch from whatever index pip is given, a CPU-only build included.
GPU_PYTHON ?= python3
GPU_WHEELS ?=
GPU_CHECK_OUT ?=
gpu-check:
	$(GPU_PYTHON) benchmarks/gpu_check.py --python $(GPU_PYTHON) $(if $(GPU_WHEELS),--wheels $(GPU_WHEELS)) $(if $(GPU_CHECK_OUT),--out $(GPU_CHECK_OUT))

# For a GPU host without a network (make gpu-check GPU_WHEELS=.whl): the wheels a CUDA
# image holding torch, CuPy, pyarrow, Pillow, safetensors and pytest lacks, for its Python
# (GPU_WHEEL_PY) and torch's CUDA major (GPU_WHEEL_CUDA), downloaded here (about 4 MiB).
# DALI's wheel (~0.5 GB) is left out: where it is absent its GPU tests skip, saying so.
GPU_WHEEL_PY ?= 3.12
GPU_WHEEL_CUDA ?= 13
GPU_WHEEL_PACKAGES ?= simplejpeg kvikio-cu$(GPU_WHEEL_CUDA) libkvikio-cu$(GPU_WHEEL_CUDA) \
	rapids-logger==0.3.* cuda-pathfinder
GPU_WHEEL_PLATFORMS := manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
	manylinux_2_17_x86_64 manylinux2014_x86_64
gpu-wheels:
	mkdir -p .whl
	python3 -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_WHEEL_PY) \
		--implementation cp $(foreach p,$(GPU_WHEEL_PLATFORMS),--platform $(p)) -d .whl \
		$(GPU_WHEEL_PACKAGES)
	du -sh .whl

# A mutation campaign over every parser (not part of `make test`): FUZZ_MINUTES (default
# 30), FUZZ_TARGETS (comma-separated, default all), FUZZ_SEED, FUZZ_JOBS. Bad inputs land
# in fuzz/findings/; the exit status is 1 when there are any.
FUZZ_MINUTES ?= 30
FUZZ_TARGETS ?=
FUZZ_SEED ?= 0
FUZZ_JOBS ?= 1
fuzz: $(VENV)/.test
	$(PY) fuzz/run.py --minutes $(FUZZ_MINUTES) --seed $(FUZZ_SEED) --jobs $(FUZZ_JOBS) $(if $(FUZZ_TARGETS),--targets $(FUZZ_TARGETS))

# The C extensions built with AddressSanitizer and UBSan into a copy of the package under
# build/asan (the normal .so files stay as they are), then the kernel tests (tests/udfs, the
# dict-column and permutation helpers, the tar member scan)
# that reach them and, where the fuzz replay exists, the fuzz corpus, run against that copy.
ASAN_DIR := build/asan
ASAN_TESTS := tests/udfs tests/engine/test_columnar_python.py tests/sources/test_shuffle_fast.py \
	tests/io/test_tar_scan.py
# the fuzz harness classifies signals and out-of-memory itself: let SIGSEGV through and
# make an allocation over the address-space cap return NULL (a MemoryError), not abort
ASAN_FUZZ := handle_segv=0:allocator_may_return_null=1
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
# libstdc++ preloaded too: ASan's __cxa_throw interceptor needs it loaded before any C++
# library (pyarrow, torch) throws, or the first C++ exception aborts the process
ASAN_ENV = LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so)" \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	PYTHONPATH="$(CURDIR)/$(ASAN_DIR)" PYTHONDONTWRITEBYTECODE=1
asan: $(VENV)/.test
	rm -rf $(ASAN_DIR) && mkdir -p $(ASAN_DIR)
	cp -r dataio tests pyproject.toml $(ASAN_DIR)/
	if [ -d fuzz ]; then cp -r fuzz $(ASAN_DIR)/; fi
	find $(ASAN_DIR) -name '*.so' -delete
	cd $(ASAN_DIR) && CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" \
		$(abspath $(PY)) -c "from setuptools import setup; setup()" build_ext --inplace -q
	test -f $(ASAN_DIR)/dataio/udfs/_jpeg*.so  # optional in a normal build, required here
	test -f $(ASAN_DIR)/dataio/io/_tarscan*.so
	cd $(ASAN_DIR) && $(ASAN_ENV) $(abspath $(PY)) -c \
		"import dataio, sys; sys.exit(not dataio.__file__.startswith('$(CURDIR)/$(ASAN_DIR)/'))"
	cd $(ASAN_DIR) && $(ASAN_ENV) $(abspath $(PY)) -m pytest $(ASAN_TESTS) -p no:cacheprovider
	@if [ -d $(ASAN_DIR)/tests/fuzz ]; then \
		cd $(ASAN_DIR) && $(ASAN_ENV) ASAN_OPTIONS=detect_leaks=0:$(ASAN_FUZZ) $(abspath $(PY)) -m pytest tests/fuzz -q -p no:cacheprovider; \
	else \
		echo "make asan: no tests/fuzz here, the fuzz corpus replay is skipped"; \
	fi

clean:
	rm -rf $(VENV) .demo-data .bench-data $(TOOLS) .venv-gpu .gpu-check .whl
