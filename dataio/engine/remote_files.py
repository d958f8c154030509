"""Remote objects as pyarrow files and datasets, read by ranges through dataio's stores.

A :class:`RangedFile` answers each read with one ranged GET made by the obstore store
that :func:`dataio.io.config.store_for` builds for every verb, so a scan meets the same
credentials, endpoint, proxy, TLS roots, timeouts and retries as ``dataio.read``.
pyarrow's Parquet reader asks for the footer, then only the column chunks of the row
groups its filter keeps (adjacent chunks coalesced into one request). Those reads go one
at a time through a Python file, so when DataFusion asks a fragment for its scanner the
chunks it will read are fetched all at once ahead of them (:class:`Ahead`). The first request
of an object is a suffix GET of :data:`TAIL_BYTES`: it gives the size and the footer at
once, and is kept for the reads that follow (the dataset's schema read and its scan).
With ``DATAIO_CACHE_DIR`` on, the cache holds whole objects: a scan takes
the object from it (or downloads and caches it) and reads it from memory.

Every range of an object comes from the version its first request saw (a
:class:`~dataio.io.ranged.Pin` of that response's ETag and size): an object overwritten
while a scan reads it fails the scan with a :class:`~dataio.TransportError` saying so.
"""

from __future__ import annotations

import collections
import functools
import io
import re
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from dataio.exceptions import DataioError, FormatError
from dataio.io.ranged import Pin
from dataio.io.uri import Location, parse

__all__ = ["TAIL_BYTES", "NoRanges", "RangedFile", "dataset", "scan_error"]

T = TypeVar("T")

# pyarrow's own first read of a Parquet footer is 64 KiB; one request covers it
TAIL_BYTES = 64 << 10

# the errors remote reads raised lately: DataFusion reports them as text, and
# scan_error gives the caller back the error's own class
_recent: collections.deque[DataioError] = collections.deque(maxlen=32)  # append is atomic


class NoRanges(DataioError):
    """The server answers whole objects only (no ``Range`` support)."""


# object stores, which always serve ranges: with the schema known, their footers are
# fetched in the background while the scan is planned (all files at once)
_STORES = ("s3", "r2", "gs", "az")
# Azure's API has no suffix ranges: a HEAD, then the tail's range
_NO_SUFFIX = ("az",)


def _whole(data: Any, start: int, end: int) -> Any:
    """``data``, checked to hold every byte of ``start..end``."""
    if len(data) != end - start:
        # translated by call() into a TransportError naming the object
        raise ConnectionError(
            f"unexpected end of body after {len(data)} of {end - start} bytes at offset {start}"
        )
    return data


class _Budget:
    """Bytes fetched ahead and not yet read, process-wide: a scan of many files at once
    holds at most :data:`AHEAD_TOTAL` of them."""

    def __init__(self) -> None:
        self.used = 0
        self.lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self.lock:
            if self.used + n > AHEAD_TOTAL:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self.lock:
            self.used -= n


_budget = _Budget()


class Piece:
    """A byte range fetched ahead (``data`` a future), and how much of it was read."""

    def __init__(self, start: int, end: int, data: Future[Any]) -> None:
        self.start, self.end, self.data, self.read = start, end, data, 0


class Tail:
    """An object's size and its last bytes, shared by every file opened on it, and the
    byte ranges a scan will read, fetched ahead in order: at most :data:`AHEAD_WINDOW`
    bytes at a time (a query that stops early wastes no more), each piece let go once
    all of it was read (or with the object), returning its bytes to the budget."""

    def __init__(self, size: int, start: int, data: Any, pin: Pin | None = None) -> None:
        self.size, self.start, self.data = size, start, data
        self.pin = pin  # the version every range must come from (None: held whole)
        self.pieces: list[Piece] = []
        self.planned: list[tuple[int, int]] = []  # still to fetch, in order
        self.fetch: Callable[[int, int], Any] | None = None
        self.held = [0]  # bytes of pieces not let go yet, for the finalizer
        self.lock = threading.Lock()
        weakref.finalize(self, _release, self.held)

    def plan(self, ranges: list[tuple[int, int]], fetch: Callable[[int, int], Any]) -> None:
        """Fetch ``ranges`` ahead with ``fetch(start, end)``, replacing an earlier plan."""
        with self.lock:  # the old plan goes first, so letting its pieces go refills nothing
            self.planned, self.fetch = [], None
            old, self.pieces = self.pieces, []
            freed = sum(piece.end - piece.start for piece in old)
            self.held[0] -= freed
        _budget.give(freed)
        with self.lock:
            self.planned, self.fetch = list(ranges), fetch
        self._refill()

    def _refill(self) -> None:
        with self.lock:
            while self.planned and self.fetch is not None and self.held[0] < AHEAD_WINDOW:
                start, end = self.planned[0]
                if not _budget.take(end - start):
                    break  # other scans hold the budget; read the rest as asked
                self.planned.pop(0)
                self.held[0] += end - start
                future = _prefetch_pool().submit(self.fetch, start, end)
                self.pieces.append(Piece(start, end, future))

    def ahead(self, start: int, end: int) -> Any:
        """``start..end`` from the ranges fetched ahead, or None if they do not hold it."""
        with self.lock:
            parts = sorted(
                (p for p in self.pieces if p.start < end and p.end > start), key=lambda p: p.start
            )
        at = start
        for piece in parts:
            if piece.start > at:
                break
            at = max(at, piece.end)
        if not parts or at < end:
            with self.lock:  # read on its own: not worth fetching again later
                self.planned = [(a, b) for a, b in self.planned if b <= start or a >= end]
            return None
        views = []
        for piece in parts:  # one piece: a view; several (a split range): joined
            a, b = max(start, piece.start), min(end, piece.end)
            views.append(memoryview(piece.data.result())[a - piece.start : b - piece.start])
            piece.read += b - a
            if piece.read >= piece.end - piece.start:  # read whole: pyarrow holds it now
                self.drop(piece)
        return views[0] if len(views) == 1 else b"".join(views)

    def drop(self, piece: Piece) -> None:
        with self.lock:
            if piece not in self.pieces:
                return
            self.pieces.remove(piece)
            self.held[0] -= piece.end - piece.start
        _budget.give(piece.end - piece.start)
        self._refill()


def _release(held: list[int]) -> None:
    _budget.give(held[0])


def _tail(uri: str) -> Tail:
    """One suffix GET: the object's size and its last :data:`TAIL_BYTES` bytes."""
    import obstore
    from obstore import exceptions as obx

    from dataio.io.config import store_for
    from dataio.io.errors import call

    loc = parse(uri)

    def get() -> Tail:
        store = store_for(loc)
        try:
            if loc.scheme not in _NO_SUFFIX:
                pin = Pin(uri)
                result = obstore.get(store, loc.key, options={"range": {"suffix": TAIL_BYTES}})
                pin.check(result.meta)
                start, end = result.range
                data = _whole(result.bytes(), start, end)
                return Tail(int(result.meta["size"]), start, data, pin)
            size = int(obstore.head(store, loc.key)["size"])  # the version: the GET's
            pin = Pin(uri, size=size)  # a GET of another size: replaced since the head
            start = max(0, size - TAIL_BYTES)
            data = _ranged(store, loc.key, start, size, pin) if size else b""
            return Tail(size, start, _whole(data, start, size), pin)
        except obx.NotSupportedError:
            raise NoRanges(f"{uri!r}: the server does not serve byte ranges") from None

    return remembered(lambda: call(get, uri, "read"))


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over one remote object; each read is one ranged GET
    (reads inside the object's cached tail cost none).

    Example:
        >>> import pyarrow.parquet as pq
        >>> pq.read_metadata(RangedFile("s3://bucket/t.parquet")).num_row_groups  # doctest: +SKIP
        40
    """

    def __init__(self, uri: str, tail: Tail | None = None) -> None:
        super().__init__()
        self.uri = uri
        self._loc = parse(uri)
        self._tail = tail
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    @property
    def tail(self) -> Tail:
        """The object's size and last bytes (fetched on first use)."""
        if self._tail is None:
            self._tail = _tail(self.uri)
        return self._tail

    def size(self) -> int:
        """The object's length in bytes."""
        return self.tail.size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence == io.SEEK_END:
            offset += self.size()
        if offset < 0:
            raise DataioError(f"cannot seek to {offset} in {self.uri!r}")
        self._pos = offset
        return offset

    def read(self, size: int | None = -1) -> bytes:
        return bytes(self.read_buffer(size))

    def read_buffer(self, size: int | None = -1) -> Any:
        """The next ``size`` bytes (all the rest if negative) as a buffer, not a copy."""
        total = self.size()
        end = total if size is None or size < 0 else min(self._pos + size, total)
        start = self._pos
        if end <= start:
            return b""
        tail = self.tail
        data: Any
        if start >= tail.start:
            data = memoryview(tail.data)[start - tail.start : end - tail.start]
        else:
            cut = min(end, tail.start)  # the rest is in the tail
            data = tail.ahead(start, cut)
            if data is None:
                data = self._get(start, end)
            elif cut < end:
                data = b"".join((data, memoryview(tail.data)[: end - tail.start]))
        self._pos = end
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read_buffer(len(view))
        view[: len(data)] = data
        return len(data)

    def _get(self, start: int, end: int) -> Any:
        return get_range(self.uri, start, end, pin=self.tail.pin)


def get_range(uri: str, start: int, end: int, *, pin: Pin | None = None) -> Any:
    """Bytes ``start..end`` of the object at ``uri``: one ranged GET through its store,
    of the version ``pin`` holds (checked; pinned by this answer if none yet)."""
    from dataio.io.config import store_for
    from dataio.io.errors import call

    loc = parse(uri)

    def get() -> Any:
        got = _ranged(store_for(loc), loc.key, start, end, pin or Pin(uri))
        return _whole(got, start, end)

    return remembered(lambda: call(get, uri, "read"))


def _ranged(store: Any, key: str, start: int, end: int, pin: Pin) -> Any:
    """One ranged GET asking for ``pin``'s version and checking what came."""
    import obstore

    options: Any = {"range": (start, end), **pin.options()}
    result = obstore.get(store, key, options=options)
    pin.check(result.meta)
    return result.bytes()


def remembered(fn: Callable[[], T]) -> T:
    """``fn()``, remembering the :class:`DataioError` it raises for :func:`scan_error`."""
    try:
        return fn()
    except DataioError as exc:
        from dataio.engine.udf_errors import renamed

        # a copy without the traceback, whose frames would keep the scan's buffers alive
        _recent.append(renamed(exc, str(exc)))
        raise


# what pyarrow raises inside a scan, as DataFusion quotes it: the file's bytes are bad
_READ_FAILURE = re.compile(
    r"External error: (?:OSError|ArrowInvalid|ArrowIOError|ArrowNotImplementedError|"
    r"ArrowSerializationError|ArrowCapacityError|ArrowIndexError): "
)


def scan_error(message: str, where: str, path: str | None) -> DataioError | None:
    """The dataio error for an engine error ``message`` raised while reading a remote
    scan's files: a remote read's own error (DataFusion passes a Python exception on as
    text; its class comes back), or a :class:`FormatError` naming ``path`` for bytes
    pyarrow could not parse. None for anything else."""
    from dataio.engine.udf_errors import renamed

    for error in reversed(_recent):
        if str(error) in message:
            return renamed(error, f"{where}: {error}")
    if path is not None and _READ_FAILURE.search(message):
        detail = message.replace("DataFusion error: ", "").strip()
        return FormatError(f"{where}: cannot read {path!r}: {detail}")
    return None


def _handler_class() -> type:
    import pyarrow as pa
    import pyarrow.fs as pafs

    class StoreHandler(pafs.FileSystemHandler):
        """A read-only pyarrow filesystem over one scheme's dataio stores; paths are
        ``authority/key``. Listing is dataio's (before the scan), so only files are
        known here."""

        def __init__(self, scheme: str) -> None:
            self.scheme = scheme
            self.tails: dict[str, Tail] = {}
            self.pending: dict[str, Future[Tail]] = {}

        def prefetch(self, path: str) -> None:
            """Start fetching ``path``'s size and footer in the background."""
            if path not in self.tails and path not in self.pending:
                self.pending[path] = _prefetch_pool().submit(_tail, f"{self.scheme}://{path}")

        def _file(self, path: str) -> RangedFile:
            pending = self.pending.get(path)
            if pending is not None and path not in self.tails:
                self.tails[path] = pending.result()  # its error, if any
                self.pending.pop(path, None)
            file = RangedFile(f"{self.scheme}://{path}", self.tails.get(path))
            self.tails[path] = file.tail
            return file

        def fetch_ahead(self, path: str, fragment: Any, columns: Any, filter: Any) -> None:
            """Start fetching, all at once, the column chunks a scan of ``path`` will read
            (pyarrow's own reads go one at a time through a Python file)."""
            tail = self._file(path).tail
            if tail.start == 0:
                return  # the whole object is in memory already
            parts = [
                (at, min(at + AHEAD_PART, end, tail.start))  # the tail is here already
                for start, end in chunk_ranges(fragment, columns, filter)
                for at in range(start, min(end, tail.start), AHEAD_PART)
            ]
            fetch = functools.partial(get_range, f"{self.scheme}://{path}", pin=tail.pin)
            tail.plan(parts, fetch)

        def __eq__(self, other: object) -> bool:
            return other is self

        def __ne__(self, other: object) -> bool:
            return other is not self

        def get_type_name(self) -> str:
            return f"dataio-{self.scheme}"

        def normalize_path(self, path: str) -> str:
            return path

        def get_file_info(self, paths: list[str]) -> list[Any]:
            # a size not known yet comes with the footer when the scan opens the file
            known = self.tails.get
            return [
                pafs.FileInfo(p, pafs.FileType.File, size=t.size if (t := known(p)) else None)
                for p in paths
            ]

        def get_file_info_selector(self, selector: Any) -> list[Any]:
            raise DataioError(f"{self.scheme}:// scans list their objects before reading")

        def open_input_file(self, path: str) -> Any:
            return pa.PythonFile(self._file(path), mode="r")

        def open_input_stream(self, path: str) -> Any:
            return self.open_input_file(path)

        def _read_only(self, *args: Any, **kwargs: Any) -> Any:
            raise DataioError("remote scans are read-only")

        create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
        delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only

    return StoreHandler


_handler: list[type] = []
_pool: list[ThreadPoolExecutor] = []
_pool_lock = threading.Lock()
# footers fetched at once while a scan of many objects is planned
PREFETCH_THREADS = 16


def _prefetch_pool() -> ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="dataio-footer"))
        return _pool[0]


# Ranges fetched ahead for one file's scan: at most this many bytes at a time, in the
# order pyarrow reads them; nearby ranges merge as pyarrow merges them (8 KiB holes)
AHEAD_WINDOW = 64 << 20
AHEAD_PART = 8 << 20  # a larger range is fetched in parts of this size, side by side
AHEAD_TOTAL = 1 << 30  # all files together
_HOLE = 8 << 10
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def chunk_ranges(fragment: Any, columns: list[str] | None, filter: Any) -> list[tuple[int, int]]:
    """The byte ranges of the column chunks a scan of ``fragment`` reads: the row groups
    its statistics keep under ``filter``, the ``columns`` asked for and those the filter
    names; nearby ranges merged. Empty when that cannot be told (pyarrow then reads as
    it goes)."""
    import pyarrow as pa

    try:
        kept = fragment.subset(filter) if filter is not None else fragment
        meta = kept.metadata
        groups = [g.id for g in kept.row_groups]
        names = {f.name for f in kept.physical_schema}
    except (pa.ArrowException, ValueError):
        return []
    wanted = names if columns is None else set(columns) & names
    if filter is not None:
        wanted |= set(_NAME.findall(str(filter))) & names
    if any("." in name for name in wanted):
        return []  # leaf paths would not tell which field a chunk belongs to
    spans = []
    for group in groups:
        row_group = meta.row_group(group)
        for i in range(row_group.num_columns):
            chunk = row_group.column(i)
            if chunk.path_in_schema.split(".", 1)[0] not in wanted:
                continue
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            spans.append((start, start + chunk.total_compressed_size))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + _HOLE:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _from_cache(handler: Any, loc: Location, path: str, uri: str) -> None:
    """With ``DATAIO_CACHE_DIR`` on for ``loc``, the whole object through the cache
    (fetched and cached on a miss; no request on a hit), served from memory."""
    from dataio.io import cache

    if cache.entry_path(loc) is None:
        return
    from dataio.io.verbs import fetch_whole

    data = remembered(lambda: fetch_whole(loc, uri))
    handler.tails[path] = Tail(len(data), 0, data)


def dataset(uri: str, schema: Any = None) -> Any:
    """A pyarrow Parquet dataset over the remote object at ``uri``, read by ranges
    (filters pushed into a scan of it prune row groups). The footer is read here, or,
    when ``schema`` is given and the object is in an object store, fetched in the
    background for the scan (so the footers of a many-file scan arrive together).

    Raises:
        NoRanges: the server ignores ``Range`` (the caller downloads the object whole).
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    if not _handler:
        _handler.append(_handler_class())
    loc = parse(uri)
    handler = _handler[0](loc.scheme)
    path = f"{loc.authority}/{loc.key}"
    _from_cache(handler, loc, path, uri)
    if schema is None or loc.scheme not in _STORES:
        # the schema is in the footer; a web server may not serve ranges (NoRanges)
        handler._file(path)
    else:
        handler.prefetch(path)  # the files of a scan fetch their footers at once
    fs = pafs.PyFileSystem(handler)
    try:
        found = ds.dataset(path, format=ds.ParquetFileFormat(), filesystem=fs, schema=schema)
    except pa.ArrowException as exc:
        if isinstance(exc, DataioError):
            raise
        raise FormatError(
            f"scan_parquet: {uri!r} is not a valid Parquet file: {exc}".replace(path, uri)
        ) from None
    if not _dataset:
        _dataset.append(_dataset_class())
    made = _dataset[0](list(found.get_fragments()), found.schema, found.format, fs)
    made.handler, made.path = handler, path
    return made


_dataset: list[type] = []


def _dataset_class() -> type:
    import pyarrow.dataset as ds

    class AheadDataset(ds.FileSystemDataset):
        """A one-file dataset whose fragments fetch the column chunks a scan will read
        all at once when DataFusion asks them for a scanner (the filter and columns are
        known only then)."""

        handler: Any
        path: str

        def get_fragments(self, filter: Any = None) -> list[Any]:
            return [Ahead(f, self) for f in super().get_fragments(filter=filter)]

    return AheadDataset


class Ahead:
    """A Parquet fragment (any attribute passes through) whose ``scanner`` first starts
    fetching the chunks it will read."""

    def __init__(self, fragment: Any, dataset: Any) -> None:
        self._fragment, self._dataset = fragment, dataset

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fragment, name)

    def scanner(self, *args: Any, **kwargs: Any) -> Any:
        columns, filter = kwargs.get("columns"), kwargs.get("filter")
        self._dataset.handler.fetch_ahead(self._dataset.path, self._fragment, columns, filter)
        return self._fragment.scanner(*args, **kwargs)
