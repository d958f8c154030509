"""Client verbs against real servers on 127.0.0.1: round trips, buffers, errors, concurrency."""

from __future__ import annotations

import gc
import mmap
import threading
import time

import numpy as np
import pytest
import torch

import dataio.rdma as rdma
from dataio.exceptions import (
    DataioError,
    DeviceError,
    OutOfRangeError,
    PlanError,
    TransportError,
)


def test_spec_example(provider: str) -> None:
    with rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20, provider=provider) as server:
        addr = server.local_addr
        with rdma.connect(addr) as client:
            rdma.write(client, offset=0, data=b"hello rdma")
            assert rdma.read(client, offset=0, size=10) == b"hello rdma"
            assert client.provider == server.provider == provider
        assert client.closed
    assert server.closed


@pytest.mark.parametrize(
    ("chunk_size", "max_inflight"), [(4096, 1), (4096, 16), (65536, 3), (4 << 20, 8)]
)
@pytest.mark.parametrize(("offset", "size"), [(0, 1), (4095, 3), (1000, 200_000), (0, 4 << 20)])
def test_round_trip_small(
    server: rdma.Server, chunk_size: int, max_inflight: int, offset: int, size: int
) -> None:
    size = min(size, server.size - offset)
    data = np.random.default_rng(offset + size).integers(0, 256, size, dtype=np.uint8).tobytes()
    with rdma.connect(
        server.local_addr, chunk_size=chunk_size, max_inflight=max_inflight
    ) as client:
        assert rdma.write(client, offset=offset, data=data) == size
        # FI_DELIVERY_COMPLETE: the bytes are in the server's memory once write returns.
        assert bytes(server.buffer[offset : offset + size]) == data
        assert rdma.read(client, offset=offset, size=size) == data
        pattern = bytes(range(256)) * (server.size // 256)
        assert bytes(server.buffer[:offset]) == pattern[:offset]
        assert bytes(server.buffer[offset + size :]) == pattern[offset + size :]


def test_round_trip_large(provider: str) -> None:
    """256 MiB written then read back, byte for byte, in 4 MiB chunks."""
    size = 256 << 20
    data = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    with (
        rdma.serve(bind="127.0.0.1:0", buffer_size=size, provider=provider) as server,
        rdma.connect(server.local_addr, chunk_size=4 << 20, max_inflight=8) as client,
    ):
        rdma.write(client, offset=0, data=data)
        assert np.array_equal(np.frombuffer(server.buffer, dtype=np.uint8), data)
        out = np.zeros(size, dtype=np.uint8)
        assert rdma.read_into(client, out, offset=0) == size
        assert np.array_equal(out, data)


def test_each_write_lands_before_it_returns(client: rdma.Client, server: rdma.Server) -> None:
    """The tcp;ofi_rxm trap: without FI_DELIVERY_COMPLETE a write completes before it lands."""
    for i in range(64):
        block = bytes([i]) * 65536
        rdma.write(client, offset=i * 65536, data=block)
        assert bytes(server.buffer[i * 65536 : (i + 1) * 65536]) == block


def _expected(server: rdma.Server, offset: int, size: int) -> bytes:
    return bytes(server.buffer[offset : offset + size])


def test_read_returns_bytes(client: rdma.Client, server: rdma.Server) -> None:
    out = rdma.read(client, offset=100, size=50)
    assert type(out) is bytes and out == _expected(server, 100, 50)
    assert rdma.read(client, offset=7, size=0) == b""


def test_read_into_bytearray(client: rdma.Client, server: rdma.Server) -> None:
    out = bytearray(1 << 20)
    assert rdma.read_into(client, out, offset=3) == len(out)
    assert out == _expected(server, 3, len(out))


def test_read_into_memoryview_slice(client: rdma.Client, server: rdma.Server) -> None:
    backing = bytearray(b"\xee" * 300)
    assert rdma.read_into(client, memoryview(backing)[100:200], offset=1) == 100
    assert backing[100:200] == _expected(server, 1, 100)
    assert backing[:100] == b"\xee" * 100 and backing[200:] == b"\xee" * 100


def test_read_into_numpy(client: rdma.Client, server: rdma.Server) -> None:
    out = np.zeros((64, 128), dtype=np.float32)
    rdma.read_into(client, out, offset=256)
    expected = np.frombuffer(_expected(server, 256, out.nbytes), dtype=np.float32)
    assert np.array_equal(out.ravel(), expected, equal_nan=True)


def test_read_into_anonymous_mmap(client: rdma.Client, server: rdma.Server) -> None:
    with mmap.mmap(-1, 1 << 16) as out:
        rdma.read_into(client, out, offset=512)
        assert out[:] == _expected(server, 512, 1 << 16)


def test_read_into_file_mmap(client: rdma.Client, server: rdma.Server, tmp_path) -> None:
    path = tmp_path / "landing.bin"
    path.write_bytes(b"\0" * 8192)
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as out:
        rdma.read_into(client, out, offset=9)
        out.flush()
    assert path.read_bytes() == _expected(server, 9, 8192)


def test_read_into_cpu_tensor(client: rdma.Client, server: rdma.Server) -> None:
    # A plain CPU tensor: pinned memory needs CUDA (see the gpu tests below).
    out = torch.zeros(1000, dtype=torch.bfloat16)
    rdma.read_into(client, out, offset=64)
    assert out.view(torch.uint8).numpy().tobytes() == _expected(server, 64, 2000)


@pytest.mark.gpu
def test_read_into_pinned_tensor(client: rdma.Client, server: rdma.Server) -> None:
    if not torch.cuda.is_available():
        pytest.skip("pinned host memory needs a CUDA device; this host has none")
    out = torch.zeros(4096, dtype=torch.uint8).pin_memory()
    rdma.read_into(client, out, offset=5)
    assert out.numpy().tobytes() == _expected(server, 5, 4096)


@pytest.mark.gpu
def test_read_into_cuda_tensor_gpudirect(server: rdma.Server) -> None:
    if not torch.cuda.is_available():
        pytest.skip("GPUDirect needs a CUDA device; this host has none")
    if not rdma.diagnose()["hmem"]["ok"]:
        pytest.skip("no FI_HMEM provider here; diagnose() says why")
    with rdma.connect(server.local_addr, cuda=True) as client:
        out = torch.zeros(4096, dtype=torch.uint8, device="cuda:0")
        rdma.read_into(client, out, offset=5)
        assert out.cpu().numpy().tobytes() == _expected(server, 5, 4096)


def test_read_into_partial_size(client: rdma.Client, server: rdma.Server) -> None:
    out = bytearray(b"\xff" * 64)
    assert rdma.read_into(client, out, offset=10, size=16) == 16
    assert out[:16] == _expected(server, 10, 16) and out[16:] == b"\xff" * 48


@pytest.mark.parametrize(
    "data",
    [
        b"bytes source",
        bytearray(b"bytearray source"),
        np.arange(40, dtype=np.int16),
        torch.arange(10, dtype=torch.float64),
        memoryview(b"0123456789abcdef")[4:12],
    ],
    ids=["bytes", "bytearray", "numpy", "torch", "memoryview"],
)
def test_write_from_each_buffer_kind(client: rdma.Client, server: rdma.Server, data) -> None:
    raw = data.numpy().tobytes() if isinstance(data, torch.Tensor) else bytes(data)
    assert rdma.write(client, offset=77, data=data) == len(raw)
    assert _expected(server, 77, len(raw)) == raw


def test_write_from_mmap(client: rdma.Client, server: rdma.Server) -> None:
    with mmap.mmap(-1, 4096) as source:
        source[:] = b"\x5a" * 4096
        rdma.write(client, offset=0, data=source)
    assert _expected(server, 0, 4096) == b"\x5a" * 4096


def test_bad_buffers_are_refused(client: rdma.Client) -> None:
    with pytest.raises(PlanError, match="read-only"):
        rdma.read_into(client, b"immutable", offset=0)
    with pytest.raises(PlanError, match="not C-contiguous"):
        rdma.read_into(client, np.zeros((8, 8), dtype=np.uint8)[:, ::2], offset=0)
    with pytest.raises(PlanError, match="not contiguous"):
        rdma.read_into(client, torch.zeros(8, 8).t(), offset=0)
    with pytest.raises(PlanError, match="takes a buffer"):
        rdma.read_into(client, [1, 2, 3], offset=0)
    with pytest.raises(OutOfRangeError, match="does not fit"):
        rdma.read_into(client, bytearray(4), offset=0, size=5)
    with pytest.raises(PlanError, match=r"rdma\.connect"):
        rdma.read("127.0.0.1:1", offset=0, size=1)  # type: ignore[arg-type]
    assert rdma.read(client, offset=0, size=4)  # the session survives refusals


@pytest.mark.parametrize(
    ("offset", "size"), [(-1, 1), (0, (4 << 20) + 1), (4 << 20, 1), ((4 << 20) - 3, 4)]
)
def test_out_of_range_is_refused(client: rdma.Client, offset: int, size: int) -> None:
    with pytest.raises(OutOfRangeError, match="outside the 4194304-byte region") as caught:
        rdma.read(client, offset=offset, size=size)
    assert isinstance(caught.value, IndexError) and isinstance(caught.value, DataioError)
    with pytest.raises(OutOfRangeError):
        rdma.write(client, offset=offset, data=bytes(max(size, 0)))
    assert rdma.read(client, offset=(4 << 20) - 4, size=4) == bytes([252, 253, 254, 255])


def test_closed_server_is_refused(provider: str) -> None:
    server = rdma.serve(bind="127.0.0.1:0", buffer_size=4096, provider=provider)
    addr = server.local_addr
    client = rdma.connect(addr)
    assert rdma.read(client, offset=0, size=4) == b"\0\0\0\0"
    server.close()
    with pytest.raises(TransportError, match="has closed") as caught:
        rdma.read(client, offset=0, size=4)
    assert isinstance(caught.value, ConnectionError)
    with pytest.raises(TransportError, match="failed earlier"):
        rdma.write(client, offset=0, data=b"x")
    client.close()
    with pytest.raises(TransportError, match="is closed"):
        rdma.read(client, offset=0, size=1)
    with pytest.raises(TransportError, match=r"no dataio\.rdma server answers"):
        rdma.connect(addr)


def test_server_closing_mid_transfer_ends_it(provider: str) -> None:
    """A transfer either finishes or fails with TransportError when its server goes away."""
    size = 64 << 20
    with rdma.serve(bind="127.0.0.1:0", buffer_size=size, provider=provider) as server:
        client = rdma.connect(server.local_addr, chunk_size=65536, max_inflight=2, timeout=10)
        outcome: list[object] = []

        def pull() -> None:
            try:
                outcome.append(rdma.read_into(client, np.empty(size, np.uint8), offset=0))
            except TransportError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=pull)
        thread.start()
        server.close()
        thread.join(timeout=30)
        assert not thread.is_alive()
        assert outcome and (outcome[0] == size or isinstance(outcome[0], TransportError))
        client.close()


def test_concurrent_clients(server: rdma.Server) -> None:
    """Four clients write their own quarter at once, then each reads the whole region."""
    quarter = server.size // 4
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)
    seen: list[bytes] = []

    def work(i: int) -> None:
        try:
            with rdma.connect(server.local_addr, chunk_size=65536, max_inflight=4) as client:
                barrier.wait(timeout=10)
                rdma.write(client, offset=i * quarter, data=bytes([i + 1]) * quarter)
                barrier.wait(timeout=30)
                seen.append(rdma.read(client, offset=0, size=server.size))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    expected = b"".join(bytes([i + 1]) * quarter for i in range(4))
    assert seen == [expected] * 4
    assert bytes(server.buffer) == expected


def test_threads_share_one_client(client: rdma.Client, server: rdma.Server) -> None:
    results: dict[int, bytes] = {}

    def pull(i: int) -> None:
        results[i] = rdma.read(client, offset=i * 4096, size=65536)

    threads = [threading.Thread(target=pull, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == {i: _expected(server, i * 4096, 65536) for i in range(6)}


def test_server_counts_sessions(server: rdma.Server) -> None:
    clients = [rdma.connect(server.local_addr) for _ in range(3)]
    assert server.clients == 3  # counted before the handshake answer went out
    for client in clients:
        client.close()
    deadline = time.monotonic() + 5
    while server.clients and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.clients == 0


def test_local_registration_path(monkeypatch: pytest.MonkeyPatch, provider: str) -> None:
    """DATAIO_RDMA_MR_LOCAL registers local buffers (FI_MR_LOCAL, as real NICs need)."""
    monkeypatch.setenv("DATAIO_RDMA_MR_LOCAL", "1")
    with (
        rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20, provider=provider) as server,
        rdma.connect(server.local_addr, chunk_size=65536) as client,
    ):
        assert client._endpoint.register_local
        data = np.random.default_rng(5).integers(0, 256, 1 << 20, dtype=np.uint8)
        rdma.write(client, offset=0, data=data)
        out = np.empty_like(data)
        rdma.read_into(client, out, offset=0)
        assert np.array_equal(out, data) and bytes(server.buffer) == data.tobytes()


def test_virtual_address_path_over_shm() -> None:
    """shm asks for FI_MR_VIRT_ADDR: the region's base is the server's buffer address."""
    with (
        rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20, provider="shm") as server,
        rdma.connect(server.local_addr) as client,
    ):
        assert server._region.base != 0
        data = bytes(range(256)) * 16
        rdma.write(client, offset=12345, data=data)
        assert bytes(server.buffer[12345 : 12345 + len(data)]) == data
        assert rdma.read(client, offset=12345, size=len(data)) == data


def test_options_are_validated(server: rdma.Server) -> None:
    with pytest.raises(PlanError, match="chunk_size"):
        rdma.connect(server.local_addr, chunk_size=0)
    with pytest.raises(PlanError, match="max_inflight"):
        rdma.connect(server.local_addr, max_inflight=0)
    with pytest.raises(PlanError, match="timeout"):
        rdma.connect(server.local_addr, timeout=0)
    with pytest.raises(PlanError, match="host:port"):
        rdma.connect("127.0.0.1")
    with rdma.connect(server.local_addr, chunk_size=1 << 40, max_inflight=4096) as client:
        assert client.max_inflight <= 4096 and client.chunk_size <= 1 << 40
        assert rdma.read(client, offset=0, size=3) == b"\0\1\2"


def test_provider_mismatch_is_refused(server: rdma.Server) -> None:
    other = "sockets" if server.provider != "sockets" else "tcp;ofi_rxm"
    with pytest.raises(TransportError, match=f"speaks {server.provider!r}, not {other!r}"):
        rdma.connect(server.local_addr, provider=other)


def test_cuda_needs_a_gpu(server: rdma.Server) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has a GPU; test_read_into_cuda_tensor_gpudirect covers it")
    with pytest.raises(DeviceError, match="CUDA") as caught:
        rdma.connect(server.local_addr, cuda=True)
    assert isinstance(caught.value, RuntimeError)


def test_a_forgotten_client_is_freed(server: rdma.Server) -> None:
    rdma.connect(server.local_addr)  # never closed, never kept
    gc.collect()
    deadline = time.monotonic() + 5
    while server.clients and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.clients == 0
