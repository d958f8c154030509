"""The RMA server: one registered memory region, a progress thread and a side channel.

A server registers its memory once (an anonymous buffer for :func:`serve`, a read-only
file mapping for :func:`serve_file`) and then does no per-request work: clients read and
write the region one-sidedly. Two threads run until :meth:`Server.close`: one drives the
provider's progress (software providers move target-side data only while the target
polls or waits on its completion queue), one answers side-channel hellos
(:mod:`dataio.rdma._channel`) and notices clients leaving.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import selectors
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from dataio._closing import Closing
from dataio.exceptions import DeviceError, NotFoundError, PlanError, TransportError
from dataio.rdma._channel import (
    MAX_FRAME,
    PROTOCOL,
    FrameReader,
    format_address,
    parse_address,
    send_frame,
)
from dataio.rdma._cuda import device_buffer
from dataio.rdma._fabric import Endpoint, Region
from dataio.rdma._loader import shim_or_raise

__all__ = ["Server", "serve", "serve_file"]

_HELLO_TIMEOUT_S = 5.0
_SEND_TIMEOUT_S = 2.0
_PROGRESS_SLICE_MS = 100
_open_servers: weakref.WeakSet[Server] = weakref.WeakSet()


def _fabric_node(host: str) -> str | None:
    return None if host in ("", "0.0.0.0", "::") else host


def _listen(host: str, port: int, bind: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        raise TransportError(
            f"cannot listen on bind={bind!r}: {exc.strerror or exc}; pick another port "
            "(0 picks a free one) or an address of this host"
        ) from None


class Server(Closing):
    """A running RMA server; a context manager that closes on exit.

    Attributes:
        local_addr: ``"host:port"`` of the side channel, the address clients connect to.
        provider: the libfabric provider serving (``"tcp;ofi_rxm"``, ``"efa"``, ...).
        size: bytes exposed; valid client offsets are ``0 <= offset <= size``.
        writable: whether clients may write (False for :func:`serve_file`).
        path: the file served, or None.
        cuda: the CUDA device index of the served memory (``serve(cuda=...)``), or None.
    """

    def __init__(
        self,
        *,
        bind: str,
        memory: mmap.mmap | None,
        size: int,
        writable: bool,
        provider: str | None,
        path: str | None = None,
        device: tuple[Any, int] | None = None,
    ) -> None:
        host, port = parse_address(bind, what="bind")
        self.size, self.writable, self.path = size, writable, path
        self._memory = memory
        self._tensor: Any = None if device is None else device[0]
        self.cuda: int | None = None if device is None else device[1]
        self._closed = False
        self._close_lock = threading.Lock()
        self._clients: set[socket.socket] = set()
        shim = shim_or_raise()
        self._shim = shim
        self._endpoint = _endpoint(shim, provider, host, hmem=device is not None)
        self.provider = self._endpoint.provider
        self._export = (
            None if memory is None else shim.ffi.from_buffer(memory, require_writable=False)
        )
        try:
            if self._tensor is not None:
                address = int(self._tensor.data_ptr())
            else:
                address = int(shim.ffi.cast("uintptr_t", self._export))
            lib = shim.lib
            access = lib.FI_REMOTE_READ | (lib.FI_REMOTE_WRITE if writable else 0)
            self._region: Region = self._endpoint.register(
                address, size, access, cuda_device=self.cuda
            )
            self._listener = _listen(host, port, bind)
        except BaseException:
            self._endpoint.close()
            if self._export is not None:
                shim.ffi.release(self._export)
            raise
        self._listener.setblocking(False)
        self.local_addr = format_address(*self._listener.getsockname()[:2])
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = shim.ffi.new("int *", 0)
        self._threads = [
            threading.Thread(target=self._progress, name="dataio-rdma-progress", daemon=True),
            threading.Thread(target=self._channel, name="dataio-rdma-channel", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        _open_servers.add(self)

    # -- public surface -------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    @property
    def clients(self) -> int:
        """How many clients hold an open session."""
        return len(self._clients)

    @property
    def buffer(self) -> Any:
        """The served memory itself (read-only for files): fill it, or inspect writes.

        A ``memoryview`` of host memory, or the ``uint8`` CUDA tensor of ``serve(cuda=...)``.
        """
        if self._closed:
            raise TransportError(f"the server at {self.local_addr} is closed")
        if self._tensor is not None:
            return self._tensor
        assert self._memory is not None
        view = memoryview(self._memory)[: self.size]
        return view.toreadonly() if not self.writable else view

    def close(self) -> None:
        """Stop serving: end every client session, stop the threads, free the region."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._wake_w.send(b"x")
        self._stop[0] = 1
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        self._wake_r.close()
        self._wake_w.close()
        self._endpoint.release(self._region)
        self._endpoint.close()
        if self._export is not None:
            self._shim.ffi.release(self._export)
        # BufferError: the caller still holds a view of .buffer; GC frees the map later.
        if self._memory is not None:
            with contextlib.suppress(BufferError):
                self._memory.close()
        _open_servers.discard(self)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self.clients} client(s)"
        what = f"file {self.path!r}" if self.path else f"{self.size} bytes"
        what += f" on cuda:{self.cuda}" if self.cuda is not None else ""
        return f"<dataio.rdma.Server {self.local_addr} {self.provider} {what}, {state}>"

    # -- threads --------------------------------------------------------------------
    def _progress(self) -> None:
        lib, endpoint = self._shim.lib, self._endpoint
        while not self._stop[0]:
            lib.dio_progress(
                endpoint.fabric, endpoint.cq, endpoint.wait_fd, _PROGRESS_SLICE_MS, self._stop
            )

    def _welcome(self) -> dict[str, Any]:
        return {
            "ok": True,
            "protocol": PROTOCOL,
            "provider": self.provider,
            "fabric": self._endpoint.candidate.fabric,
            "name": self._endpoint.name.hex(),
            "size": self.size,
            "base": self._region.base,
            "key": self._region.key,
            "writable": self.writable,
            "mr_mode": self._endpoint.mr_mode,
        }

    def _greet(self, conn: socket.socket, hello: dict[str, Any]) -> bool:
        """Answer one hello; False when the peer is not a matching client."""
        conn.settimeout(_SEND_TIMEOUT_S)  # a peer that never reads must not stall us
        try:
            wanted = hello.get("provider")
            if hello.get("hello") != PROTOCOL:
                got = str(hello.get("hello"))[:80]
                send_frame(conn, {"ok": False, "error": f"expected {PROTOCOL!r}, got {got!r}"})
                return False
            if wanted and wanted != self.provider:
                error = f"the server speaks {self.provider!r}, not {str(wanted)[:80]!r}"
                send_frame(conn, {"ok": False, "error": error})
                return False
            self._clients.add(conn)  # before the answer, so connect() returning implies it
            send_frame(conn, self._welcome())
            return True
        except OSError:
            self._clients.discard(conn)
            return False

    def _on_hello_bytes(self, selector: selectors.BaseSelector, conn: socket.socket) -> None:
        """Feed what a connecting peer sent; greet it once its hello frame is complete.

        Every failure here (EOF, an oversized or unparsable frame, a failed send) ends
        this one connection; the acceptor keeps serving everyone else.
        """
        pending: _Pending = selector.get_key(conn).data
        try:
            data = conn.recv(MAX_FRAME)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        hello = None
        try:
            if not data:
                raise TransportError("the peer hung up before its hello")
            hello = pending.reader.feed(data)
        except TransportError:
            pass
        else:
            if hello is None:
                return  # more to come, before the deadline
        selector.unregister(conn)
        if hello is not None and self._greet(conn, hello):
            selector.register(conn, selectors.EVENT_READ, "open")
        else:
            conn.close()

    @staticmethod
    def _expire(selector: selectors.BaseSelector) -> float | None:
        """Close handshakes past their deadline; return seconds until the next one."""
        now = time.monotonic()
        soonest = None
        for key in list(selector.get_map().values()):
            if isinstance(key.data, _Pending):
                if key.data.deadline <= now:
                    selector.unregister(key.fileobj)
                    assert isinstance(key.fileobj, socket.socket)
                    key.fileobj.close()
                else:
                    left = key.data.deadline - now
                    soonest = left if soonest is None else min(soonest, left)
        return soonest

    def _channel(self) -> None:
        # One thread, non-blocking sockets: a peer that sends half a hello and stalls
        # holds only its own buffer until its deadline, never the acceptor.
        selector = selectors.DefaultSelector()
        selector.register(self._listener, selectors.EVENT_READ, "accept")
        selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while True:
                for key, _ in selector.select(self._expire(selector)):
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    if key.data == "wake":
                        return
                    if key.data == "accept":
                        try:
                            peer, _ = self._listener.accept()
                        except OSError:  # BlockingIOError, or out of descriptors
                            continue
                        peer.setblocking(False)
                        deadline = time.monotonic() + _HELLO_TIMEOUT_S
                        selector.register(peer, selectors.EVENT_READ, _Pending(deadline))
                    elif isinstance(key.data, _Pending):
                        self._on_hello_bytes(selector, conn)
                    else:  # an open session: EOF, or a protocol violation, ends it
                        selector.unregister(conn)
                        self._clients.discard(conn)
                        conn.close()
        finally:
            for key in list(selector.get_map().values()):
                if key.data not in ("accept", "wake"):
                    assert isinstance(key.fileobj, socket.socket)
                    key.fileobj.close()
            self._clients.clear()
            selector.close()
            self._listener.close()


class _Pending:
    """A connection that has not yet sent a complete hello."""

    __slots__ = ("deadline", "reader")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.reader = FrameReader()


def _endpoint(shim: Any, provider: str | None, host: str, *, hmem: bool) -> Endpoint:
    try:
        return Endpoint(shim, provider=provider, node=_fabric_node(host), hmem=hmem)
    except TransportError as exc:
        if hmem:  # the same wording as connect(..., cuda=True)
            raise DeviceError(
                f"serve(..., cuda=True): no provider offers a device-memory (FI_HMEM) path "
                f"here: {exc}"
            ) from None
        raise


def serve(
    *,
    bind: str = "127.0.0.1:0",
    buffer_size: int,
    provider: str | None = None,
    cuda: bool | int = False,
) -> Server:
    """Serve a fresh zero-filled buffer of ``buffer_size`` bytes for remote reads and writes.

    Args:
        bind: ``"host:port"`` to listen on; port 0 picks a free one (see ``local_addr``).
            The fabric endpoint binds to the same host.
        buffer_size: bytes to expose (at least 1); the server fills or inspects them via
            ``.buffer``.
        provider: a libfabric provider (``"tcp;ofi_rxm"``, ``"sockets"``, ``"efa"``,
            ``"verbs;ofi_rxm"``); default: a NIC provider if one matches, else
            ``tcp;ofi_rxm``. ``FI_PROVIDER`` in the environment also filters.
        cuda: serve GPU memory (GPUDirect RDMA): ``True`` or a device index allocates the
            buffer as a ``uint8`` CUDA tensor on that device (``.buffer``), registered
            with ``FI_HMEM`` so peers' NICs read and write VRAM directly.

    Raises:
        PlanError: ``buffer_size`` is not a positive integer.
        TransportError: libfabric, the shim or a matching provider is missing.
        DeviceError: ``cuda=`` where the host has no GPU, libfabric is older than 1.9,
            or no provider offers ``FI_HMEM`` (the same checks as ``connect(cuda=True)``).

    Example::

        with rdma.serve(bind="127.0.0.1:0", buffer_size=1 << 20) as server:
            server.buffer[:5] = b"hello"
            print(server.local_addr)
    """
    if not isinstance(buffer_size, int) or isinstance(buffer_size, bool) or buffer_size <= 0:
        raise PlanError(
            f"buffer_size must be a positive number of bytes, got {buffer_size!r}; "
            "a zero-byte region would have nothing to read or write"
        )
    if cuda is not False:
        shim = shim_or_raise()
        device = device_buffer(buffer_size, cuda, int(shim.lib.fi_version()))
        return Server(
            bind=bind, memory=None, size=buffer_size, writable=True, provider=provider,
            device=device,
        )  # fmt: skip
    memory = mmap.mmap(-1, buffer_size)
    try:
        return Server(bind=bind, memory=memory, size=buffer_size, writable=True, provider=provider)
    except BaseException:
        memory.close()
        raise


def serve_file(
    path: str | os.PathLike[str], *, bind: str = "127.0.0.1:0", provider: str | None = None
) -> Server:
    """Serve a file read-only: clients read any byte range; writes are refused.

    The file is memory-mapped and registered as is, so a self-describing format such as
    safetensors needs no extra protocol: a client reads the header, then each tensor's
    byte range.

    Args:
        path: the file to serve.
        bind: ``"host:port"`` to listen on (port 0 picks a free one).
        provider: as for :func:`serve`.

    Raises:
        NotFoundError: ``path`` does not exist.
        TransportError: libfabric, the shim or a matching provider is missing.

    Example::

        server = rdma.serve_file("model.safetensors", bind="127.0.0.1:0")
    """
    text = os.fspath(path)
    try:
        with open(text, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            memory = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else mmap.mmap(-1, 1)
            )
    except FileNotFoundError:
        raise NotFoundError(f"no such file {text!r} to serve; check the path") from None
    try:
        return Server(
            bind=bind,
            memory=memory,
            size=size,
            writable=False,
            provider=provider,
            path=str(Path(text).resolve()),
        )
    except BaseException:
        memory.close()
        raise


def close_all() -> None:
    """Close servers still open (at interpreter exit)."""
    for server in list(_open_servers):
        server.close()
