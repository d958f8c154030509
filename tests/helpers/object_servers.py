"""Real servers on 127.0.0.1 for IO tests: a range-capable HTTP object server (in a
thread, with fault injection) and moto's S3 server (in a subprocess)."""

from __future__ import annotations

import hashlib
import socket
import sys
import threading
import time
import urllib.request
from email.utils import formatdate
from pathlib import Path

from helpers.servers import QuietHandler, ServerProcess, ThreadedServer, free_port


class ObjectHandler(QuietHandler):
    """GET (with ``Range``), HEAD, PUT and DELETE over the server's in-memory dict."""

    server: RangeServer

    def _fault(self) -> bool:
        self.server.requests.append((self.command, self.path, dict(self.headers)))
        if self.server.fail_next > 0:
            self.server.fail_next -= 1
            self.reply(503, b"try again")
            return True
        if self.server.stall_secs:
            time.sleep(self.server.stall_secs)
        return False

    def _meta(self, data: bytes) -> dict[str, str]:
        return {
            "ETag": self.server.etag(data),
            "Last-Modified": formatdate(self.server.mtime, usegmt=True),
            "Accept-Ranges": "bytes",
        }

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        started = time.monotonic()
        try:
            self._get()
        finally:
            if "Range" in self.headers:
                with self.server.lock:
                    self.server.ranged_spans.append((started, time.monotonic()))

    def _get(self) -> None:
        if self._fault():
            return
        data = self.server.objects.get(self.path)
        if data is None:
            self.reply(404, b"not found")
            return
        headers = self._meta(data)
        wanted = self.headers.get("If-Match")
        if (
            getattr(self.server, "if_match", True)
            and wanted is not None
            and wanted not in ("*", headers["ETag"])
        ):
            self.reply(412, b"precondition failed", {"ETag": headers["ETag"]})
            return
        spec = self.headers.get("Range")
        if spec is None:
            if self.server.die_mid_body and self.command == "GET":
                self._half_then_die(data, headers)
                return
            self.reply(200, data, headers)
            return
        first, _, last = spec.removeprefix("bytes=").partition("-")
        if first == "":
            start, end = max(len(data) - int(last), 0), len(data) - 1
        else:
            start = int(first)
            end = min(int(last), len(data) - 1) if last else len(data) - 1
        if start >= len(data) or start > end:
            self.reply(416, b"", {"Content-Range": f"bytes */{len(data)}"})
            return
        headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.reply(206, data[start : end + 1], headers)

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """As the base class, but a body goes out at ``server.bytes_per_sec`` at most."""
        rate = self.server.bytes_per_sec
        if not rate or self.command == "HEAD" or len(body) < 2:
            super().reply(status, body, headers)
            return
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        step = max(1, int(rate / 50))  # 50 slices a second
        started = time.monotonic()
        for sent in range(0, len(body), step):
            self.wfile.write(body[sent : sent + step])
            self.wfile.flush()
            ahead = started + (sent + step) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)

    def _half_then_die(self, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.server.half_sent.set()
        self.server.killed.wait(10)
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def do_PUT(self) -> None:
        if self._fault():
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.objects[self.path] = body
        self.reply(201, b"", {"ETag": self._meta(body)["ETag"]})

    def do_DELETE(self) -> None:
        if self._fault():
            return
        found = self.server.objects.pop(self.path, None)
        self.reply(204 if found is not None else 404)


class RangeServer(ThreadedServer):
    """Objects in memory behind :class:`ObjectHandler`, with faults the tests set:
    ``fail_next`` 503s, ``stall_secs`` before answering, ``die_mid_body``; ``if_match``
    (on) answers a GET whose ``If-Match`` names another ETag with 412, as object stores
    do (off: the header is ignored, as by many web servers)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.fail_next = 0
        self.stall_secs = 0.0
        self.die_mid_body = False
        self.if_match = True
        self.bytes_per_sec = 0.0  # per response; 0: as fast as the socket goes
        self.half_sent = threading.Event()
        self.killed = threading.Event()
        self.mtime = time.time()
        self.lock = threading.Lock()
        self.ranged_spans: list[tuple[float, float]] = []  # (start, end) of ranged GETs
        self._etags: dict[int, tuple[bytes, str]] = {}
        super().__init__(ObjectHandler)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # clients that give up (timeouts, killed reads) are part of the tests

    def etag(self, data: bytes) -> str:
        """The quoted MD5 of ``data``, computed once per object body: hashing a 38 MiB
        body for every ranged GET cost ~100 ms a request, which object stores do not."""
        with self.lock:
            hit = self._etags.get(id(data))
        if hit is not None and hit[0] is data:
            return hit[1]
        tag = '"' + hashlib.md5(data).hexdigest() + '"'
        with self.lock:
            if len(self._etags) >= 256:
                self._etags.clear()
            self._etags[id(data)] = (data, tag)  # the body kept: its id stays its own
        return tag

    def most_ranged_at_once(self, margin: float = 0.05) -> int:
        """The most ranged GETs answered at one time, each span trimmed by ``margin``
        seconds at both ends (a client may send its next request a moment before the
        handler of its last one returns)."""
        with self.lock:
            spans = [(a + margin, b - margin) for a, b in self.ranged_spans if b - a > 2 * margin]
        edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        most = now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
        return most

    def kill(self) -> None:
        """Stop accepting, and cut any connection parked mid-body."""
        self.killed.set()
        self.stop()


class MotoServer(ServerProcess):
    """``moto_server -H 127.0.0.1 -p PORT`` in a subprocess, stopped by :meth:`stop`."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        port = free_port()
        exe = Path(sys.executable).with_name("moto_server")
        command = [str(exe), "-H", "127.0.0.1", "-p", str(port)]
        super().__init__(command, port=port, name="moto_server", env=env, timeout=30)

    def create_bucket(self, name: str) -> None:
        request = urllib.request.Request(f"{self.url}/{name}", data=b"", method="PUT")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
