"""The image SQL functions: ``decode_image(bytes, mode)`` and ``image_size(bytes)``."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataio.engine.udf_errors import row_error
from dataio.engine.udf_kernel import chain_kernel
from dataio.engine.udf_output import validity
from dataio.engine.udf_run import run_rows
from dataio.engine.udf_values import as_view, reader
from dataio.exceptions import DecodeError, QueryError

__all__ = ["decode_image_udf", "image_sizes"]

_MAX_BINARY = 2**31 - 1  # a plain ``binary`` array's int32 offsets


def decode_image_udf() -> Any:
    """``decode_image(bytes, mode)``: ``{height, width, channels, pixels}`` per image.

    ``pixels`` are the ``uint8`` HWC bytes. Batched: one decode chain per mode, rows
    spread over the CPU pool, values read zero-copy.
    """
    import pyarrow as pa
    from datafusion import udf

    struct = pa.struct(
        [
            ("height", pa.int32()),
            ("width", pa.int32()),
            ("channels", pa.int32()),
            ("pixels", pa.binary()),
        ]
    )

    def call(values: Any, modes: Any) -> Any:
        return _decode_images(values, modes, struct)

    inputs = [pa.field("bytes", pa.binary_view()), pa.field("mode", pa.string_view())]
    return udf(call, inputs, pa.field("image", struct), "immutable", "decode_image")


def _decode_images(values: Any, modes: Any, struct: Any) -> Any:
    import pyarrow as pa

    from dataio import decoders
    from dataio.udfs.image import CHANNELS

    values = as_view(values)
    n = len(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    mode_values = modes.cast(pa.string()).to_pylist() if n else []
    if len(mode_values) == 1 and n > 1:  # a constant
        mode_values = mode_values * n
    pieces: list[np.ndarray | None] = [None] * n
    for mode in sorted({m for m, v in zip(mode_values, valid, strict=True) if v}, key=str):
        if mode not in CHANNELS:
            raise DecodeError(f"decode_image mode must be one of {list(CHANNELS)}, got {mode!r}")
        rows = valid & np.array([m == mode for m in mode_values], bool)
        _, results = run_rows(chain_kernel((decoders.image(mode=mode),)), values, rows)
        for i in np.flatnonzero(rows):
            pieces[i] = results[i]
    valid &= np.array([p is not None for p in pieces], bool)
    shapes = np.array([p.shape if p is not None else (0, 0, 0) for p in pieces], np.int32)
    sizes = np.array([0 if p is None else p.size for p in pieces], np.int64)
    if sizes.sum() > _MAX_BINARY:
        raise QueryError(
            f"decode_image: {int(sizes.sum())} pixel bytes in one batch exceed a binary "
            "column's 2 GiB; decode fewer or smaller images per batch"
        )
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    body = np.empty(int(offsets[-1]), np.uint8)
    for k, p in enumerate(pieces):
        if p is not None:
            body[int(offsets[k]) : int(offsets[k + 1])] = p.reshape(-1)
    pixels = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(body)]
    )
    shapes = shapes.reshape(n, 3)
    return pa.StructArray.from_arrays(
        [pa.array(shapes[:, 0]), pa.array(shapes[:, 1]), pa.array(shapes[:, 2]), pixels],
        fields=list(struct),
        mask=validity(valid),
    )


def image_sizes(values: Any) -> Any:
    """``{height, width}`` from each image's header, read in place (the ``image_size``
    SQL function); null values give null rows."""
    import pyarrow as pa

    from dataio.udfs.image import image_size

    values = as_view(values)
    valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), bool)
    read = reader(values)
    sizes = np.zeros((len(values), 2), np.int32)
    for i in np.flatnonzero(valid):
        data = None
        try:
            data = read(int(i))
            sizes[i] = image_size(data)[::-1]
        except Exception as exc:
            raise row_error("image_size", exc, int(i), data, False) from exc
    return pa.StructArray.from_arrays(
        [pa.array(sizes[:, 0]), pa.array(sizes[:, 1])],
        names=["height", "width"],
        mask=validity(valid),
    )
