"""A loopback HTTP proxy for the network tests: it forwards plain HTTP requests sent in
absolute form, tunnels ``CONNECT``, records every request with its
``Proxy-Authorization`` header, and can demand Basic credentials (``407``)."""

from __future__ import annotations

import base64
import http.client
import select
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from helpers.servers import QuietHandler, ThreadedServer

# headers that concern one hop only, never forwarded
_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
}


@dataclass(frozen=True)
class Seen:
    """One request as the proxy received it."""

    method: str
    target: str  # absolute URL for forwarded requests, ``host:port`` for CONNECT
    proxy_authorization: str | None
    range: str | None = None  # the request's Range (or x-ms-range) header, if any


def _range(headers: Any) -> str | None:
    """The byte range a request asks for (Azure's clients send ``x-ms-range``)."""
    found = headers.get("Range") or headers.get("x-ms-range")
    return str(found) if found is not None else None


class ProxyHandler(QuietHandler):
    server: ProxyServer

    def _admit(self) -> bool:
        header = self.headers.get("Proxy-Authorization")
        self.server.seen.append(Seen(self.command, self.path, header, _range(self.headers)))
        if self.server.expected is None or header == self.server.expected:
            return True
        self.send_response(407)
        self.send_header("Proxy-Authenticate", 'Basic realm="test proxy"')
        self.send_header("Content-Length", "0")
        self.end_headers()
        return False

    def _address(self, host: str, port: int) -> tuple[str, int]:
        # names the tests invent resolve to loopback here, as a corporate proxy's DNS would
        return ("127.0.0.1" if host in self.server.loopback_names else host), port

    def do_CONNECT(self) -> None:
        if not self._admit():
            return
        host, _, port = self.path.rpartition(":")
        try:
            upstream = socket.create_connection(self._address(host, int(port)), timeout=10)
        except OSError:
            self.send_error(502)
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        _pipe(self.connection, upstream)

    def _forward(self) -> None:
        if not self._admit():
            return
        url = urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.send_error(400, "absolute http:// URL expected")
            return
        body = self._body()
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if body is not None:
            # one Content-Length, whatever its case: Node servers (Azurite) answer 400
            # to a request carrying two
            headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
            headers["Content-Length"] = str(len(body))
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        upstream = http.client.HTTPConnection(
            *self._address(url.hostname, url.port or 80), timeout=30
        )
        try:
            upstream.request(self.command, path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError:
            self.send_error(502)
            return
        finally:
            upstream.close()
        self.send_response(response.status, response.reason)
        for key, value in response.getheaders():
            if key.lower() not in _HOP and key.lower() != "content-length":
                self.send_header(key, value)
        length = response.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", length or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.server.bodies.append(len(data))  # append is atomic across handlers
            self.wfile.write(data)

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length is not None else None

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward
    do_OPTIONS = do_PROPFIND = do_MKCOL = do_MOVE = do_COPY = _forward


def _pipe(client: socket.socket, upstream: socket.socket) -> None:
    sockets = [client, upstream]
    try:
        while True:
            ready, _, broken = select.select(sockets, [], sockets, 30)
            if broken or not ready:
                return
            for sock in ready:
                data = sock.recv(1 << 16)
                if not data:
                    return
                (upstream if sock is client else client).sendall(data)
    except OSError:
        return
    finally:
        upstream.close()


class ProxyServer(ThreadedServer):
    """``ProxyServer(auth=("user", "pass"))`` answers 407 unless the request carries
    those Basic credentials; ``seen`` lists every request received, ``body_bytes``
    counts the response body bytes forwarded (plain HTTP)."""

    def __init__(
        self, *, auth: tuple[str, str] | None = None, loopback_names: tuple[str, ...] = ()
    ) -> None:
        self.seen: list[Seen] = []
        self.bodies: list[int] = []
        self.expected: str | None = None
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            self.expected = f"Basic {token}"
        self.loopback_names = set(loopback_names)
        super().__init__(ProxyHandler)

    @property
    def body_bytes(self) -> int:
        return sum(self.bodies)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients hanging up mid-tunnel are normal
