"""Byte spans of remote objects, read ahead of their reader in bounded memory.

A tar source reads its archives front to back in spans (a shard, or a rank's part of
one) and parses while the bytes arrive. :class:`SpanReader` keeps the link busy meanwhile:

* A span is one ranged request, streamed, while its first window arrives at the verbs'
  ``SPLIT_BELOW`` rate or faster (a server on this host or next to it: one connection
  outruns the parser, and more requests would only cost the server; moto copies the
  whole object for each).
* When the first window arrives slower (a remote store's one-connection rate), the rest
  of the span is fetched as ranged windows, ``depth`` at a time: the fan-out of
  :func:`dataio.read` (``DATAIO_OBJECT_SHARDS``), with at most ``depth`` windows
  requested ahead of the reader.
* The request for the span planned next (:meth:`SpanReader.then`: the next shard) is sent
  while the current span's last window is read, so a shard boundary waits on no round trip.

Every request for an object's spans reads one version of it (a
:class:`~dataio.io.ranged.Pin`, one per object, which its spans share): the first
response's, asked for again by each later request (``If-Match`` on a strong ETag) and
compared with every response's ETag and size, so an object overwritten mid-read is a
:class:`~dataio.TransportError` saying so, never a tar of two versions.

Pieces are the buffers the bodies arrived in (not copied). A body that ends short of its
range, or breaks off, is a :class:`~dataio.TransportError` naming the object and the offset.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from dataio.exceptions import DataioError, TransportError
from dataio.io.config import redact, store_for, transport_for
from dataio.io.errors import call
from dataio.io.ranged import Pin
from dataio.io.uri import parse

__all__ = ["PIECE_BYTES", "WINDOW_BYTES", "SpanReader"]

#: the smallest piece a streamed span is handed out in: large enough that a piece costs
#: little Python, small enough to stay in cache while it is parsed
PIECE_BYTES = 1 << 20
#: the largest window of a fanned-out span (the transport's ``readall_chunk_mib`` when
#: smaller): ``depth`` of them may be requested ahead of the reader (128 MiB at the
#: default depth of 8). A span shorter than three windows is never split: on moto under
#: load (2 cores), 8 MiB windows split 46 MiB shards and the extra requests (moto copies
#: the whole object for each) made a pass 4x slower; ``dataio.read`` does not split
#: objects under 64 MiB either.
WINDOW_BYTES = 16 << 20

Span = tuple[int, int]


class SpanReader:
    """Serves byte spans of remote objects, read ahead of the caller (one per pass).

    ``requests`` counts the ranged GETs sent, ``fanned`` the spans read by parallel
    windows, ``peak_ahead`` the most bytes of windows requested and not yet handed to
    the reader (at most ``depth`` windows). :meth:`close` drops what is in flight.

    Example:
        >>> reader = SpanReader()  # doctest: +SKIP
        >>> reader.then("s3://bucket/shard-1.tar", (0, 1 << 30))  # doctest: +SKIP
        >>> for piece in reader.pieces("s3://bucket/shard-0.tar", 0, 1 << 30):  # doctest: +SKIP
        ...     parse(piece)
    """

    def __init__(self, *, depth: int | None = None, window: int | None = None) -> None:
        self._depth = depth
        self._window = window
        self._pool: ThreadPoolExecutor | None = None
        self._planned: tuple[str, Span | Callable[[], Span], Pin | None] | None = None
        self._early: tuple[str, Future[tuple[Span, Any]]] | None = None
        self.requests = 0
        self.fanned = 0
        self.peak_ahead = 0

    def then(self, uri: str, span: Span | Callable[[], Span], *, pin: Pin | None = None) -> None:
        """Plan ``uri``'s ``span`` (``(start, stop)``, or a function giving it, called
        on a worker) as the next span read, of ``pin``'s version (pass :meth:`pieces`
        the same pin); its request goes out near the end of the current one. A later
        call replaces the plan."""
        self._planned = (uri, span, pin)

    def pieces(
        self,
        uri: str,
        start: int,
        stop: int,
        *,
        seen: Callable[[int], None] | None = None,
        pin: Pin | None = None,
    ) -> Iterator[Any]:
        """The bytes ``start .. stop - 1`` of ``uri`` as they arrive; ``seen`` gets the
        object's size from the first response. ``pin``: the version to read (shared by
        the object's other spans); without one, the first response's.

        Raises:
            TransportError: the body ended short of the range or broke off (naming the
                offset), or the object is not the pinned version (it changed while it
                was being read), besides the errors of :func:`dataio.read`.
        """
        if stop <= start:
            return
        pin = pin if pin is not None else Pin(uri)
        loc = parse(uri)
        transport = transport_for(loc.scheme)
        depth = self._depth or transport.readall_concurrency
        window = self._window or min(transport.chunk_bytes, WINDOW_BYTES)
        early = self._take_early(uri)
        fired = stop - start <= window
        if fired:  # a small span: the next one's request goes out with it
            self._send_planned(depth)
        result = self._response(uri, (start, stop), early, pin)
        _check(pin, result.meta, uri, (start, stop))
        if seen is not None:
            seen(int(result.meta["size"]))
        got = 0
        waited = 0.0  # time spent waiting on the body (not parsing it): its arrival rate
        pieces = iter(result.stream(min_chunk_size=PIECE_BYTES))
        while True:
            began = time.perf_counter()
            piece = _next(pieces, uri, start + got)
            waited += time.perf_counter() - began
            if piece is None:
                break
            got += len(piece)
            yield piece
            if not fired and got >= stop - start - window:
                fired = True
                self._send_planned(depth)
            if got >= window and got - len(piece) < window and depth > 1:
                rest = stop - start - got
                if rest >= 2 * window and got < _split_below() * max(waited, 1e-9):
                    del pieces, result  # the rest by windows: this response is dropped
                    self.fanned += 1
                    yield from self._windows(uri, start + got, stop, depth, window, pin)
                    return
        if got != stop - start:
            raise TransportError(
                f"archive {redact(uri)!r}: the body ended after {got} of {stop - start} bytes "
                f"at offset {start + got}; retry the read"
            )

    def close(self) -> None:
        """Stop: requests in flight finish on their own and are dropped."""
        self._planned = self._early = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- requests ------------------------------------------------------------------------

    def _workers(self, depth: int) -> ThreadPoolExecutor:
        if self._pool is None:  # the windows and one early request
            self._pool = ThreadPoolExecutor(depth + 1, thread_name_prefix="dataio-span")
        return self._pool

    def _take_early(self, uri: str) -> Future[tuple[Span, Any]] | None:
        """The early request sent for ``uri``, if any (any other is dropped)."""
        early, self._early = self._early, None
        return early[1] if early is not None and early[0] == uri else None

    def _response(
        self, uri: str, span: Span, early: Future[tuple[Span, Any]] | None, pin: Pin
    ) -> Any:
        """The response for ``span``: the early request's when it was for this span,
        else one sent now (the caller checks its version, on its own thread)."""
        if early is not None:
            try:
                at, response = early.result()
            except Exception:
                pass  # asked again below: the reader gets its own error
            else:
                if at == span:
                    return response
        self.requests += 1
        return _get(uri, span, pin)

    def _send_planned(self, depth: int) -> None:
        """Send the planned span's request on a worker (its body waits in the socket)."""
        planned, self._planned = self._planned, None
        if planned is None:
            return
        uri, span, pin = planned
        self.requests += 1

        def send() -> tuple[Span, Any]:
            at = span() if callable(span) else span
            return at, _get(uri, at, pin) if at[1] > at[0] else None

        self._early = (uri, self._workers(depth).submit(send))

    def _windows(
        self, uri: str, start: int, stop: int, depth: int, window: int, pin: Pin
    ) -> Iterator[Any]:
        """``start .. stop - 1`` by windows, ``depth`` requested ahead of the reader."""
        spans = deque((a, min(a + window, stop)) for a in range(start, stop, window))
        pending: deque[tuple[Span, Future[Any]]] = deque()
        pool = self._workers(depth)
        ahead = 0

        def submit() -> None:
            nonlocal ahead
            span = spans.popleft()
            self.requests += 1
            pending.append((span, pool.submit(_window, uri, span, pin)))
            ahead += span[1] - span[0]
            self.peak_ahead = max(self.peak_ahead, ahead)
            if not spans:
                self._send_planned(depth)

        try:
            while spans and len(pending) < depth:
                submit()
            while pending:
                span, future = pending.popleft()
                body = future.result()
                ahead -= span[1] - span[0]
                if spans:
                    submit()
                yield body
        finally:
            for _, future in pending:
                future.cancel()


def _split_below() -> float:
    from dataio.io.verbs import SPLIT_BELOW

    return SPLIT_BELOW


def _get(uri: str, span: Span, pin: Pin | None) -> Any:
    """The response to a GET of ``span``, asking for ``pin``'s version when it has one
    (a 412 when the object changed); its metadata is checked by the caller."""
    import obstore

    loc = parse(uri)
    options: dict[str, Any] = {"range": span}
    if pin is not None:
        options.update(pin.options())
    return call(lambda: obstore.get(store_for(loc), loc.key, options=options), uri, "archive")  # type: ignore[arg-type]


def _check(pin: Pin, meta: Any, uri: str, span: Span) -> None:
    """``pin.check(meta)``: a response of another version (or, the first, of another
    size than the ``head`` the span was planned by) is refused, naming its range."""
    try:
        pin.check(meta)
    except TransportError as exc:
        raise TransportError(
            f"archive {redact(uri)!r}: the range from offset {span[0]} to {span[1]} came "
            f"of another version: {exc}"
        ) from None


def _window(uri: str, span: Span, pin: Pin) -> Any:
    """One window's body, whole (on a worker: the wait holds no GIL), of ``pin``'s
    version: ``If-Match`` asks for it, and the response's ETag and size are checked
    (a server that ignores ``If-Match`` answers with the new version's)."""
    where = f"archive {redact(uri)!r}: the range from offset {span[0]} to {span[1]}"
    try:
        result = _get(uri, span, pin)
    except TransportError as exc:  # a 412 included: the object changed (named in exc)
        raise TransportError(f"{where} could not be read ({exc}); retry the read") from None
    _check(pin, result.meta, uri, span)
    try:
        body = call(result.bytes, uri, "archive")
    except TransportError as exc:
        raise TransportError(f"{where} broke off ({exc}); retry the read") from None
    if len(body) != span[1] - span[0]:
        raise TransportError(
            f"archive {redact(uri)!r}: the body ended after {len(body)} of "
            f"{span[1] - span[0]} bytes at offset {span[0] + len(body)}; retry the read"
        )
    return body


def _next(pieces: Iterator[Any], uri: str, offset: int) -> Any:
    """The body's next piece (``None`` at its end); a break names the offset."""
    try:
        return call(lambda: next(pieces, None), uri, "archive")
    except TransportError as exc:
        raise TransportError(
            f"archive {redact(uri)!r}: the body broke off at offset {offset} ({exc}); "
            "retry the read"
        ) from None
    except DataioError:
        raise
