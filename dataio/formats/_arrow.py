"""Checks that make damaged Arrow IPC, Feather and Parquet files safe to hand to pyarrow.

pyarrow and DataFusion trust the offsets and lengths an Arrow IPC file declares: a
flipped byte in a string column's offsets makes later reads touch memory outside the
file (SIGSEGV, SIGBUS). ``validate(full=True)`` rejects such data cleanly, so every
table read from an IPC file is validated before anything else touches it. Feather V1
files are read by a pyarrow path that slices buffers at the offsets the footer
declares, without bounds checks, so their footer is checked here first.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dataio.exceptions import FormatError, NotFoundError, PermissionDeniedError

__all__ = ["check_feather_v1", "check_ipc_file", "open_error", "read_errors", "validated"]


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
