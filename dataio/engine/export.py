"""Outputs: NumPy batches as they are, torch tensors sharing their memory, Arrow batches."""

from __future__ import annotations

from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.exceptions import DataioError

__all__ = ["to_arrow", "to_torch"]


def to_torch(batch: Batch, device: str | None = None) -> Batch:
    """Convert array columns to torch tensors without copying (``torch.from_numpy``)."""
    import torch

    columns: dict[str, Any] = {}
    for name, column in batch._columns.items():
        if isinstance(column, np.ndarray):
            tensor = torch.from_numpy(column)
            if device is not None:
                tensor = tensor.pin_memory().to(device, non_blocking=True)
            columns[name] = tensor
        else:
            columns[name] = column
    return batch.with_columns(columns)


def to_arrow(batch: Batch) -> Any:
    """Build a ``pyarrow.RecordBatch``: tensor slots as ``fixed_shape_tensor`` columns.

    Also carries ``__index__`` (record indices) and ``__key__`` when rows have keys.
    """
    import pyarrow as pa

    arrays: list[Any] = []
    names: list[str] = []
    for name, column in batch._columns.items():
        if batch.mixed_by and name in batch.row_values:
            continue  # per-record values mean nothing for blended rows
        if hasattr(column, "__dlpack__") and not isinstance(column, np.ndarray):
            column = np.from_dlpack(column)  # a CPU torch tensor: same memory
        if isinstance(column, np.ndarray):
            arrays.append(pa.FixedShapeTensorArray.from_numpy_ndarray(column))
        else:
            try:
                arrays.append(pa.array(column))
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                kinds = sorted({type(v).__name__ for v in column})
                raise DataioError(
                    f"passthrough slot {name!r} holds values Arrow cannot represent ({kinds}); "
                    "map them to plain types (numbers, strings, bytes, lists, dicts) first"
                ) from exc
        names.append(name)
    if batch.mixed_by is None:
        arrays.append(pa.array(batch.indices, pa.int64()))
        names.append("__index__")
        if any(k is not None for k in batch.keys):
            arrays.append(pa.array(batch.keys))
            names.append("__key__")
    return pa.RecordBatch.from_arrays(arrays, names=names)
