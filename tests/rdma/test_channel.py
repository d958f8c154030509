"""The side channel's addresses and frames."""

from __future__ import annotations

import socket
import struct

import pytest

from dataio.exceptions import PlanError, TransportError
from dataio.rdma._channel import format_address, parse_address, recv_frame, send_frame


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0.0.0.0:5000", ("0.0.0.0", 5000)),
        ("[::1]:65535", ("::1", 65535)),
        ("localhost:80", ("localhost", 80)),
    ],
)
def test_addresses_round_trip(addr: str, expected: tuple[str, int]) -> None:
    assert parse_address(addr) == expected
    assert format_address(*expected) == addr


@pytest.mark.parametrize("addr", ["127.0.0.1", "127.0.0.1:x", "127.0.0.1:70000", "", 5])
def test_bad_addresses(addr: object) -> None:
    with pytest.raises(PlanError, match="addr="):
        parse_address(addr)  # type: ignore[arg-type]


def test_frames_round_trip() -> None:
    left, right = socket.socketpair()
    with left, right:
        send_frame(left, {"hello": "dataio.rdma/1", "provider": None, "n": 1 << 40})
        assert recv_frame(right) == {"hello": "dataio.rdma/1", "provider": None, "n": 1 << 40}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (struct.pack(">I", 1 << 20), "exceeds"),
        (struct.pack(">I", 3) + b"{x}", "not JSON"),
        (struct.pack(">I", 2) + b"[]", "not an object"),
        (struct.pack(">I", 10) + b"{}", "closed the side channel"),
    ],
)
def test_bad_frames(raw: bytes, message: str) -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(raw)
        left.shutdown(socket.SHUT_WR)
        with pytest.raises(TransportError, match=message):
            recv_frame(right)
