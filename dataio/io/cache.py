"""An optional local cache of whole remote objects, on when ``DATAIO_CACHE_DIR`` is set.

Layout: ``$DATAIO_CACHE_DIR/objects-v1/<partition>/<xx>/<object>``. The partition is a
hash of the scheme's credential and endpoint identity, so two accounts or two servers
never share entries; the object name is a hash of the URI. Neither holds a secret or a
URI in clear. Credentials resolved at request time (``method="default"``) bypass the
cache: the identity that would own an entry is not known.

An entry is the object's bytes followed by a footer (size, CRC-32, magic). It is
written to a temporary file and renamed into place, so readers see a whole entry or
none; a footer that does not match (a truncated or corrupt file) is a miss and the
object is fetched again. Hits do not revalidate against the origin: cache immutable
objects. Local files are never cached.

``DATAIO_CACHE_MAX_GIB`` bounds the entries' total size: once a write takes the cache
over it, the least recently used entries (a hit refreshes an entry's modification time)
are deleted down to 90% of the bound. The directory is scanned on the first write of a
process and again after every sixteenth of the bound written; an object larger than the
bound is not cached. Without the variable the cache grows without bound.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import tempfile
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataio.exceptions import DataioError
from dataio.io.uri import Location

__all__ = [
    "EntryWriter",
    "drop",
    "entry_path",
    "load",
    "load_into",
    "read_through",
    "store",
    "trim",
]

log = logging.getLogger("dataio.io")

ENV = "DATAIO_CACHE_DIR"
MAX_ENV = "DATAIO_CACHE_MAX_GIB"
_FOOTER = struct.Struct("<QI8s")  # object size, CRC-32, magic
_MAGIC = b"dataio\x01\x00"
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT", "AWS_REGION", "AWS_DEFAULT_REGION")


def _root() -> Path | None:
    text = os.environ.get(ENV)
    return Path(text).expanduser() / "objects-v1" if text else None


def _limit() -> int | None:
    """The bound on the entries' total bytes, or ``None`` for no bound."""
    text = os.environ.get(MAX_ENV, "").strip()
    if not text:
        return None
    try:
        gib = float(text)
    except ValueError:
        gib = -1.0
    if not gib > 0 or gib == float("inf"):
        raise DataioError(
            f"{MAX_ENV} must be a positive number of GiB (such as 20 or 0.5), got {text!r}; "
            "unset it for an unbounded cache"
        )
    return max(1, int(gib * 2**30))


_trim_lock = threading.Lock()
_written_since_scan: int | None = None  # None: this process has not scanned yet


def _after_write(root: Path, size: int, limit: int) -> None:
    """Count a new entry's bytes; trim the cache when a scan is due."""
    global _written_since_scan
    with _trim_lock:
        due = _written_since_scan is None or _written_since_scan + size >= limit // 16
        _written_since_scan = 0 if due else (_written_since_scan or 0) + size
    if due:
        trim(root, limit)


def trim(root: Path, limit: int) -> int:
    """Delete the least recently used entries under ``root`` until they total at most
    90% of ``limit`` bytes (nothing when they already fit); returns the bytes deleted.

    Entries other processes delete meanwhile are skipped; partial writes are left alone.
    """
    found: list[tuple[float, int, str]] = []
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            if name.startswith(".partial-"):
                continue
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            found.append((info.st_mtime, info.st_size, path))
            total += info.st_size
    if total <= limit:
        return 0
    goal, deleted = int(limit * 0.9), 0
    for _, size, path in sorted(found):
        if total - deleted <= goal:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            deleted += size
    log.info("cache over %s bytes: deleted %s bytes of least recently used entries", limit, deleted)
    return deleted


def _touch(path: Path) -> None:
    """Mark an entry used now, for least-recently-used trimming (only with a bound)."""
    if os.environ.get(MAX_ENV):
        with contextlib.suppress(OSError):
            os.utime(path)


def _partition(scheme: str) -> str | None:
    """The hashed identity that owns ``scheme``'s entries; ``None`` when uncacheable."""
    from dataio.io import config

    credentials = config.credentials_for(scheme)
    method = credentials.pop("method", None)
    if method == "default" and scheme not in ("http", "https"):
        return None  # resolved by the platform chain per request: identity unknown here
    endpoint: Any = config.endpoint_for(scheme)
    if endpoint is None and scheme in ("s3", "r2"):
        endpoint = [os.environ.get(name) for name in _ENDPOINT_ENV]
    identity = {
        "scheme": scheme,
        "credentials": sorted(credentials.items()),  # hashed below, never stored
        "endpoint": endpoint,
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _object_name(loc: Location) -> str:
    return hashlib.sha256(str(loc).encode()).hexdigest()


def entry_path(loc: Location) -> Path | None:
    """Where ``loc``'s entry lives, or ``None`` when it must not be cached."""
    root = _root()
    if root is None or loc.scheme == "file":
        return None
    _limit()  # a malformed bound fails every cached read, not silently
    partition = _partition(loc.scheme)
    if partition is None:
        return None
    name = _object_name(loc)
    return root / partition / name[:2] / name


def _open_entry(path: Path) -> tuple[Any, int, int] | None:
    """An open entry, its object size and CRC-32; ``None`` when missing or malformed."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError:
        return None
    try:
        total = os.fstat(f.fileno()).st_size
        if total >= _FOOTER.size:
            f.seek(total - _FOOTER.size)
            size, crc, magic = _FOOTER.unpack(f.read(_FOOTER.size))
            if magic == _MAGIC and size == total - _FOOTER.size:
                f.seek(0)
                return f, size, crc
    except OSError:
        pass
    f.close()
    log.warning("cache entry %s is damaged; fetching the object again", path)
    return None


def load(path: Path) -> bytes | None:
    """The cached object at ``path``, or ``None`` when missing, truncated or corrupt."""
    opened = _open_entry(path)
    if opened is None:
        return None
    f, size, crc = opened
    with f:
        try:
            data = f.read(size)
        except OSError:
            return None
    if len(data) != size or zlib.crc32(data) != crc:
        log.warning("cache entry %s fails its checksum; fetching the object again", path)
        return None
    _touch(path)
    return data


def load_into(path: Path, view: memoryview) -> int | None:
    """Copy the cached object into ``view``; its size, or ``None`` on a miss or when
    it does not fit (the origin read then reports the error)."""
    opened = _open_entry(path)
    if opened is None:
        return None
    f, size, crc = opened
    with f:
        if size > len(view):
            return None
        done = 0
        try:
            while done < size:
                n = f.readinto(view[done:size])
                if not n:
                    return None
                done += n
        except OSError:
            return None
    if zlib.crc32(view[:size]) != crc:
        log.warning("cache entry %s fails its checksum; fetching the object again", path)
        return None
    _touch(path)
    return size


def store(path: Path, data: Any) -> None:
    """Save ``data`` (any buffer) as the entry at ``path``; failures only log.

    With ``DATAIO_CACHE_MAX_GIB`` set, an object larger than the bound is not saved and
    the cache is trimmed when a scan is due.
    """
    view = memoryview(data).cast("B")
    limit = _limit()
    if limit is not None and len(view) + _FOOTER.size > limit:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
    except OSError as exc:
        log.warning("cannot write the cache under %s: %s", path.parent, exc)
        return
    try:
        with open(fd, "wb") as f:
            f.write(view)
            f.write(_FOOTER.pack(len(view), zlib.crc32(view), _MAGIC))
        os.replace(temp, path)
    except OSError as exc:
        log.warning("cannot write the cache entry %s: %s", path, exc)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return
    root = _root()
    if limit is not None and root is not None:
        _after_write(root, len(view) + _FOOTER.size, limit)


class EntryWriter:
    """An entry written piece by piece as a streamed object arrives (never held whole);
    :meth:`commit` puts it in place, :meth:`abort` (or a failed write) drops it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._crc = 0
        self._size = 0
        self._limit = _limit()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._temp = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
        self._file: Any = open(fd, "wb")  # noqa: SIM115 - closed by commit or abort

    def write(self, piece: Any) -> None:
        """Append a piece of the object."""
        if self._file is None:
            return
        self._crc = zlib.crc32(piece, self._crc)
        self._size += len(piece)
        if self._limit is not None and self._size + _FOOTER.size > self._limit:
            self.abort()  # larger than the whole cache: not cached
            return
        try:
            self._file.write(piece)
        except OSError as exc:
            log.warning("cannot write the cache entry %s: %s", self.path, exc)
            self.abort()

    def commit(self) -> None:
        """Finish the entry (footer, rename into place); failures only log."""
        if self._file is None:
            return
        try:
            self._file.write(_FOOTER.pack(self._size, self._crc, _MAGIC))
            self._file.close()
            self._file = None
            os.replace(self._temp, self.path)
        except OSError as exc:
            log.warning("cannot write the cache entry %s: %s", self.path, exc)
            self.abort()
            return
        root = _root()
        if self._limit is not None and root is not None:
            _after_write(root, self._size + _FOOTER.size, self._limit)

    def abort(self) -> None:
        """Drop the partial entry."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
        with contextlib.suppress(OSError):
            os.unlink(self._temp)


def read_through(loc: Location, download: Callable[[], Any]) -> Any:
    """The object from the cache, or from ``download()`` (then cached)."""
    path = entry_path(loc)
    if path is None:
        return download()
    hit = load(path)
    if hit is not None:
        return hit
    data = download()
    store(path, data)
    return data


def drop(loc: Location) -> None:
    """Forget ``loc`` in every partition (after a write or a delete through dataio)."""
    root = _root()
    if root is None or loc.scheme == "file" or not root.is_dir():
        return
    name = _object_name(loc)
    for partition in root.iterdir():
        with contextlib.suppress(OSError):
            (partition / name[:2] / name).unlink()
