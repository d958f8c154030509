"""dataio's GDS routes against the real kvikio API (issue #18, item 3).

kvikio is the ``gds`` extra, not a test extra (its wheels pull CuPy and CUDA toolkit
wheels): ``make test`` and ``make gpu-check`` install it with ``--no-deps``. They need no
GPU: kvikio 26.10 imports, opens files and switches its compatibility mode without a
CUDA driver; only its reads (even into host memory) need ``libcuda.so.1``. Seen without
a driver: ``pread`` raises ``RuntimeError: KvikIO failure at: .../shim/utils.cpp:21:
libcuda.so.1: cannot open shared object file``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import dataio
from dataio.formats import _devices, gds

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        importlib.util.find_spec("kvikio") is None,
        reason="kvikio is not installed (make test installs it with --no-deps; see the Makefile)",
    ),
]


def test_kvikio_loads_with_its_defaults_submodule() -> None:
    kvikio, defaults, why = _devices.load_kvikio()
    assert why == "" and kvikio is sys.modules["kvikio"]
    # `import kvikio` alone does not load kvikio.defaults: dataio imports it by name
    assert defaults is sys.modules["kvikio.defaults"]
    assert isinstance(_devices.compat_preferred(defaults), bool)


def test_the_compat_switch_uses_kvikios_own_setter() -> None:
    kvikio, defaults, _ = _devices.load_kvikio()
    before = defaults.get("compat_mode")
    with gds._compat(kvikio, defaults, True):
        assert defaults.get("compat_mode") == kvikio.CompatMode.ON
        assert defaults.is_compat_mode_preferred()
    assert defaults.get("compat_mode") == before


def test_a_compat_file_opens_through_kvikio(tmp_path: Path) -> None:
    path = tmp_path / "raw.bin"
    path.write_bytes(bytes(range(256)) * 16)
    opened = gds.GdsFile(str(path), torch.device("cpu"), "compat", "test")
    try:
        assert opened._cufile is not None and opened.size == 4096
    finally:
        opened.close()
    assert opened.closed and opened._cufile is None


def test_the_route_and_report_name_kvikio() -> None:
    _devices.gds_info.cache_clear()
    try:
        info = dataio.gds_info()
    finally:
        _devices.gds_info.cache_clear()
    kvikio, _, _ = _devices.load_kvikio()
    assert info["kvikio"] == kvikio.__version__
    if info["cuda_devices"]:
        assert info["route"] in ("gds", "compat")
    else:
        assert info["route"] is None and info["route_why"] == "no CUDA device"
