"""Batch transforms: whole-batch ops between the shape stage and Python batch maps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.exceptions import FieldError, ShapeMismatchError
from dataio.plan.ops import Op

__all__ = ["apply_batch_ops", "padded_slots"]


def padded_slots(ops: tuple[Op, ...]) -> frozenset[str]:
    """Slots a ``padding`` transform will pad: assembly leaves them as lists of rows."""
    return frozenset(name for op in ops if op.name == "padding" for name in op.param("slots"))


def batch_rng(seed: int, epoch: int, first: int, number: int) -> np.random.Generator:
    """The generator of batch transform ``number`` for the batch starting at record ``first``."""
    return np.random.default_rng([seed, epoch, first, 1_000_003 + number])


def apply_batch_ops(batch: Batch, ops: tuple[Op, ...], seed: int, epoch: int) -> Batch:
    """Run ``ops`` in order on a NumPy batch."""
    first = batch._indices[0] if len(batch._indices) else 0
    for number, op in enumerate(ops):
        rng = batch_rng(seed, epoch, first, number) if op.random else None
        batch = _OPS[op.name](batch, op.params_dict(), rng)
    return batch


def _array(batch: Batch, name: str, what: str) -> np.ndarray:
    column = batch._columns[name]
    if not isinstance(column, np.ndarray):
        raise FieldError(
            f"{what} needs slot {name!r} as a stacked array; it holds "
            f"{type(column).__name__} (variable shapes or per-record values)"
        )
    return column


def _labels(batch: Batch, p: dict[str, Any], what: str) -> np.ndarray | None:
    if p["label"] is None:
        return None
    from dataio.udfs.batch import one_hot

    raw = batch._columns[p["label"]]
    values = np.asarray(raw)
    if values.ndim == 1:
        if p["num_classes"] is None:
            raise FieldError(
                f"{what}: slot {p['label']!r} holds class ids; pass num_classes= to one-hot them"
            )
        return one_hot(values, p["num_classes"])
    return values.astype(np.float32)


def _mix(batch: Batch, p: dict[str, Any], rng: Any, cut: bool) -> Batch:
    from dataio.udfs import batch as kernels

    what = "cutmix" if cut else "mixup"
    lam = float(rng.beta(p["alpha"], p["alpha"]))
    perm = rng.permutation(len(batch))
    labels = _labels(batch, p, what)
    columns = dict(batch._columns)
    for name in p["slots"]:
        x = _array(batch, name, what)
        if cut:
            mixed, mixed_labels, _ = kernels.cutmix(
                x, labels, lam, perm, layout=p["layout"], rng=rng
            )
        else:
            mixed, mixed_labels = kernels.mixup(x, labels, lam, perm)
        columns[name] = mixed
    row_values = batch.row_values
    if labels is not None:
        columns[p["label"]] = mixed_labels  # blended labels are a tensor now
        row_values = row_values - {p["label"]}
    return batch.with_columns(columns, mixed_by=what, row_values=row_values)


def _padding(batch: Batch, p: dict[str, Any], rng: Any) -> Batch:
    from dataio.udfs.batch import pad_batch

    columns = dict(batch._columns)
    for name in p["slots"]:
        rows = columns[name]
        if isinstance(rows, np.ndarray):
            rows = list(rows)
        if any(r is None for r in rows):
            raise ShapeMismatchError(f"padding: slot {name!r} has rows without a value (None)")
        padded, mask = pad_batch([np.asarray(r) for r in rows], axis=p["axis"], value=p["value"])
        columns[name] = padded
        columns[f"{name}_mask"] = mask
    return batch.with_columns(columns)


def _shuffle(batch: Batch, p: dict[str, Any], rng: Any) -> Batch:
    order = rng.permutation(len(batch))
    columns = {name: _reorder(column, order) for name, column in batch._columns.items()}
    sizes = {name: [rows[i] for i in order] for name, rows in batch._sizes.items()}
    return batch.with_columns(
        columns,
        keys=[batch._key_list()[i] for i in order],
        indices=[batch._index_list()[i] for i in order],
        sizes=sizes,
    )


def _reorder(column: Any, order: np.ndarray) -> Any:
    if isinstance(column, np.ndarray):
        return column[order]
    if hasattr(column, "take") and not isinstance(column, list):  # an Arrow array
        return column.take(order)
    return [column[i] for i in order]


def _normalization(batch: Batch, p: dict[str, Any], rng: Any) -> Batch:
    from dataio.udfs.batch import batch_normalize

    columns = dict(batch._columns)
    for name in p["slots"]:
        x = _array(batch, name, "normalization")
        axes = p["axes"]
        if axes is None:  # keep the channel axis (1), reduce over the rest
            axes = tuple(a for a in range(x.ndim) if a != 1) if x.ndim > 2 else (0,)
        columns[name] = batch_normalize(x, axes=tuple(axes), eps=p["eps"])
    return batch.with_columns(columns)


_OPS: dict[str, Callable[[Batch, dict[str, Any], Any], Batch]] = {
    "mixup": lambda b, p, r: _mix(b, p, r, cut=False),
    "cutmix": lambda b, p, r: _mix(b, p, r, cut=True),
    "padding": _padding,
    "shuffle": _shuffle,
    "normalization": _normalization,
}
