"""A seekable, read-only binary file over any URI, read by byte ranges with read-ahead.

Formats that can seek (safetensors headers, HDF5 through h5py, NPY headers, zip
directories) read a large remote object through :class:`RangedFile` and fetch only the
bytes they touch. Each fetch is one :func:`dataio.io.verbs.read` of a range; small reads
fetch ``read_ahead`` bytes at once and serve the next reads from that block, large ones
fetch exactly what they ask for. When the local cache (``DATAIO_CACHE_DIR``) holds the
whole object, ranges are read from the cached copy instead of the network.

Every range of one :class:`RangedFile` comes from one version of the object (a
:class:`Pin`): the ETag (else the modification time) its first response gave, and the
size its ``head`` gave. Later ranges ask for that version (``If-Match``, for a strong
ETag) and check the version they got, so an object overwritten mid-read is a
:class:`~dataio.TransportError` saying so, never a mix of two versions.
"""

from __future__ import annotations

import io
import os
from typing import Any, NoReturn

from dataio.exceptions import DataioError, TransportError
from dataio.io import cache, verbs
from dataio.io.config import redact
from dataio.io.uri import parse

__all__ = ["READ_AHEAD", "Pin", "RangedFile", "is_local", "local_path"]

# One block per small read: HDF5 and zip readers make many reads of a few bytes to a few
# KiB each, close together; a round trip per read would dominate. Reads this large or
# larger bypass the block, so a tensor's bytes are fetched once, exactly.
READ_AHEAD = 256 << 10


def is_local(uri: str | os.PathLike[str]) -> bool:
    """Whether ``uri`` is a local path or a ``file://`` URI."""
    return parse(uri).scheme == "file"


def local_path(uri: str | os.PathLike[str]) -> str:
    """The filesystem path of a local path or ``file://`` URI (a trailing ``/`` kept)."""
    text = os.fspath(uri)
    if "://" not in text:
        return text
    loc = parse(text)
    return loc.path + ("/" if text.endswith("/") and not loc.path.endswith("/") else "")


class Pin:
    """The version of one object that a series of ranged reads must all see.

    Made empty (or with the ``size`` alone): the first response's version is taken;
    or from a version known already (``etag``, ``size``, ``last_modified``, as GET
    responses give them). :meth:`options` asks a request for that version
    (``If-Match`` for a strong ETag; a weak one never matches there) and :meth:`check`
    compares each response's metadata with it. Share it between threads once it holds a
    version (after the first read).

    Example:
        >>> pin = Pin("s3://bucket/model.safetensors", etag='"abc"', size=10)
        >>> pin.options()
        {'if_match': '"abc"'}
    """

    __slots__ = ("etag", "last_modified", "size", "uri")

    def __init__(
        self,
        uri: str,
        *,
        etag: str | None = None,
        size: int | None = None,
        last_modified: Any = None,
    ) -> None:
        self.uri = uri
        self.etag, self.size, self.last_modified = etag or None, size, last_modified

    def options(self) -> dict[str, Any]:
        """obstore ``get`` options asking for the pinned version."""
        if self.etag and not self.etag.startswith("W/"):
            return {"if_match": self.etag}
        return {}

    def check(self, meta: Any) -> None:
        """Raise :class:`~dataio.TransportError` if ``meta`` (an obstore response's
        metadata) is another version than the pinned one; pin it if none was yet.

        A pin holding a size already (a ``head``'s or a listing's, which the reads were
        planned by) refuses a first response of another size: the object was replaced
        between the two, and reading it against the old size would cut it silently.
        """
        etag, size = meta.get("e_tag") or None, meta.get("size")
        modified = meta.get("last_modified")
        if size is not None and self.size is not None and size != self.size:
            self._changed(f"{self.size} bytes when its reading began", f"{size} bytes now")
        if self.size is None:
            self.size = size
        if self.etag is None and self.last_modified is None:
            self.etag, self.last_modified = etag, modified
            return
        if self.etag is not None and etag is not None:
            if etag != self.etag:
                self._changed(f"ETag {self.etag} at the first read", f"ETag {etag} now")
        elif modified is not None and modified != self.last_modified:
            # a server without ETags: the modification time tells
            self._changed(
                f"modified {self.last_modified} at the first read", f"modified {modified} now"
            )

    def _changed(self, was: str, now: str) -> NoReturn:
        raise TransportError(
            f"{redact(self.uri)!r} changed while it was being read ({was}, {now}): its "
            "parts would mix two versions; read it again"
        )


class RangedFile(io.RawIOBase):
    """A read-only, seekable file over ``uri`` whose reads fetch byte ranges.

    ``size`` is the object's size when known (else one ``head`` asks); ``pin`` the
    version to read (else the first response's): pass one file's
    :attr:`pin` to another opened on the same object to read one version through both.
    ``fetched`` and ``requests`` count the bytes and ranges read so far. Not safe to
    share between threads (one position); open one per thread.

    Example:
        >>> with RangedFile("s3://bucket/arrays.h5") as f:  # doctest: +SKIP
        ...     magic = f.read(8)
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        size: int | None = None,
        read_ahead: int = READ_AHEAD,
        pin: Pin | None = None,
    ) -> None:
        super().__init__()
        self.uri = os.fspath(uri)
        self._cached: Any = None
        held = _hub_cached(self.uri) if pin is None and size is None else None
        if held is not None:  # the Hub said the size, and the shared cache may hold it
            path, size = held
            try:
                self._cached = None if path is None else open(path, "rb")  # noqa: SIM115
            except OSError:  # gone meanwhile (a cache cleanup): read from the Hub
                self._cached = None
        if pin is None and size is None:
            # the head gives the size only: the version is the first GET's, compared
            # with later GETs' (a HEAD's ETag may be another API's, as GCS's JSON one)
            size = int(verbs.head(self.uri)["size"])
        self.pin = pin or Pin(self.uri, size=size)
        self.size: int = size if size is not None else self.pin.size or 0
        self.read_ahead = read_ahead
        self.fetched = 0
        self.requests = 0
        self._pos = 0
        self._block = b""
        self._block_at = 0
        self._error: DataioError | None = None
        entry = cache.entry_path(parse(self.uri)) if self._cached is None else None
        if entry is not None:
            self._cached = _open_cached(entry, self.size)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}.get(whence)
        if base is None:
            raise OSError(f"seek whence must be 0, 1 or 2, got {whence!r}")
        if base + offset < 0:  # as a real file answers: zipfile and h5py expect OSError
            raise OSError(f"negative seek position {base + offset} in {redact(self.uri)!r}")
        self._pos = base + offset
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        # never allocate more than the object holds: a damaged file's lengths (an IPC
        # body of 2**60 bytes) reach here unchecked through readers such as pyarrow
        if size is None or size < 0:
            return self.readall()
        self._check_open()
        return super().read(min(size, max(0, self.size - self._pos))) or b""

    def readinto(self, target: Any) -> int:
        self._check_open()
        view = memoryview(target).cast("B")
        want = max(0, min(len(view), self.size - self._pos))
        done = 0
        while done < want:
            at = self._pos + done
            rel = at - self._block_at
            if 0 <= rel < len(self._block):  # served from the read-ahead block
                n = min(want - done, len(self._block) - rel)
                view[done : done + n] = self._block[rel : rel + n]
                done += n
                continue
            rest = want - done
            if rest >= self.read_ahead:  # large: exactly these bytes, no block
                data = self.pread(at, rest)
                view[done : done + len(data)] = data
                done += len(data)
                if len(data) < rest:
                    raise self._short(at + len(data))
                continue
            wanted = min(self.read_ahead, self.size - at)
            self._block = self.pread(at, wanted)
            self._block_at = at
            if len(self._block) < wanted:
                raise self._short(at + len(self._block))
        self._pos += done
        return done

    def readall(self) -> bytes:
        self._check_open()
        data = self.read(max(0, self.size - self._pos))
        return data or b""

    def pread(self, offset: int, size: int) -> bytes:
        """``size`` bytes from ``offset`` (fewer at the end of the object), fetched now;
        the position does not move."""
        size = min(size, self.size - offset)  # a cached entry has a footer past the end
        if size <= 0:
            return b""
        self.requests += 1
        try:
            if self._cached is not None:
                data = os.pread(self._cached.fileno(), size, offset)
            else:
                data = self._fetch(offset, size)
        except DataioError as exc:
            self._error = exc
            raise
        self.fetched += len(data)
        return data

    def _fetch(self, offset: int, size: int) -> bytes:
        loc = parse(self.uri)
        if loc.scheme == "file":
            return verbs.read(self.uri, offset=offset, size=size)
        return bytes(verbs._download(loc, self.uri, offset=offset, size=size, pin=self.pin))

    def hold(self, offset: int, data: bytes) -> None:
        """Serve reads of ``offset..offset + len(data)`` from ``data``, bytes of this
        object's pinned version fetched already (by another file over it), until a read
        outside them replaces them."""
        self._block, self._block_at = bytes(data), offset

    def read_whole(self) -> Any:
        """The whole object, of the pinned version, as one buffer (the position does not
        move): from the local cache when it holds it, else one download (then cached,
        when ``DATAIO_CACHE_DIR`` is on, replacing an entry of another version)."""
        self._check_open()
        loc = parse(self.uri)
        if self._cached is not None or loc.scheme == "file":
            return self.pread(0, self.size)
        # no entry of this size was found when the file was opened: an entry there now
        # is another version (the object was rewritten by another tool), so a miss
        self.requests += 1
        try:
            data = verbs._download(loc, self.uri, pin=self.pin)
        except DataioError as exc:
            self._error = exc
            raise
        if len(data) != self.size:
            raise self._short(len(data))
        entry = cache.entry_path(loc)
        if entry is not None:
            cache.store(entry, data)
        self.fetched += len(data)
        return data

    def take_error(self) -> DataioError | None:
        """The error of the last failed fetch (then forgotten): for readers such as h5py
        that turn a file object's exceptions into their own."""
        error, self._error = self._error, None
        return error

    def close(self) -> None:
        if self._cached is not None:
            self._cached.close()
            self._cached = None
        self._block = b""
        super().close()

    def _short(self, at: int) -> TransportError:
        """The object ended at byte ``at``, before the size it was opened with."""
        return TransportError(
            f"{redact(self.uri)!r} ended at byte {at} of {self.size}: the object is shorter "
            "than when it was opened (changed meanwhile?); open it again"
        )

    def _check_open(self) -> None:
        if self.closed:
            raise DataioError(f"{redact(self.uri)!r} is closed; open it again to read")

    def __repr__(self) -> str:
        return f"<RangedFile {redact(self.uri)!r} ({self.size} bytes)>"


def _hub_cached(uri: str) -> tuple[str | None, int] | None:
    """An ``hf`` file's size, and its path in the shared Hugging Face cache if that
    holds the revision's current version (see :func:`dataio.io.hf.cached_file`)."""
    loc = parse(uri)
    if loc.scheme != "hf":
        return None
    from dataio.io import hf

    return hf.cached_file(loc)


def _open_cached(entry: Any, size: int) -> Any:
    """The cache entry's file when it holds this object whole (its footer checked), else
    ``None``. Ranges from it skip the whole-object CRC: checking it means reading it all."""
    opened = cache._open_entry(entry)
    if opened is None:
        return None
    f, cached_size, _ = opened
    if cached_size != size:
        f.close()
        return None
    return f
