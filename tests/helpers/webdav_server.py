"""A real WebDAV server (wsgidav on cheroot) on 127.0.0.1, in a subprocess, serving one
folder read-write to anonymous clients. obstore's HTTP store lists through PROPFIND, so
this is what ``ls`` / ``glob`` over ``http://`` talk to."""

from __future__ import annotations

import sys
from pathlib import Path

from helpers.servers import ServerProcess, free_port


class WebDAVServer(ServerProcess):
    """``wsgidav --root ROOT`` on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        port = free_port()
        exe = Path(sys.executable).with_name("wsgidav")
        command = [
            str(exe),
            "--host=127.0.0.1",
            f"--port={port}",
            f"--root={root}",
            "--auth=anonymous",
            "--no-config",
            "-qq",
        ]
        super().__init__(command, port=port, name="wsgidav", timeout=30)
