"""Archive sources: ``webdataset`` shards and single ``archive`` files (tar, tar.gz, zip).

Members are grouped into one record per sample key, WebDataset style: for a member
``dir/0001.seg.png`` the key is ``dir/0001`` and the field is ``seg.png``. Members of one
sample must be adjacent, as WebDataset writers produce them.

Archives are local paths or URIs (``s3://``, ``gs://``, ``az://``, ``hf://``,
``http(s)://``); a remote tar is read as a stream of ranged requests, never held whole,
and a remote zip by ranges (:class:`~dataio.io.ranged.RangedFile`), each of one version
of its object (an overwrite mid-read is a :class:`~dataio.TransportError`).
Sharded passes (``run(shard=...)``) over plain tar shards give each rank a contiguous
run of the samples, shards whole where the run covers them, so each rank reads about
``1/world`` of the bytes (see :meth:`ArchiveSource.shard_records`).
"""

from __future__ import annotations

import functools
import io
import itertools
import logging
import lzma
import os
import re
import string
import tarfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dataio.exceptions import (
    DataioError,
    FormatError,
    NotFoundError,
    PermissionDeniedError,
    PlanError,
)
from dataio.io import zipmember
from dataio.io.errors import call
from dataio.io.local import open_regular
from dataio.io.ranged import Pin, RangedFile
from dataio.io.spans import SpanReader
from dataio.io.tar import Blocks, SeekBlocks, checked_tarinfo, read_member, walk
from dataio.io.uri import parse
from dataio.sources import shardindex
from dataio.sources.base import Source

__all__ = ["archive", "expand_braces", "webdataset", "write_webdataset_index"]

log = logging.getLogger("dataio.sources")


# -- brace patterns ------------------------------------------------------------------------

_INT_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_LETTERS = string.ascii_uppercase + string.ascii_lowercase


def expand_braces(pattern: str) -> list[str]:
    """Expand a brace pattern as bash and the ``braceexpand`` package do.

    Comma lists (``{train,val}``), nested groups (``{a,b{1,2}}``), integer ranges
    with zero padding (``{0000..0099}``, ``{0..10..2}``, backwards ``{3..1}``) and letter
    ranges (``{a..e}``); several groups expand as a product, in order. A brace group
    that is neither a list nor a range stays literal (``{x}``); ``\\`` escapes a brace
    or comma.

    Raises:
        PlanError: the braces are unbalanced.

    Example:
        >>> expand_braces("s-{train,val}-{00..01}.tar")
        ['s-train-00.tar', 's-train-01.tar', 's-val-00.tar', 's-val-01.tar']
    """
    return [re.sub(r"\\(.)", r"\1", s) for s in _pattern(pattern, pattern)]


def _pattern(text: str, whole: str) -> list[str]:
    items: list[Iterable[str]] = []
    start = pos = depth = 0
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            if depth == 0 and pos > start:
                items.append([text[start:pos]])
                start = pos
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                inner = text[start + 1 : pos]
                group = _alternatives(inner, whole)
                items.extend([["{"], _pattern(inner, whole), ["}"]] if group is None else [group])
                start = pos + 1
        pos += 1
    if depth:
        raise PlanError(f"unbalanced braces in {whole!r}; close each '{{' with '}}'")
    if start < len(text):
        items.append([text[start:]])
    return ["".join(combo) for combo in itertools.product(*items)]


def _alternatives(inner: str, whole: str) -> list[str] | None:
    """A brace group's alternatives, or ``None`` when it is neither a list nor a range."""
    match = _INT_RANGE.match(inner)
    if match:
        low, high, step = match.groups()
        padded = any(s.startswith(("0", "-0")) for s in (low, high) if s not in ("0", "-0"))
        width = max(len(low), len(high)) if padded else 0
        return [f"{n:0{width}d}" for n in _steps(int(low), int(high), step)]
    match = _CHAR_RANGE.match(inner)
    if match:
        low, high, step = match.groups()
        by = int(step or 1) or 1
        first, last = _LETTERS.index(low), _LETTERS.index(high)
        if first < last:
            return list(_LETTERS[first : last + 1 : by])
        return list(_LETTERS[first : (last or -len(_LETTERS)) - 1 : -by])  # as braceexpand
    alternatives: list[str] = []
    commas = start = pos = depth = 0
    while pos < len(inner):
        char = inner[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            alternatives += _pattern(inner[start:pos], whole)
            start = pos + 1
            commas += 1
        pos += 1
    if depth or not commas:
        return None
    return alternatives + _pattern(inner[start:], whole)


def _steps(low: int, high: int, step: str | None) -> range:
    by = int(step or 1) or 1
    return range(low, high + 1, by) if low < high else range(low, high - 1, -by)


# -- archives by URI -----------------------------------------------------------------------

#: bytes a remote header walk reads per request: one header block. A larger window saves
#: requests over small members but fetches member bytes a rank may not read: 2 KiB
#: windows cost ~10% of the dataset per rank on 20 KB samples, single blocks ~5%.
_AHEAD = 512


class _Archive:
    """One archive, local or remote: its length, reads at offsets, streams over spans.

    Every remote read of one :class:`_Archive` (its header walk, its spans, all their
    windows) reads one version of the object, :attr:`pin`: the size its ``head`` gave
    (when one was asked) and the ETag of the first response; an overwrite meanwhile is
    a :class:`~dataio.TransportError` naming the URI.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.loc = parse(uri)
        self.local = self.loc.scheme == "file"
        self.pin = Pin(uri)
        self._size: int | None = None
        self.observed: int | None = None  # the size the last ranged GET reported
        self.reader: SpanReader | None = None  # the pass's read-ahead, when it has one
        self._asking = threading.Lock()  # one HEAD at a time (a read-ahead worker asks too)

    def size(self) -> int:
        with self._asking:
            return self._known_size()

    def _known_size(self) -> int:
        if self._size is None:
            if self.local:
                fd, self._size = call(
                    lambda: open_regular(self.loc.path, "archive"), self.uri, "archive"
                )
                os.close(fd)
            else:
                self.version()
        assert self._size is not None
        return self._size

    def version(self) -> str:
        """What identifies this version of the object: size and ETag (remote), size and
        modification time (local)."""
        if self.local:
            stat = call(lambda: os.stat(self.loc.path), self.uri, "archive")
            return f"{stat.st_size}:{stat.st_mtime_ns}"
        from dataio.io.verbs import head

        meta = head(self.uri)
        self._size = int(meta["size"])
        if self.pin.size is None:  # reads of another size are another version
            self.pin.size = self._size
        return f"{meta['size']}:{meta['etag']}"

    def open_local(self) -> tuple[Any, int]:
        """The archive file (regular files only: a FIFO would block) and its size."""
        fd, size = call(lambda: open_regular(self.loc.path, "archive"), self.uri, "archive")
        self._size = size
        return os.fdopen(fd, "rb"), size

    def reader_at(self) -> tuple[Callable[[int, int], bytes], Callable[[], None]]:
        """``read_at(offset, n)`` and a function closing what it holds."""
        if self.local:
            file, _ = self.open_local()
            fd = file.fileno()
            return (
                lambda offset, n: call(lambda: os.pread(fd, n, offset), self.uri, "archive")
            ), file.close
        from dataio.io.verbs import _download

        held: list[Any] = [0, b""]  # a read-ahead window: a header walk reads small pieces

        def read_at(offset: int, n: int) -> bytes:
            start, window = held
            if start <= offset and offset + n <= start + len(window):
                return bytes(window[offset - start : offset - start + n])
            total = self.size()
            if offset >= total:
                return b""
            size = min(max(n, _AHEAD), total - offset)
            window = bytes(_download(self.loc, self.uri, offset=offset, size=size, pin=self.pin))
            held[:] = [offset, window]
            return bytes(window[:n])

        return read_at, lambda: None

    def span(self, start: int, stop: int) -> Iterator[bytes]:
        """The bytes ``start .. stop - 1`` as they arrive (a ranged request, or the
        cached copy of the object)."""
        if self.local:
            yield from _file_span(self.open_local()[0], start, stop, self.uri)
            return
        cached = _cached(self.loc)
        if cached is not None:
            yield from _file_span(cached, start, stop, self.uri)
            return
        writer = _cache_writer(self.loc) if start == 0 and stop == self.size() else None
        if writer is None:
            yield from _remote_span(self, start, stop)
            return
        try:  # a whole object read: saved to the cache as it streams by
            for piece in _remote_span(self, start, stop):
                writer.write(piece)
                yield piece
        except BaseException:
            writer.abort()
            raise
        writer.commit()


def _file_span(file: Any, start: int, stop: int, uri: str) -> Iterator[bytes]:
    with file:
        file.seek(start)
        left = stop - start
        while left > 0:
            chunk: bytes = call(functools.partial(file.read, min(left, 1 << 20)), uri, "archive")
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


def _cached(loc: Any) -> Any:
    """The open cache entry of a remote object when ``DATAIO_CACHE_DIR`` holds it."""
    from dataio.io import cache

    path = cache.entry_path(loc)
    if path is None:
        return None
    opened = cache._open_entry(path)  # a span is checked by the tar reader, not the CRC
    return None if opened is None else opened[0]


def _cache_writer(loc: Any) -> Any:
    """A writer for ``loc``'s cache entry, or ``None`` (no cache, or it cannot be written)."""
    from dataio.io import cache

    path = cache.entry_path(loc)
    if path is None:
        return None
    try:
        return cache.EntryWriter(path)
    except OSError:
        return None


def _remote_span(archive: _Archive, start: int, stop: int) -> Iterator[Any]:
    """A remote span's pieces through the pass's :class:`SpanReader` (its own when none):
    streamed, or fanned out to parallel windows on a slow link, the next span requested
    before this one ends."""
    reader = archive.reader or SpanReader()

    def seen(size: int) -> None:
        archive.observed = size

    try:
        yield from reader.pieces(archive.uri, start, stop, seen=seen, pin=archive.pin)
    finally:
        if archive.reader is None:
            reader.close()


def _plan(reader: SpanReader, archive: _Archive, span: Any) -> None:
    """Have ``reader`` request ``archive``'s ``span`` (a pair, or a function giving it)
    ahead of its reading: remote archives the cache does not hold only."""
    if archive.local:
        return
    from dataio.io import cache

    entry = cache.entry_path(archive.loc)
    if entry is None or not entry.exists():
        reader.then(archive.uri, span, pin=archive.pin)


def _whole(archive: _Archive) -> tuple[int, int]:
    """An archive's whole span (its size asked first, unless known)."""
    return 0, archive.size()


# -- members and samples -------------------------------------------------------------------


def _split_member(name: str) -> tuple[str, str]:
    if "/" not in name:  # the common case, without os.path (a pass calls this per member)
        stem, dot, ext = name.partition(".")
        return (stem, ext.lower()) if dot else (name, "")
    directory, base = os.path.split(name)
    if "." not in base:
        return name, ""
    stem, ext = base.split(".", 1)
    return (os.path.join(directory, stem) if directory else stem), ext.lower()


def _corrupt(path: str, exc: BaseException) -> FormatError:
    return FormatError(
        f"archive {path!r} is corrupt or truncated ({exc}); re-create or re-download it"
    )


# gzip, bzip2 and xz magic: tarfile.open("r:*") inflates these
_COMPRESSED = (b"\x1f\x8b", b"BZ", b"\xfd7")


def _plain_tar(uri: str) -> bool:
    """Whether ``uri`` names an uncompressed tar (by its name): one read by offsets."""
    return uri.lower().endswith(".tar")


def _compressed(uri: str) -> bool | None:
    """Whether an archive's first bytes are gzip, bzip2 or xz, whatever its name says;
    ``None`` when it cannot be read now (a pass over it reports why)."""
    archive = _Archive(uri)
    try:
        if archive.local:
            file, _ = archive.open_local()
            with file:
                head: bytes = call(lambda: file.read(6), uri, "archive")
        else:
            from dataio.io.verbs import read

            head = bytes(read(uri, offset=0, size=min(6, archive.size())))
    except DataioError:
        return None
    return head[:2] in _COMPRESSED


def _tar_members(
    source: _Archive, start: int = 0, stop: int | None = None
) -> Iterator[tuple[str, bytes]]:
    """The members of a tar; a plain one from ``start`` to ``stop`` (header offsets)."""
    if source.local:
        file, size = source.open_local()
        with file:
            compressed = file.read(6)[:2] in _COMPRESSED
            if compressed:
                file.seek(0)
                yield from _tarfile_members(file, source.uri)
                return
        total = size
    else:
        total = source.size()
    end = total if stop is None else stop
    pieces = source.span(start, end)
    if not source.local and start == 0:
        head, pieces = _peek(pieces, 6)
        if head[:2] in _COMPRESSED:  # gzip, bzip2 or xz, whatever the name says
            yield from _tarfile_members(_PieceStream(pieces), source.uri, stream=True)
            for _ in pieces:  # the rest (a gzip trailer): the whole read completes (cached)
                pass
            return
    blocks = Blocks(_reader(pieces), start)
    for name, _, data in walk(blocks, source.uri, total):
        assert data is not None
        yield name, data
    for _ in pieces:  # the end-of-archive padding: a whole read completes (and is cached)
        pass


def _peek(pieces: Iterator[bytes], n: int) -> tuple[bytes, Iterator[bytes]]:
    """The first ``n`` bytes of ``pieces`` (fewer when they end), and all of them again."""
    seen: list[bytes] = []
    while sum(map(len, seen)) < n:
        piece = next(pieces, None)
        if piece is None:
            break
        seen.append(piece)
    return b"".join(seen)[:n], itertools.chain(seen, pieces)


class _PieceStream(io.RawIOBase):
    """A read-only, unseekable file over pieces of bytes as they arrive (a compressed
    tar streamed from a remote store)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._left = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._left = memoryview(piece)
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


def _reader(pieces: Iterator[bytes]) -> Callable[[int], bytes]:
    def read(_: int) -> bytes:
        return next(pieces, b"")

    return read


def _tarfile_members(file: Any, path: str, *, stream: bool = False) -> Iterator[tuple[str, bytes]]:
    """A compressed tar, through :mod:`tarfile` (its length is unknown); ``stream``: read
    front to back (the file cannot seek)."""
    mode: Any = "r|*" if stream else "r:*"  # the stubs type the stream modes apart
    try:
        with tarfile.open(fileobj=file, mode=mode, tarinfo=checked_tarinfo(path, None)) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                handle = tar.extractfile(member)
                if handle is not None:
                    yield member.name, read_member(handle, member.size, whole=False)
    except DataioError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise _corrupt(path, exc) from exc


#: a remote zip's read-ahead: members (a sample's files) are read a block at a time, one
#: request for several; the block doubles while reads go on where the last ended (a pass
#: in file order: round trips, not bytes, bound a store's rate) up to the largest, and
#: drops back after a jump (the directory; a pass that stops early fetches ~1 MiB more
#: than it reads). At most one block is held besides the member read.
_ZIP_READ_AHEAD = 1 << 20
_ZIP_READ_AHEAD_MAX = 16 << 20


class _ZipRanges(RangedFile):
    """A remote zip's bytes by ranges (see ``_ZIP_READ_AHEAD``), of one version."""

    def __init__(self, uri: str, *, size: int | None) -> None:
        super().__init__(uri, size=size, read_ahead=_ZIP_READ_AHEAD)
        self._next = -1  # where the last fetch ended

    def pread(self, offset: int, size: int) -> bytes:
        if offset == self._next:
            self.read_ahead = min(2 * self.read_ahead, _ZIP_READ_AHEAD_MAX)
        else:
            self.read_ahead = _ZIP_READ_AHEAD
        data = super().pread(offset, size)
        self._next = offset + len(data)
        return data


def _zip_members(source: _Archive) -> Iterator[tuple[str, bytes]]:
    """A zip's members in directory order: a remote one read by ranges (its directory
    at the end, then each member), of one version of the object."""
    if not source.local:
        file, size = _remote_zip(source)
    else:
        file, size = source.open_local()
    path = source.uri
    with file:
        try:
            with zipfile.ZipFile(file) as archive_file:
                for info in archive_file.infolist():
                    if not info.is_dir():
                        where = f"zip {path!r} member {info.filename!r}"
                        data = zipmember.read_member(
                            archive_file, info, archive_size=size, where=where
                        )
                        yield info.filename, bytes(data)
        except DataioError:
            raise
        except zipmember.ZIP_ERRORS as exc:
            # zipfile turns a failed fetch (an OSError) into BadZipFile: a network
            # failure is not a damaged archive
            failed = file.take_error() if isinstance(file, RangedFile) else None
            if failed is not None:
                raise failed from None
            raise _corrupt(path, exc) from exc


def _remote_zip(source: _Archive) -> tuple[Any, int]:
    """A remote zip as a seekable file read by ranges of one version (its ``head``'s
    size, its first response's ETag), and its size; one held whole by the local cache
    (``DATAIO_CACHE_DIR``) is read from there. When the cache is on and does not hold it
    yet, the whole object is read once instead, and kept there."""
    from dataio.io import cache

    entry = cache.entry_path(source.loc)
    held = None if entry is None else cache._open_entry(entry)
    if held is not None:
        held[0].close()  # RangedFile reads the entry itself, without a head
    size = None if held is None else held[1]
    file = _ZipRanges(source.uri, size=size)
    if entry is None or held is not None:
        return file, file.size
    with file:
        whole = file.read_whole()
    return io.BytesIO(whole), len(whole)


def _members(source: _Archive) -> Iterator[tuple[str, bytes]]:
    if source.uri.lower().endswith(".zip"):
        return _zip_members(source)
    return _tar_members(source)


class _FailedSample(Mapping[str, Any]):
    """Stands in for the samples an archive could not deliver: the loader reads a field
    of it, gets ``error`` and records a row error (dropped under ``on_failure="skip"``,
    raised under ``"strict"``) instead of the rest of the archive vanishing unseen."""

    def __init__(self, path: str, error: DataioError) -> None:
        self._meta = {"__key__": f"{path}:<unreadable>", "__url__": path}
        self.error = error

    def __getitem__(self, field: str) -> Any:
        if field in self._meta:
            return self._meta[field]
        if field == "key" or field.startswith("__"):
            raise KeyError(field)
        raise self.error

    def __iter__(self) -> Iterator[str]:
        return iter(self._meta)

    def __len__(self) -> int:
        return len(self._meta)


def _group(members: Iterable[tuple[str, bytes]], path: str) -> Iterator[dict[str, Any]]:
    current: dict[str, Any] | None = None
    at: str | None = None  # the current sample's key
    for name, data in members:
        key, field = _split_member(name)
        if not field or field.startswith("__"):
            continue
        if key != at or current is None:
            if current is not None:
                yield current
            current = {"__key__": key, "__url__": path}
            at = key
        current[field] = data
    if current is not None:
        yield current


def _samples(source: _Archive) -> Iterator[dict[str, Any]]:
    return _group(_members(source), source.uri)


# -- the sample index of a plain tar -------------------------------------------------------


class _Index:
    """Where each sample of a plain tar starts: ``starts[i]`` is the offset of sample
    ``i``'s first header block and ``starts[-1]`` where the last one ends. ``error``:
    the archive broke off after these samples (one stand-in sample follows them)."""

    def __init__(self, starts: list[int], error: DataioError | None) -> None:
        self.starts = starts
        self.error = error

    @property
    def count(self) -> int:
        """Samples, the stand-in for a broken archive included."""
        return max(len(self.starts) - 1, 0) + (1 if self.error is not None else 0)


_INDEXING = threading.Lock()
#: indexes of this process, by URI and version (bounded: cleared when full)
_KNOWN: dict[tuple[str, str], _Index] = {}
_KNOWN_MAX = 1 << 14
_KNOWN_LOCK = threading.Lock()


def _index(uri: str) -> _Index:
    """A plain tar's sample index: known to this process, saved in the cache directory
    (``DATAIO_CACHE_DIR``, remote objects), or walked and then remembered."""
    source = _Archive(uri)
    try:
        version = source.version()
    except DataioError as exc:
        return _Index([], exc)
    key = (uri, version)
    with _KNOWN_LOCK:
        known = _KNOWN.get(key)
    if known is not None:
        return known
    saved = _index_file(source, version)
    index = _load_index(saved) if saved is not None else None
    if index is None:
        index = _walk_index(source)
        if saved is not None and index.error is None:
            _save_index(saved, index)
    if index.error is None:
        with _KNOWN_LOCK:
            if len(_KNOWN) >= _KNOWN_MAX:
                _KNOWN.clear()
            _KNOWN[key] = index
    return index


def _index_file(source: _Archive, version: str) -> Any:
    """Where a remote tar's index is saved: next to its cache entry (same partition)."""
    import hashlib

    from dataio.io import cache

    entry = cache.entry_path(source.loc)
    if entry is None:
        return None
    tag = hashlib.sha256(version.encode()).hexdigest()[:16]
    return entry.with_name(f"{entry.name}.tar-index-{tag}.json")


def _load_index(path: Any) -> _Index | None:
    import json

    try:
        starts = json.loads(path.read_text())["starts"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(starts, list) or not all(type(v) is int for v in starts):
        return None
    if any(b < a for a, b in itertools.pairwise(starts)):
        return None  # damaged: walk again
    return _Index(starts, None)


def _save_index(path: Any, index: _Index) -> None:
    import json
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        with open(fd, "w") as f:
            json.dump({"starts": index.starts}, f)
        os.replace(temp, path)
    except OSError:
        pass  # the index is an optimisation: the next pass walks again


def _walk_index(source: _Archive) -> _Index:
    """Walk a plain tar's headers (skipping the members' bytes) and note sample starts."""
    uri = source.uri
    starts: list[int] = []
    try:
        read_at, close = source.reader_at()
    except DataioError as exc:
        return _Index([], exc)
    key: str | None = None
    try:
        total = source.size()
        blocks = SeekBlocks(read_at, total=total)
        for name, offset, _ in walk(blocks, uri, total, data=False):
            sample, field = _split_member(name)
            if not field or field.startswith("__"):
                continue
            if sample != key:
                starts.append(offset)
                key = sample
        if starts:
            starts.append(blocks.offset if blocks.offset <= total else total)
        return _Index(starts, None)
    except DataioError as exc:
        # the last sample begun may be incomplete: it ends where the next would start,
        # so it goes with the error (as a pass over the archive drops it)
        return _Index(starts, exc)
    finally:
        close()


def _rank_run(n: int, rank: int, world: int, *, pad: bool) -> tuple[range, list[int]]:
    """Rank ``rank``'s contiguous run of ``n`` samples and its padding (the rule of a
    frame's shards: counts equal a round-robin shard's)."""
    base, rest = divmod(n, world)
    if not pad:
        return range(rank * base, (rank + 1) * base), []
    start = rank * base + min(rank, rest)
    run = range(start, start + base + (1 if rank < rest else 0))
    if not rest or rank < rest:
        return run, []
    return run, [run.start if run else rank % n]


class ArchiveSource(Source):
    """Samples of one or more archives, read in order; each pass reopens the files.

    An archive found corrupt, truncated or over a limit part-way ends with one stand-in
    sample whose fields raise the error, so the loader records it as a row error (and
    goes on to the next shard under ``on_failure="skip"``); iterating the source
    directly raises it.
    """

    def __init__(
        self, paths: list[str], description: dict[str, Any], index: str | bool | None = None
    ) -> None:
        self.paths = paths
        self._description = description
        self._indexes: dict[str, _Index] = {}
        self._index_option = index  # a shard index's URI; None: look beside the shards
        self._counted: _Counts | bool | None = None  # the loaded index (False: none)
        self._sniffed: dict[str, bool] = {}  # whether a .tar shard's bytes are compressed

    def iterate(self) -> Iterator[Any]:
        """Read the archives one after the other, grouping members into samples; a
        remote archive's request goes out while the one before it is read."""
        reader = SpanReader()
        sources = [_Archive(p) for p in self.paths]
        try:
            for source, after in itertools.zip_longest(sources, sources[1:]):
                source.reader = reader
                if after is not None and not after.uri.lower().endswith(".zip"):
                    _plan(reader, after, functools.partial(_whole, after))
                try:
                    yield from _samples(source)
                except DataioError as exc:
                    yield _FailedSample(source.uri, exc)
        finally:
            reader.close()

    def __iter__(self) -> Iterator[Any]:
        for sample in self.iterate():
            if isinstance(sample, _FailedSample):
                raise sample.error
            yield sample

    def describe(self) -> dict[str, Any]:
        """The pattern or path."""
        return dict(self._description)

    def _sample_index(self) -> list[_Index]:
        """Each shard's sample index (header walks, several shards at a time)."""
        with _INDEXING:  # module-level: a source stays picklable
            missing = [p for p in dict.fromkeys(self.paths) if p not in self._indexes]
            if missing:
                # remote walks wait on one small request per member: more at once
                remote = any(parse(p).scheme != "file" for p in missing)
                workers = min(32 if remote else 4, len(missing))
                with ThreadPoolExecutor(workers) as pool:
                    found = dict(zip(missing, pool.map(_index, missing), strict=True))
            else:
                found = {}
            # a walk that failed (a shard briefly missing, a dropped connection) is this
            # pass's answer only: the next pass walks that shard again
            self._indexes.update((p, i) for p, i in found.items() if i.error is None)
            return [found[p] if p in found else self._indexes[p] for p in self.paths]

    def shard_records(
        self, rank: int, world: int, *, pad: bool, start: int = 0
    ) -> Iterator[tuple[int, Any]] | None:
        """Rank ``rank`` of ``world``'s samples, from its ``start``-th on, with their
        positions in the unsharded stream; ``None`` when the archives are not all plain
        tars (compressed tars, by name or by their first bytes, and zips are dealt sample
        by sample, round robin).

        The samples of all shards, in order, are cut into ``world`` contiguous runs with
        the counts of a round-robin shard (``pad=True``: ``ceil(n / world)`` each, a rank
        short of one repeating its first sample; ``pad=False``: ``n // world``, the last
        ``n % world`` dropped). A run covers whole shards and at most a part of one at
        each end, so a rank reads about ``1/world`` of the bytes. Where each sample
        starts comes from a walk of the shards' headers (their members are skipped, not
        read), done once per source; a rank then reads its byte ranges only, and a
        resumed pass starts at its sample's offset.
        """
        if world == 1 or not all(_plain_tar(p) for p in self.paths) or self._any_compressed():
            return None
        return self._dealt(rank, world, pad, start)

    def _any_compressed(self) -> bool:
        """Whether a shard named ``.tar`` holds gzip, bzip2 or xz bytes (a pass inflates
        it; a header walk by offsets cannot), by its first bytes, looked at once."""
        # looking at a remote shard costs a request, which these save: a shard index
        # vouches for its shards (its writer walked their headers), and without one the
        # header walk a dealt pass needs anyway (saved in the cache directory) does
        remotes = [p for p in self.paths if parse(p).scheme != "file"]
        vouched: set[str] = set()
        if remotes:
            if self._shard_index() is not None:
                vouched.update(remotes)
            else:
                walks = zip(self.paths, self._sample_index(), strict=True)
                vouched.update(p for p, index in walks if index.error is None)
        with _INDEXING:
            missing = [
                p for p in dict.fromkeys(self.paths) if p not in self._sniffed and p not in vouched
            ]
            if missing:
                remote = any(parse(p).scheme != "file" for p in missing)
                workers = min(32 if remote else 4, len(missing))
                with ThreadPoolExecutor(workers) as pool:
                    for path, found in zip(missing, pool.map(_compressed, missing), strict=True):
                        if found is not None:  # unreadable now: looked at again next time
                            self._sniffed[path] = found
            return any(self._sniffed.get(p, False) for p in self.paths)

    def _shard_index(self) -> _Counts | None:
        """The shards' sample counts from a shard index, or ``None`` without one."""
        with _INDEXING:
            if self._counted is None:
                self._counted = _load_counts(self.paths, self._index_option) or False
            return self._counted if isinstance(self._counted, _Counts) else None

    def _dealt(self, rank: int, world: int, pad: bool, start: int) -> Iterator[tuple[int, Any]]:
        counted = self._shard_index()
        if counted is None:
            _note_walk(len(self.paths))
            indexes = self._sample_index()
            counts = [i.count for i in indexes]
        else:
            counts = counted.counts
        firsts = [0, *itertools.accumulate(counts)]
        run, padding = _rank_run(firsts[-1], rank, world, pad=pad)
        if counted is not None and start == 0:
            # a shard the index calls empty is read by no run: the rank where it falls
            # (the last rank for trailing ones) checks it, so a count of 0 cannot hide samples
            last = rank == world - 1
            for shard, count in enumerate(counts):
                if not count and (
                    run.start <= firsts[shard] < run.stop or (last and firsts[shard] >= run.start)
                ):
                    for _ in _read_counted(_Archive(self.paths[shard]), 0, 0, counted, shard):
                        pass

        def read(first: int, stop: int) -> Iterator[tuple[int, Any]]:
            """Positions ``first .. stop - 1``, a shard's part at a time (ranges, never
            lists: an index may count billions of samples); each remote shard's first
            request goes out while the shard before it is read."""
            shard = _shard_of(firsts, first)
            reader = SpanReader()
            sources: dict[int, _Archive] = {}

            def source(k: int) -> _Archive:
                if k not in sources:
                    sources[k] = _Archive(self.paths[k])
                    sources[k].reader = reader
                return sources[k]

            try:
                while first < stop:
                    end = min(stop, firsts[shard + 1])
                    if first < end:
                        lo, hi = first - firsts[shard], end - firsts[shard]
                        ahead = min(stop, firsts[shard + 2]) if shard + 2 < len(firsts) else stop
                        if firsts[shard + 1] < ahead:  # the next shard is read too
                            nxt, count = shard + 1, ahead - firsts[shard + 1]
                            if counted is None:
                                _plan(reader, source(nxt), _walked_span(indexes[nxt], count))
                            else:
                                _plan(
                                    reader,
                                    source(nxt),
                                    _counted_span(source(nxt), counted, nxt, count),
                                )
                        if counted is None:
                            records = self._read_span(source(shard), indexes[shard], lo, hi)
                        else:
                            records = _read_counted(source(shard), lo, hi, counted, shard)
                        yield from zip(range(first, end), records, strict=True)
                        sources.pop(shard, None)
                    first = end
                    shard += 1
            finally:
                reader.close()

        kept: Any = None  # the run's first sample, when it pads the run's end
        for at, record in read(run.start + start, run.stop) if start < len(run) else ():
            if at == run.start and at in padding:
                kept = _copy(record)
            yield at, record
        for at in padding[max(start - len(run), 0) :]:
            if kept is not None and at == run.start:  # not read twice
                yield at, _copy(kept)
            else:
                yield from read(at, at + 1)

    def _read_span(self, source: _Archive, index: _Index, lo: int, hi: int) -> Iterator[Any]:
        """Samples ``lo .. hi - 1`` of one shard (exactly ``hi - lo`` records)."""
        path = source.uri
        complete = max(len(index.starts) - 1, 0)
        n = hi - lo
        got = 0
        if lo < complete:
            end = min(hi, complete)
            try:
                members = _tar_members(source, index.starts[lo], index.starts[end])
                for sample in itertools.islice(_group(members, path), end - lo):
                    got += 1
                    yield sample
                if got < end - lo:
                    raise FormatError(
                        f"archive {path!r} holds fewer samples than when it was indexed; "
                        "it changed during the pass, re-run over unchanging shards"
                    )
            except DataioError as exc:
                while got < n:
                    got += 1
                    yield _FailedSample(path, exc)
        while got < n:  # the stand-in for a broken shard
            assert index.error is not None
            got += 1
            yield _FailedSample(path, index.error)


# -- dealing by a shard index ---------------------------------------------------------------


class _Counts:
    """The shards' sample counts (and file sizes, where recorded) from the index at ``uri``."""

    def __init__(self, uri: str, counts: list[int], sizes: list[int | None]) -> None:
        self.uri = uri
        self.counts = counts
        self.sizes = sizes


def _load_counts(paths: list[str], option: str | bool | None) -> _Counts | None:
    """The index ``option`` names (it must list every shard), or the one found beside the
    first shard when ``option`` is ``None`` (ignored unless it lists every shard)."""
    if option is False or not paths:
        return None
    by_name = False
    if isinstance(option, str):
        loaded = shardindex.load(option)
        # by file name only when no shard is listed where it is: an index copied away
        # from its shards, not one that lists some of them and not others of that name
        by_name = all(loaded.lookup(p, by_name=False) is None for p in paths)
        missing = loaded.missing(paths, by_name=by_name)
        if missing:
            raise PlanError(
                f"webdataset index {option!r} does not list {len(missing)} of the "
                f"{len(paths)} shards (first {missing[0]!r}); write it again with "
                "dataio.write_webdataset_index(pattern, uri)"
            )
    else:
        uri = shardindex.default_index(paths[0])
        try:
            loaded = shardindex.load(uri)
        except (NotFoundError, PermissionDeniedError):
            return None
        # an index found by its place lists the shards beside it: a shard elsewhere with
        # the same file name (a/shard.tar, b/shard.tar) is another shard, not a copy
        missing = loaded.missing(paths, by_name=False)
        if missing:
            log.info(
                "webdataset: the index %r does not list %d of the %d shards (first %r); "
                "it is not used",
                uri,
                len(missing),
                len(paths),
                missing[0],
            )
            return None
    found = [loaded.lookup(p, by_name=by_name) for p in paths]
    return _Counts(loaded.uri, [f[0] for f in found if f], [f[1] for f in found if f])


_WALK_NOTED = threading.Event()


def _note_walk(shards: int) -> None:
    """Say once per process what a sharded pass without an index costs, and the cure."""
    if not _WALK_NOTED.is_set():
        _WALK_NOTED.set()
        log.info(
            "webdataset: dealing %d shards to ranks walks the tar headers of every shard "
            "first (remotely one request per member, several shards at a time); "
            "dataio.write_webdataset_index(pattern) writes a shard index once, and passes "
            "that find it (shardindex.json beside the first shard, or index=...) skip the walk",
            shards,
        )


def _mismatch(path: str, counted: _Counts, expected: int, actual: str) -> FormatError:
    return FormatError(
        f"webdataset index {counted.uri!r} says shard {path!r} holds {expected} samples but "
        f"it holds {actual}; the shard changed since the index was written: write it again "
        "with dataio.write_webdataset_index(pattern, uri), or pass index=False"
    )


#: how a run starting inside a shard reaches its first sample: "stream" reads the shard
#: from its start and drops the samples before (one ranged request, at most one shard's
#: bytes extra); "walk" walks that shard's headers first (a request per member remotely).
#: Measured on moto (benchmarks/object_io.py --webdataset-remote), streaming is far faster.
_SKIP_BY = "stream"


def _read_counted(
    source: _Archive, lo: int, hi: int, counted: _Counts, shard: int
) -> Iterator[Any]:
    """Samples ``lo .. hi - 1`` of shard ``shard``, which the index says holds
    ``counted.counts[shard]``: streamed from the shard's start (the samples before ``lo``
    are read and dropped). A read that reaches the shard's end counts it whole, and any
    disagreement with the index is a :class:`FormatError` naming both counts."""
    expected, size = counted.counts[shard], counted.sizes[shard]
    path = source.uri
    if size is not None and not source.local:
        source._size = size  # no HEAD: the first ranged GET reports the object's size
    try:
        total = source.size()
    except DataioError as exc:
        yield from (_FailedSample(path, exc) for _ in range(hi - lo))
        return

    def check_size() -> None:
        actual = total if source.observed is None else source.observed
        if size is not None and size != actual:
            raise _mismatch(path, counted, expected, f"{actual} bytes, not the {size} it lists")

    check_size()
    if expected > total // 512:  # a sample takes a header block at least
        raise _mismatch(path, counted, expected, f"at most {total // 512} in its {total} bytes")
    if _SKIP_BY == "walk" and lo > 0:
        yield from _read_walked(path, lo, hi, counted, shard)
        return
    to_end = hi >= expected
    pieces = source.span(0, total) if to_end else _windows(source, total, hi / max(expected, 1))
    got = seen = 0
    error: DataioError | None = None
    try:
        members = walk(Blocks(_reader(pieces), 0), path, total)
        for sample in _group(((m, d) for m, _, d in members if d is not None), path):
            if lo <= seen < hi:
                got += 1
                yield sample
            seen += 1
            if seen >= hi and not to_end:
                break
        if to_end:
            for _ in pieces:  # past the end-of-archive block: the whole read completes (cached)
                pass
    except DataioError as exc:
        error = exc  # a corrupt shard: stand-ins for the rest of the run, as without an index
        if source.observed is None and size is not None and not source.local:
            source.version()  # the request failed before reporting a size (a shorter object?)
            source.observed = source._size
    check_size()
    if error is None and (seen < hi or (to_end and seen != expected)):
        raise _mismatch(path, counted, expected, str(seen))
    while got < hi - lo:
        assert error is not None
        got += 1
        yield _FailedSample(path, error)


def _counted_span(source: _Archive, counted: _Counts, shard: int, hi: int) -> Any:
    """The first span :func:`_read_counted` reads of ``shard`` for its samples ``0 .. hi - 1``
    (a function: the shard's size may need a request)."""
    expected, size = counted.counts[shard], counted.sizes[shard]

    def span() -> tuple[int, int]:
        total = size if size is not None else source.size()
        if hi >= expected:
            return 0, total
        return 0, min(total, _first_window(total, hi / max(expected, 1)))

    return span


def _walked_span(index: _Index, hi: int) -> tuple[int, int]:
    """The span :meth:`ArchiveSource._read_span` reads of a shard for samples ``0 .. hi - 1``."""
    complete = max(len(index.starts) - 1, 0)
    if not complete:
        return 0, 0
    return index.starts[0], index.starts[min(hi, complete)]


def _read_walked(path: str, lo: int, hi: int, counted: _Counts, shard: int) -> Iterator[Any]:
    """As :func:`_read_counted`, reaching sample ``lo`` by a walk of the shard's headers."""
    index = _index(path)
    expected = counted.counts[shard]
    if index.error is None and index.count != expected:
        raise _mismatch(path, counted, expected, str(index.count))
    records = ArchiveSource([path], {})._read_span(_Archive(path), index, lo, hi)
    yield from records


def _first_window(total: int, part: float) -> int:
    """The first request's size for a run ending ``part`` of the way into a shard."""
    return int(total * part * 1.05) + (64 << 10)


def _windows(source: _Archive, total: int, part: float) -> Iterator[bytes]:
    """A shard's bytes from its start by ranged requests of growing size, the first sized
    to ``part`` of the shard (and a little more): a run ending inside a shard fetches about
    the bytes it needs, not the whole shard."""
    start, window = 0, _first_window(total, part)
    while start < total:
        stop = min(total, start + window)
        yield from source.span(start, stop)
        start, window = stop, max(window, 1 << 20) * 2


# -- writing an index --------------------------------------------------------------------


def _shard_entry(path: str) -> tuple[int, int]:
    """A plain tar's sample count and size: a local one by a walk of its headers, a remote
    one streamed whole in one request (a header walk would send one per member)."""
    source = _Archive(path)
    if source.local:
        index = _walk_index(source)
        if index.error is not None:
            raise index.error
        return max(len(index.starts) - 1, 0), source.size()
    total = source.size()
    key: str | None = None
    count = 0
    pieces = source.span(0, total)
    for name, _, _ in walk(Blocks(_reader(pieces), 0), path, total, data=False):
        sample, field = _split_member(name)
        if field and not field.startswith("__") and sample != key:
            count += 1
            key = sample
    for _ in pieces:  # past the end-of-archive block: the whole read completes (and is cached)
        pass
    return count, total


def write_webdataset_index(
    pattern: str | os.PathLike[str], uri: str | os.PathLike[str] | None = None, *, workers: int = 8
) -> str:
    """Count the samples of every shard of ``pattern`` and write a shard index (the
    ``wids`` JSON format) that sharded passes read instead of walking every shard.

    Shards are counted ``workers`` at a time: local ones by a walk of their headers,
    remote ones streamed whole, once. The index lists each shard's ``url`` (relative to
    the index's directory when the shard lies under it), ``nsamples`` and ``filesize``.

    Args:
        pattern: the shards, as :func:`webdataset` takes them (plain ``.tar`` files).
        uri: where to write; by default ``shardindex.json`` beside the first shard, where
            :func:`webdataset` looks for it.
        workers: shards counted at once.

    Returns:
        The URI written.

    Raises:
        PlanError: a shard is not a plain ``.tar``, or ``workers`` is not positive.
        FormatError: a shard is corrupt or truncated (nothing is written).

    Example:
        >>> dataio.write_webdataset_index("s3://bucket/shard-{0000..0099}.tar")  # doctest: +SKIP
        's3://bucket/shardindex.json'
    """
    paths = expand_braces(os.fspath(pattern))
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise PlanError(f"workers must be a positive integer, got {workers!r}")
    plain = [p for p in paths if not _plain_tar(p)]
    if plain:
        raise PlanError(
            f"a shard index lists plain .tar shards only; {plain[0]!r} is not one "
            "(compressed tars are dealt sample by sample and need no index)"
        )
    target = os.fspath(uri) if uri is not None else shardindex.default_index(paths[0])
    with ThreadPoolExecutor(min(workers, len(paths))) as pool:
        found = list(pool.map(_shard_entry, paths))
    rows = [
        {"url": shardindex.entry_url(target, p), "nsamples": n, "filesize": size}
        for p, (n, size) in zip(paths, found, strict=True)
    ]
    shardindex.write(target, rows)
    return target


def _copy(record: Any) -> Any:
    return dict(record) if isinstance(record, dict) else record


def _shard_of(firsts: Sequence[int], position: int) -> int:
    import bisect

    return bisect.bisect_right(firsts, position) - 1


def webdataset(
    pattern: str | os.PathLike[str], *, index: str | os.PathLike[str] | bool | None = None
) -> ArchiveSource:
    """Samples from WebDataset tar shards named by a brace pattern, in shard order.

    The pattern is a local path or a URI (``s3://``, ``gs://``, ``az://``, ``hf://``,
    ``http(s)://``); remote shards are streamed. Braces expand as in
    :func:`expand_braces`: ``{0000..0099}``, ``{train,val}``.

    Args:
        pattern: the shards, or a shard index (a ``.json`` URI, read at once): its
            shards, in its order.
        index: a shard index (``wids`` JSON, see :func:`write_webdataset_index`) giving
            each shard's sample count, so a sharded pass deals samples to ranks without
            walking every shard's headers. ``None`` (the default) uses
            ``shardindex.json`` beside the first shard when it exists and lists every
            shard; ``False`` never reads one. Read only by sharded passes.

    Example:
        >>> source = dataio.webdataset("s3://bucket/shard-{0000..0099}.tar")  # doctest: +SKIP
    """
    text = os.fspath(pattern)
    description: dict[str, Any] = {"source": "webdataset", "pattern": text}
    if text.lower().endswith(".json") and index is None:
        # a shard index names the shards itself (wids' ShardListDataset takes one so)
        return ArchiveSource(shardindex.load(text).shards, description, text)
    option: str | bool | None
    if index is None or isinstance(index, bool):
        if index is True:
            raise PlanError("index=True: pass the index's URI, None (look for one) or False")
        option = index
    else:
        option = os.fspath(index)
        description["index"] = option
    return ArchiveSource(expand_braces(text), description, option)


def archive(path: str | os.PathLike[str]) -> ArchiveSource:
    """Samples from one tar (optionally compressed) or zip archive, a local path or a URI.

    Example:
        >>> source = dataio.archive("/data/images.zip")  # doctest: +SKIP
    """
    text = os.fspath(path)
    return ArchiveSource([text], {"source": "archive", "path": text})
