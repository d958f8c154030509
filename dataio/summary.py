"""``LazyFrame.describe()``: summary statistics of each column, as polars computes them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dataio.exceptions import PlanError
from dataio.plan.expr import Expr, col

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = ["describe_frame"]


def _kind(dtype: pa.DataType) -> str:
    import pyarrow as pa

    t = pa.types
    if t.is_dictionary(dtype):
        return _kind(dtype.value_type)
    if t.is_integer(dtype) or t.is_floating(dtype) or t.is_decimal(dtype):
        return "numeric"
    if t.is_boolean(dtype):
        return "bool"
    if t.is_string(dtype) or t.is_large_string(dtype) or dtype == pa.string_view():
        return "string"
    return "other"


def _percentiles(percentiles: Sequence[float] | float | None) -> list[float]:
    items = [] if percentiles is None else percentiles
    values = [items] if isinstance(items, int | float) else list(items)
    for q in values:
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= 1:
            raise PlanError(f"describe() percentiles must be numbers in [0, 1], got {q!r}")
    return sorted({float(q) for q in values})


def _nearest(n: int, q: float) -> int:
    """polars' ``"nearest"`` quantile index: ``(n - 1) * q`` rounded half away from zero."""
    return min(n - 1, math.floor((n - 1) * q + 0.5))


def describe_frame(frame: LazyFrame, percentiles: Sequence[float] | float | None) -> pa.Table:
    """The statistics table of :meth:`dataio.frame.LazyFrame.describe`."""
    import numpy as np
    import pyarrow as pa

    qs = _percentiles(percentiles)
    labels = ["count", "null_count", "mean", "std", "min", *(f"{q * 100:g}%" for q in qs), "max"]
    kinds = {f.name: _kind(f.type) for f in frame.schema}
    aggs: list[Expr] = []
    for i, name in enumerate(frame.columns):
        aggs += [col(name).count().alias(f"{i}:count"), col(name).null_count().alias(f"{i}:nulls")]
        value = col(name).cast("float64") if kinds[name] in ("numeric", "bool") else col(name)
        if kinds[name] in ("numeric", "bool"):
            aggs.append(value.mean().alias(f"{i}:mean"))
        if kinds[name] == "numeric":
            aggs.append(value.std().alias(f"{i}:std"))
        if kinds[name] != "other":
            aggs += [value.min().alias(f"{i}:min"), value.max().alias(f"{i}:max")]
    row = frame.agg(*aggs).collect().to_pylist()[0]
    columns: dict[str, Any] = {"statistic": pa.array(labels, pa.string())}
    for i, name in enumerate(frame.columns):
        stats: dict[str, Any] = {
            "count": row[f"{i}:count"],
            "null_count": row[f"{i}:nulls"],
            "mean": row.get(f"{i}:mean"),
            "std": row.get(f"{i}:std"),
            "min": row.get(f"{i}:min"),
            "max": row.get(f"{i}:max"),
        }
        if kinds[name] == "numeric" and qs and stats["count"]:
            stats.update(_quantiles(frame, name, qs, stats["count"]))
        if frame.schema.field(name).type in (pa.float32(), pa.float16()):
            # as polars: a float32 column's mean and std are float32 values
            for stat in ("mean", "std"):
                if stats[stat] is not None:
                    stats[stat] = float(np.float32(stats[stat]))
        values = [stats.get(label) for label in labels]
        if kinds[name] in ("numeric", "bool"):
            columns[name] = pa.array(values, pa.float64())
        else:
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(columns)


def _quantiles(frame: LazyFrame, name: str, qs: list[float], n: int) -> dict[str, float]:
    """The nearest-rank percentiles of a numeric column: one sort of its non-null values."""
    value = col(name).cast("float64").alias("v")
    ordered = frame.filter(col(name).is_not_null()).select(value).sort("v").collect().column(0)
    return {f"{q * 100:g}%": ordered[_nearest(n, q)].as_py() for q in qs}
