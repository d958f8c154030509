"""available() / info() / diagnose(), a host without libfabric, lazy import and the shim build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dataio.rdma as rdma
from dataio._capabilities import format_report, report
from dataio.exceptions import TransportError

MISSING = "/nonexistent/libfabric.so.1"


def _run(code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
        check=True,
    )
    return done.stdout


def test_available_and_info_list_the_loopback_providers() -> None:
    assert rdma.available() is True
    found = rdma.info()
    assert found["available"] and found["why"] is None
    assert Path(found["library"]).exists() and found["version"].startswith("1.")
    assert found["shim"]["built"] and Path(found["shim"]["path"]).exists()
    names = {p["name"] for p in found["providers"]}
    assert {"tcp;ofi_rxm", "sockets"} <= names
    assert all(p["rma"] for p in found["providers"])
    assert found["default_provider"] == "tcp;ofi_rxm"  # no NIC here: the fallback


def test_diagnose_explains_each_open() -> None:
    result = rdma.diagnose()
    assert result["plain"]["ok"] and result["plain"]["opened"] == "tcp;ofi_rxm"
    plain = result["plain"]["providers"]
    assert plain["tcp;ofi_rxm"].startswith("matches") and plain["sockets"].startswith("matches")
    assert "not offered" in plain["efa"]
    hmem = result["hmem"]["providers"]
    assert "FI_HMEM" in hmem["tcp;ofi_rxm"] and "FI_HMEM" in hmem["sockets"]
    summary = result["summary"]
    assert summary[0].startswith("libfabric 1.")
    assert any(line.startswith("plain RMA: OK") for line in summary)
    assert any(line.startswith("HMEM (GPUDirect):") for line in summary)
    assert any(line.startswith("CUDA:") for line in summary)
    assert summary[-1].startswith("verdict: rdma.connect() works over tcp;ofi_rxm")
    if not result["cuda"]["found"]:
        assert "cuda=True will fail" in summary[-1]


def test_host_without_libfabric(monkeypatch: pytest.MonkeyPatch) -> None:
    """Discovery pointed at a missing library: everything reports, nothing raises."""
    monkeypatch.setenv("DATAIO_LIBFABRIC", MISSING)
    assert rdma.available() is False
    found = rdma.info()
    assert found["available"] is False and found["library"] is None
    assert "DATAIO_LIBFABRIC" in found["why"] and MISSING in found["why"]
    assert found["providers"] == []
    result = rdma.diagnose()
    assert not result["plain"]["ok"] and not result["hmem"]["ok"]
    assert result["summary"][0].startswith("libfabric: not found")
    assert "impossible without libfabric" in result["summary"][1]
    with pytest.raises(TransportError, match="needs libfabric"):
        rdma.serve(bind="127.0.0.1:0", buffer_size=16)
    entry = report()["libfabric"]
    assert entry["found"] is False and MISSING in entry["why"]


def test_fresh_process_without_libfabric(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "import dataio.rdma as rdma\n"
        "out = [rdma.available(), rdma.info()['why'], rdma.diagnose()['summary'][0]]\n"
        "maps = open('/proc/self/maps').read()\n"
        "out += ['libfabric' in maps, any(m.startswith('_dataio_fabric') for m in sys.modules)]\n"
        "print(json.dumps(out))\n"
    )
    out = json.loads(_run(code, DATAIO_LIBFABRIC=MISSING, DATAIO_CACHE_DIR=str(tmp_path)))
    assert out[0] is False and MISSING in out[1] and out[2].startswith("libfabric: not found")
    assert out[3:] == [False, False]
    assert not (tmp_path / "rdma").exists()  # nothing was built
    text = subprocess.run(
        [sys.executable, "-m", "dataio"],
        capture_output=True,
        text=True,
        env={**os.environ, "DATAIO_LIBFABRIC": MISSING},
        check=True,
    ).stdout
    assert "libfabric:     not found: DATAIO_LIBFABRIC=" in text


def test_import_loads_nothing() -> None:
    code = (
        "import json, sys\n"
        "import dataio.rdma\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(json.dumps(['libfabric' in maps, 'cffi' in sys.modules, 'torch' in sys.modules]))"
    )
    assert json.loads(_run(code)) == [False, False, False]


def test_shim_builds_into_an_empty_cache(tmp_path: Path) -> None:
    code = "import dataio.rdma as rdma; print(rdma.available(), rdma.info()['shim']['path'])"
    available, path = _run(code, DATAIO_CACHE_DIR=str(tmp_path)).split()
    assert available == "True"
    assert Path(path).parent == tmp_path / "rdma" and Path(path).is_file()
    again = _run(code, DATAIO_CACHE_DIR=str(tmp_path)).split()[1]
    assert again == path  # reused, not rebuilt


def test_capability_report_names_the_providers() -> None:
    entry = report()["libfabric"]
    assert entry["found"] and {"tcp;ofi_rxm", "sockets"} <= set(entry["providers"])
    text = format_report(report())
    line = next(line for line in text.splitlines() if line.startswith("libfabric:"))
    assert "RMA providers:" in line and "tcp;ofi_rxm" in line


def test_module_entry_point() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dataio.rdma", "--build"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert lines[0].startswith("shim: ") and any(line.startswith("verdict:") for line in lines)


def test_a_built_shim_serves_a_host_without_headers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """libfabric1 without libfabric-dev: the shim built earlier (say in an image) is used."""
    from dataio.rdma import _build
    from dataio.rdma._discovery import find_library

    built = _build.load(find_library()).path

    def no_headers(library: object) -> tuple[str, str]:
        raise _build.ShimUnavailable("the libfabric headers (rdma/fabric.h) are missing")

    monkeypatch.setattr(_build, "find_headers", no_headers)
    assert _build.load(find_library()).path == built
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path))  # an empty cache: nothing to reuse
    with pytest.raises(_build.ShimUnavailable, match="headers"):
        _build.load(find_library())
    assert rdma.available() is False
    assert "headers" in rdma.info()["why"]
    assert any("shim: unavailable" in line for line in rdma.diagnose()["summary"])
