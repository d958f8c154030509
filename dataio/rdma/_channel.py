"""The TCP side channel: how a client learns the server's fabric address and memory key.

RMA needs, before the first byte moves, the target endpoint's fabric address, the
region's key and its base address. They travel over a plain TCP connection to the
server's ``local_addr`` (the same host and port the user passes to ``connect``):

1. the client connects and sends a *hello* frame;
2. the server answers with its provider, fabric address and region, or an error;
3. the connection then stays open and silent. Its end means the session ended: the
   server sees a client leave, and a client sees the server close (EOF) before it
   posts more work, or while it waits for completions.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON (an object).
Binary fields (the fabric address) are hex strings. Frames are capped at 64 KiB: a
larger declared length is refused before its body is read, and any body that does not
parse (including JSON nested too deeply for the parser) is a :class:`TransportError`.

hello (client → server)::

    {"hello": "dataio.rdma/1", "provider": "tcp;ofi_rxm" | null}

welcome (server → client)::

    {"ok": true, "provider": "tcp;ofi_rxm", "fabric": "127.0.0.1/32",
     "name": "0200a6af7f000001...", "size": 1048576, "base": 0, "key": 3665428480,
     "writable": true, "mr_mode": 0}

refusal (server → client)::

    {"ok": false, "error": "the server speaks 'sockets', not 'tcp;ofi_rxm'"}

``base`` is the remote address of the region's first byte: 0 for offset-addressed
providers, the server's virtual address under ``FI_MR_VIRT_ADDR``; a client reads
``base + offset``.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

from dataio.exceptions import PlanError, TransportError

__all__ = ["PROTOCOL", "FrameReader", "decode_frame", "parse_address", "recv_frame", "send_frame"]

PROTOCOL = "dataio.rdma/1"
MAX_FRAME = 1 << 16
_HEADER = struct.Struct(">I")


def parse_address(addr: str, *, what: str = "addr") -> tuple[str, int]:
    """Split ``"host:port"`` (``"[::1]:port"`` for IPv6) into ``(host, port)``."""
    if not isinstance(addr, str) or ":" not in addr:
        raise PlanError(f"{what}={addr!r} is not 'host:port' (for example '127.0.0.1:0')")
    host, _, port_text = addr.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise PlanError(f"{what}={addr!r} has no valid port; use a number in 0..65535")
    return host, port


def format_address(host: str, port: int) -> str:
    """The inverse of :func:`parse_address`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def send_frame(sock: socket.socket, message: dict[str, Any]) -> None:
    """Send one JSON frame."""
    body = json.dumps(message).encode()
    sock.sendall(_HEADER.pack(len(body)) + body)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise TransportError("the peer closed the side channel in the middle of a frame")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _check_size(size: int) -> None:
    if size > MAX_FRAME:
        raise TransportError(f"side-channel frame of {size} bytes exceeds {MAX_FRAME}")


def decode_frame(body: bytes) -> dict[str, Any]:
    """Parse one frame's body (raises :class:`TransportError` on anything but an object)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # RecursionError: "[[[[..." within the size cap still exhausts the parser's stack.
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise TransportError(f"side-channel frame is not JSON: {reason}") from None
    if not isinstance(message, dict):
        raise TransportError(f"side-channel frame is not an object: {_short(message)}")
    return message


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."


def recv_frame(sock: socket.socket) -> dict[str, Any]:
    """Receive one JSON frame (raises :class:`TransportError` on EOF or garbage)."""
    (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    _check_size(size)
    return decode_frame(_recv_exactly(sock, size))


class FrameReader:
    """Assemble one frame from bytes as they arrive (for non-blocking sockets).

    The declared length is checked as soon as the 4-byte header is in, so an oversized
    frame is refused without buffering its body.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._size: int | None = None

    def feed(self, data: bytes) -> dict[str, Any] | None:
        """Add received bytes; return the frame once complete, else None."""
        self._buffer += data
        if self._size is None and len(self._buffer) >= _HEADER.size:
            (self._size,) = _HEADER.unpack_from(self._buffer)
            _check_size(self._size)
            del self._buffer[: _HEADER.size]
        if self._size is None or len(self._buffer) < self._size:
            return None
        if len(self._buffer) > self._size:
            raise TransportError("the peer sent bytes past its hello frame; expected one frame")
        return decode_frame(bytes(self._buffer))
