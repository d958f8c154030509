"""One-sided RDMA reads and writes over libfabric: serve memory or a file, pull byte ranges.

A server registers one memory region (a buffer, or a read-only file mapping); clients
read and write it with RMA, pipelined in ``chunk_size`` segments with up to
``max_inflight`` in flight, straight into or out of caller-owned buffers::

    import dataio.rdma as rdma

    with rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20) as server:
        with rdma.connect(server.local_addr) as client:
            rdma.write(client, offset=0, data=b"hello rdma")
            assert rdma.read(client, offset=0, size=10) == b"hello rdma"

libfabric (``libfabric.so.1``, or ``$DATAIO_LIBFABRIC``) is found at first use, and a
small cffi shim is compiled against its headers then (see ``dataio.rdma._build``), so
importing this module needs neither. :func:`available`, :func:`info` and
:func:`diagnose` report, without raising, what works here and why not.
"""

from __future__ import annotations

import atexit

from dataio.rdma._client import Client, connect, read, read_into, write
from dataio.rdma._client import close_all as _close_clients
from dataio.rdma._probe import available, diagnose, info
from dataio.rdma._server import Server, serve, serve_file
from dataio.rdma._server import close_all as _close_servers

__all__ = [
    "Client",
    "Server",
    "available",
    "connect",
    "diagnose",
    "info",
    "read",
    "read_into",
    "serve",
    "serve_file",
    "write",
]


@atexit.register
def _close_everything() -> None:
    # Sessions left open would otherwise meet interpreter teardown inside libfabric.
    _close_clients()
    _close_servers()
