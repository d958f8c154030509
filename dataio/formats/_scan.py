"""Scans of tensor files (``scan_numpy``, ``scan_npz``, ``scan_hdf5``) as lazy frames.

Each is a :class:`~dataio.frame.LazyFrame` over a :class:`~dataio.frame_plan.FileRecords`
node: nothing is listed or opened when it is built; every run and every pass resolves
the paths again (:mod:`dataio.io.resolve`) and reads file after file. Iterated as a
record source, a bare scan yields the reader's records (NumPy arrays, memory-mapped
where asked) and a damaged file is one :class:`FailedRecord`. Run as a frame (``collect``,
filters, SQL), each array becomes a :data:`TENSOR` value: Arrow has no column type whose
rows may differ in dtype and shape, so the value carries both next to its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dataio.exceptions import DataioError, PlanError
from dataio.frame_plan import FileRecords
from dataio.io.resolve import resolve, spec_items

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = [
    "FailedRecord",
    "file_records",
    "iter_records",
    "record_key",
    "records_table",
    "tensor_type",
    "tensor_values",
]

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def record_key(path: str) -> str:
    """A record key for a file: its name without the extension."""
    return os.path.splitext(os.path.basename(path))[0]


class FailedRecord(Mapping[str, Any]):
    """The record of a file that could not be read: its data fields raise the error.

    ``key`` and ``path`` read as usual; reading a data field (``"array"``, ...) raises
    the file's error (a :class:`~dataio.exceptions.FormatError` naming it). In a
    pipeline that makes the file one row error: dropped under ``on_failure="skip"``,
    raised under ``"strict"``, while the files after it are still read.
    """

    def __init__(self, path: str, key: str, fields: tuple[str, ...], error: DataioError):
        self._plain = {"key": key, "path": path}
        self._fields = fields
        self.error = error

    def __getitem__(self, name: str) -> Any:
        if name in self._fields:
            raise self.error
        return self._plain[name]

    def __iter__(self) -> Iterator[str]:
        return iter((*self._plain, *self._fields))

    def __len__(self) -> int:
        return len(self._plain) + len(self._fields)

    def __repr__(self) -> str:
        return f"FailedRecord(path={self._plain['path']!r}, error={self.error!r})"


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


def _paths(node: FileRecords) -> list[str]:
    # plain paths are not checked here: a missing or damaged file is one failed record
    return resolve(node.spec, what=node.name, extensions=node.extensions, check=False)


def iter_records(node: FileRecords) -> Iterator[Mapping[str, Any]]:
    """The records, file after file; a file that fails to read is one
    :class:`FailedRecord` when the node has data fields, else its error ends the pass."""
    for path in _paths(node):
        try:
            yield from node.read(path)
        except DataioError as exc:
            if not node.fields:
                raise
            # One damaged file is one bad record, not the end of the pass.
            yield FailedRecord(path, record_key(path), node.fields, exc)


def records_table(node: FileRecords) -> pa.Table:
    """Every file's records as one ``pyarrow.Table`` of the node's schema (a damaged
    file raises its error: an Arrow value cannot carry it)."""
    import pyarrow as pa

    batches = [node.to_arrow(list(node.read(path))) for path in _paths(node)]
    return pa.Table.from_batches(batches, schema=node.schema)
