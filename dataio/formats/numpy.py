"""NumPy files: NPY memory-mapped read-only, NPZ members mapped in place when stored.

Headers are checked before any byte is viewed (:mod:`dataio.udfs.tensor`): object
arrays are refused without unpickling, truncated files are refused, foreign byte order
is returned as native values (a copy), and Fortran order is kept. Compressed NPZ
members inflate in bounded steps, checked against :mod:`dataio.limits` as they grow.

A mapped array of a file truncated underneath it kills the process (``SIGBUS``) when
it touches a lost page; ``mmap=False`` reads into memory instead (decision 012).
"""

from __future__ import annotations

import errno
import io
import mmap as mmaplib
import os
import zipfile
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio.exceptions import DataioError, FieldError, FormatError, PlanError
from dataio.formats._scan import Source, file_records, record_key, tensor_type, tensor_values
from dataio.io.local import open_file
from dataio.io.ranged import RangedFile, local_path
from dataio.io.uri import parse
from dataio.io.verbs import fetch_into, fetch_whole, head
from dataio.io.zipmember import LOCAL_HEADER, ZIP_ERRORS, read_member
from dataio.udfs.tensor import decode_npy, parse_npy_header

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = ["decode_npz", "read_npz", "read_numpy", "scan_npz", "scan_numpy"]


def _map(path: str | os.PathLike[str]) -> mmaplib.mmap:
    """A read-only mapping of a whole local file."""
    text = os.fspath(path)
    return _opened(text, lambda f: mmaplib.mmap(f.fileno(), 0, access=mmaplib.ACCESS_READ))


def _load(path: str | os.PathLike[str]) -> bytearray:
    """A whole local file read into writable memory (no mapping: truncation cannot hurt)."""
    text = os.fspath(path)

    def read(f: Any) -> bytearray:
        data = bytearray(os.fstat(f.fileno()).st_size)
        if f.readinto(data) != len(data):
            raise FormatError(f"{text} shrank while it was read; retry")
        return data

    return _opened(text, read)


def _opened(text: str, use: Any) -> Any:
    """``use(file)`` on the open local file ``text``, with its errors mapped."""
    try:
        with open_file(text, "read") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise FormatError(f"{text} is empty; expected NumPy data")
            return use(f)
    except DataioError:  # NotFoundError and PermissionDeniedError are OSErrors too
        raise
    except OSError as exc:
        raise DataioError(f"cannot read {text!r}: {exc.strerror or exc}") from exc


def _owned(array: np.ndarray) -> np.ndarray:
    """A writable, native-order copy that keeps the memory layout (Fortran stays F)."""
    return np.array(array, dtype=array.dtype.newbyteorder("="), order="K", copy=True)


def _remote(path: str | os.PathLike[str]) -> bool:
    text = os.fspath(path)
    return "://" in text and not text.startswith("file://")


def _local(path: str | os.PathLike[str]) -> str:
    return local_path(path)


def _fetch(uri: str, *, writable: bool) -> Any:
    """A whole remote object (through the cache), into writable memory if asked."""
    if not writable:
        return fetch_whole(parse(uri), uri)
    data = bytearray(head(uri)["size"])
    n = fetch_into(uri, data)
    if n != len(data):
        raise FormatError(f"{uri} changed size while it was read; retry")
    return data


def _read_remote_npy(uri: str, *, writable: bool) -> np.ndarray:
    """An NPY object: its header fetched and checked first (a pickled or damaged file is
    refused before its data is downloaded), then the whole object."""
    with RangedFile(uri, read_ahead=_NPY_PREFIX) as f:
        if f.size == 0:
            raise FormatError(f"{uri} is empty; expected NumPy data")
        prefix = f.read(min(f.size, _NPY_PREFIX))
        parse_npy_header(prefix, source=uri, total=f.size)
        if len(prefix) == f.size:  # a small array: already here whole
            return decode_npy(bytearray(prefix) if writable else prefix, source=uri)
    return decode_npy(_fetch(uri, writable=writable), source=uri)


# The first bytes of a remote .npy: its header (NumPy pads it to 64 bytes, rarely more
# than a few hundred) and, for a small array, the whole file.
_NPY_PREFIX = 64 << 10


def read_numpy(path: str | os.PathLike[str], *, mmap: bool = True) -> np.ndarray:
    """Read one ``.npy`` file.

    With ``mmap=True`` the result is a read-only view of a file mapping (no copy unless
    the file's byte order is foreign); touching it after the file is truncated kills the
    process with ``SIGBUS``. With ``mmap=False`` it is a writable array read into
    memory, unaffected by later changes to the file. Values come back in native byte
    order.

    ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, ``http(s)://``, ...): the
    header is fetched and checked first, then the object is read into memory
    (read-only with ``mmap=True``, writable with ``mmap=False``).

    Raises:
        FormatError: not NPY, truncated, or holding pickled Python objects.
        NotFoundError: no such file or object.

    Example:
        >>> dataio.read_numpy("/data/x.npy").shape  # doctest: +SKIP
        (1000, 128)
    """
    if _remote(path):
        array = _read_remote_npy(os.fspath(path), writable=not mmap)
        return array if mmap or array.flags.writeable else _owned(array)
    path = _local(path)
    if not mmap:
        array = decode_npy(_load(path), source=os.fspath(path))
        return array if array.flags.writeable else _owned(array)
    # The mapping is never closed by hand: arrays view it without pinning it, and it
    # unmaps when the last array over it is gone.
    return decode_npy(_map(path), source=os.fspath(path))


def _npz_members(zf: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    return {info.filename[:-4]: info for info in zf.infolist() if info.filename.endswith(".npy")}


def _stored_offset(buffer: Any, info: zipfile.ZipInfo, source: str) -> int:
    """Where a stored member's bytes start: after its local header, name and extra field."""
    start = info.header_offset
    if start + LOCAL_HEADER.size > len(buffer):
        raise FormatError(f"{source}: member {info.filename!r} starts past the end of the file")
    signature, name_len, extra_len = LOCAL_HEADER.unpack_from(buffer, start)
    if signature != b"PK\x03\x04":
        raise FormatError(f"{source}: member {info.filename!r} has a corrupt local header")
    data = start + LOCAL_HEADER.size + name_len + extra_len
    if data + info.file_size > len(buffer):
        raise FormatError(f"{source}: member {info.filename!r} is truncated")
    return data


class _BufferFile(io.RawIOBase):
    """A read-only, seekable file over a buffer. ``io.BytesIO`` would copy any buffer
    but ``bytes``, and an archive's file mapping can be larger than memory."""

    def __init__(self, buffer: Any) -> None:
        self._view = memoryview(buffer).cast("B")
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        if base + offset < 0:  # as a real file answers: zipfile expects OSError here
            raise OSError(errno.EINVAL, f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, target: Any) -> int:
        chunk = self._view[self._pos : self._pos + len(target)]
        memoryview(target).cast("B")[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)

    def close(self) -> None:
        self._view.release()  # a file mapping cannot close while a view exports it
        super().close()


def decode_npz(
    buffer: Any, *, source: str, keys: Iterable[str] | None = None
) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` archive held in ``buffer`` (names without ``.npy``).

    Members stored uncompressed are read-only views of ``buffer``; compressed ones are
    inflated, in bounded steps. ``source`` names the archive in errors.

    Raises:
        FormatError: not a zip archive, or a member is not valid NPY (or is pickled).
        FieldError: a requested key is not in the archive.
        LimitError: a member inflates past ``max_member_bytes`` / ``max_decoded_bytes``,
            or past ``max_inflation_ratio`` once over ``inflation_floor_bytes``.

    Example:
        >>> data = dataio.read("s3://bucket/batch.npz")  # doctest: +SKIP
        >>> decode_npz(data, source="batch.npz")["x"].shape  # doctest: +SKIP
        (64, 128)
    """
    arrays: dict[str, np.ndarray] = {}
    with memoryview(buffer) as whole:
        size = whole.nbytes
    try:
        with _BufferFile(buffer) as file, zipfile.ZipFile(file) as zf:
            members = _npz_members(zf)
            for name in members if keys is None else keys:
                info = members.get(name)
                if info is None:
                    raise FieldError(f"{source} has no array {name!r}; it holds {sorted(members)}")
                where = f"{source}:{info.filename}"
                if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                    start = _stored_offset(buffer, info, source)
                    view = memoryview(buffer)[start : start + info.file_size]
                    arrays[name] = decode_npy(view, source=where)
                else:
                    data = read_member(zf, info, archive_size=size, where=where)
                    # read-only, as stored members are: mmap=False is the way to writable
                    arrays[name] = decode_npy(memoryview(data).toreadonly(), source=where)
    except DataioError:
        raise
    except ZIP_ERRORS as exc:
        raise FormatError(
            f"{source!r} is not a readable .npz (zip) archive: {type(exc).__name__}: {exc}"
        ) from exc
    return arrays


def _read_remote_members(uri: str, keys: list[str]) -> dict[str, np.ndarray]:
    """Some arrays of a remote ``.npz``, read by ranges: the zip directory, then each
    member asked for (a stored member in one range, a compressed one inflated as its
    bytes arrive)."""
    arrays: dict[str, np.ndarray] = {}
    with RangedFile(uri) as f:
        try:
            if f.size == 0:
                raise FormatError(f"{uri} is empty; expected NumPy data")
            with zipfile.ZipFile(f) as zf:
                members = _npz_members(zf)
                for name in keys:
                    info = members.get(name)
                    if info is None:
                        raise FieldError(f"{uri} has no array {name!r}; it holds {sorted(members)}")
                    where = f"{uri}:{info.filename}"
                    if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 1:
                        stored = f.pread(_member_start(f, info, uri), info.file_size)
                        arrays[name] = decode_npy(stored, source=where)
                    else:
                        data = read_member(zf, info, archive_size=f.size, where=where)
                        arrays[name] = decode_npy(memoryview(data).toreadonly(), source=where)
        except DataioError:
            raise
        except ZIP_ERRORS as exc:
            # zipfile turns a failed fetch (an OSError) into BadZipFile: a network
            # failure is not a damaged archive
            failed = f.take_error()
            if failed is not None:
                raise failed from None
            raise FormatError(
                f"{uri!r} is not a readable .npz (zip) archive: {type(exc).__name__}: {exc}"
            ) from exc
    return arrays


def _member_start(f: RangedFile, info: zipfile.ZipInfo, source: str) -> int:
    """Where a stored member's bytes start in a remote archive (its local header read)."""
    header = f.pread(info.header_offset, LOCAL_HEADER.size)
    if len(header) < LOCAL_HEADER.size:
        raise FormatError(f"{source}: member {info.filename!r} starts past the end of the file")
    signature, name_len, extra_len = LOCAL_HEADER.unpack_from(header, 0)
    if signature != b"PK\x03\x04":
        raise FormatError(f"{source}: member {info.filename!r} has a corrupt local header")
    start = info.header_offset + LOCAL_HEADER.size + name_len + extra_len
    if start + info.file_size > f.size:
        raise FormatError(f"{source}: member {info.filename!r} is truncated")
    return start


def read_npz(
    path: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    mmap: bool = True,
) -> dict[str, np.ndarray]:
    """Read the arrays of an ``.npz`` archive into a dict (names without ``.npy``).

    ``path`` may be a URI. With ``keys``, a remote archive is read by ranges: its zip
    directory, then only those members; without, it is read whole into memory (through
    the local cache when ``DATAIO_CACHE_DIR`` is set).

    Members stored uncompressed (``np.savez``) are read-only views of a file mapping;
    compressed members (``np.savez_compressed``) are inflated, under the limits of
    :mod:`dataio.limits`. ``mmap=False`` returns writable copies instead, which survive
    the file being truncated (a mapped view then dies with ``SIGBUS``).

    Raises:
        FormatError: not a zip archive, or a member is not valid NPY (or is pickled).
        FieldError: a requested key is not in the archive.

    Example:
        >>> dataio.read_npz("/data/batch.npz", keys=["x"])["x"].dtype  # doctest: +SKIP
        dtype('float32')
    """
    if isinstance(keys, str):
        raise PlanError(f"keys= takes a list of names, got the string {keys!r}")
    if _remote(path) and keys is not None:
        arrays = _read_remote_members(os.fspath(path), list(keys))
    elif _remote(path):
        uri = os.fspath(path)
        data = _fetch(uri, writable=False)
        if not len(data):
            raise FormatError(f"{uri} is empty; expected NumPy data")
        arrays = decode_npz(data, source=uri, keys=keys)
    else:
        arrays = decode_npz(_map(_local(path)), source=os.fspath(path), keys=keys)
    return arrays if mmap else {name: _owned(a) for name, a in arrays.items()}


def _key_path_schema(data: str, dtype: pa.DataType) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([("key", pa.string()), ("path", pa.string()), (data, dtype)])


def scan_numpy(source: Source, *, mmap: bool = True) -> LazyFrame:
    """A lazy frame of ``.npy`` files: records ``{"key", "path", "array"}``, one per file.

    ``source`` is a path, a glob, a directory (its ``.npy`` files) or a list of them.
    Nothing is listed or read until the frame runs or is iterated; each pass reads
    again. Iterated (``pipe.bind(scan)``, ``for record in scan``), ``"array"`` is a NumPy
    array and a damaged file does not end the scan: its record's ``"array"`` raises the
    file's :class:`~dataio.exceptions.FormatError` when read (in a pipeline: one row
    error). Run as a frame (``collect()``, filters, SQL), ``array`` is a
    :func:`~dataio.formats._scan.tensor_type` struct (dtype, shape, bytes).

    Example:
        >>> for record in dataio.scan_numpy("/data/*.npy"):  # doctest: +SKIP
        ...     print(record["key"], record["array"].shape)
    """
    import pyarrow as pa

    def read(path: str) -> Iterator[dict[str, Any]]:
        yield {"key": record_key(path), "path": path, "array": read_numpy(path, mmap=mmap)}

    schema = _key_path_schema("array", tensor_type())

    def to_arrow(records: list[dict[str, Any]]) -> pa.RecordBatch:
        rows = [
            {**r, "array": tensor_values(r["array"], f"scan_numpy {r['path']!r}")} for r in records
        ]
        return pa.RecordBatch.from_pylist(rows, schema=schema)

    return file_records(
        "scan_numpy",
        source,
        extensions=(".npy",),
        options={"mmap": mmap},
        read=read,
        to_arrow=to_arrow,
        fields=("array",),
        schema=schema,
    )


def scan_npz(source: Source, *, keys: Iterable[str] | None = None, mmap: bool = True) -> LazyFrame:
    """A lazy frame of ``.npz`` files: records ``{"key", "path", "arrays"}``, one per file.

    As for :func:`scan_numpy`, a damaged file's ``"arrays"`` raises its error when read.
    Iterated, ``"arrays"`` maps member names to NumPy arrays; run as a frame, ``arrays``
    is a list of ``{name, dtype, shape, data}`` structs in the file's member order.

    Example:
        >>> for record in dataio.scan_npz("/data/*.npz", keys=["x", "y"]):  # doctest: +SKIP
        ...     x, y = record["arrays"]["x"], record["arrays"]["y"]
    """
    import pyarrow as pa

    if isinstance(keys, str):
        raise PlanError(f"keys= takes a list of names, got the string {keys!r}")
    wanted = None if keys is None else list(keys)

    def read(path: str) -> Iterator[dict[str, Any]]:
        arrays = read_npz(path, keys=wanted, mmap=mmap)
        yield {"key": record_key(path), "path": path, "arrays": arrays}

    member = pa.struct([pa.field("name", pa.string()), *tensor_type()])
    schema = _key_path_schema("arrays", pa.list_(member))

    def to_arrow(records: list[dict[str, Any]]) -> pa.RecordBatch:
        rows = [
            {
                **r,
                "arrays": [
                    {"name": name, **tensor_values(a, f"scan_npz {r['path']!r} member {name!r}")}
                    for name, a in r["arrays"].items()
                ],
            }
            for r in records
        ]
        return pa.RecordBatch.from_pylist(rows, schema=schema)

    return file_records(
        "scan_npz",
        source,
        extensions=(".npz",),
        options={"keys": wanted, "mmap": mmap},
        read=read,
        to_arrow=to_arrow,
        fields=("arrays",),
        schema=schema,
    )
