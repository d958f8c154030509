"""``stream(uri)``: an object's body read on demand, as bytes, lines or Server-Sent Events.

Opening waits for the response headers only, so a missing object fails at once. The
byte, line and event iterators share one cursor. A body is never requested twice:
once the response is open, a broken connection is an error for the caller, not a
silent retry (obstore would resume a broken body with a ranged request, so remote
object stores are read through a copy of their store with retries off).

``http(s)`` bodies are read with the standard library rather than obstore, because
obstore refuses responses without a ``Content-Length`` (chunked bodies, event streams).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from dataio._closing import Closing
from dataio.exceptions import (
    DataioError,
    DecodeError,
    NotFoundError,
    TransportError,
    TransportTimeoutError,
)
from dataio.io.config import credentials_for, derived_store, redact, store_for, transport_for
from dataio.io.errors import call, translate
from dataio.io.local import open_regular
from dataio.io.uri import Location, parse

if TYPE_CHECKING:
    from obstore.store import ObjectStore

__all__ = ["SSEEvent", "Stream", "stream"]

_MIB = 1 << 20
DEFAULT_LIMIT = 8 * _MIB
_CHUNK = 64 << 10
_READ_AHEAD = 4 * _MIB  # bytes an object-store body is read ahead of its caller
_DEFAULT_WAIT_SECS = 30.0  # obstore's default request timeout, applied per wait
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class SSEEvent:
    """One Server-Sent Event.

    Attributes:
        event: the event type (``"message"`` when the block names none).
        data: the block's ``data`` lines joined by ``"\\n"``.
        id: the last event ID the stream has set so far (as ``EventSource`` keeps it),
            or ``None``.
        retry: the last reconnection time in milliseconds the stream has set, or ``None``.
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class _Body:
    """The body of one open response: ``next_chunk`` gives bytes or ``None`` at the end."""

    size: int | None = None

    def next_chunk(self) -> bytes | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Stream(Closing):
    """An open object body, read on demand.

    :meth:`iter_bytes` (also plain iteration), :meth:`iter_lines`, :meth:`iter_sse`,
    :meth:`read` and :meth:`read_all` all advance one cursor: bytes that one of them
    buffered and did not hand out are where the next one starts. A stream never ends
    short: a body that breaks off, is reset or ends before its declared size raises
    :class:`~dataio.exceptions.TransportError` naming the URI and the byte offset, and so
    does a read under way that :meth:`close` (from another thread) cuts. A read begun
    after :meth:`close` raises :class:`~dataio.exceptions.DataioError`.
    """

    def __init__(self, uri: str, body: _Body, *, line_limit: int, event_limit: int) -> None:
        self.uri = uri
        self.size = body.size
        self.line_limit = line_limit
        self.event_limit = event_limit
        self._body = body
        self._buf = bytearray()
        self._pos = 0
        self._eof = False
        self._closed = False
        self._position = 0  # bytes handed to the caller
        self._received = 0  # bytes taken from the body
        self._last_id: str | None = None
        self._retry: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"at byte {self._position}"
        return f"<dataio.Stream {redact(self.uri)!r} {state}>"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def tell(self) -> int:
        """How many body bytes the caller has been given so far."""
        return self._position

    def readable(self) -> bool:
        return True

    # -- the cursor ----------------------------------------------------------------------

    def _next_chunk(self) -> bytes | None:
        """The next body chunk, ``None`` at the end; never ends short without an error."""
        if self._closed:  # closed while a read was under way
            raise self._cut()
        if self._eof:
            return None
        try:
            chunk = self._body.next_chunk()
        except DataioError as exc:
            self._eof = True
            if self._closed:  # close() from another thread cut the pending read
                raise self._cut() from None
            self.close()
            raise _broken(exc, self.uri, self._received, self.size) from None
        if self._closed:
            self._eof = True
            raise self._cut()
        if chunk is None:
            self._eof = True
            if self.size is not None and self._received < self.size:
                self.close()
                raise _short(self.uri, self._received, self.size)
            return None
        self._received += len(chunk)
        return chunk

    def _cut(self) -> TransportError:
        return TransportError(
            f"stream {redact(self.uri)!r} was closed by close() during a read, at byte "
            f"{self._received}{_of(self.size)}; open a new stream to read it again"
        )

    def _pull(self) -> bool:
        """Append the next body chunk to the buffer; ``False`` at the end of the body."""
        chunk = self._next_chunk()
        if chunk is None:
            return False
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += chunk
        return True

    def _take(self, n: int) -> bytes:
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += len(out)
        self._position += len(out)
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return out

    def _line(self) -> bytes | None:
        """The next line without its terminator (LF, CRLF or CR), or ``None`` at the end."""
        scan = self._pos
        while True:
            buf = self._buf
            lf = buf.find(b"\n", scan)
            cr = buf.find(b"\r", scan, lf if lf >= 0 else len(buf))
            end = cr if cr >= 0 else lf
            if end >= 0:
                width = 1
                if end == cr:
                    if end + 1 == len(buf):  # a CR at the buffer's end: is an LF next?
                        rel = end - self._pos
                        if self._pull():
                            scan = self._pos + rel
                            continue
                    elif buf[end + 1] == 0x0A:
                        width = 2
                self._check_line(end - self._pos)
                line = self._take(end - self._pos)
                self._take(width)
                return line
            pending = len(buf) - self._pos
            self._check_line(pending)
            if not self._pull():
                return self._take(pending) if pending else None
            scan = self._pos + pending

    def _check_line(self, length: int) -> None:
        if length > self.line_limit:
            self.close()
            raise DataioError(
                f"a line of stream {redact(self.uri)!r} is longer than line_limit="
                f"{self.line_limit} bytes; pass a larger line_limit to dataio.stream(...)"
            )

    # -- the readers ---------------------------------------------------------------------

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (all the rest when negative); ``b""`` at the end.

        Example:
            >>> header = dataio.stream("s3://bucket/big.bin").read(512)  # doctest: +SKIP
        """
        self._check_open()
        if size is None or size < 0:
            return self.read_all()
        while len(self._buf) - self._pos < size and self._pull():
            pass
        return self._take(size)

    def read_all(self) -> bytes:
        """The rest of the body, materialized as bytes.

        Example:
            >>> rest = dataio.stream("https://host/file.bin").read_all()  # doctest: +SKIP
        """
        self._check_open()
        parts = [self._take(len(self._buf) - self._pos)]
        while (chunk := self._next_chunk()) is not None:
            self._position += len(chunk)
            parts.append(chunk)
        return b"".join(parts)

    def iter_bytes(self) -> Iterator[bytes]:
        """The body's bytes as they arrive (buffered leftovers first).

        Example:
            >>> for chunk in dataio.stream("s3://bucket/big.bin").iter_bytes():  # doctest: +SKIP
            ...     digest.update(chunk)
        """
        self._check_open()
        while True:
            if self._pos < len(self._buf):
                yield self._take(len(self._buf) - self._pos)
                continue
            chunk = self._next_chunk()
            if chunk is None:
                return
            self._position += len(chunk)
            yield chunk

    def __iter__(self) -> Iterator[bytes]:
        return self.iter_bytes()

    def iter_lines(self) -> Iterator[str]:
        """The body's UTF-8 lines, without their terminators (LF, CRLF or CR).

        Example:
            >>> for line in dataio.stream("https://host/log.txt").iter_lines():  # doctest: +SKIP
            ...     print(line)
        """
        self._check_open()
        while (raw := self._line()) is not None:
            yield self._text(raw)

    def iter_sse(self) -> Iterator[SSEEvent]:
        """The body parsed as Server-Sent Events (``text/event-stream``).

        Comment lines are skipped, blocks without ``data`` dispatch nothing, and an
        unfinished block at the end of the body is dropped, as browsers do.

        Example:
            >>> with dataio.stream("http://host/events") as s:  # doctest: +SKIP
            ...     for event in s.iter_sse():
            ...         print(event.event, event.data)
        """
        self._check_open()
        while (event := self._next_event()) is not None:
            yield event

    def _next_event(self) -> SSEEvent | None:
        data: list[str] = []
        kind = ""
        size = 0
        while True:
            start = self._position
            raw = self._line()
            if raw is None:
                return None
            if start == 0 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if not raw:
                if data:
                    return SSEEvent(kind or "message", "\n".join(data), self._last_id, self._retry)
                kind = ""
                continue
            size += len(raw) + 1
            if size > self.event_limit:
                self.close()
                raise DataioError(
                    f"an event of stream {redact(self.uri)!r} is larger than event_limit="
                    f"{self.event_limit} bytes; pass a larger event_limit to dataio.stream(...)"
                )
            line = self._text(raw)
            if line.startswith(":"):
                continue
            name, colon, value = line.partition(":")
            if colon and value.startswith(" "):
                value = value[1:]
            if name == "data":
                data.append(value)
            elif name == "event":
                kind = value
            elif name == "id" and "\0" not in value:
                self._last_id = value
            elif name == "retry" and value.isascii() and value.isdigit():
                self._retry = int(value)

    def _text(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(
                f"stream {redact(self.uri)!r} holds a line that is not UTF-8 ({exc.reason} at "
                f"byte {exc.start} of {raw[:40]!r}); read it with iter_bytes() instead"
            ) from None

    def _check_open(self) -> None:
        if self._closed:
            raise self._closed_error()

    def _closed_error(self) -> DataioError:
        return DataioError(
            f"stream {redact(self.uri)!r} is closed (at byte {self._position}); "
            "open a new one to read again"
        )

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop reading: a pending read is cut short and the connection is released.

        Example:
            >>> s = dataio.stream("http://host/events")  # doctest: +SKIP
            >>> s.close()  # doctest: +SKIP
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._buf.clear()
        self._pos = 0
        self._body.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _broken(exc: DataioError, uri: str, received: int, size: int | None) -> DataioError:
    """``exc`` told as a failure at byte ``received`` of a body, which is never retried."""
    kind = type(exc) if isinstance(exc, TransportError | TransportTimeoutError) else TransportError
    target = f"stream {redact(uri)!r}"
    reason = str(exc)
    if reason.startswith(target + " "):  # said once, in front
        reason = reason[len(target) + 1 :].removeprefix("failed: ")
    return kind(
        f"{target} broke off at byte {received}{_of(size)}: {reason}; a stream is not "
        "retried once its body has started: open a new stream to read it again"
    )


def _short(uri: str, received: int, size: int) -> TransportError:
    """A body that ended before the size its response (or file) declared."""
    return TransportError(
        f"stream {redact(uri)!r} ended at byte {received} of {size}, short of the size its "
        "Content-Length (or file size) declared: the server closed the connection early or "
        "the object shrank; a stream is not retried once its body has started: open a new "
        "stream to read it again"
    )


def _of(size: int | None) -> str:
    return "" if size is None else f" of {size}"


def stream(
    uri: str | os.PathLike[str],
    *,
    line_limit: int = DEFAULT_LIMIT,
    event_limit: int = DEFAULT_LIMIT,
) -> Stream:
    """Open an object for sequential reading; the body is read as the caller asks.

    The request is sent and its response headers awaited now, so a missing object
    raises here. ``configure_transport(scheme, timeout_secs=...)`` bounds each wait
    for more data (default 30 s), not the time the caller spends between reads.

    Args:
        uri: a local path or a ``file://``, ``s3://``, ``r2://``, ``gs://``, ``az://``,
            ``hf://`` or ``http(s)://`` URI.
        line_limit: the longest line, in bytes, :meth:`Stream.iter_lines` and
            :meth:`Stream.iter_sse` accept.
        event_limit: the largest Server-Sent Event, in bytes.

    Raises:
        NotFoundError: there is no object at ``uri``.
        TransportError: the server cannot be reached, or breaks off mid-body.
        TransportTimeoutError: no data arrived within the timeout.

    Example:
        >>> with dataio.stream("http://127.0.0.1:8000/events") as s:  # doctest: +SKIP
        ...     for event in s.iter_sse():
        ...         print(event.data)
    """
    for label, value in (("line_limit", line_limit), ("event_limit", event_limit)):
        if not isinstance(value, int) or value < 1:
            raise DataioError(f"{label} must be a positive number of bytes, got {value!r}")
    text = os.fspath(uri)
    loc = parse(text)
    if loc.scheme == "file":
        body: _Body = _LocalBody(loc, text)
    elif loc.scheme in ("http", "https"):
        body = _HttpBody(loc, text)
    else:
        body = _StoreBody(loc, text)
    return Stream(text, body, line_limit=line_limit, event_limit=event_limit)


# -- bodies --------------------------------------------------------------------------------


class _LocalBody(_Body):
    def __init__(self, loc: Location, uri: str) -> None:
        def open_file() -> Any:
            fd, self.size = open_regular(loc.path, "stream")
            return os.fdopen(fd, "rb", buffering=0)

        self.uri = uri
        self._file = call(open_file, uri, "stream")

    def next_chunk(self) -> bytes | None:
        chunk = call(lambda: self._file.read(_CHUNK), self.uri, "stream")
        return chunk or None

    def close(self) -> None:
        self._file.close()


def _wait_secs(scheme: str) -> float:
    return transport_for(scheme).timeout_secs or _DEFAULT_WAIT_SECS


def _stream_store(loc: Location) -> tuple[ObjectStore, dict[str, Any]]:
    """A copy of the scheme's store for streams, and the retry plan of its opens.

    The copy has no overall request deadline (a stream lasts as long as the caller
    reads), a per-read timeout instead, and no retries: obstore would otherwise resume
    a broken body with a second, ranged request.
    """
    from obstore.store import LocalStore, MemoryStore

    base = store_for(loc)
    if isinstance(base, LocalStore | MemoryStore):  # hf:// offline: the shared hub cache
        return base, {"max_retries": 0}
    args, kwargs = base.__getnewargs_ex__()
    retry = dict(kwargs.get("retry_config") or {})

    def build() -> ObjectStore:
        wait = _wait_secs(loc.scheme)
        client = dict(kwargs.get("client_options") or {})
        client["timeout"] = timedelta(days=3650)
        client["read_timeout"] = timedelta(seconds=wait)
        client.setdefault("connect_timeout", timedelta(seconds=min(wait, 10.0)))
        options = {**kwargs, "client_options": client, "retry_config": {"max_retries": 0}}
        return type(base)(*args, **options)

    return derived_store(base, "stream", build), retry


def _retrying(open_once: Callable[[], Any], retry: dict[str, Any], uri: str) -> Any:
    """Open a response, retrying (before any body byte is read) what obstore would retry."""
    attempts = int(retry.get("max_retries", 3)) + 1
    backoff = retry.get("backoff") or {}
    delay = _secs(backoff.get("init_backoff"), 0.05)
    ceiling = _secs(backoff.get("max_backoff"), 1.0)
    for attempt in range(attempts):
        try:
            return call(open_once, uri, "stream")
        except (TransportError, TransportTimeoutError, _ServerError) as exc:
            if attempt + 1 == attempts:
                if isinstance(exc, _ServerError):
                    raise DataioError(str(exc)) from None
                raise
        time.sleep(delay)  # backoff between attempts, as obstore does
        delay = min(delay * float(backoff.get("base", 2)), ceiling)
    raise AssertionError("unreachable")


def _secs(value: Any, default: float) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    return default


class _ServerError(DataioError):
    """A 5xx answer to an open: retried, then reported."""


class _StoreBody(_Body):
    """A body read through obstore (object stores such as S3 and R2).

    obstore's blocking iterator cannot be interrupted, so a reader thread pulls the body
    into a bounded queue and callers wait on the queue, which :meth:`close` wakes. When
    the caller is slower than the network, one call takes every chunk that has arrived.
    A reader thread that is itself waiting on the network when the stream closes ends at
    its next chunk or its read timeout, and drops the connection then.
    """

    def __init__(self, loc: Location, uri: str) -> None:
        import obstore

        self.uri = uri
        store, retry = _stream_store(loc)

        def open_once() -> Any:
            try:
                return obstore.get(store, loc.key)
            except Exception as exc:
                error = translate(exc, uri, "stream")
                if type(error) is DataioError and _status_5xx(str(error)):
                    raise _ServerError(str(error)) from None
                raise error from None

        result = _retrying(open_once, retry, uri)
        self.size = int(result.meta["size"])
        self._chunks: Any = iter(result.stream(min_chunk_size=1))
        self._ready: deque[Any] = deque()  # obstore Bytes, copied when handed out
        self._ahead = 0  # bytes in _ready
        self._end = False
        self._error: DataioError | None = None
        self._closed = False
        self._cond = threading.Condition()
        self._pump: threading.Thread | None = None

    def next_chunk(self) -> bytes | None:
        with self._cond:
            if self._pump is None and not self._closed:
                self._pump = threading.Thread(target=self._fill, name="dataio-stream", daemon=True)
                self._pump.start()
            while not (self._ready or self._end or self._closed):
                self._cond.wait()
            if self._closed:
                return None
            if self._ready:
                ready = self._ready
                # one copy out of obstore's buffers, whether one chunk or many
                chunk = bytes(ready[0]) if len(ready) == 1 else b"".join(ready)
                ready.clear()
                self._ahead = 0
                self._cond.notify_all()
                return chunk
            if self._error is not None:
                raise self._error
            return None

    def _fill(self) -> None:
        """The reader thread: the body's chunks into ``_ready``, at most _READ_AHEAD ahead."""
        chunks, error = self._chunks, None
        try:
            for chunk in chunks:
                with self._cond:
                    while self._ahead >= _READ_AHEAD and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._ready.append(chunk)
                    self._ahead += len(chunk)
                    self._cond.notify_all()
        except Exception as exc:
            error = translate(exc, self.uri, "stream")
        finally:
            self._chunks = None  # dropping obstore's stream drops the connection
            with self._cond:
                self._end, self._error = True, error
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._ready.clear()
            self._cond.notify_all()
            if self._pump is None:
                self._chunks = None  # never read: drop the connection now


def _status_5xx(text: str) -> bool:
    return re.search(r"\b5\d\d\b", text) is not None


class _HttpBody(_Body):
    """A body read with ``http.client`` through ``urllib`` (proxies from the environment)."""

    def __init__(self, loc: Location, uri: str) -> None:
        self.uri = uri
        wait = _wait_secs(loc.scheme)
        credentials = credentials_for(loc.scheme)
        headers = {"User-Agent": "dataio", "Accept-Encoding": "identity"}
        if "bearer_token" in credentials:
            headers["Authorization"] = f"Bearer {credentials['bearer_token']}"
        retry = {"max_retries": 3}  # as the http stores of dataio.io.config retry
        self._response: Any = _retrying(lambda: _http_open(uri, headers, wait), retry, uri)
        self._socket = _socket_of(self._response)
        length = self._response.headers.get("Content-Length")
        self.size = int(length) if length and length.isdigit() else None
        self._lock = threading.Lock()

    def next_chunk(self) -> bytes | None:
        response = self._response
        if response is None:
            return None
        try:
            chunk = response.read1(_CHUNK)
        except Exception as exc:  # http.client raises many kinds when a socket breaks
            if self._response is None:  # close() from another thread cut this read
                return None
            raise self._error(exc) from None
        # read1 ends quietly when the server closes before Content-Length bytes:
        # Stream checks the count against ``size``
        return chunk or None

    def _error(self, exc: Exception) -> DataioError:
        import http.client

        target = redact(self.uri)
        if isinstance(exc, TimeoutError):
            return TransportTimeoutError(
                f"stream {target!r} timed out waiting for data; raise the limit with "
                "dataio.configure_transport(scheme, timeout_secs=...)"
            )
        if isinstance(exc, http.client.IncompleteRead):
            return TransportError(
                f"stream {target!r} failed: the server closed the connection before the body ended"
            )
        return TransportError(
            f"stream {target!r} failed: the server went away ({type(exc).__name__})"
        )

    def close(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is None:
            return
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in another thread
        with contextlib.suppress(Exception):
            response.close()


def _http_open(uri: str, headers: dict[str, str], wait: float) -> Any:
    import urllib.error
    import urllib.request

    from dataio.io.network import origin, proxy_for, tls_context

    scheme = parse(uri).scheme
    proxy = proxy_for(origin(uri))
    opener = urllib.request.build_opener(
        # the same proxy decision obstore's requests get; {} means a direct connection
        urllib.request.ProxyHandler({scheme: proxy} if proxy else {}),
        urllib.request.HTTPSHandler(context=tls_context()),
    )
    request = urllib.request.Request(uri)
    for name, value in headers.items():
        if name == "Authorization":
            request.add_unredirected_header(name, value)  # never sent on to a redirect target
        else:
            request.add_header(name, value)
    try:
        return opener.open(request, timeout=wait)
    except urllib.error.HTTPError as exc:
        exc.close()
        code = exc.code
        if code in (404, 410):
            raise NotFoundError(
                f"no object at {redact(uri)!r}; check the path, bucket and key"
            ) from None
        if code >= 500:
            raise _ServerError(f"stream {redact(uri)!r} failed: HTTP {code} {exc.reason}") from None
        raise translate(RuntimeError(f"{code} {exc.reason}"), uri, "stream") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, OSError):
            raise reason from None  # call() turns it into a transport error
        raise DataioError(f"stream {redact(uri)!r} failed: {reason}") from None


def _socket_of(response: Any) -> socket.socket | None:
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None
