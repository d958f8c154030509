"""TFRecord files of ``tf.train.Example`` messages, read without TensorFlow or protobuf.

A TFRecord file is a sequence of records, each::

    uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)

(little-endian). ``data`` is usually a serialized ``tf.train.Example``: a map from feature
name to a ``BytesList``, ``FloatList`` or ``Int64List``. Both checksums are verified; a
mismatch or a truncated record raises :class:`~dataio.FormatError` naming the file, the
record number and its byte offset. A length field is checked against the bytes left
in the file and ``max_decoded_bytes`` before anything is read on its strength, and a
long record is read in steps of ``max_prealloc_bytes``.

A whole file may be compressed, as TensorFlow's ``GZIP`` and ``ZLIB`` options write it:
the records above as one gzip or zlib stream. Offsets then count decompressed bytes.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import struct
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dataio import limits
from dataio.exceptions import FormatError, PlanError
from dataio.io.local import open_file

__all__ = [
    "COMPRESSIONS",
    "compression_of",
    "compression_option",
    "crc32c",
    "crc32c_backend",
    "infer_schema",
    "iter_tfrecord",
    "masked_crc32c",
    "parse_example",
    "read_table",
]

Feature = list[bytes] | np.ndarray

# -- CRC32C (Castagnoli), reflected polynomial 0x82F63B78 ----------------------------------

_POLY = 0x82F63B78
_BLOCK = 512  # bytes per row of the vectorized path
_TABLE = [0] * 256
for _byte in range(256):
    _crc = _byte
    for _ in range(8):
        _crc = (_crc >> 1) ^ (_POLY if _crc & 1 else 0)
    _TABLE[_byte] = _crc
_BLOCK_TABLES: np.ndarray | None = None


def _block_tables() -> np.ndarray:
    """``tables[i][b]``: the raw CRC of byte ``b`` at position ``i`` of a block.

    The raw CRC (zero start, no final xor) is linear in the message bits, so a block's
    CRC is the xor of its bytes' contributions, each a table lookup.
    """
    global _BLOCK_TABLES
    if _BLOCK_TABLES is None:
        table = np.array(_TABLE, np.uint32)
        tables = np.empty((_BLOCK, 256), np.uint32)
        tables[_BLOCK - 1] = table  # the last byte: no zero bytes follow it
        for i in range(_BLOCK - 2, -1, -1):
            after = tables[i + 1]
            tables[i] = table[after & 0xFF] ^ (after >> 8)  # one more zero byte after it
        _BLOCK_TABLES = tables
    return _BLOCK_TABLES


def _crc_bytes(data: bytes | memoryview, crc: int) -> int:
    table = _TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc


def _table_crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC32C from the tables above (NumPy for long inputs): the fallback when no native
    CRC32C package is installed."""
    view = memoryview(data).cast("B")
    n = len(view)
    if n < 4 * _BLOCK:
        return _crc_bytes(view, 0xFFFFFFFF) ^ 0xFFFFFFFF
    tables = _block_tables()
    padded = np.zeros(-(-n // _BLOCK) * _BLOCK, np.uint8)
    start = len(padded) - n  # leading zero bytes leave a zero CRC state unchanged
    padded[start:] = np.frombuffer(view, np.uint8)
    padded[start : start + 4] ^= 0xFF  # the 0xFFFFFFFF start state, folded into the data
    blocks = padded.reshape(-1, _BLOCK)
    partial = np.bitwise_xor.reduce(tables[np.arange(_BLOCK), blocks], axis=1)
    # Shifting a state through one block of zeros: its 4 bytes lead a block of zeros.
    t0, t1, t2, t3 = (tables[k].tolist() for k in range(4))
    crc = 0
    for value in partial.tolist():
        crc = t0[crc & 0xFF] ^ t1[(crc >> 8) & 0xFF] ^ t2[(crc >> 16) & 0xFF] ^ t3[crc >> 24]
        crc ^= value
    return crc ^ 0xFFFFFFFF


_CRC32C: tuple[str, Callable[[Any], int]] | None = None


def crc32c_backend() -> str:
    """Which implementation :func:`crc32c` uses: ``"crc32c"`` (the ``crc32c`` package),
    ``"google-crc32c"`` or ``"table"`` (dataio's own, when neither is installed).

    Example:
        >>> crc32c_backend() in ("crc32c", "google-crc32c", "table")
        True
    """
    return _crc32c_impl()[0]


def _crc32c_impl() -> tuple[str, Callable[[Any], int]]:
    global _CRC32C
    if _CRC32C is None:
        _CRC32C = _select_crc32c()
    return _CRC32C


def _select_crc32c() -> tuple[str, Callable[[Any], int]]:
    """The fastest CRC32C installed: ``crc32c`` where it runs on the CPU's CRC32C
    instruction (it takes any buffer without a copy), then google-crc32c's C extension
    (``bytes`` only), then ``crc32c``'s software C, then the table (about 0.1 GB/s;
    both packages run at several GB/s). google-crc32c's pure-Python mode is slower than
    the table, so it is passed over."""
    package: Any
    try:
        import crc32c as package
    except ImportError:
        package = None
    if package is not None and getattr(package, "hardware_based", False):
        return "crc32c", package.crc32c
    google_crc32c: Any
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # its "pure python" notice
        try:
            import google_crc32c
        except ImportError:
            google_crc32c = None
    if google_crc32c is not None and getattr(google_crc32c, "implementation", "") == "c":
        value = google_crc32c.value

        def google(data: Any) -> int:
            # its C function takes bytes objects only
            return int(value(data if isinstance(data, bytes) else bytes(data)))

        return "google-crc32c", google
    if package is not None:
        return "crc32c", package.crc32c
    return "table", _table_crc32c


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """The CRC32C checksum of ``data``, through the ``crc32c`` or ``google-crc32c``
    package when one is installed (see :func:`crc32c_backend`).

    Example:
        >>> crc32c(b"123456789") == 0xE3069283
        True
    """
    return _crc32c_impl()[1](data)


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TFRecord's masked CRC32C: rotate right by 15 bits and add ``0xA282EAD8``."""
    crc = _crc32c_impl()[1](data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- records -------------------------------------------------------------------------------


COMPRESSIONS = ("none", "gzip", "zlib")
_STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def compression_of(head: bytes) -> str:
    """The compression a file's first bytes show: ``"none"`` when they start a record
    (its length checksum holds), else ``"gzip"`` or ``"zlib"`` by their headers."""
    if len(head) >= 12 and masked_crc32c(head[:8]) == struct.unpack("<I", head[8:12])[0]:
        return "none"
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if (
        len(head) >= 2
        and head[0] & 0x0F == 8
        and head[0] >> 4 <= 7
        and (head[0] << 8 | head[1]) % 31 == 0
    ):
        return "zlib"
    return "none"  # not a stream either: the record checks below say what is wrong


def compression_option(value: str | None) -> str | None:
    """``value`` as one of :data:`COMPRESSIONS` (``None``: detect); TensorFlow's names too."""
    if value is None:
        return None
    lowered = (value.lower() or "none") if isinstance(value, str) else value
    if lowered not in COMPRESSIONS:
        raise PlanError(
            f"TFRecord compression must be None (detect), {', '.join(map(repr, COMPRESSIONS))} "
            f"(TensorFlow's '', 'GZIP', 'ZLIB'), got {value!r}"
        )
    return lowered


class _ZlibReader(io.RawIOBase):
    """A zlib stream, decompressed as it is read; bytes after its end are an error."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj()
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while not self._pending:
            if self._inflate.eof:
                if self._inflate.unused_data or self._raw.read(1):
                    raise zlib.error("bytes follow the end of the zlib stream")
                return 0
            chunk = self._inflate.unconsumed_tail or self._raw.read(1 << 16)
            if not chunk:
                raise EOFError("the zlib stream ended before its end marker")
            self._pending = memoryview(self._inflate.decompress(chunk, 1 << 20))
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _open(path: str, kind: str | None) -> tuple[Any, str]:
    """The file's bytes as a binary reader, and its compression (``kind``, or detected)."""
    handle: Any
    if "://" in path and not path.startswith("file://"):
        from dataio.io.read import read_bytes

        handle = io.BytesIO(read_bytes(path))  # NotFoundError names the URI
    else:
        handle = open_file(path.removeprefix("file://"), "read TFRecord file")
    if kind is None:
        kind = compression_of(handle.read(12))
        handle.seek(0)
    return handle, kind


def _records(
    path: str, verify: bool, compression: str | None = None
) -> Iterator[tuple[int, int, bytes]]:
    """``(record number, byte offset, data)`` for each record of a file."""
    named = compression_option(compression)
    raw, kind = _open(path, named)
    handle: Any = raw
    if kind == "gzip":
        handle = gzip.GzipFile(fileobj=raw, mode="rb")
    elif kind == "zlib":
        handle = io.BufferedReader(_ZlibReader(raw))
    offset = 0
    number = 0
    size = _plain_size(raw) if kind == "none" else None

    def read(n: int, where: str) -> bytes:
        try:
            step = limits.get().max_prealloc_bytes
            if n <= step:
                return bytes(handle.read(n))
            # Grow as bytes arrive: a length field alone must not allocate.
            parts = []
            while n > 0 and (chunk := handle.read(min(n, step))):
                parts.append(chunk)
                n -= len(chunk)
            return b"".join(parts)
        except _STREAM_ERRORS as exc:
            told = "" if named else " (told from the first bytes: pass compression='none' if not)"
            raise FormatError(
                f"{where} (decompressed): the {kind} stream{told} is corrupt or truncated: {exc}"
            ) from None

    try:
        while True:
            where = f"{path!r}: record {number} at byte offset {offset}"
            header = read(12, where)
            if not header:
                return
            if len(header) < 12:
                raise FormatError(f"{where}: truncated header ({len(header)} of 12 bytes)")
            (length,) = struct.unpack("<Q", header[:8])
            (length_crc,) = struct.unpack("<I", header[8:])
            if verify and masked_crc32c(header[:8]) != length_crc:
                raise FormatError(f"{where}: length checksum mismatch (corrupt length field)")
            if size is not None and offset + 16 + length > size:
                raise FormatError(
                    f"{where}: truncated: the record declares {length:,} data bytes, the file "
                    f"holds {max(size - offset - 16, 0):,} more"
                )
            limits.check("max_decoded_bytes", length, what=f"{where}: record length")
            data = read(length, where)
            if len(data) < length:
                raise FormatError(f"{where}: truncated data ({len(data)} of {length} bytes)")
            footer = read(4, where)
            if len(footer) < 4:
                raise FormatError(f"{where}: truncated data checksum")
            if verify and masked_crc32c(data) != struct.unpack("<I", footer)[0]:
                raise FormatError(f"{where}: data checksum mismatch (corrupt record data)")
            yield number, offset, data
            offset += 16 + length
            number += 1
    finally:
        handle.close()
        raw.close()


def _plain_size(raw: Any) -> int | None:
    """The size of an uncompressed file (or in-memory copy), when it has one."""
    if isinstance(raw, io.BytesIO):
        with raw.getbuffer() as view:
            return view.nbytes
    try:
        status = os.fstat(raw.fileno())
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) else None  # a pipe has no size


def iter_tfrecord(
    path: str | os.PathLike[str],
    *,
    raw: bool = False,
    verify: bool = True,
    compression: str | None = None,
) -> Iterator[Any]:
    """Read a TFRecord file: each ``tf.train.Example`` as a dict, checksums verified.

    A feature becomes a ``list[bytes]`` (``BytesList``), a ``float32`` array
    (``FloatList``) or an ``int64`` array (``Int64List``). ``raw=True`` yields each
    record's bytes unparsed (for other message types). ``compression``: ``"gzip"`` or
    ``"zlib"`` for files TensorFlow wrote with those options, ``"none"``, or ``None`` to
    tell from the file's first bytes.

    Raises:
        NotFoundError: the file does not exist.
        FormatError: a record is truncated, fails its checksum or is not an Example, or
            the compressed stream is damaged; the message names the file, the record
            number and its byte offset (in decompressed bytes for compressed files).

    Example:
        >>> for example in dataio.iter_tfrecord("/data/train.tfrecord"):  # doctest: +SKIP
        ...     label = example["label"][0]
    """
    text = os.fspath(path)
    for number, offset, data in _records(text, verify, compression):
        if raw:
            yield data
            continue
        try:
            yield parse_example(data)
        except FormatError as exc:
            raise FormatError(
                f"{text!r}: record {number} at byte offset {offset} is not a tf.train.Example: "
                f"{exc}"
            ) from None


# -- protobuf wire format ------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise FormatError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise FormatError("varint longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)``: ints for varint/fixed types, bytes otherwise."""
    pos = 0
    end = len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise FormatError("truncated 64-bit field")
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > end:
                raise FormatError(f"field {number} claims {size} bytes, {end - pos} remain")
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            if pos + 4 > end:
                raise FormatError("truncated 32-bit field")
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise FormatError(f"unsupported wire type {wire} in field {number}")
        yield number, wire, value


def _signed(value: int) -> int:
    value &= (1 << 64) - 1  # a 10-byte varint carries 70 bits; protobuf keeps the low 64
    return value - (1 << 64) if value >= 1 << 63 else value


def _feature(data: bytes) -> Feature:
    kind: int | None = None
    out: Feature = []
    for number, wire, value in _fields(data):
        if number not in (1, 2, 3):
            continue
        if wire != 2:
            raise FormatError(f"a Feature's list (field {number}) is not length-delimited")
        kind = number
        out = _list_values(number, value)
    if kind is None:
        return []  # a Feature with no kind set: an empty BytesList, as TensorFlow reads it
    return out


def _list_values(kind: int, data: bytes) -> Feature:
    bytes_values: list[bytes] = []
    floats: list[np.ndarray] = []
    ints: list[int] = []
    for number, wire, value in _fields(data):
        if number != 1:
            continue
        if kind == 1:
            if wire != 2:
                raise FormatError("BytesList value is not length-delimited")
            bytes_values.append(bytes(value))
        elif kind == 2:
            if wire == 2:
                if len(value) % 4:
                    raise FormatError("packed FloatList size is not a multiple of 4")
                floats.append(np.frombuffer(value, "<f4"))
            elif wire == 5:
                floats.append(np.frombuffer(value, "<f4"))
            else:
                raise FormatError(f"FloatList value has wire type {wire}")
        elif wire == 2:
            pos = 0
            while pos < len(value):
                item, pos = _varint(value, pos)
                ints.append(_signed(item))
        elif wire == 0:
            ints.append(_signed(value))
        else:
            raise FormatError(f"Int64List value has wire type {wire}")
    if kind == 1:
        return bytes_values
    if kind == 2:
        return np.concatenate(floats).astype(np.float32) if floats else np.empty(0, np.float32)
    return np.array(ints, np.int64)


def parse_example(data: bytes) -> dict[str, Feature]:
    """Parse a serialized ``tf.train.Example`` into ``{name: values}``."""
    out: dict[str, Feature] = {}
    for number, wire, features in _fields(data):
        if number != 1 or wire != 2:
            continue
        for entry_number, entry_wire, entry in _fields(features):
            if entry_number != 1 or entry_wire != 2:
                continue
            name: str | None = None
            value: Feature = []
            for field, field_wire, item in _fields(entry):
                if field == 1 and field_wire == 2:
                    try:
                        name = bytes(item).decode("utf-8")
                    except UnicodeDecodeError:
                        raise FormatError("a feature name is not UTF-8") from None
                elif field == 2 and field_wire == 2:
                    value = _feature(item)
            if name is None:
                raise FormatError("a feature map entry has no name")
            out[name] = value
    return out


# -- Arrow tables ---------------------------------------------------------------------------

_KINDS = {"bytes": "binary", "float": "float", "int64": "int64"}
_SAMPLE = 64


def _kind(value: Feature) -> str:
    if isinstance(value, list):
        return "bytes"
    return "float" if value.dtype == np.float32 else "int64"


def _arrow_type(kind: str, scalar: bool) -> Any:
    import pyarrow as pa

    base = {"bytes": pa.binary(), "float": pa.float32(), "int64": pa.int64()}[kind]
    return base if scalar else pa.list_(base)


def infer_schema(path: str, compression: str | None = None) -> Any:
    """The Arrow schema of a file's Examples, from its first records.

    A feature with exactly one value in every sampled record becomes a scalar column
    (``binary``, ``float32`` or ``int64``); any other becomes a list column.
    """
    import pyarrow as pa

    kinds: dict[str, str] = {}
    scalar: dict[str, bool] = {}
    for number, example in enumerate(iter_tfrecord(path, compression=compression)):
        for name, value in example.items():
            kind = _kind(value) if len(value) else kinds.get(name, "bytes")
            if name in kinds and len(value) and kinds[name] != kind:
                raise FormatError(f"{path!r}: feature {name!r} holds both {kinds[name]} and {kind}")
            kinds[name] = kind if len(value) or name not in kinds else kinds[name]
            scalar[name] = scalar.get(name, True) and len(value) == 1
        if number + 1 >= _SAMPLE:
            break
    return pa.schema([pa.field(n, _arrow_type(kinds[n], scalar[n])) for n in kinds])


def read_table(path: str, schema: Any, compression: str | None = None) -> Any:
    """All Examples of a file as a ``pyarrow.Table`` with ``schema`` (missing: null)."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for number, offset, data in _records(path, True, compression):
        try:
            example = parse_example(data)
        except FormatError as exc:
            raise FormatError(
                f"{path!r}: record {number} at byte offset {offset} is not a tf.train.Example: "
                f"{exc}"
            ) from None
        for field in schema:
            value = example.get(field.name)
            columns[field.name].append(_cell(path, number, offset, field, value))
    arrays = [pa.array(columns[f.name], f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _cell(path: str, number: int, offset: int, field: Any, value: Feature | None) -> Any:
    import pyarrow as pa

    if value is None:
        return None
    scalar = not pa.types.is_list(field.type)
    base = field.type if scalar else field.type.value_type
    expected = {pa.binary(): "bytes", pa.float32(): "float", pa.int64(): "int64"}.get(base)
    if len(value) and _kind(value) != expected:
        raise FormatError(
            f"{path!r}: record {number} at byte offset {offset}: feature {field.name!r} holds "
            f"{_kind(value)} values, the scan's schema expects {expected}"
        )
    if not scalar:
        return value if isinstance(value, list) else value.tolist()
    if len(value) == 0:
        return None
    if len(value) > 1:
        raise FormatError(
            f"{path!r}: record {number} at byte offset {offset}: feature {field.name!r} has "
            f"{len(value)} values but the scan made it a scalar column from the first records; "
            "pass schema= with a list type for it"
        )
    return value[0] if isinstance(value, list) else value[0].item()
