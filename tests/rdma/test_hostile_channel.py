"""Hostile peers on the side channel: the server keeps serving, the client fails cleanly.

Every hostile frame is also saved under ``fuzz/corpus/rdma_frame/`` as a regression input.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dataio.rdma as rdma
from dataio.exceptions import PlanError, TransportError
from dataio.rdma import _server
from dataio.rdma._channel import FrameReader, recv_frame


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _json_frame(message: Any) -> bytes:
    return _frame(json.dumps(message).encode())


HOSTILE_FRAMES = {
    # 60 KB of "[" fits the 64 KiB cap but exhausts json's recursion limit.
    "deep-nesting": _frame(b"[" * 60_000),
    "deep-nesting-object": _frame(b'{"a":' * 12_000),
    # A declared 2 GiB body must be refused from its header alone.
    "huge-length": struct.pack(">I", 0x7FFF_FFFF) + b"{}",
    "not-utf8": _frame(b"\xff\xfe{\x80}"),
    "not-an-object": _frame(b"[1, 2, 3]"),
    "hello-wrong-types": _json_frame({"hello": ["dataio.rdma/1"], "provider": {"x": 1}}),
    "truncated-header": b"\x00\x00",
    "trailing-bytes": _json_frame({"hello": "dataio.rdma/1", "provider": None}) + b"junk",
}


def _host_port(server: rdma.Server) -> tuple[str, int]:
    host, port = server.local_addr.rsplit(":", 1)
    return host, int(port)


def _read_to_eof(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _timed_connect(server: rdma.Server) -> float:
    """Connect, read two bytes, return how long the handshake took."""
    start = time.monotonic()
    with rdma.connect(server.local_addr, timeout=5) as client:
        elapsed = time.monotonic() - start
        assert rdma.read(client, offset=1, size=2) == b"\1\2"
    return elapsed


@pytest.fixture
def small_server() -> Iterator[rdma.Server]:
    with rdma.serve(bind="127.0.0.1:0", buffer_size=4096, provider="tcp;ofi_rxm") as srv:
        srv.buffer[:] = bytes(range(256)) * 16
        yield srv


@pytest.mark.parametrize("name", sorted(HOSTILE_FRAMES))
def test_hostile_frame_is_dropped_and_server_keeps_serving(
    small_server: rdma.Server, name: str
) -> None:
    raw = HOSTILE_FRAMES[name]
    with socket.create_connection(_host_port(small_server)) as peer:
        peer.sendall(raw)
        peer.shutdown(socket.SHUT_WR)  # a truncated frame ends in EOF
        peer.settimeout(5)
        answer = _read_to_eof(peer)  # the server hangs up on this peer only
    if answer:  # a well-formed but wrong hello earns a refusal first
        (length,) = struct.unpack(">I", answer[:4])
        assert json.loads(answer[4 : 4 + length])["ok"] is False
    assert _timed_connect(small_server) < 2.5
    assert [t.name for t in threading.enumerate()].count("dataio-rdma-channel") == 1


def test_huge_length_is_refused_before_its_body(small_server: rdma.Server) -> None:
    with socket.create_connection(_host_port(small_server)) as peer:
        peer.sendall(struct.pack(">I", 0x7FFF_FFFF))  # the header alone, no body follows
        peer.settimeout(5)
        assert peer.recv(1) == b""


def test_slow_loris_does_not_delay_other_handshakes(
    small_server: rdma.Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Five bytes: a header promising a 2-byte body, and one byte of it; then silence.
    lorises = [socket.create_connection(_host_port(small_server)) for _ in range(4)]
    try:
        for loris in lorises:
            loris.sendall(struct.pack(">I", 2) + b"{")
        time.sleep(0.2)  # the server has read them and is waiting for more
        assert _timed_connect(small_server) < 2.5  # was 5 s: the hello timeout
        assert _timed_connect(small_server) < 2.5  # was 5 s: the hello timeout
    finally:
        for loris in lorises:
            loris.close()


def test_stalled_handshake_is_closed_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_server, "_HELLO_TIMEOUT_S", 0.3)
    with rdma.serve(bind="127.0.0.1:0", buffer_size=64, provider="tcp;ofi_rxm") as server:
        with socket.create_connection(_host_port(server)) as loris:
            loris.sendall(struct.pack(">I", 2) + b"{")
            loris.settimeout(5)
            start = time.monotonic()
            assert loris.recv(1) == b""
            assert time.monotonic() - start < 3.0
        with rdma.connect(server.local_addr, timeout=5) as client:
            assert client.size == 64


def test_frame_reader_refuses_oversized_header_without_body() -> None:
    reader = FrameReader()
    with pytest.raises(TransportError, match="exceeds"):
        reader.feed(struct.pack(">I", 1 << 20))
    assert FrameReader().feed(struct.pack(">I", 2) + b"{") is None


def test_recv_frame_maps_deep_nesting() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(HOSTILE_FRAMES["deep-nesting"])
        with pytest.raises(TransportError, match="nested too deeply"):
            recv_frame(right)


def _good_welcome() -> dict[str, Any]:
    return {
        "ok": True,
        "protocol": "dataio.rdma/1",
        "provider": "tcp;ofi_rxm",
        "fabric": "127.0.0.1/32",
        "name": "02" * 16,
        "size": 4096,
        "base": 0,
        "key": 7,
        "writable": True,
        "mr_mode": 0,
    }


BAD_WELCOMES: dict[str, bytes] = {
    "welcome-missing-fields": _json_frame({"ok": True}),
    "welcome-size-string": _json_frame({**_good_welcome(), "size": "4096"}),
    "welcome-size-negative": _json_frame({**_good_welcome(), "size": -1}),
    "welcome-key-huge": _json_frame({**_good_welcome(), "key": 1 << 70}),
    "welcome-writable-int": _json_frame({**_good_welcome(), "writable": 1}),
    "welcome-name-not-hex": _json_frame({**_good_welcome(), "name": "zz"}),
    "welcome-name-short": _json_frame({**_good_welcome(), "name": "02"}),
    "welcome-provider-list": _json_frame({**_good_welcome(), "provider": ["tcp"]}),
    "welcome-ok-string": _json_frame({**_good_welcome(), "ok": "yes"}),
    "welcome-deep-nesting": _frame(b"[" * 60_000),
    "welcome-huge-length": struct.pack(">I", 0x7FFF_FFFF),
}


@pytest.mark.parametrize("name", sorted(BAD_WELCOMES))
def test_bogus_welcome_is_a_transport_error(name: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            recv_frame(conn)  # the client's hello
            conn.sendall(BAD_WELCOMES[name])
            conn.settimeout(5)
            conn.recv(1)  # hold the line until the client gives up

    thread = threading.Thread(target=answer)
    thread.start()
    try:
        with pytest.raises(TransportError):
            rdma.connect(f"127.0.0.1:{port}", timeout=5)
    finally:
        thread.join()
        listener.close()


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_serve_refuses_non_positive_buffer_size(size: Any) -> None:
    with pytest.raises(PlanError, match="buffer_size"):
        rdma.serve(bind="127.0.0.1:0", buffer_size=size)
