"""Feeding trainers from a Ray dataset: one rank's share as dataio batches."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any, Literal

from dataio.exceptions import PlanError

__all__ = ["TrainFeed", "train_feed"]

_lock = threading.Lock()
#: per dataset, its streaming_split per world size (every rank's iterator from one split)
_splits: weakref.WeakKeyDictionary[Any, dict[int, list[Any]]] = weakref.WeakKeyDictionary()


class TrainFeed:
    """One rank's batches of a Ray dataset (see :func:`train_feed`).

    Each ``iter()`` is one pass (an epoch) over the rank's share; Ray starts the
    dataset's execution when every rank has started its pass.
    """

    def __init__(
        self,
        shard: Any,
        *,
        batch_size: int | None,
        output: str,
        drop_last: bool,
        rank: int,
        world: int,
    ) -> None:
        self.shard = shard
        self.batch_size = batch_size
        self.output = output
        self.drop_last = drop_last
        self.rank = rank
        self.world = world

    def __iter__(self) -> Iterator[Any]:
        batches = self.shard.iter_batches(
            batch_size=self.batch_size, batch_format="pyarrow", drop_last=self.drop_last
        )
        for table in batches:
            yield _batch(table, self.output)

    def __repr__(self) -> str:
        return (
            f"TrainFeed(rank={self.rank}, world={self.world}, batch_size={self.batch_size}, "
            f"output={self.output!r})"
        )


def train_feed(
    ds: Any,
    rank: int = 0,
    world: int = 1,
    *,
    batch_size: int | None = 32,
    output: Literal["numpy", "torch"] = "numpy",
    drop_last: bool = False,
) -> TrainFeed:
    """Rank ``rank`` of ``world``'s share of ``ds`` as :class:`~dataio.batch.Batch` objects.

    The ranks share one ``ds.streaming_split(world, equal=True)`` (made by the first
    call for that dataset and world size): their rows are disjoint, together complete
    up to ``world - 1`` rows that ``equal=True`` may drop, and every rank gets the same
    count. ``batch_size=None`` yields the dataset's blocks as they come (the batches of
    :func:`map_pipeline`, each without a copy; other sizes concatenate the tensors of
    neighbouring blocks once). ``ds`` may also be a ``ray.data.DataIterator`` already
    split for this rank
    (Ray Train's ``get_dataset_shard``). Tensor columns become arrays (tensors for
    ``output="torch"``), ``__index__`` the batch's ``indices`` and ``__key__`` its keys.

    Image columns that ``map_pipeline(..., normalize="feed")`` left at ``uint8`` are
    normalized here, in this process (the same float32 steps as a loader's device
    normalize).

    Resume: a Ray execution cannot restart in the middle; a pass restarts at an epoch
    boundary (build the epoch's dataset with ``map_pipeline(..., epoch=e)`` and feed it
    again). There is no exact mid-epoch resume through Ray.

    Example:
        >>> for batch in dataio.ray.train_feed(ds, rank, world, batch_size=64):  # doctest: +SKIP
        ...     batch["image"].shape
    """
    if output not in ("numpy", "torch"):
        raise PlanError(f"train_feed output must be 'numpy' or 'torch', got {output!r}")
    if batch_size is not None and (
        isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
    ):
        raise PlanError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise PlanError(f"world must be a positive integer, got {world!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
        raise PlanError(f"rank must be in [0, {world}), got {rank!r}")
    if hasattr(ds, "streaming_split"):
        with _lock:
            per_world = _splits.setdefault(ds, {})
            if world not in per_world:
                per_world[world] = ds.streaming_split(world, equal=True)
            shard = per_world[world][rank]
    elif hasattr(ds, "iter_batches"):
        shard = ds
    else:
        raise PlanError(
            f"train_feed takes a ray.data.Dataset or DataIterator, got {type(ds).__name__}"
        )
    return TrainFeed(
        shard, batch_size=batch_size, output=output, drop_last=drop_last, rank=rank, world=world
    )


def _batch(table: Any, output: str) -> Any:
    """A :class:`~dataio.batch.Batch` of a Ray batch's columns."""
    import numpy as np
    import pyarrow as pa

    from dataio.batch import Batch

    columns: dict[str, Any] = {}
    indices: Any = range(table.num_rows)
    keys: Any = None
    steps = []
    for name in table.column_names:
        column = table[name].combine_chunks()
        if name == "__index__":
            indices = column.to_numpy().tolist()
            continue
        if name == "__key__":
            keys = column.to_pylist()
            continue
        columns[name] = _values(column, np, pa)
        step = _deferred(table.schema.field(name))
        if step is not None:
            steps.append(step)
    if output == "torch":
        import torch

        columns = {
            name: torch.from_numpy(_writable(value, np))
            if isinstance(value, np.ndarray) and value.dtype != object
            else value
            for name, value in columns.items()
        }
        batch = Batch(columns, keys=keys, indices=indices)
        if steps:
            from dataio.plan import runtime

            batch = runtime.engine().apply_on_device(batch, tuple(steps))
        return batch
    for step in steps:
        columns[step.slot] = _normalized(columns[step.slot], step, np)
    return Batch(columns, keys=keys, indices=indices)


def _deferred(field: Any) -> Any:
    """The normalize ``map_pipeline(..., normalize="feed")`` left to this column, or None."""
    import json

    from dataio.plan import runtime
    from dataio.ray.pipeline import NORMALIZE_KEY

    note = (field.metadata or {}).get(NORMALIZE_KEY)
    if note is None:
        return None
    found = json.loads(note)
    return runtime.engine().DeviceNormalize(
        found["slot"], tuple(found["scale"]), tuple(found["bias"]), found["layout"], found["dtype"]
    )


def _normalized(pixels: Any, step: Any, np: Any) -> Any:
    """``uint8`` rows as ``pixels * scale + bias`` per channel in two rounded ``float32``
    steps (as the host kernel and the device normalize), then the slot's dtype."""
    from dataio.udfs.arrays import numpy_dtype

    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8:
        return pixels  # an empty batch of a skipped slot
    row = (-1, 1, 1) if step.layout == "CHW" else (1, 1, -1)
    shape = (1,) * (pixels.ndim - 3) + row
    scale = np.asarray(step.scale, np.float32).reshape(shape)
    bias = np.asarray(step.bias, np.float32).reshape(shape)
    out = np.multiply(pixels, scale, dtype=np.float32)
    out += bias
    return out if step.dtype == "float32" else out.astype(numpy_dtype(step.dtype))


def _writable(array: Any, np: Any) -> Any:
    """Torch tensors own writable memory: a read-only view of an Arrow block is copied."""
    array = np.ascontiguousarray(array)
    return array if array.flags.writeable else array.copy()


def _values(column: Any, np: Any, pa: Any) -> Any:
    """Tensors as NumPy arrays (``fixed_shape_tensor`` or Ray's tensor type), numbers
    without nulls as NumPy, anything else as the Arrow array."""
    kind = column.type
    if isinstance(kind, pa.FixedShapeTensorType):
        return column.to_numpy_ndarray()
    if isinstance(kind, pa.ExtensionType) and hasattr(column, "to_numpy"):
        return column.to_numpy()  # Ray's ArrowTensorType
    if (pa.types.is_integer(kind) or pa.types.is_floating(kind)) and not column.null_count:
        return column.to_numpy()
    return column
