"""Flat verbs over any supported URI: head, read, fetch_into, write, exists, ls, glob, delete.

Calls are obstore's synchronous ones, safe from many threads (its async get was ~30x
slower here). Local reads use plain file IO, which is faster and copies less.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, overload

from dataio import limits, progress
from dataio.exceptions import DataioError, NotFoundError, OutOfRangeError
from dataio.io import cache
from dataio.io.config import redact, store_for, transport_for
from dataio.io.errors import call
from dataio.io.local import open_regular, read_bounded
from dataio.io.uri import Location, parse, require_writable

_bytes: Any
try:  # the compiled helper; without it large bodies arrive in pieces and are joined
    from dataio.io import _bytes
except ImportError:  # pragma: no cover - built with the package
    _bytes = None

__all__ = ["delete", "exists", "fetch_into", "fetch_whole", "glob", "head", "ls", "read", "write"]

URI = str | os.PathLike[str]
ReadFormat = Literal[
    "bytes",
    "text",
    "json",
    "jsonl",
    "npy",
    "npz",
    "parquet",
    "feather",
    "arrow",
    "ipc",
    "image",
    "safetensors",
]
Sink = Callable[[int, Any], None]


def head(uri: URI) -> dict[str, Any]:
    """Metadata of one object: ``size`` (bytes), ``etag`` (str or None), ``last_modified``.

    Example:
        >>> dataio.head("s3://bucket/file.bin")["size"]  # doctest: +SKIP
        1048576
    """
    import obstore

    loc = parse(uri)
    meta = call(lambda: obstore.head(store_for(loc), loc.key), uri, "head")
    return {"size": meta["size"], "etag": meta["e_tag"], "last_modified": meta["last_modified"]}


def exists(uri: URI) -> bool:
    """Whether an object exists at ``uri``.

    Example:
        >>> dataio.exists("s3://bucket/out.bin")  # doctest: +SKIP
        True
    """
    try:
        head(uri)
    except NotFoundError:
        return False
    return True


@overload
def read(
    uri: URI,
    *,
    offset: int | None = None,
    size: int | None = None,
    format: Literal["bytes"] = "bytes",
    mode: str | None = None,
) -> bytes: ...


@overload
def read(
    uri: URI,
    *,
    offset: int | None = None,
    size: int | None = None,
    format: ReadFormat,
    mode: str | None = None,
) -> Any: ...


def read(
    uri: URI,
    *,
    offset: int | None = None,
    size: int | None = None,
    format: ReadFormat = "bytes",
    mode: str | None = None,
) -> Any:
    """Read an object, or ``size`` bytes of it from ``offset``; ``format`` decodes it.

    A range running past the end is cut short; one starting past the end raises
    :class:`~dataio.OutOfRangeError`. Large whole-object reads split into parallel
    ranged requests (see :func:`configure_transport`) and go through the local cache
    when ``DATAIO_CACHE_DIR`` is set.

    Args:
        uri: a local path or a ``file://``, ``s3://``, ``r2://``, ``gs://``, ``az://``,
            ``hf://`` or ``http(s)://`` URI.
        offset: where the range starts (bytes only).
        size: how many bytes to read (bytes only).
        format: what to make of the whole object: ``"bytes"``, ``"text"`` (UTF-8),
            ``"json"``, ``"jsonl"`` (a list), ``"npy"``, ``"npz"`` (a dict of arrays),
            ``"parquet"``, ``"feather"``, ``"arrow"``, ``"ipc"`` (a ``pyarrow.Table``),
            ``"image"`` (a ``uint8`` HWC array) or ``"safetensors"`` (a dict of arrays).
        mode: the image mode for ``format="image"``: ``"rgb"`` (default), ``"gray"``
            or ``"rgba"``.

    Raises:
        DecodeError: the object is not in ``format``.

    Example:
        >>> chunk = dataio.read("s3://bucket/file.bin", offset=0, size=1 << 20)  # doctest: +SKIP
        >>> table = dataio.read("s3://bucket/shard.parquet", format="parquet")  # doctest: +SKIP
    """
    if format != "bytes" or mode is not None:
        from dataio.io.read import check_format, decode

        check_format(format, mode, ranged=offset is not None or size is not None)
        loc = parse(uri)
        # a remote body is decoded from the buffer it arrived in, not a copy of it
        data = read(uri) if loc.scheme == "file" else fetch_whole(loc, uri)
        return decode(data, format, mode, uri)
    _check_range(offset, size)
    if size == 0:
        return b""
    loc = parse(uri)
    if loc.scheme == "file":
        return call(lambda: _read_local(loc.path, offset or 0, size), uri, "read")
    if offset is None and size is None:
        return bytes(fetch_whole(loc, uri))
    return bytes(_download(loc, uri, offset=offset or 0, size=size))


def fetch_whole(loc: Location, uri: URI) -> Any:
    """A whole remote object as the buffer it arrived in (not copied into ``bytes``),
    through the local cache when ``DATAIO_CACHE_DIR`` is set; an ``hf`` file through
    the shared Hugging Face cache where ``huggingface_hub`` is installed."""
    what = f"reading {redact(str(uri))!r}"
    cached = _hub_download(loc, lambda total: limits.check("max_decoded_bytes", total, what=what))
    if cached is not None:
        return call(lambda: _read_local(cached, 0, None, name=str(uri)), uri, "read")
    return cache.read_through(loc, lambda: _download(loc, uri))


def _hub_download(loc: Location, check: Callable[[int], None]) -> str | None:
    """The path of an ``hf`` file in the shared hub cache (downloaded there first), or
    None where the Hub's cache is not used (see :func:`dataio.io.hf.download`).
    ``check`` gets the size the Hub reports before anything is downloaded."""
    if loc.scheme != "hf":
        return None
    from dataio.io import hf

    return hf.download(loc, check=check)


def _download(
    loc: Location, uri: URI, *, offset: int = 0, size: int | None = None, pin: Any = None
) -> Any:
    """The object (or a range) from its server: for a small body, the buffer it arrived
    in; for a large one, a ``bytes`` its pieces were streamed into (no other full-size
    buffer is made). Bodies declaring more than ``max_prealloc_bytes`` (or without the
    compiled helper) are joined from their pieces once all have arrived."""
    target: list[Any] = []  # the bytes and a writable view of it, for a streamed body
    pieces: dict[int, Any] = {}

    def expect(total: int) -> None:
        if size is None and not offset:
            limits.check("max_decoded_bytes", total, what=f"reading {redact(str(uri))!r}")
        # a declared size is only a claim: past max_prealloc_bytes, pieces are kept as
        # they arrive and joined at the end, so a lying Content-Length costs nothing
        if STREAM_BYTES <= total <= limits.get().max_prealloc_bytes and _bytes is not None:
            target.extend(_bytes.blank(total))

    def sink(at: int, piece: Any) -> None:
        if target:
            target[1][at : at + len(piece)] = piece
        else:
            pieces[at] = piece

    call(lambda: _fetch(loc, sink, offset=offset, size=size, expect=expect, pin=pin), uri, "read")
    if target:  # _fetch checked that every byte arrived
        data, view = target
        view.release()
        return data
    if len(pieces) == 1:
        return pieces[0]
    return b"".join(pieces[k] for k in sorted(pieces))


def fetch_into(uri: URI, buffer: Any) -> int:
    """Fill the start of a writable ``buffer`` with the whole object; return its size.

    Local files are read straight into the buffer; remote bodies are copied once, piece
    by piece as they arrive, so no full-size intermediate is held.

    Example:
        >>> buf = bytearray(1 << 30)  # doctest: +SKIP
        >>> n = dataio.fetch_into("s3://bucket/checkpoint.bin", buf)  # doctest: +SKIP
    """
    view = memoryview(buffer).cast("B")
    if view.readonly:
        raise DataioError(
            f"fetch_into needs a writable buffer such as a bytearray, got a read-only "
            f"{type(buffer).__name__}"
        )
    loc = parse(uri)
    if loc.scheme == "file":
        return call(lambda: _readinto_local(loc.path, view), uri, "fetch_into")

    def check(total: int) -> None:
        if total > len(view):
            raise DataioError(
                f"fetch_into {redact(str(uri))!r}: the object has {total} bytes but the buffer "
                f"holds {len(view)}; allocate at least dataio.head(uri)['size'] bytes"
            )

    def sink(at: int, piece: Any) -> None:
        view[at : at + len(piece)] = piece

    cached = _hub_download(loc, check)
    if cached is not None:
        return call(lambda: _readinto_local(cached, view, name=str(uri)), uri, "fetch_into")
    entry = cache.entry_path(loc)
    if entry is not None:
        hit = cache.load_into(entry, view)
        if hit is not None:
            return hit
    n: int = call(lambda: _fetch(loc, sink, expect=check), uri, "fetch_into")
    if entry is not None:
        cache.store(entry, view[:n])
    return n


def write(uri: URI, data: Any) -> str | None:
    """Write ``data`` (bytes or any buffer) as the whole object; return its ETag.

    The object appears whole or not at all: local writes go through a staging file,
    large remote ones through a multipart upload completed only at the end.

    Example:
        >>> etag = dataio.write("s3://bucket/out.bin", b"payload")  # doctest: +SKIP
    """
    import obstore

    loc = parse(uri)
    require_writable(loc, "write")
    # obstore uploads large bodies in parts, which HTTP stores cannot take: one PUT there
    single = loc.scheme in ("http", "https")
    options: dict[str, Any] = {"use_multipart": False} if single else {}
    result = call(lambda: obstore.put(store_for(loc), loc.key, data, **options), uri, "write")
    cache.drop(loc)
    return result["e_tag"]


def delete(uri: URI) -> None:
    """Delete one object; deleting a missing object is not an error (as on S3).

    Example:
        >>> dataio.delete("s3://bucket/out.bin")  # doctest: +SKIP
    """
    import obstore

    loc = parse(uri)
    require_writable(loc, "delete")
    with contextlib.suppress(NotFoundError):
        call(lambda: obstore.delete(store_for(loc), loc.key), uri, "delete")
    cache.drop(loc)


def ls(prefix_uri: URI) -> list[str]:
    """The objects and sub-prefixes (ending in ``/``) directly under a directory-like prefix.

    Example:
        >>> dataio.ls("s3://bucket/prefix/")  # doctest: +SKIP
        ['s3://bucket/prefix/a.bin', 's3://bucket/prefix/sub/']
    """
    import obstore

    loc = parse(prefix_uri)
    if loc.scheme == "hf":
        from dataio.io import hf

        return hf.ls(loc)
    prefix = loc.key.rstrip("/") or None
    result = call(lambda: obstore.list_with_delimiter(store_for(loc), prefix), prefix_uri, "ls")
    found = [loc.child(o["path"]) for o in result["objects"]]
    found += [loc.child(p.rstrip("/") + "/") for p in result["common_prefixes"]]
    return sorted(found)


def glob(pattern_uri: URI) -> list[str]:
    """Objects whose key matches a pattern: ``*`` and ``?`` within a path segment,
    ``[abc]`` classes, and ``**`` for any number of segments.

    Example:
        >>> dataio.glob("s3://bucket/**/*.safetensors")  # doctest: +SKIP
        ['s3://bucket/model/part-0.safetensors']
    """
    import obstore

    loc = parse(pattern_uri)
    segments = loc.key.split("/")
    literal: list[str] = []
    for segment in segments:
        if any(c in segment for c in "*?["):
            break
        literal.append(segment)
    if len(literal) == len(segments):
        return [str(loc)] if exists(str(loc)) else []
    matcher = _glob_regex(loc.key)
    prefix = "/".join(literal) or None
    if loc.scheme == "hf":
        from dataio.io import hf

        return sorted(loc.child(k) for k in hf.keys(loc, prefix) if matcher.match(k))
    store = store_for(loc)

    def collect() -> list[str]:
        keys: list[str] = []
        for chunk in obstore.list(store, prefix, chunk_size=1000):
            keys.extend(o["path"] for o in chunk if matcher.match(o["path"]))
        return keys

    return sorted(loc.child(k) for k in call(collect, pattern_uri, "glob"))


def _glob_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    segments = pattern.split("/")
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
            continue
        parts.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(parts) + r"\Z")


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in segment[i + 2 :]:
            end = segment.index("]", i + 2)
            body = segment[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _check_range(offset: int | None, size: int | None) -> None:
    if offset is not None and offset < 0:
        raise OutOfRangeError(f"offset must be >= 0, got {offset!r}")
    if size is not None and size < 0:
        raise OutOfRangeError(f"size must be >= 0, got {size!r}")


def _read_local(path: str, offset: int, size: int | None, *, name: str | None = None) -> bytes:
    """``size`` bytes from ``offset`` of a local file; ``name`` (else ``path``) is what
    errors call it (a URI served from a cache)."""
    name = redact(name) if name is not None else path
    fd, total = open_regular(path, "read")
    try:
        if offset and total and offset >= total:
            raise _past_end(name, offset, total)
        # never ask the OS for more than the file holds: read(n) allocates n first
        want = total - offset if size is None else min(size, max(total - offset, 0))
        if size is None:
            limits.check("max_decoded_bytes", want, what=f"reading {name!r}")
        data = os.pread(fd, want, offset) if want else b""
        if len(data) == want and (want or total):
            return data
        # a short read, or a file whose size stat does not know (/proc): drain it
        os.lseek(fd, offset + len(data), os.SEEK_SET)
        rest = read_bounded(fd, path, data)
        if offset and not rest:
            raise _past_end(name, offset, 0)
        return rest if size is None else rest[:size]
    finally:
        os.close(fd)


def _past_end(path: str, offset: int, total: int) -> OutOfRangeError:
    return OutOfRangeError(f"read {path!r}: offset {offset} is past the end of its {total} bytes")


def _readinto_local(path: str, view: memoryview, *, name: str | None = None) -> int:
    name = redact(name) if name is not None else path
    fd, total = open_regular(path, "fetch_into")
    try:
        if total > len(view):
            raise DataioError(
                f"fetch_into {name!r}: the file has {total} bytes but the buffer holds "
                f"{len(view)}; allocate at least dataio.head(uri)['size'] bytes"
            )
        done = 0
        while done < total:
            n = os.readv(fd, [view[done:total]])
            if not n:
                break
            done += n
        return done
    finally:
        os.close(fd)


def _fetch(
    loc: Location,
    sink: Sink,
    *,
    offset: int = 0,
    size: int | None = None,
    expect: Callable[[int], None] | None = None,
    pin: Any = None,
) -> int:
    """GET an object (or a range) and hand its pieces to ``sink(position, buffer)``.

    One request reads small objects. A large whole-object read with a strong ETag keeps
    the first response for its first chunk and fetches the rest as ranged requests
    pinned to that ETag (``If-Match``), so a concurrent overwrite fails instead of
    mixing versions. ``pin`` (a :class:`dataio.io.ranged.Pin`) pins a range to the
    version that earlier ranges of the same read saw.
    """
    import obstore

    store = store_for(loc)
    options: dict[str, Any] = {}
    if size is not None:
        options["range"] = (offset, offset + size)
    elif offset:
        options["range"] = {"offset": offset}
    if pin is not None:
        options.update(pin.options())
    result = obstore.get(store, loc.key, options=options or None)  # type: ignore[arg-type]
    if pin is not None:
        pin.check(result.meta)
    start, end = result.range
    total = end - start
    if total >= STREAM_BYTES:  # a bar for a large body, where someone watches
        sink = progress.track_bytes(sink, total, desc=f"download {loc.key.rsplit('/', 1)[-1]}")
    if expect is not None:
        expect(total)
    transport = transport_for(loc.scheme)
    chunk, concurrency = transport.chunk_bytes, transport.readall_concurrency
    etag = result.meta["e_tag"]
    strong = bool(etag) and not str(etag).startswith("W/")
    if "range" in options or concurrency < 2 or total < 2 * chunk or not strong:
        if total < STREAM_BYTES:
            body = result.bytes()
            sink(0, body)
            return len(body)
        _stream(_pieces(result), sink, 0, total)
        return total
    # The first response's body serves the first chunk (and whatever piece crosses it).
    # Ranged requests exist to beat a per-connection limit; if the first chunk arrived
    # faster than SPLIT_BELOW, one connection is not the bottleneck (a server on this
    # host or next to it) and the same response reads on, sparing the server the extra
    # requests (moto, for one, reads the whole object for each).
    pieces = _pieces(result)
    started = time.perf_counter()
    first = _stream(pieces, sink, 0, total, stop=chunk)
    if first / max(time.perf_counter() - started, 1e-9) >= SPLIT_BELOW:
        _stream(pieces, sink, first, total - first)
        return total
    ranges = [(s, min(s + chunk, total)) for s in range(first, total, chunk)]

    def get(span: tuple[int, int]) -> None:
        got = obstore.get(store, loc.key, options={"range": span, "if_match": etag})
        _stream(_pieces(got), sink, span[0], span[1] - span[0])

    with ThreadPoolExecutor(min(concurrency, len(ranges))) as pool:
        list(pool.map(get, ranges))
    return total


# Bodies of at least this many bytes stream into their destination in PIECE_BYTES pieces
# (256 KiB measured best here: it stays in L2; 1 MiB pieces were ~15% slower) instead of
# being gathered whole and copied: 256 MiB from moto, ~310 -> ~740 MB/s for read().
STREAM_BYTES = 4 << 20
PIECE_BYTES = 256 << 10
# A first chunk arriving at least this fast (bytes/s, timed from its response headers)
# reads the rest of a large object on the same connection instead of splitting it.
# Object stores give one connection ~50-200 MB/s; a server on the same host gives one
# connection more than the client can copy.
SPLIT_BELOW = 400e6


def _pieces(result: Any) -> Iterator[Any]:
    """A response body's pieces, PIECE_BYTES at least (the last may be shorter)."""
    return iter(result.stream(min_chunk_size=PIECE_BYTES))


def _stream(
    pieces: Iterator[Any], sink: Sink, at: int, size: int, *, stop: int | None = None
) -> int:
    """Hand a body's ``pieces`` to ``sink`` one by one from position ``at``; they must
    hold ``size`` bytes. With ``stop``, end after the piece that reaches ``stop`` bytes
    (the rest stays in ``pieces``). Returns the bytes handed over."""
    done = 0
    for piece in pieces:
        sink(at + done, piece)
        done += len(piece)
        if stop is not None and done >= stop:
            return done
    if done != size:
        # translated by call() into a TransportError naming the object
        raise ConnectionError(f"unexpected end of body after {done} of {size} bytes")
    return done
