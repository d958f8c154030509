"""Checks that make damaged Arrow IPC, Feather and Parquet files safe to hand to pyarrow.

pyarrow and DataFusion trust the offsets and lengths an Arrow IPC file declares: a
flipped byte in a string column's offsets makes later reads touch memory outside the
file (SIGSEGV, SIGBUS). ``validate(full=True)`` rejects such data cleanly, so every
table read from an IPC file is validated before anything else touches it. Feather V1
files are read by a pyarrow path that slices buffers at the offsets the footer
declares, without bounds checks, so their footer is checked here first.

Remote Arrow IPC files are read by ranges (:func:`read_remote_ipc`): the footer, whose
record batch and dictionary blocks are checked against the file before pyarrow is let
near them, then only the record batches a read needs, and in them only the columns
asked for (pyarrow's ``included_fields`` reads just those buffers). Every batch is
validated in full before it is returned, as a local file's are.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dataio.exceptions import DataioError, FormatError, NotFoundError, PermissionDeniedError

__all__ = [
    "check_feather_v1",
    "check_ipc_file",
    "ipc_blocks",
    "open_error",
    "read_errors",
    "read_remote_ipc",
    "remote_ipc_schema",
    "validated",
]


def _decode_names(fields: Any) -> None:
    """Read every (nested) field name: ``validate`` checks data, not names, and a name
    that is not UTF-8 would fail later, in whatever touches it, as UnicodeDecodeError."""
    for field in fields:
        _ = field.name
        kind = field.type
        if hasattr(kind, "field"):
            _decode_names(kind.field(i) for i in range(kind.num_fields))


def validated(table: Any, source: str) -> Any:
    """``table`` once ``validate(full=True)`` passes and its field names decode; a
    :class:`FormatError` otherwise."""
    import pyarrow as pa

    try:
        _decode_names(table.schema)
        table.validate(full=True)
    except (pa.ArrowException, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise FormatError(
            f"{source!r} holds invalid Arrow data ({exc}); the file is damaged, rewrite it"
        ) from None
    return table


def open_error(exc: BaseException, path: str, what: str) -> Exception:
    """The dataio error for failing to open or read local ``path`` (a ``what`` file)."""
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"{what}: no such file {path!r}")
    if isinstance(exc, PermissionError):
        return PermissionDeniedError(f"{what}: no permission to read {path!r}; check its mode")
    if isinstance(exc, IsADirectoryError):
        return FormatError(f"{what}: {path!r} is a directory, not a file")
    return FormatError(f"{what}: {path!r} is not a valid file: {exc}")


@contextmanager
def read_errors(path: str, what: str) -> Iterator[None]:
    """Errors reading local Arrow file ``path`` (a ``what`` file) as dataio's, naming it."""
    import pyarrow as pa

    try:
        yield
    except FileNotFoundError:
        raise NotFoundError(f"{what}: the file {path!r} is gone") from None
    except pa.ArrowException as exc:
        raise FormatError(f"{what}: cannot read {path!r}: {exc}") from None
    except OSError as exc:
        raise open_error(exc, path, what) from None


def check_regular(path: str, what: str) -> os.stat_result:
    """Stat ``path`` and refuse anything but a readable regular file (FIFOs would block)."""
    from dataio.io import local

    try:
        info = os.stat(path)
    except OSError as exc:
        raise open_error(exc, path, what) from None
    local.check_regular(path, info.st_mode, what)
    if not os.access(path, os.R_OK):
        raise PermissionDeniedError(f"{what}: no permission to read {path!r}; check its mode")
    return info


_CHECKED: dict[tuple[str, int, int], None] = {}


def check_ipc_file(path: str, what: str) -> None:
    """Validate every record batch of a local Arrow IPC file once per path, size and mtime.

    DataFusion reads IPC files without validating them; this runs before a file is
    registered with it. Costs one pass over the file (see docs/api.md).
    """
    import pyarrow as pa

    info = check_regular(path, what)
    key = (os.path.abspath(path), info.st_size, info.st_mtime_ns)
    if key in _CHECKED:
        return
    try:
        with pa.memory_map(path) as source:
            reader = pa.ipc.open_file(source)
            _decode_names(reader.schema)
            for i in range(reader.num_record_batches):
                reader.get_batch(i).validate(full=True)
    except (pa.ArrowException, ValueError) as exc:
        raise FormatError(
            f"{what}: {path!r} is not a valid Arrow IPC file ({exc}); the file is damaged"
        ) from None
    except OSError as exc:
        raise open_error(exc, path, what) from None
    if len(_CHECKED) >= 4096:
        _CHECKED.clear()
    _CHECKED[key] = None


# -- Feather V1 -------------------------------------------------------------------------------
# The V1 footer is a flatbuffer CTable {description, num_rows, columns: [Column], version,
# metadata}; Column {name, values: PrimitiveArray, metadata_type, metadata, user_metadata};
# PrimitiveArray {type, encoding, offset, length, null_count, total_bytes}.

_V1_WIDTH = {0: 0, 1: 1, 2: 2, 3: 4, 4: 8, 5: 1, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8}
_V1_WIDTH.update({13: 0, 14: 8, 15: 4, 16: 8})  # category codes are sized by their levels
_V1_BINARY = {11: 4, 12: 4, 17: 8, 18: 8}  # offsets width per binary-like type


class _Flat:
    """Bounds-checked reads of one flatbuffer."""

    def __init__(self, buf: bytes) -> None:
        self.buf = buf

    def _u(self, fmt: str, pos: int) -> int:
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.buf):
            raise ValueError(f"offset {pos} outside the {len(self.buf)}-byte footer")
        return int(struct.unpack_from(fmt, self.buf, pos)[0])

    def table(self, pos: int) -> tuple[int, list[int]]:
        vtable = pos - self._u("<i", pos)
        vsize = self._u("<H", vtable)
        if vsize < 4 or vsize % 2:
            raise ValueError(f"vtable at {vtable} has size {vsize}")
        self._u("<H", vtable + vsize - 2)
        tsize = self._u("<H", vtable + 2)
        if tsize:
            self._u("B", pos + tsize - 1)
        fields = [self._u("<H", vtable + 4 + 2 * i) for i in range((vsize - 4) // 2)]
        return pos, fields

    def field(self, table: tuple[int, list[int]], i: int, fmt: str, default: int = 0) -> int:
        pos, fields = table
        return self._u(fmt, pos + fields[i]) if i < len(fields) and fields[i] else default

    def ref(self, table: tuple[int, list[int]], i: int) -> int | None:
        pos, fields = table
        if i >= len(fields) or not fields[i]:
            return None
        at = pos + fields[i]
        return at + self._u("<I", at)

    def string(self, table: tuple[int, list[int]], i: int) -> None:
        at = self.ref(table, i)
        if at is not None:
            self._u("B", at + 4 + self._u("<I", at))  # the bytes and their NUL

    def tables(self, table: tuple[int, list[int]], i: int) -> Iterator[tuple[int, list[int]]]:
        at = self.ref(table, i)
        if at is None:
            return
        count = self._u("<I", at)
        if count:
            self._u("<I", at + 4 * count)
        for k in range(count):
            item = at + 4 + 4 * k
            yield self.table(item + self._u("<I", item))


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def _check_array(flat: _Flat, array: tuple[int, list[int]], size: int, width: int | None) -> None:
    kind = flat.field(array, 0, "<b")
    offset, length = flat.field(array, 2, "<q"), flat.field(array, 3, "<q")
    nulls, total = flat.field(array, 4, "<q"), flat.field(array, 5, "<q")
    if kind not in _V1_WIDTH and kind not in _V1_BINARY:
        raise ValueError(f"unknown column type {kind}")
    if min(offset, length, nulls, total) < 0 or nulls > length or offset + total > size:
        raise ValueError(
            f"column data at {offset}+{total} (length {length}, nulls {nulls}) "
            f"is outside the {size}-byte file"
        )
    need = _pad8((length + 7) // 8) if nulls else 0
    if kind in _V1_BINARY:
        need += _pad8((length + 1) * _V1_BINARY[kind])
    elif kind == 0:
        need += (length + 7) // 8
    else:
        need += length * (width if width is not None else _V1_WIDTH[kind])
    if need > total:
        raise ValueError(f"column of {length} values needs {need} bytes, holds {total}")


def check_feather_v1(data: bytes | memoryview, source: str) -> None:
    """Refuse a Feather V1 file whose footer points outside the file or is malformed."""
    size = len(data)
    try:
        if size < 12 or bytes(data[-4:]) != b"FEA1":
            raise ValueError("no FEA1 trailer")
        meta_len = struct.unpack_from("<I", data, size - 8)[0]
        if meta_len > size - 12:
            raise ValueError(f"footer length {meta_len} exceeds the file")
        flat = _Flat(bytes(data[size - 8 - meta_len : size - 8]))
        root = flat.table(flat._u("<I", 0))
        flat.string(root, 0)
        flat.string(root, 4)
        # pyarrow dereferences these without null checks: require them present
        if flat.ref(root, 2) is None:
            raise ValueError("no column list")
        for column in flat.tables(root, 2):
            if flat.ref(column, 0) is None:
                raise ValueError("a column has no name")
            flat.string(column, 0)
            flat.string(column, 4)
            values_at = flat.ref(column, 1)
            if values_at is None:
                raise ValueError("a column has no values")
            values = flat.table(values_at)
            width = None
            meta_at = flat.ref(column, 3)
            meta = None if meta_at is None else flat.table(meta_at)
            kind = flat.field(column, 2, "B")
            if kind > 4 or (kind and meta is None):
                raise ValueError(f"column metadata of kind {kind} is missing or unknown")
            if meta is not None and kind == 1:  # CategoryMetadata {levels, ordered}
                levels_at = flat.ref(meta, 0)
                if levels_at is None:
                    raise ValueError("a category column has no levels")
                _check_array(flat, flat.table(levels_at), size, None)
                width = _V1_WIDTH.get(flat.field(values, 0, "<b"))
            elif meta is not None and kind == 2:  # TimestampMetadata {unit, timezone}
                flat.string(meta, 1)
            _check_array(flat, values, size, width)
    except (ValueError, struct.error) as exc:
        raise FormatError(
            f"{source!r} is not a valid Feather V1 file (damaged footer: {exc}); rewrite it"
        ) from None


# -- Arrow IPC files read by ranges -----------------------------------------------------------
# File: "ARROW1\0\0", messages, the footer flatbuffer, its int32 length, "ARROW1". Footer
# {version: short, schema: Schema, dictionaries: [Block], recordBatches: [Block], ...};
# Block is a struct {offset: long, metaDataLength: int, (pad), bodyLength: long}.

_IPC_MAGIC = b"ARROW1"
_IPC_TAIL = 64 << 10  # one request holds the footer of most files
_IPC_READ_AHEAD = 8 << 10
_BLOCK = struct.Struct("<qi4xq")


class IpcBlock:
    """Where one message of an IPC file lies: ``offset``, ``meta`` and ``body`` lengths."""

    __slots__ = ("body", "meta", "offset")

    def __init__(self, offset: int, meta: int, body: int) -> None:
        self.offset, self.meta, self.body = offset, meta, body

    @property
    def end(self) -> int:
        return self.offset + self.meta + self.body


def ipc_blocks(footer: bytes, footer_start: int) -> tuple[list[IpcBlock], list[IpcBlock]]:
    """The dictionary and record batch blocks of an IPC footer, each checked to lie in
    ``8..footer_start`` of the file, aligned as the format requires.

    Raises:
        ValueError: the footer is malformed or a block points outside the messages.
    """
    flat = _Flat(footer)
    root = flat.table(flat._u("<I", 0))
    found: list[list[IpcBlock]] = []
    for field in (2, 3):  # dictionaries, recordBatches
        blocks: list[IpcBlock] = []
        found_at = flat.ref(root, field)
        at = 0 if found_at is None else found_at
        count = 0 if found_at is None else flat._u("<I", at)
        if count:
            flat._u("B", at + 4 + _BLOCK.size * count - 1)  # the vector lies in the footer
        for k in range(count):
            offset, meta, body = _BLOCK.unpack_from(footer, at + 4 + _BLOCK.size * k)
            if offset < 8 or offset % 8 or meta < 8 or meta % 8 or body < 0:
                raise ValueError(f"block {k} at {offset} (+{meta}+{body}) is misaligned")
            if offset + meta + body > footer_start:
                raise ValueError(
                    f"block {k} at {offset} (+{meta}+{body}) runs past the messages, which "
                    f"end at byte {footer_start}"
                )
            blocks.append(IpcBlock(offset, meta, body))
        found.append(blocks)
    return found[0], found[1]


class _RemoteIpc:
    """An opened remote IPC file: a ranged file over it, its tail (where the footer is)
    and its record batch blocks, checked."""

    def __init__(self, f: Any, tail_at: int, tail: bytes, blocks: list[IpcBlock]) -> None:
        self.f, self.tail_at, self.tail, self.blocks = f, tail_at, tail, blocks

    def another(self) -> Any:
        """One more ranged file over the same version, holding the tail (no request)."""
        from dataio.io.ranged import RangedFile

        f = RangedFile(self.f.uri, size=self.f.size, pin=self.f.pin, read_ahead=_IPC_READ_AHEAD)
        f.hold(self.tail_at, self.tail)
        return f


def _open_remote_ipc(uri: str, what: str) -> _RemoteIpc:
    """``uri`` opened: its tail fetched (one request for most footers), blocks checked."""
    from dataio.io.ranged import RangedFile

    f = RangedFile(uri, read_ahead=_IPC_READ_AHEAD)
    try:
        size = f.size
        tail_at = max(0, size - _IPC_TAIL)
        tail = f.pread(tail_at, size - tail_at)
        if size < 18 or tail[-6:] != _IPC_MAGIC or (not tail_at and tail[:6] != _IPC_MAGIC):
            raise ValueError("no ARROW1 magic (not an Arrow IPC file)")
        length = struct.unpack_from("<i", tail, len(tail) - 10)[0]
        footer_start = size - 10 - length
        if length <= 0 or footer_start < 8:
            raise ValueError(f"footer length {length} does not fit the {size}-byte file")
        footer = (
            tail[footer_start - tail_at : size - 10 - tail_at]
            if footer_start >= tail_at
            else f.pread(footer_start, length)
        )
        if len(footer) != length:
            raise ValueError(f"footer of {length} bytes ends early")
        _, batches = ipc_blocks(footer, footer_start)  # dictionaries checked too
    except (ValueError, struct.error) as exc:
        f.close()
        raise FormatError(f"{what}: {uri!r} is not a valid Arrow IPC file: {exc}") from None
    except BaseException:
        f.close()
        raise
    # pyarrow's reads of the footer come from the tail; then it reads batch metadata
    # (small) and column buffers (each exactly): a large read-ahead would fetch
    # neighbouring columns' bytes
    f.hold(tail_at, tail)
    return _RemoteIpc(f, tail_at, tail, batches)


def _ipc_reader(f: Any, uri: str, what: str, columns: list[str] | None) -> Any:
    import pyarrow as pa

    try:
        reader = pa.ipc.open_file(f if isinstance(f, pa.NativeFile) else pa.PythonFile(f, "r"))
        if columns is None:
            return reader
        names = reader.schema.names
        missing = [c for c in columns if c not in names]
        if missing:
            raise FormatError(f"{what}: {uri!r} has no column {missing[0]!r}; it has {names}")
        options = pa.ipc.IpcReadOptions(included_fields=[names.index(c) for c in columns])
        if isinstance(f, pa.NativeFile):
            return pa.ipc.open_file(f, options=options)
        return pa.ipc.open_file(pa.PythonFile(f, mode="r"), options=options)
    except (pa.ArrowException, ValueError, OSError) as exc:  # ArrowIOError is OSError
        if isinstance(exc, DataioError):
            raise
        raise _ipc_error(f, uri, what, exc) from None


def _ipc_error(f: Any, uri: str, what: str, exc: BaseException) -> Exception:
    """A fetch's own error (pyarrow wraps a file object's), else a FormatError."""
    failed = f.take_error() if hasattr(f, "take_error") else None
    if failed is not None:
        return failed
    return FormatError(f"{what}: {uri!r} is not a valid Arrow IPC file: {exc}")


def remote_ipc_schema(uri: str, what: str) -> Any:
    """The schema of the remote Arrow IPC file at ``uri``, from its footer (read by
    ranges: one request for most files, after the ``head``)."""
    opened = _open_remote_ipc(uri, what)
    with opened.f:
        reader = _ipc_reader(opened.f, uri, what, None)
        _decode_names(reader.schema)
        return reader.schema


# record batches read side by side (each reader a file of its own over the same version)
_IPC_THREADS = 8


def read_remote_ipc(
    uri: str, what: str, *, columns: list[str] | None = None, rows: int | None = None
) -> Any:
    """The remote Arrow IPC file at ``uri`` as a validated ``pyarrow.Table``.

    The footer is read by ranges and its blocks checked against the file first. Then:
    with ``rows``, record batch after record batch until that many rows are read;
    with ``columns`` (and no ``rows``), every batch, up to 8 at once, each reading
    only those columns' buffers; with neither, the whole object in one download (the
    bytes are all needed), parsed from memory. Every batch is validated in full.

    Raises:
        FormatError: the file is damaged (a block outside the file, a bad message, data
            that fails ``validate(full=True)``).
    """
    import pyarrow as pa

    opened = _open_remote_ipc(uri, what)
    with opened.f:
        if columns is None and rows is None:
            whole = pa.BufferReader(pa.py_buffer(opened.f.read_whole()))
            return _read_batches(whole, uri, what, None, None, len(opened.blocks))
        if rows is not None or len(opened.blocks) < 2:
            return _read_batches(opened.f, uri, what, columns, rows, len(opened.blocks))
    count = len(opened.blocks)
    step = -(-count // _IPC_THREADS)
    parts = [range(a, min(a + step, count)) for a in range(0, count, step)]

    def read(part: range) -> Any:
        with opened.another() as f:
            return _read_batches(f, uri, what, columns, None, count, part)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(parts)) as pool:
        tables = list(pool.map(read, parts))
    return pa.concat_tables(tables)


def _read_batches(
    f: Any,
    uri: str,
    what: str,
    columns: list[str] | None,
    rows: int | None,
    count: int,
    indices: range | None = None,
) -> Any:
    """The record batches ``indices`` (all) of the IPC file ``f``, validated, as a table
    of ``columns`` (all); with ``rows``, only the first batches holding that many."""
    import pyarrow as pa

    reader = _ipc_reader(f, uri, what, columns)
    if reader.num_record_batches != count:  # pyarrow read another footer than dataio
        raise FormatError(f"{what}: {uri!r}: the footer changed while it was read")
    batches = []
    read = 0
    for i in range(count) if indices is None else indices:
        if rows is not None and read >= rows:
            break
        try:
            batch = reader.get_batch(i)
        except (pa.ArrowException, ValueError, OSError) as exc:
            if isinstance(exc, DataioError):
                raise
            raise _ipc_error(f, uri, what, exc) from None
        batches.append(validated(batch, uri))
        read += batch.num_rows
    schema = reader.schema  # the columns read, in the file's order
    _decode_names(schema)
    table = pa.Table.from_batches(batches, schema=schema)
    return table if columns is None else table.select(columns)
