"""What every loopback test server shares: a free port, a subprocess server that is
waited for and stopped, and an HTTP server serving from a thread."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_listening(
    port: int, process: subprocess.Popen[bytes], *, name: str, timeout: float = 60
) -> None:
    """Return once ``127.0.0.1:port`` accepts connections; stop ``process`` and raise
    when it exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_process(process)
                raise RuntimeError(f"{name} did not start on port {port}") from None
            time.sleep(0.05)


def stop_process(process: subprocess.Popen[bytes], timeout: float = 5) -> None:
    """Terminate ``process`` if it still runs, killing it when it ignores that."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


class ServerProcess:
    """A server command in a subprocess, listening on ``port``; stopped by :meth:`stop`."""

    def __init__(
        self,
        command: list[str],
        *,
        port: int,
        name: str,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> None:
        self.port = port
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        wait_until_listening(port, self.process, name=name, timeout=timeout)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop_process(self.process)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1, no access log, and :meth:`reply` for whole answers."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` (left out for HEAD) and a Content-Length."""
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class ThreadedServer(ThreadingHTTPServer):
    """An HTTP server on a free loopback port, serving from a daemon thread until
    :meth:`stop`."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", free_port()), handler)
        self.thread = threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        """Stop accepting and close the socket."""
        self.shutdown()
        self.server_close()
        self.thread.join(5)
