"""Arrow columns in the executor: values read zero-copy, passthrough columns as outputs.

* :func:`value_reader` gives a media slot each row's value without a Python row: a
  ``memoryview`` over the value's bytes inside a ``binary``, ``large_binary`` or
  ``binary_view`` column's buffers (no copy), a ``str`` path from a string column,
  ``None`` for a null.
* :func:`arrow_column` is the passthrough rule for Arrow rows: integer and floating
  columns without nulls become NumPy arrays of their type (a zero-copy, read-only view of
  the Arrow buffer), booleans without nulls a ``bool`` array; ``fixed_shape_tensor``
  columns without nulls an array ``[n, *shape]`` of their value type (zero-copy over the
  storage's flat values; ``bool`` ones a copy); every other column (strings, binary,
  nested, temporal, anything with nulls) stays a ``pyarrow.Array``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["arrow_column", "value_reader"]

#: a row number -> that row's value (``memoryview``, ``str`` or ``None``)
Reader = Callable[[int], Any]


def arrow_column(array: pa.Array | np.ndarray) -> Any:
    """A passthrough column of Arrow rows as the batch delivers it (see module doc)."""
    import pyarrow as pa

    if isinstance(array, np.ndarray):  # already taken as NumPy from a parent batch
        return array
    kind = array.type
    if array.null_count == 0:
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            return array.to_numpy(zero_copy_only=True)
        if pa.types.is_boolean(kind):
            return array.to_numpy(zero_copy_only=False)
        if isinstance(kind, pa.FixedShapeTensorType):
            return _tensor_column(array)
    return array


def _tensor_column(array: pa.FixedShapeTensorArray) -> Any:
    """A ``fixed_shape_tensor`` column without nulls as ``[n, *shape]`` NumPy; kept as
    Arrow when its values hold nulls (NumPy has no place for them) or are not numbers."""
    import pyarrow as pa

    kind = array.type
    values = array.storage.flatten()  # this slice's values only: it honours the offset
    if values.null_count:
        return array
    value_type = kind.value_type
    if pa.types.is_integer(value_type) or pa.types.is_floating(value_type):
        # pyarrow's own view: zero-copy, and it lays out a permuted tensor's dimensions
        return array.to_numpy_ndarray()
    permutation = kind.permutation
    if pa.types.is_boolean(value_type) and (not permutation or permutation == sorted(permutation)):
        # bits unpacked to bytes (a copy, as for bool columns); pyarrow's view refuses bool
        return values.to_numpy(zero_copy_only=False).reshape(len(array), *kind.shape)
    return array


def value_reader(array: pa.Array) -> Reader:
    """A function reading row ``i`` of ``array`` as a media kernel's input, zero-copy."""
    import pyarrow as pa

    kind = array.type
    if isinstance(array, pa.ChunkedArray):  # pragma: no cover - batches hold plain arrays
        array = array.combine_chunks()
    valid = None
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_dictionary(kind):
        return value_reader(array.dictionary_decode())
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return _offsets_reader(
            array, valid, np.int64 if pa.types.is_large_binary(kind) else np.int32, text=False
        )
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _offsets_reader(
            array, valid, np.int64 if pa.types.is_large_string(kind) else np.int32, text=True
        )
    if pa.types.is_binary_view(kind) or pa.types.is_string_view(kind):
        return _view_reader(array, valid, text=pa.types.is_string_view(kind))
    if pa.types.is_fixed_size_binary(kind):
        return _fixed_reader(array, valid)

    def python_value(row: int) -> Any:  # anything else: the kernel names the type it got
        scalar = array[row]
        return scalar.as_py() if scalar.is_valid else None

    return python_value


def _offsets_reader(array: pa.Array, valid: Any, dtype: Any, *, text: bool) -> Reader:
    _, offsets_buffer, data_buffer = array.buffers()
    n, first = len(array), array.offset
    offsets = np.frombuffer(offsets_buffer, dtype=dtype)[first : first + n + 1] if n else None
    data = _bytes_view(data_buffer)

    def read(row: int) -> Any:
        if valid is not None and not valid[row]:
            return None
        assert offsets is not None
        value = data[int(offsets[row]) : int(offsets[row + 1])]
        return str(value, "utf-8") if text else value

    return read


def _view_reader(array: pa.Array, valid: Any, *, text: bool) -> Reader:
    buffers = array.buffers()
    first = array.offset
    views = _bytes_view(buffers[1])
    fields = np.frombuffer(buffers[1], dtype=np.int32).reshape(-1, 4) if len(array) else None
    data = [_bytes_view(b) for b in buffers[2:]]

    def read(row: int) -> Any:
        if valid is not None and not valid[row]:
            return None
        assert fields is not None
        at = first + row
        length = int(fields[at, 0])
        if length <= 12:  # short values live inside the 16-byte view itself
            value = views[at * 16 + 4 : at * 16 + 4 + length]
        else:
            buffer, offset = int(fields[at, 2]), int(fields[at, 3])
            value = data[buffer][offset : offset + length]
        return str(value, "utf-8") if text else value

    return read


def _fixed_reader(array: pa.Array, valid: Any) -> Reader:
    width = array.type.byte_width
    data = _bytes_view(array.buffers()[1])
    first = array.offset

    def read(row: int) -> Any:
        if valid is not None and not valid[row]:
            return None
        at = (first + row) * width
        return data[at : at + width]

    return read


def _bytes_view(buffer: pa.Buffer | None) -> memoryview:
    """Unsigned bytes over an Arrow buffer (its own memoryview holds signed chars)."""
    if buffer is None:
        return memoryview(b"")
    return memoryview(buffer).cast("B")
