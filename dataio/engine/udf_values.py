"""Values a batched chain reads: rows of binary, binary_view or string arrays, zero-copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.engine.udf_kernel import pa_module
from dataio.exceptions import DecodeError

__all__ = ["as_view", "reader"]


def reader(values: Any) -> Callable[[int], memoryview]:
    """``value(i)``: row ``i`` of a binary/large_binary/binary_view array, zero-copy."""
    pa = pa_module()
    buffers = values.buffers()
    start = values.offset
    empty = memoryview(b"")

    def raw(buffer: Any) -> memoryview:
        return memoryview(buffer).cast("B") if buffer is not None else empty

    if values.type == pa.binary_view() or values.type == pa.string_view():
        views_raw = raw(buffers[1])
        views = np.frombuffer(views_raw, np.int32).reshape(-1, 4)
        data = [raw(b) for b in buffers[2:]]

        def view(i: int) -> memoryview:
            j = start + i
            length, _, index, offset = (int(v) for v in views[j])
            if length <= 12:  # stored inline, after the length
                return views_raw[j * 16 + 4 : j * 16 + 4 + length]
            return data[index][offset : offset + length]

        return view
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    offsets = np.frombuffer(buffers[1], np.int64 if wide else np.int32)
    body = raw(buffers[2])

    def plain(i: int) -> memoryview:
        return body[int(offsets[start + i]) : int(offsets[start + i + 1])]

    return plain


def as_view(values: Any) -> Any:
    pa = pa_module()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.type in (pa.binary_view(), pa.string_view()) or pa.types.is_binary(values.type):
        return values
    if pa.types.is_large_binary(values.type) or pa.types.is_string(values.type):
        return values
    if pa.types.is_large_string(values.type):
        return values
    raise DecodeError(f"a chain reads binary or string (path) values, got {values.type}")
