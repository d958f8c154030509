"""A real WebDAV server (wsgidav on cheroot) on 127.0.0.1, in a subprocess, serving one
folder read-write to anonymous clients. obstore's HTTP store lists through PROPFIND, so
this is what ``ls`` / ``glob`` over ``http://`` talk to."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from helpers.object_servers import free_port


class WebDAVServer:
    """``wsgidav --root ROOT`` on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        exe = Path(sys.executable).with_name("wsgidav")
        self.process = subprocess.Popen(
            [
                str(exe),
                "--host=127.0.0.1",
                f"--port={self.port}",
                f"--root={root}",
                "--auth=anonymous",
                "--no-config",
                "-qq",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("wsgidav did not start") from None
                time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
