"""A scripted HTTP server on 127.0.0.1 for streaming tests.

Each route sends its body as a list of pieces, chunked (as Server-Sent Events servers do)
or with a ``Content-Length``. A route can hold back a piece until the test sets an event
(a stall), cut the connection after some pieces (a dying server), and the server counts
requests and the body bytes it managed to send. It also answers path-style S3 GETs
(``/bucket/key``), so obstore's S3 client can read from it with faults injected.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

from helpers.servers import QuietHandler, ThreadedServer


@dataclass
class Script:
    """What one route answers.

    ``hold`` maps a piece index to an event the server waits for before sending that
    piece; ``die_after`` cuts the connection once that many pieces went out (a clean
    close, or a TCP reset with ``reset=True``); ``sent`` is set each time a piece has
    been flushed (``reached[i]`` after piece ``i``).
    """

    pieces: list[bytes]
    chunked: bool = True
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: dict[int, threading.Event] = field(default_factory=dict)
    die_after: int | None = None
    reset: bool = False
    reached: list[threading.Event] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reached = [threading.Event() for _ in self.pieces]

    @property
    def body(self) -> bytes:
        return b"".join(self.pieces)


def split(data: bytes, size: int) -> list[bytes]:
    """``data`` cut into pieces of ``size`` bytes (the last may be shorter)."""
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


class StreamHandler(QuietHandler):
    server: StreamServer

    def do_GET(self) -> None:
        server = self.server
        with server.lock:
            server.requests.append((self.command, self.path, dict(self.headers)))
            server.active += 1
        try:
            self._answer()
        finally:
            with server.lock:
                server.active -= 1
                server.idle.notify_all()

    def _answer(self) -> None:
        server = self.server
        script = server.routes.get(self.path)
        if script is None:
            self.reply(404, b"not found")
            return
        self.send_response(script.status)
        headers = {
            "ETag": f'"{abs(hash(script.body)):x}"',
            "Last-Modified": "Wed, 21 Oct 2015 07:28:00 GMT",
            **script.headers,
        }
        for key, value in headers.items():
            self.send_header(key, value)
        if script.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(len(script.body)))
        self.end_headers()
        try:
            self._send(script)
        except OSError:  # the client went away: stop sending
            self.close_connection = True

    def _send(self, script: Script) -> None:
        for index, piece in enumerate(script.pieces):
            gate = script.hold.get(index)
            if gate is not None:
                gate.wait()
                if self.server.stopping.is_set():
                    raise ConnectionAbortedError
            if script.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if piece else b"")
            else:
                self.wfile.write(piece)
            self.wfile.flush()
            with self.server.lock:
                self.server.sent[self.path] = self.server.sent.get(self.path, 0) + len(piece)
            script.reached[index].set()
            if script.die_after is not None and index + 1 >= script.die_after:
                if script.reset:  # linger 0: close() sends RST instead of FIN
                    linger = struct.pack("ii", 1, 0)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    self.connection.close()
                else:
                    self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
        if script.chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class StreamServer(ThreadedServer):
    """Answers each path in ``routes`` with its :class:`Script`; 404 for the rest."""

    def __init__(self) -> None:
        self.routes: dict[str, Script] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.sent: dict[str, int] = {}
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.active = 0  # requests being answered
        self.stopping = threading.Event()
        super().__init__(StreamHandler)

    def gets(self, path: str) -> int:
        """How many GETs reached ``path``."""
        with self.lock:
            return sum(1 for method, p, _ in self.requests if method == "GET" and p == path)

    def wait_idle(self, timeout: float = 10) -> bool:
        """Wait until no request is being answered (a client that hung up ends its reply
        at the next write); whether that happened in time."""
        with self.idle:
            return self.idle.wait_for(lambda: self.active == 0, timeout)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that give up are part of the tests

    def stop(self) -> None:
        """Release every held piece, stop accepting and close the socket."""
        self.stopping.set()
        for script in self.routes.values():
            for gate in script.hold.values():
                gate.set()
        super().stop()
