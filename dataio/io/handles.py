"""Composable handles: ``reader(uri)`` (lazy, chained views) and ``writer(uri)``."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import tarfile
import zlib
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dataio import limits
from dataio.exceptions import DataioError, DecodeError, NotFoundError
from dataio.io import cache
from dataio.io.config import redact, store_for
from dataio.io.errors import call
from dataio.io.stream import stream
from dataio.io.tar import checked_tarinfo
from dataio.io.uri import parse, require_writable
from dataio.io.verbs import fetch_whole, read

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["Reader", "Writer", "reader", "writer"]

_MIB = 1 << 20


class Reader:
    """A lazy view of one object: each method returns a new reader; nothing is read
    until :meth:`read_all` or :meth:`read_buffer`.

    A plain reader fetches the whole object (through the local cache when
    ``DATAIO_CACHE_DIR`` is set). Decompression and tar steps read the object as a
    stream instead: they inflate as bytes arrive and stop reading once the tar member
    is complete, so an early member of a large archive does not download the rest.
    """

    def __init__(self, uri: str | os.PathLike[str], steps: tuple[tuple[str, str], ...] = ()):
        parse(uri)  # fail early on a malformed URI
        self.uri = os.fspath(uri)
        self._steps = steps

    def __repr__(self) -> str:
        chain = "".join(f".{op}({arg!r})" if arg else f".{op}()" for op, arg in self._steps)
        return f"reader({self.uri!r}){chain}"

    def gunzip(self) -> Reader:
        """The gzip-decompressed content."""
        return Reader(self.uri, (*self._steps, ("gunzip", "")))

    def tar_entry(self, name: str) -> Reader:
        """The content of member ``name`` of this tar archive (plain or compressed)."""
        return Reader(self.uri, (*self._steps, ("tar_entry", name)))

    def read_all(self) -> bytes:
        """Read and transform everything into bytes."""
        data = self._materialize()
        return data if isinstance(data, bytes) else bytes(data)

    def read_buffer(self) -> memoryview:
        """A read-only buffer over the result that keeps the native storage alive
        (no final copy into ``bytes``); hand it to ``numpy.frombuffer`` or ``memoryview``."""
        return memoryview(self._materialize()).toreadonly()

    def _materialize(self) -> Any:
        if not self._steps:
            return self._raw()
        with contextlib.ExitStack() as stack:
            source: Any = stack.enter_context(self._open())
            for op, arg in self._steps:
                if op == "gunzip":
                    source = stack.enter_context(gzip.GzipFile(fileobj=source, mode="rb"))
                else:
                    source = _tar_member(source, arg, self.uri, stack)
            try:
                return _read_bounded(source, repr(self))
            except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
                raise _not_readable(exc, self.uri) from None

    def _open(self) -> Any:
        """The object as a file-like stream: the cached copy when there is one."""
        loc = parse(self.uri)
        entry = cache.entry_path(loc)
        if entry is not None:
            hit = cache.load(entry)
            if hit is not None:
                return io.BytesIO(hit)
        return stream(self.uri)

    def _raw(self) -> Any:
        loc = parse(self.uri)
        if loc.scheme == "file":
            return read(self.uri)
        return fetch_whole(loc, self.uri)


def _read_bounded(source: Any, what: str) -> bytes:
    """Read ``source`` to its end in pieces, refusing past ``max_decoded_bytes`` (a gzip
    bomb inflates ~1000:1, so the compressed size bounds nothing)."""
    cap = limits.get().max_decoded_bytes
    parts, total = [], 0
    while chunk := source.read(_MIB):
        total += len(chunk)
        if total > cap:
            limits.check("max_decoded_bytes", total, what=redact(what))
        parts.append(chunk)
    return b"".join(parts)


def _not_readable(exc: BaseException, uri: str) -> DataioError:
    if isinstance(exc, DataioError):
        return exc
    if isinstance(exc, tarfile.TarError):
        return DecodeError(f"{redact(uri)!r} is not a readable tar archive: {exc}")
    return DecodeError(f"{redact(uri)!r} is not valid gzip: {exc}")


def _tar_member(source: Any, name: str, uri: str, stack: contextlib.ExitStack) -> Any:
    """The file-like content of member ``name``, read from ``source`` in stream mode:
    members before it are skipped, nothing after it is read."""

    def total(tar: Any) -> int | None:
        # an uncompressed stream's length bounds its members; a compressed one's does not
        size = getattr(source, "size", None)
        return size if getattr(tar.fileobj, "comptype", None) == "tar" else None

    try:
        archive = stack.enter_context(
            tarfile.open(  # noqa: SIM115 - the stack closes it
                fileobj=source, mode="r|*", tarinfo=checked_tarinfo(redact(uri), total)
            )
        )
        seen: list[str] = []
        for member in archive:
            if member.name == name:
                if not member.isfile():
                    raise DataioError(
                        f"tar entry {name!r} in {redact(uri)!r} is not a regular file; "
                        "name a file member of the archive"
                    )
                handle = archive.extractfile(member)
                assert handle is not None  # a regular file always has content
                return handle
            if len(seen) < 5:
                seen.append(member.name)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise _not_readable(exc, uri) from None
    except TypeError as exc:  # tarfile's gzip header parse: ord(b"") on a cut header
        cut = tarfile.ReadError(f"its gzip header is cut short ({exc})")
        raise _not_readable(cut, uri) from None
    raise NotFoundError(f"no entry {name!r} in tar {redact(uri)!r}; the first entries are {seen}")


def reader(uri: str | os.PathLike[str]) -> Reader:
    """A lazy, composable reader of one object.

    Example:
        >>> src = dataio.reader("s3://bucket/shard.tar.gz")  # doctest: +SKIP
        >>> payload = src.gunzip().tar_entry("0001.jpg").read_all()  # doctest: +SKIP
    """
    return Reader(uri)


class Writer:
    """Write one object in pieces; it becomes visible only when the ``with`` block ends
    without an error. Objects larger than ``part_size_mib`` go up as a multipart upload."""

    def __init__(self, uri: str | os.PathLike[str], *, part_size_mib: int = 10) -> None:
        if part_size_mib < 5:
            raise DataioError(
                f"part_size_mib must be at least 5 (the S3 minimum), got {part_size_mib!r}"
            )
        self.uri = os.fspath(uri)
        self.part_size = part_size_mib * _MIB
        self.written = 0
        self._file: Any = None

    def __enter__(self) -> Writer:
        import obstore

        loc = parse(self.uri)
        require_writable(loc, "write")
        store = store_for(loc)
        self._file = call(
            lambda: obstore.open_writer(store, loc.key, buffer_size=self.part_size),
            self.uri,
            "write",
        )
        return self

    def write(self, data: Any) -> int:
        """Append ``data`` (bytes or any buffer); return the number of bytes taken."""
        if self._file is None:
            raise DataioError("use the writer in a `with dataio.writer(uri) as w:` block")
        n = call(lambda: self._file.write(data), self.uri, "write")
        self.written += n
        return int(n)

    def write_chunks(self, chunks: Iterable[Any]) -> int:
        """Append every chunk of ``chunks``; return the bytes taken."""
        return sum(self.write(chunk) for chunk in chunks)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        file, self._file = self._file, None
        if exc_type is not None:
            # obstore drops the staged data / multipart upload without completing it
            with contextlib.suppress(Exception):  # the caller's error matters more
                file.__exit__(exc_type, exc, tb)
            return
        call(file.close, self.uri, "write")
        cache.drop(parse(self.uri))


def writer(uri: str | os.PathLike[str], *, part_size_mib: int = 10) -> Writer:
    """A context manager writing one object piece by piece.

    Example:
        >>> with dataio.writer("s3://bucket/checkpoint.bin") as w:  # doctest: +SKIP
        ...     w.write_chunks(huge_generator())
    """
    return Writer(uri, part_size_mib=part_size_mib)
