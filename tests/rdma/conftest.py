"""RDMA fixtures: real servers on 127.0.0.1 over the loopback providers, and a leak check.

These tests need libfabric (``libfabric1 libfabric-dev``) and cffi; they fail, not skip,
when either is missing (apart from the simulated no-libfabric host in test_probe.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

import dataio.rdma as rdma
from dataio.rdma import _client, _server

PROVIDERS = ["tcp;ofi_rxm", "sockets"]


@pytest.fixture(scope="session", autouse=True)
def libfabric_ready() -> None:
    """Build (or find) the shim once, failing loudly when libfabric is absent."""
    from dataio.rdma._loader import shim_or_raise

    shim_or_raise()


def _rdma_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dataio-rdma")]


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every test closes its servers and clients, and their threads end."""
    yield
    leaked = list(_server._open_servers) + list(_client._open_clients)
    for handle in leaked:
        handle.close()
    assert not leaked, f"left open: {leaked}"
    deadline = time.monotonic() + 5
    while _rdma_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _rdma_threads(), f"threads left behind: {_rdma_threads()}"


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    """Each loopback provider in turn."""
    return str(request.param)


@pytest.fixture
def server(provider: str) -> Iterator[rdma.Server]:
    """A 4 MiB server on 127.0.0.1 whose buffer holds a known pattern."""
    with rdma.serve(bind="127.0.0.1:0", buffer_size=4 << 20, provider=provider) as srv:
        srv.buffer[:] = bytes(range(256)) * (srv.size // 256)
        yield srv


@pytest.fixture
def client(server: rdma.Server) -> Iterator[rdma.Client]:
    """A client of ``server``."""
    with rdma.connect(server.local_addr) as cli:
        yield cli
