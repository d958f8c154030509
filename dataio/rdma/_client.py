"""The RMA client: one endpoint addressing one server's region, and the transfer verbs.

A transfer is split into ``chunk_size`` segments with up to ``max_inflight`` posted at
once; the loop runs in C without the GIL (``dio_transfer`` in the shim). Local memory is
the caller's own: it is registered only where the provider demands it
(``FI_MR_LOCAL``, device memory), never staged through a copy. Writes ask for
``FI_DELIVERY_COMPLETE``, so a completed write has landed in the server's memory.
"""

from __future__ import annotations

import socket
import threading
import weakref
from typing import Any

from dataio._closing import Closing
from dataio.exceptions import DeviceError, OutOfRangeError, PlanError, TransportError
from dataio.rdma._buffers import Local, local_buffer
from dataio.rdma._channel import PROTOCOL, parse_address, recv_frame, send_frame
from dataio.rdma._cuda import require_cuda
from dataio.rdma._fabric import Endpoint, error_text
from dataio.rdma._loader import shim_or_raise

__all__ = ["Client", "connect", "read", "read_into", "write"]

DEFAULT_CHUNK_SIZE = 4 << 20
DEFAULT_MAX_INFLIGHT = 8
DEFAULT_TIMEOUT_S = 30.0
_open_clients: weakref.WeakSet[Client] = weakref.WeakSet()


def _check_options(chunk_size: int, max_inflight: int, timeout: float) -> None:
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise PlanError(f"chunk_size must be a positive number of bytes, got {chunk_size!r}")
    if not isinstance(max_inflight, int) or not 1 <= max_inflight <= 4096:
        raise PlanError(f"max_inflight must be an integer in 1..4096, got {max_inflight!r}")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise PlanError(f"timeout must be a positive number of seconds, got {timeout!r}")


_WELCOME_INTS = ("size", "base", "key")


def _check_welcome(welcome: dict[str, Any], addr: str) -> tuple[str, bytes]:
    """Validate a welcome frame's fields; return its provider and fabric address.

    A server that answers with missing or mistyped fields is not a dataio.rdma server
    (or a broken one): that is a :class:`TransportError`, never a ``KeyError``.
    """

    def bad(field: str) -> TransportError:
        value = str(welcome.get(field, "<missing>"))[:80]
        return TransportError(
            f"the server at {addr!r} sent a malformed welcome: field {field!r} is {value!r}; "
            "is it a dataio.rdma server of the same version?"
        )

    for field in _WELCOME_INTS:
        value = welcome.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
            raise bad(field)
    if not isinstance(welcome.get("writable"), bool):
        raise bad("writable")
    provider = welcome.get("provider")
    if not isinstance(provider, str) or not provider or len(provider) > 256:
        raise bad("provider")
    name = welcome.get("name")
    if not isinstance(name, str):
        raise bad("name")
    try:
        raw = bytes.fromhex(name)
    except ValueError:
        raise bad("name") from None
    if not raw:
        raise bad("name")
    return provider, raw


class Client(Closing):
    """A session with one server; a context manager that closes on exit.

    Use it with :func:`read`, :func:`write` and :func:`read_into`. One transfer runs at
    a time per client (threads sharing a client take turns); open one client per thread
    for concurrency.

    Attributes:
        addr: the server's ``"host:port"``.
        provider: the libfabric provider in use (the server's).
        size: bytes the server exposes.
        writable: whether the server accepts writes.
        cuda: whether device (``FI_HMEM``) buffers are accepted.
        chunk_size, max_inflight, timeout: the transfer settings.
    """

    def __init__(
        self,
        addr: str,
        *,
        cuda: bool,
        provider: str | None,
        chunk_size: int,
        max_inflight: int,
        timeout: float,
    ) -> None:
        _check_options(chunk_size, max_inflight, timeout)
        host, port = parse_address(addr)
        self.addr, self.cuda, self.timeout = addr, bool(cuda), float(timeout)
        self._closed = False
        self._broken: str | None = None
        self._lock = threading.Lock()
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise TransportError(
                f"no dataio.rdma server answers at {addr!r} ({exc.strerror or exc}); "
                "is it running, and is this its local_addr?"
            ) from None
        try:
            self._handshake(provider)
        except BaseException:
            self._sock.close()
            raise
        inflight = min(max_inflight, self._endpoint.tx_size)
        self.chunk_size = min(chunk_size, self._endpoint.max_msg_size)
        self.max_inflight = inflight
        self._contexts = self._shim.ffi.new("struct fi_context2[]", inflight)
        _open_clients.add(self)

    def _handshake(self, provider: str | None) -> None:
        send_frame(self._sock, {"hello": PROTOCOL, "provider": provider})
        try:
            welcome = recv_frame(self._sock)
        except (OSError, TransportError) as exc:
            raise TransportError(
                f"{self.addr!r} did not answer the dataio.rdma handshake ({exc}); "
                "is it a dataio.rdma server?"
            ) from None
        if welcome.get("ok") is not True:
            raise TransportError(
                f"the server at {self.addr} refused the session: {str(welcome.get('error'))[:200]}"
            )
        self.provider, name = _check_welcome(welcome, self.addr)
        self.size, self.writable = welcome["size"], welcome["writable"]
        self._base, self._key = welcome["base"], welcome["key"]
        self._shim = shim_or_raise()
        if self.cuda:
            require_cuda(
                "connect(..., cuda=True)",
                int(self._shim.lib.fi_version()),
                instead="connect without cuda=True to read into host memory",
            )
        local_host = self._sock.getsockname()[0]
        try:
            self._endpoint = Endpoint(
                self._shim, provider=self.provider, node=local_host, hmem=self.cuda
            )
        except TransportError as exc:
            if self.cuda:
                raise DeviceError(
                    f"connect(..., cuda=True): the server's provider {self.provider!r} "
                    f"offers no device-memory (FI_HMEM) path here: {exc}"
                ) from None
            raise
        try:
            if len(name) < len(self._endpoint.name):
                # fi_av_insert reads a full provider-sized address: a short one would be
                # read past its end.
                raise TransportError(
                    f"the server at {self.addr!r} sent a {len(name)}-byte fabric address; "
                    f"{self.provider!r} addresses are {len(self._endpoint.name)} bytes"
                )
            self._peer = self._endpoint.insert(name)
        except BaseException:
            self._endpoint.close()
            raise
        self._sock.settimeout(None)

    # -- public surface -------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self._closed

    def close(self) -> None:
        """End the session and free the endpoint; waits for a running transfer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._broken is None:
                self._endpoint.close()
            self._sock.close()
        _open_clients.discard(self)

    def __del__(self) -> None:
        # A forgotten client still frees its endpoint; nothing else would (a WeakSet).
        if not getattr(self, "_closed", True) and hasattr(self, "_endpoint"):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("failed" if self._broken else "open")
        return f"<dataio.rdma.Client {self.addr} {self.provider} {self.size} bytes, {state}>"

    # -- transfers ------------------------------------------------------------------
    def _server_gone(self) -> bool:
        try:
            data = self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            return True
        return data == b""

    def _check_usable(self) -> None:
        if self._closed:
            raise TransportError(f"this client of {self.addr} is closed; connect again")
        if self._broken is not None:
            raise TransportError(
                f"this client of {self.addr} failed earlier ({self._broken}); connect again"
            )

    def _break(self, reason: str) -> None:
        """Give up on the session: closing the endpoint cancels whatever is still posted."""
        self._broken = reason
        self._endpoint.close()

    def _check_range(self, offset: int, length: int) -> None:
        if not isinstance(offset, int) or not isinstance(length, int):
            raise PlanError(f"offset and size must be integers, got {offset!r} and {length!r}")
        if offset < 0 or length < 0 or offset + length > self.size:
            raise OutOfRangeError(
                f"offset={offset} size={length} falls outside the {self.size}-byte region "
                f"served at {self.addr}; valid ranges lie within 0..{self.size}"
            )

    def _transfer(self, *, write: bool, local: Local, offset: int, length: int) -> int:
        """Move ``length`` bytes between ``local`` and the server at ``offset``."""
        self._check_usable()
        self._check_range(offset, length)
        if write and not self.writable:
            raise TransportError(
                f"the server at {self.addr} is read-only (it serves a file); write refused"
            )
        if local.cuda_device is not None and not self.cuda:
            raise DeviceError(
                f"the buffer lives on cuda:{local.cuda_device}; open the client with "
                "connect(addr, cuda=True) to read into device memory"
            )
        if length == 0:
            return 0
        with self._lock:
            self._check_usable()
            if self._server_gone():
                self._break("the server closed the session")
                raise TransportError(
                    f"the dataio.rdma server at {self.addr} has closed; connect to a running one"
                )
            return self._run(write, local, offset, length)

    def _run(self, write: bool, local: Local, offset: int, length: int) -> int:
        ffi, lib, endpoint = self._shim.ffi, self._shim.lib, self._endpoint
        region = None
        if local.cuda_device is not None or endpoint.register_local:
            access = lib.FI_WRITE if write else lib.FI_READ
            region = endpoint.register(local.address, length, access, cuda_device=local.cuda_device)
        x = ffi.new("struct dio_xfer *")
        x.ep, x.cq, x.peer = endpoint.ep, endpoint.cq, self._peer
        x.is_write = int(write)
        x.local = ffi.cast("char *", local.address)
        x.desc = region.desc if region is not None else ffi.NULL
        x.length = length
        x.remote_addr = self._base + offset
        x.key = self._key
        x.chunk = self.chunk_size
        x.inflight = self.max_inflight
        x.contexts = self._contexts
        x.flags = lib.FI_COMPLETION | (lib.FI_DELIVERY_COMPLETE if write else 0)
        x.timeout_ms = max(1, int(self.timeout * 1000))
        x.alive_fd = self._sock.fileno()
        x.fabric, x.wait_fd = endpoint.fabric, endpoint.wait_fd
        rc = lib.dio_transfer(x)
        if rc == 0:
            if region is not None:
                endpoint.release(region)
            return length
        message = ffi.string(x.message).decode(errors="replace") or error_text(self._shim, rc)
        self._break(message)
        verb = "write to" if write else "read from"
        if rc == -lib.FI_ECONNRESET:
            raise TransportError(f"{verb} {self.addr} failed: {message}; the server is gone")
        raise TransportError(f"{verb} {self.addr} over {self.provider} failed: {message}")


def connect(
    addr: str,
    *,
    cuda: bool = False,
    provider: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_inflight: int = DEFAULT_MAX_INFLIGHT,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Client:
    """Open a session with the server at ``addr`` (its ``local_addr``).

    Args:
        addr: ``"host:port"`` of a server started by :func:`serve` or :func:`serve_file`.
        cuda: accept CUDA tensors in :func:`read_into` (GPUDirect RDMA, ``FI_HMEM``);
            needs a GPU and an HMEM-capable provider, else :class:`DeviceError`.
        provider: insist on this provider; the server must speak it.
        chunk_size: bytes per posted operation (capped at the provider's maximum).
        max_inflight: operations posted at once (capped at the provider's queue size).
        timeout: seconds to wait for the handshake, and for each next completion.

    Raises:
        TransportError: nothing answers at ``addr``, the handshake or fabric open failed.
        DeviceError: ``cuda=True`` where there is no GPU or no HMEM provider.

    Example::

        with rdma.connect(server.local_addr) as client:
            rdma.write(client, offset=0, data=b"hello rdma")
            assert rdma.read(client, offset=0, size=10) == b"hello rdma"
    """
    return Client(
        addr,
        cuda=cuda,
        provider=provider,
        chunk_size=chunk_size,
        max_inflight=max_inflight,
        timeout=timeout,
    )


def _client(handle: Any) -> Client:
    if not isinstance(handle, Client):
        raise PlanError(f"expected a client from rdma.connect(), got {type(handle).__name__}")
    return handle


def read(handle: Client, *, offset: int = 0, size: int) -> bytes:
    """Read ``size`` bytes at ``offset`` of the server's region.

    Returns a new ``bytes`` (one copy after the transfer); :func:`read_into` avoids it.

    Raises:
        OutOfRangeError: the range leaves the region.
        TransportError: the server is gone or the transfer failed.

    Example::

        header = rdma.read(client, offset=0, size=8)
    """
    client = _client(handle)
    if not isinstance(size, int) or size < 0:
        raise OutOfRangeError(f"size must be a non-negative integer, got {size!r}")
    target = bytearray(size)
    read_into(client, target, offset=offset)
    return bytes(target)


def write(handle: Client, *, offset: int = 0, data: Any) -> int:
    """Write ``data`` (bytes-like, NumPy array or tensor) at ``offset``; return its size.

    ``data`` itself is the RMA source (no copy). The call returns once the bytes have
    landed in the server's memory (``FI_DELIVERY_COMPLETE``).

    Raises:
        OutOfRangeError: the range leaves the region.
        TransportError: the server is read-only or gone, or the transfer failed.

    Example::

        rdma.write(client, offset=4096, data=np.arange(10, dtype=np.float32))
    """
    client = _client(handle)
    local = local_buffer(client._shim.ffi, data, writable=False, what="write(data=...)")
    try:
        return client._transfer(write=True, local=local, offset=offset, length=local.nbytes)
    finally:
        local.release()


def read_into(handle: Client, buffer: Any, *, offset: int = 0, size: int | None = None) -> int:
    """Read into ``buffer`` directly (no intermediate copy); return the bytes read.

    Args:
        handle: a client from :func:`connect`.
        buffer: a writable contiguous ``bytearray``, ``memoryview``, NumPy array,
            ``mmap``, or torch tensor (CPU, pinned, or CUDA on a ``cuda=True`` client).
        offset: where in the server's region to start.
        size: bytes to read into the start of ``buffer`` (default: all of it).

    Raises:
        OutOfRangeError: the range leaves the region, or ``size`` exceeds the buffer.
        TransportError: the server is gone or the transfer failed.
        DeviceError: a CUDA tensor on a client opened without ``cuda=True``.

    Example::

        out = np.empty(1024, dtype=np.float32)
        rdma.read_into(client, out, offset=tensor_offset)
    """
    client = _client(handle)
    local = local_buffer(client._shim.ffi, buffer, writable=True, what="read_into(buffer)")
    try:
        length = local.nbytes if size is None else size
        if not isinstance(length, int) or not 0 <= length <= local.nbytes:
            raise OutOfRangeError(
                f"size={size!r} does not fit the {local.nbytes}-byte buffer; "
                f"pass 0 <= size <= {local.nbytes}"
            )
        return client._transfer(write=False, local=local, offset=offset, length=length)
    finally:
        local.release()


def close_all() -> None:
    """Close clients still open (at interpreter exit)."""
    for client in list(_open_clients):
        client.close()
