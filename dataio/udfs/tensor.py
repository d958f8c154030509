"""Tensor kernels: NPY and safetensors headers parsed and checked, arrays viewed over buffers.

Everything here works on a buffer (``bytes``, a ``memoryview`` or an ``mmap``) and
returns NumPy arrays that view it: an array over a read-only buffer is read-only, and
nothing is copied unless the bytes need converting (a foreign byte order, a misaligned
start). Headers are untrusted input, so every field is checked before any byte is
viewed, and every failure is a :class:`~dataio.exceptions.FormatError` naming the
source and, for safetensors, the tensor.
"""

from __future__ import annotations

import ast
import json
import math
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio import limits
from dataio.exceptions import FieldError, FormatError

#: CPython 3.11's AST constructor is not thread-safe: ``ast.literal_eval`` on two pool
#: threads at once failed now and then with "SystemError: AST constructor recursion depth
#: mismatch" (a valid NPY header, seen under the whole test suite). NPY headers (and
#: NumPy's comma-string dtypes, parsed the same way) are evaluated one at a time.
_AST_LOCK = threading.Lock()

__all__ = [
    "MAX_NPY_HEADER",
    "MAX_SAFETENSORS_HEADER",
    "SAFETENSORS_DTYPES",
    "NpyHeader",
    "SafetensorsHeader",
    "TensorDtype",
    "TensorEntry",
    "decode_npy",
    "decode_safetensors",
    "entry_array",
    "numpy_dtype",
    "parse_npy_header",
    "parse_safetensors_header",
    "read_safetensors_header",
    "safetensors_header_length",
    "view_numpy",
]

#: NumPy's own limit for NPY headers it parses without ``max_header_size``.
MAX_NPY_HEADER = 10_000
#: The safetensors library refuses headers over 100 MB; so do we.
MAX_SAFETENSORS_HEADER = 100_000_000
#: NumPy's and torch's limit on dimensions.
MAX_DIMS = 64
#: A dimension past this overflows NumPy's and torch's signed 64-bit sizes.
_MAX_DIM = (1 << 63) - 1

_NPY_MAGIC = b"\x93NUMPY"


@dataclass(frozen=True)
class TensorDtype:
    """One safetensors dtype.

    Attributes:
        name: the header's spelling (``"BF16"``).
        bits: bits per element.
        numpy: a NumPy dtype string, ``"ml_dtypes:<name>"`` for dtypes NumPy lacks, or
            ``None`` when there is no NumPy equivalent.
        torch: the ``torch`` attribute of the dtype, or ``None``.
    """

    name: str
    bits: int
    numpy: str | None
    torch: str | None


SAFETENSORS_DTYPES: dict[str, TensorDtype] = {
    d.name: d
    for d in (
        TensorDtype("BOOL", 8, "|b1", "bool"),
        TensorDtype("U8", 8, "|u1", "uint8"),
        TensorDtype("I8", 8, "|i1", "int8"),
        TensorDtype("U16", 16, "<u2", "uint16"),
        TensorDtype("I16", 16, "<i2", "int16"),
        TensorDtype("U32", 32, "<u4", "uint32"),
        TensorDtype("I32", 32, "<i4", "int32"),
        TensorDtype("U64", 64, "<u8", "uint64"),
        TensorDtype("I64", 64, "<i8", "int64"),
        TensorDtype("F16", 16, "<f2", "float16"),
        TensorDtype("F32", 32, "<f4", "float32"),
        TensorDtype("F64", 64, "<f8", "float64"),
        TensorDtype("C64", 64, "<c8", "complex64"),
        TensorDtype("BF16", 16, "ml_dtypes:bfloat16", "bfloat16"),
        TensorDtype("F8_E4M3", 8, "ml_dtypes:float8_e4m3fn", "float8_e4m3fn"),
        TensorDtype("F8_E5M2", 8, "ml_dtypes:float8_e5m2", "float8_e5m2"),
        TensorDtype("F8_E4M3FNUZ", 8, "ml_dtypes:float8_e4m3fnuz", "float8_e4m3fnuz"),
        TensorDtype("F8_E5M2FNUZ", 8, "ml_dtypes:float8_e5m2fnuz", "float8_e5m2fnuz"),
        TensorDtype("F8_E8M0", 8, "ml_dtypes:float8_e8m0fnu", "float8_e8m0fnu"),
        # Two 4-bit values per byte: torch exposes them as packed pairs.
        TensorDtype("F4", 4, None, "float4_e2m1fn_x2"),
        TensorDtype("F6_E2M3", 6, None, None),
        TensorDtype("F6_E3M2", 6, None, None),
    )
}


def numpy_dtype(dtype: TensorDtype, *, source: str, tensor: str) -> np.dtype:
    """The NumPy dtype for a safetensors dtype; ``ml_dtypes`` supplies BF16 and F8."""
    if dtype.numpy is None:
        raise FormatError(
            f"{source}: tensor {tensor!r} is {dtype.name}, which has no NumPy dtype; "
            "read it with framework='torch'"
            + ("" if dtype.torch else " is not possible either (no torch dtype exists)")
        )
    if not dtype.numpy.startswith("ml_dtypes:"):
        return np.dtype(dtype.numpy)
    try:
        import ml_dtypes
    except ImportError:
        raise FormatError(
            f"{source}: tensor {tensor!r} is {dtype.name}, which NumPy lacks; "
            "install ml_dtypes (pip install ml_dtypes) or read it with framework='torch'"
        ) from None
    return np.dtype(getattr(ml_dtypes, dtype.numpy.split(":", 1)[1]))


def view_numpy(
    buffer: Any,
    dtype: np.dtype,
    shape: tuple[int, ...],
    offset: int,
    *,
    fortran: bool = False,
    source: str = "",
) -> np.ndarray:
    """View ``buffer`` at ``offset`` as an array, in native byte order.

    The result shares the buffer's memory (read-only when the buffer is) unless the
    bytes are in a foreign byte order, which is converted into a new array.
    """
    try:
        array = np.ndarray(
            shape, dtype=dtype, buffer=buffer, offset=offset, order="F" if fortran else "C"
        )
    except (ValueError, TypeError, OverflowError) as exc:
        # Callers check shapes first; this is the backstop for what NumPy still refuses.
        where = f"{source}: " if source else ""
        raise FormatError(
            f"{where}{shape} of {dtype} at byte {offset} cannot be viewed: {exc}"
        ) from exc
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
        array.flags.writeable = False
    return array


# -- NPY --------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpyHeader:
    """A checked NPY header: what the data section holds and where it starts."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    offset: int

    @property
    def nbytes(self) -> int:
        """Bytes of array data after the header."""
        return math.prod(self.shape) * self.dtype.itemsize


def parse_npy_header(
    buffer: Any, *, source: str = "NPY bytes", total: int | None = None
) -> NpyHeader:
    """Parse and check the header of NPY data, refusing pickled objects and truncation.

    ``total`` is the size of the whole file when ``buffer`` holds only its start (a
    remote object's first bytes: its header is checked before the data is fetched).

    Raises:
        FormatError: not NPY, a malformed header, an object dtype, or too few data bytes.

    Example:
        >>> parse_npy_header(npy_bytes).shape  # doctest: +SKIP
        (3, 4)
    """
    view = memoryview(buffer).cast("B")
    size = len(view)
    if size < 10 or bytes(view[:6]) != _NPY_MAGIC:
        what = "too short" if size < 10 else f"starts with {bytes(view[:6])!r}"
        raise FormatError(f"{source} is not an NPY file ({what}); expected the \\x93NUMPY magic")
    major = view[6]
    if major == 1:
        (length,), start = struct.unpack("<H", view[8:10]), 10
    elif major in (2, 3):
        if size < 12:
            raise FormatError(f"{source} is truncated inside its NPY header")
        (length,), start = struct.unpack("<I", view[8:12]), 12
    else:
        raise FormatError(f"{source} has NPY format version {major}; dataio reads versions 1-3")
    if length > MAX_NPY_HEADER:
        raise FormatError(
            f"{source} declares a {length}-byte NPY header, over the {MAX_NPY_HEADER}-byte "
            "limit; the file is corrupt or not NPY"
        )
    if start + length > size:
        raise FormatError(
            f"{source} is truncated: its NPY header needs {start + length} bytes, "
            f"the data holds {size}"
        )
    encoding = "latin1" if major < 3 else "utf8"
    try:
        text = bytes(view[start : start + length]).decode(encoding)
        with _AST_LOCK:
            fields = ast.literal_eval(text)
    except (
        ValueError,  # also integers over Python's 4,300-digit limit
        TypeError,  # an unhashable dict key: {[]: 1}
        SyntaxError,
        UnicodeDecodeError,
        MemoryError,
        RecursionError,
    ) as exc:
        raise FormatError(f"{source} has an unreadable NPY header: {exc}") from None
    header = _check_npy_fields(fields, source)
    dtype, shape, fortran = header
    data = NpyHeader(dtype, shape, fortran, start + length)
    _check_count(shape, dtype.itemsize, dtype.kind, source)
    if total is not None:
        size = total
    if data.offset + data.nbytes > size:
        raise FormatError(
            f"{source} is truncated: shape {shape} of {dtype} needs {data.nbytes} data bytes, "
            f"the file holds {size - data.offset}; re-save or re-download it"
        )
    return data


def _too_big(shape: tuple[int, ...] | list[int], itemsize: int) -> bool:
    """Whether NumPy may refuse the shape: it multiplies the sizes other than 0, and
    widens a zero-size element to up to 4 bytes when it copies."""
    return math.prod(n for n in shape if n) * (itemsize or 4) > _MAX_DIM


def _check_count(shape: tuple[int, ...], itemsize: int, kind: str, source: str) -> None:
    """Refuse shapes NumPy cannot hold, and zero-size elements past ``max_decoded_bytes``.

    Other arrays are checked against the bytes that hold them. A zero-size dtype
    (``|V0``, ``|S0``, ``<U0``) makes a huge shape cost nothing on disk, yet a copy or a
    loop over it hangs or allocates exabytes: NumPy widens ``S0`` to ``S1`` and ``U0`` to
    ``U1`` (4 bytes) when it copies, so its elements count as that.
    """
    if len(shape) > MAX_DIMS or any(n > _MAX_DIM for n in shape):
        raise FormatError(
            f"{source}: shape {shape!r} has over {MAX_DIMS} dimensions or a size over 2**63; "
            "the header is corrupt"
        )
    count = math.prod(shape)
    if count == 0 and _too_big(shape, itemsize):  # else the data bytes or the limit bound it
        raise FormatError(
            f"{source}: shape {shape!r} multiplies past 2**63 bytes, which NumPy cannot "
            "hold or copy even when one size is 0; the header is corrupt"
        )
    if itemsize == 0:
        limits.check(
            "max_decoded_bytes",
            count * (4 if kind == "U" else 1),
            what=f"{source}: shape {shape!r} of zero-size elements",
        )


def _check_npy_fields(fields: Any, source: str) -> tuple[np.dtype, tuple[int, ...], bool]:
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise FormatError(
            f"{source}: an NPY header must be a dict of descr, fortran_order and shape, "
            f"got {fields!r}"
        )
    shape, fortran = fields["shape"], fields["fortran_order"]
    if not isinstance(shape, tuple) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape
    ):
        raise FormatError(f"{source}: NPY shape must be a tuple of sizes >= 0, got {shape!r}")
    if not isinstance(fortran, bool):
        raise FormatError(f"{source}: NPY fortran_order must be a bool, got {fortran!r}")
    try:
        with _AST_LOCK:
            dtype = np.lib.format.descr_to_dtype(fields["descr"])
    except (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        OverflowError,
        RecursionError,
        SyntaxError,  # NumPy parses comma strings such as "(,)f4" with ast.literal_eval
        MemoryError,
    ) as exc:
        raise FormatError(
            f"{source}: NPY descr {fields['descr']!r} is not a dtype: {exc}"
        ) from None
    if dtype.hasobject:
        raise FormatError(
            f"{source} holds Python objects (dtype {dtype}), stored pickled; dataio never "
            "unpickles data. Re-save it with a numeric, string or structured dtype"
        )
    return dtype, shape, fortran


def decode_npy(data: Any, *, source: str = "NPY bytes") -> np.ndarray:
    """Decode NPY bytes into an array that views ``data`` (read-only for ``bytes``).

    Fortran order is kept; foreign byte order becomes native (a copy).

    Example:
        >>> decode_npy(open("x.npy", "rb").read()).dtype  # doctest: +SKIP
        dtype('float32')
    """
    header = parse_npy_header(data, source=source)
    return view_numpy(
        data,
        header.dtype,
        header.shape,
        header.offset,
        fortran=header.fortran_order,
        source=source,
    )


# -- safetensors ------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors header; ``start`` and ``end`` are absolute offsets."""

    name: str
    dtype: TensorDtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes this tensor occupies."""
        return self.end - self.start


@dataclass(frozen=True)
class SafetensorsHeader:
    """A checked safetensors header: tensors in file order and the text metadata."""

    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    data_start: int

    def entry(self, name: str, *, source: str) -> TensorEntry:
        """The entry of tensor ``name``, or a :class:`FieldError` listing what exists."""
        try:
            return self.tensors[name]
        except KeyError:
            available = list(self.tensors)
            shown = ", ".join(repr(k) for k in available[:10])
            more = f" and {len(available) - 10} more" if len(available) > 10 else ""
            raise FieldError(f"{source} has no tensor {name!r}; it holds {shown}{more}") from None


def safetensors_header_length(prefix: bytes, size: int, *, source: str) -> int:
    """Check the 8-byte header length against the file size and the 100 MB cap."""
    if size < 8 or len(prefix) < 8:
        raise FormatError(
            f"{source} is {size} bytes, too short for a safetensors file "
            "(it starts with an 8-byte header length)"
        )
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_SAFETENSORS_HEADER:
        raise FormatError(
            f"{source} declares a {length}-byte header, over the "
            f"{MAX_SAFETENSORS_HEADER}-byte limit; the file is corrupt or not safetensors"
        )
    if 8 + length > size:
        raise FormatError(
            f"{source} declares a {length}-byte header, which runs past the end of the "
            f"{size}-byte file; it is truncated or not safetensors"
        )
    limits.check("max_header_bytes", length, what=f"{source}: safetensors header length")
    return length


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_safetensors_header(header: bytes, size: int, *, source: str) -> SafetensorsHeader:
    """Parse and check a safetensors header (the JSON after the 8-byte length).

    ``size`` is the size of the whole file or buffer: tensors must tile the data
    section after the header exactly, without gaps, overlaps or bytes past its end.

    Raises:
        FormatError: invalid JSON, unknown dtypes, shapes that disagree with byte counts,
            or offsets that overlap, leave gaps or run out of range.
    """
    data_start = 8 + len(header)
    try:
        if not header.startswith(b"{"):
            raise ValueError("the header must be a JSON object")
        fields = json.loads(header.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise FormatError(
            f"{source} has an invalid safetensors header ({exc}); the file is corrupt or "
            "not safetensors"
        ) from None
    if not isinstance(fields, dict):
        raise FormatError(f"{source}: the safetensors header is not a JSON object")
    metadata = fields.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError(f"{source}: __metadata__ must map names to strings, got {metadata!r}")
    entries = [_entry(name, info, data_start, source) for name, info in fields.items()]
    _check_tiling(entries, size - data_start, data_start, source)
    entries.sort(key=lambda e: (e.start, e.end))
    return SafetensorsHeader({e.name: e for e in entries}, metadata, data_start)


def _entry(name: str, info: Any, data_start: int, source: str) -> TensorEntry:
    where = f"{source}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise FormatError(f"{where} needs dtype, shape and data_offsets, got {info!r}")
    dtype = SAFETENSORS_DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
    if dtype is None:
        raise FormatError(
            f"{where} has unknown dtype {info['dtype']!r}; known: {sorted(SAFETENSORS_DTYPES)}"
        )
    shape, offsets = info["shape"], info["data_offsets"]
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(_natural(n) and n <= _MAX_DIM for n in shape)
    ):
        raise FormatError(
            f"{where} has shape {shape!r}; expected a list of at most {MAX_DIMS} sizes "
            "in 0..2**63-1"
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_natural(n) for n in offsets)
        or offsets[0] > offsets[1]
    ):
        raise FormatError(
            f"{where} has data_offsets {offsets!r}; expected [begin, end] with 0 <= begin <= end"
        )
    bits = math.prod(shape) * dtype.bits
    # An empty tensor whose other sizes multiply past 2**63 bytes: NumPy and torch refuse
    # it. Others are bounded by the byte count check below.
    if bits == 0 and _too_big(shape, -(-dtype.bits // 8)):
        raise FormatError(
            f"{where} has shape {shape!r}, whose sizes multiply past 2**63 bytes; the "
            "header is corrupt"
        )
    if bits % 8 or bits // 8 != offsets[1] - offsets[0]:
        raise FormatError(
            f"{where} is {dtype.name} of shape {shape}, which needs {bits // 8:,} bytes"
            f"{f' and {bits % 8} bits' if bits % 8 else ''}, but "
            f"its data_offsets {offsets} span {offsets[1] - offsets[0]}; the header "
            "disagrees with itself, re-export the file"
        )
    return TensorEntry(name, dtype, tuple(shape), data_start + offsets[0], data_start + offsets[1])


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_tiling(entries: list[TensorEntry], data_size: int, base: int, source: str) -> None:
    covered = 0
    previous: TensorEntry | None = None
    for entry in sorted(entries, key=lambda e: (e.start, e.end)):
        begin, end = entry.start - base, entry.end - base
        if end > data_size:
            raise FormatError(
                f"{source}: tensor {entry.name!r} ends at data byte {end} but the data "
                f"section holds {data_size} bytes; the file is truncated or corrupt"
            )
        if begin < covered:
            raise FormatError(
                f"{source}: tensor {entry.name!r} (bytes {begin}..{end}) overlaps tensor "
                f"{previous.name if previous else None!r} (ending at {covered}); "
                "the header is corrupt"
            )
        if begin > covered:
            raise FormatError(
                f"{source}: data bytes {covered}..{begin} belong to no tensor (before "
                f"{entry.name!r}); safetensors data must be covered exactly"
            )
        covered, previous = end, entry
    if covered != data_size:
        raise FormatError(
            f"{source}: tensors cover {covered} data bytes but the data section holds "
            f"{data_size}; the file has trailing bytes or a corrupt header"
        )


def read_safetensors_header(buffer: Any, *, source: str) -> SafetensorsHeader:
    """Parse the header at the start of an in-memory safetensors buffer."""
    view = memoryview(buffer).cast("B")
    length = safetensors_header_length(bytes(view[:8]), len(view), source=source)
    return parse_safetensors_header(bytes(view[8 : 8 + length]), len(view), source=source)


def entry_array(buffer: Any, entry: TensorEntry, *, source: str) -> np.ndarray:
    """View one safetensors tensor of ``buffer`` as a NumPy array."""
    dtype = numpy_dtype(entry.dtype, source=source, tensor=entry.name)
    try:
        return view_numpy(buffer, dtype, entry.shape, entry.start)
    except FormatError as exc:  # named here, so the common path formats no name
        raise FormatError(f"{source}: tensor {entry.name!r}: {exc}") from exc


def decode_safetensors(
    data: Any, key: str | None = None, *, source: str = "safetensors bytes"
) -> np.ndarray:
    """Decode tensor ``key`` of in-memory safetensors data (the only tensor if ``None``).

    Example:
        >>> decode_safetensors(open("m.safetensors", "rb").read(), "w").shape  # doctest: +SKIP
        (4, 4)
    """
    header = read_safetensors_header(data, source=source)
    if key is None:
        if len(header.tensors) != 1:
            names: Iterable[str] = list(header.tensors)[:10]
            raise FieldError(
                f"{source} holds {len(header.tensors)} tensors ({', '.join(map(repr, names))}); "
                "pass key= to choose one"
            )
        key = next(iter(header.tensors))
    return entry_array(data, header.entry(key, source=source), source=source)
