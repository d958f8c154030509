"""Servers: serving files (a safetensors checkpoint), lifecycle, and the side channel's guard."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from safetensors.torch import load_file
from safetensors.torch import save_file as save_torch_file

import dataio.rdma as rdma
from dataio.exceptions import NotFoundError, PlanError, TransportError


def _host_port(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


def _header(client: rdma.Client) -> tuple[dict, int]:
    """Read a safetensors header over RDMA: an 8-byte little-endian length, then JSON."""
    (length,) = struct.unpack("<Q", rdma.read(client, offset=0, size=8))
    return json.loads(rdma.read(client, offset=8, size=length)), 8 + length


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    rng = np.random.default_rng(3)
    save_torch_file(
        {
            "embed.weight": torch.from_numpy(rng.standard_normal((512, 64), dtype=np.float32)),
            "layer.0.weight": torch.randn(256, 256, generator=torch.Generator().manual_seed(1)).to(
                torch.bfloat16
            ),
            "layer.0.bias": torch.arange(256, dtype=torch.int64),
            "norm.weight": torch.ones(64, dtype=torch.float16),
        },
        str(path),
    )
    return path


def test_serve_file_pulls_one_tensor(checkpoint: Path, provider: str) -> None:
    reference = load_file(str(checkpoint))
    with (
        rdma.serve_file(checkpoint, bind="127.0.0.1:0", provider=provider) as server,
        rdma.connect(server.local_addr) as client,
    ):
        assert server.size == checkpoint.stat().st_size and not server.writable
        header, data_start = _header(client)
        entry = header["layer.0.weight"]
        assert entry["dtype"] == "BF16"
        begin, end = entry["data_offsets"]
        out = torch.empty(entry["shape"], dtype=torch.bfloat16)
        assert rdma.read_into(client, out, offset=data_start + begin) == end - begin
        assert torch.equal(out, reference["layer.0.weight"])


def test_serve_file_every_tensor_into_numpy(tmp_path: Path) -> None:
    path = tmp_path / "arrays.safetensors"
    arrays: dict[str, np.ndarray] = {
        "a": np.arange(1000, dtype=np.float64).reshape(10, 100),
        "b": np.array([1, -2, 3], dtype=np.int8),
        "c": np.zeros((0, 4), dtype=np.float32),
    }
    save_file(arrays, str(path))
    dtypes = {"F64": np.float64, "I8": np.int8, "F32": np.float32}
    with (
        rdma.serve_file(str(path), bind="127.0.0.1:0", provider="tcp;ofi_rxm") as server,
        rdma.connect(server.local_addr) as client,
    ):
        header, data_start = _header(client)
        for name, expected in arrays.items():
            entry = header[name]
            out = np.empty(entry["shape"], dtype=dtypes[entry["dtype"]])
            rdma.read_into(client, out, offset=data_start + entry["data_offsets"][0])
            assert np.array_equal(out, expected)


def test_served_files_refuse_writes(checkpoint: Path) -> None:
    with (
        rdma.serve_file(checkpoint, bind="127.0.0.1:0", provider="sockets") as server,
        rdma.connect(server.local_addr) as client,
    ):
        with pytest.raises(TransportError, match="read-only"):
            rdma.write(client, offset=0, data=b"overwrite")
        with pytest.raises(TypeError):
            server.buffer[0] = 0
        assert rdma.read(client, offset=8, size=1) == b"{"  # still serving


def test_serve_file_errors(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no such file") as caught:
        rdma.serve_file(tmp_path / "missing.safetensors", bind="127.0.0.1:0")
    assert isinstance(caught.value, FileNotFoundError)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    with (
        rdma.serve_file(empty, bind="127.0.0.1:0", provider="tcp;ofi_rxm") as server,
        rdma.connect(server.local_addr) as client,
    ):
        assert server.size == 0 and rdma.read(client, offset=0, size=0) == b""


def test_serve_arguments_are_checked() -> None:
    with pytest.raises(PlanError, match="host:port"):
        rdma.serve(bind="127.0.0.1", buffer_size=16)
    with pytest.raises(PlanError, match="valid port"):
        rdma.serve(bind="127.0.0.1:99999", buffer_size=16)
    with pytest.raises(PlanError, match="buffer_size"):
        rdma.serve(bind="127.0.0.1:0", buffer_size=-1)
    with pytest.raises(TransportError, match="no RMA-capable provider 'nonesuch'"):
        rdma.serve(bind="127.0.0.1:0", buffer_size=16, provider="nonesuch")


def test_server_lifecycle(provider: str) -> None:
    server = rdma.serve(bind="127.0.0.1:0", buffer_size=1024, provider=provider)
    assert repr(server) == (
        f"<dataio.rdma.Server {server.local_addr} {provider} 1024 bytes, 0 client(s)>"
    )
    assert server.provider == provider and server.writable and server.path is None
    names = {t.name for t in threading.enumerate()}
    assert {"dataio-rdma-progress", "dataio-rdma-channel"} <= names
    view = server.buffer  # a view held across close must not break it
    server.close()
    server.close()
    assert server.closed and "closed" in repr(server)
    with pytest.raises(TransportError, match="is closed"):
        server.buffer  # noqa: B018
    del view


def test_strangers_on_the_side_channel_are_dropped(server: rdma.Server) -> None:
    with socket.create_connection(_host_port(server.local_addr)) as stranger:
        stranger.sendall(struct.pack(">I", 5) + b"hello")  # not JSON
        stranger.settimeout(5)
        assert stranger.recv(1) == b""  # the server hung up
    with socket.create_connection(_host_port(server.local_addr)) as impostor:
        body = json.dumps({"hello": "someone-else/9"}).encode()
        impostor.sendall(struct.pack(">I", len(body)) + body)
        impostor.settimeout(5)
        (length,) = struct.unpack(">I", impostor.recv(4))
        assert json.loads(impostor.recv(length))["ok"] is False
    with rdma.connect(server.local_addr) as client:  # still serving real clients
        assert rdma.read(client, offset=1, size=2) == b"\1\2"


def test_connecting_to_something_else_fails_clearly() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def hang_up() -> None:
        conn, _ = listener.accept()
        conn.close()

    thread = threading.Thread(target=hang_up)
    thread.start()
    try:
        with pytest.raises(TransportError, match=r"did not answer the dataio\.rdma handshake"):
            rdma.connect(f"127.0.0.1:{port}", timeout=5)
    finally:
        thread.join()
        listener.close()


def test_busy_port_is_refused(server: rdma.Server) -> None:
    with pytest.raises(TransportError, match="cannot listen on bind="):
        rdma.serve(bind=server.local_addr, buffer_size=16, provider=server.provider)


def test_fi_provider_selects_the_provider() -> None:
    code = (
        "import dataio.rdma as rdma\n"
        "s = rdma.serve(bind='127.0.0.1:0', buffer_size=64)\n"
        "with s, rdma.connect(s.local_addr) as c:\n"
        "    rdma.write(c, offset=0, data=b'abc')\n"
        "    print(s.provider, c.provider, rdma.read(c, offset=0, size=3).decode())\n"
    )
    env = {**os.environ, "FI_PROVIDER": "sockets"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.split() == ["sockets", "sockets", "abc"]
