"""Scans of tensor files (``scan_numpy``, ``scan_npz``, ``scan_hdf5``) as lazy frames.

Each is a :class:`~dataio.frame.LazyFrame` over a :class:`~dataio.plan.frame.FileRecords`
node: nothing is listed or opened when it is built; every run and every pass resolves
the paths again (:mod:`dataio.io.resolve`) and reads file after file. Iterated as a
record source, a bare scan yields the reader's records (NumPy arrays, memory-mapped
where asked) and a damaged file is one failed record (:mod:`dataio.engine.records`
runs these nodes). Run as a frame (``collect``,
filters, SQL), each array becomes a :data:`TENSOR` value: Arrow has no column type whose
rows may differ in dtype and shape, so the value carries both next to its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dataio.exceptions import PlanError
from dataio.io.resolve import spec_items
from dataio.plan.frame import FileRecords

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = ["file_records", "record_key", "tensor_type", "tensor_values"]

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def record_key(path: str) -> str:
    """A record key for a file: its name without the extension."""
    return os.path.splitext(os.path.basename(path))[0]


def tensor_type() -> pa.DataType:
    """The Arrow type of one array of any dtype and shape: ``struct<dtype: string (NumPy's
    ``dtype.str``), shape: list<int64>, data: large_binary (C order)>``.

    ``np.frombuffer(v["data"], v["dtype"]).reshape(v["shape"])`` gives the array back.
    """
    import pyarrow as pa

    return pa.struct(
        [
            pa.field("dtype", pa.string()),
            pa.field("shape", pa.list_(pa.int64())),
            pa.field("data", pa.large_binary()),
        ]
    )


def tensor_values(array: np.ndarray, what: str) -> dict[str, Any]:
    """One array as a :func:`tensor_type` value (its bytes copied, C order)."""
    import numpy as np

    array = np.asarray(array)
    if array.dtype.hasobject:
        raise PlanError(
            f"{what} holds Python objects ({array.dtype}), which Arrow cannot hold; "
            "iterate the scan's records instead of running it as a frame"
        )
    dtype = array.dtype.str if array.dtype.names is None else str(array.dtype.descr)
    data = np.ascontiguousarray(array).tobytes()
    return {"dtype": dtype, "shape": list(array.shape), "data": data}


def file_records(
    name: str,
    source: Source,
    *,
    extensions: tuple[str, ...],
    options: dict[str, Any],
    read: Callable[[str], Iterator[dict[str, Any]]],
    to_arrow: Callable[[list[dict[str, Any]]], pa.RecordBatch],
    fields: tuple[str, ...],
    schema: pa.Schema,
) -> LazyFrame:
    """A lazy frame of the records ``read`` makes from each file ``source`` names."""
    from dataio.frame import LazyFrame

    items = spec_items(source, name)
    node = FileRecords(
        name, items, extensions, tuple(options.items()), read, to_arrow, fields, schema
    )
    return LazyFrame(node, schema)
