"""Turning a finished job into a :class:`~dataio.batch.Batch` under the failure policy."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from dataio.batch import Batch
from dataio.engine.columns import arrow_column
from dataio.engine.executor import BatchJob
from dataio.engine.lower import SlotKernel
from dataio.engine.rejects import RejectLog
from dataio.exceptions import BatchFailedError, DataioError, ShapeMismatchError
from dataio.plan.ops import Op

__all__ = ["FailurePolicy", "assemble"]

_fast: Any
try:  # the C helper for passthrough columns (optional build); Python types them without it
    from dataio.engine import _columns as _fast
except ImportError:  # pragma: no cover - built with the package
    _fast = None

row_logger = logging.getLogger("dataio.rows")


class FailurePolicy:
    """``on_failure`` and ``log_errors`` of a run, applied to each finished job."""

    def __init__(
        self,
        on_failure: str | int,
        log_errors: bool | Callable[[Exception], Any],
        rejects: RejectLog | None = None,
    ) -> None:
        self.on_failure = on_failure
        self.log_errors = log_errors
        #: where every bad row is recorded, skipped or failed
        self.rejects = rejects

    def report(self, errors: list[DataioError]) -> None:
        """Send row errors to the configured logger or callback."""
        if self.log_errors is True:
            for error in errors:
                row_logger.warning("dropped %s", error)
        elif callable(self.log_errors):
            for error in errors:
                self.log_errors(error)

    def survives(self, survivors: int) -> bool:
        """Whether a batch with row errors and ``survivors`` good rows is delivered."""
        if self.on_failure == "strict":
            return False
        return survivors >= (1 if self.on_failure == "skip" else int(self.on_failure))

    def check(self, errors: list[DataioError], survivors: int, total: int) -> None:
        """Raise when the batch does not meet the policy."""
        if not errors:
            return
        if self.on_failure == "strict":
            raise errors[0]
        needed = 1 if self.on_failure == "skip" else int(self.on_failure)
        if survivors < needed:
            raise BatchFailedError(
                f"only {survivors} of {total} rows survived, {needed} required "
                f"(on_failure={self.on_failure!r}); first error: {errors[0]}",
                errors,
            )


def _stack(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ShapeMismatchError(
            f"slot {name!r} produced rows of different shapes {sorted(shapes)}; add a "
            "fixed-size op (resize, a crop, fix_length) or batch_transforms.padding"
        )
    return np.stack(arrays)


def _numeric(values: list[Any]) -> Any:
    """Passthrough numbers or bools as an array of their dtype; anything else stays a list.

    Python ints become int64, Python floats float64 and bools bool; NumPy scalars of one
    dtype keep it. Mixed kinds, ``None``, strings and ints beyond int64 stay a list.
    """
    if not values:
        return values
    if _fast is not None and type(values) is list:
        packed = _fast.numeric(values)
        if packed is False:  # a str, bytes or None value: a list whatever the rest is
            return values
        if packed is not None:
            code, data = packed
            return np.frombuffer(data, np.dtype(code))  # writable: a bytearray's memory
    kinds = set(map(type, values))
    if len(kinds) == 1:
        kind = next(iter(kinds))
        if kind is int:
            try:
                return np.fromiter(values, np.int64, len(values))
            except OverflowError:  # an int beyond int64: keep Python's exact value
                return values
        if kind is float:
            return np.fromiter(values, np.float64, len(values))
        if kind is bool:
            return np.fromiter(values, np.bool_, len(values))
        if issubclass(kind, np.number | np.bool_):
            return np.array(values)
        return values
    if kinds <= {int, float}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:  # an int beyond float64's range
            return values
    return values


def _stacks(job: BatchJob, kernel: SlotKernel, unstacked: frozenset[str]) -> bool:
    """Whether a slot's rows are variable-shape arrays that :func:`_column` stacks."""
    name = kernel.name
    return not (
        name in job.buffers
        or kernel.passthrough
        or kernel.objects
        or name in unstacked
        or job.inactive.get(name)
    )


def _mark_odd_shapes(
    job: BatchJob, errors: dict[int, DataioError], unstacked: frozenset[str]
) -> None:
    """Make rows whose shape differs from the batch's most common shape row errors.

    The rule: per stacked slot, among the rows still surviving, the most common shape
    wins (a tie goes to the shape of the earliest row); every other row gets a
    :class:`ShapeMismatchError` naming it, so ``on_failure`` decides as for any bad row.
    """
    for kernel in job.kernels:
        if not _stacks(job, kernel, unstacked):
            continue
        values = job.values[kernel.name]
        rows = [row for row in range(job.size) if row not in errors]
        shapes = [np.shape(values[row]) for row in rows]
        counts = Counter(shapes)  # insertion-ordered: max() breaks ties by first row
        if len(counts) <= 1:
            continue
        kept = max(counts, key=counts.__getitem__)
        for row, shape in zip(rows, shapes, strict=True):
            if shape != kept:
                errors[row] = ShapeMismatchError(
                    f"slot {kernel.name!r} produced rows of different shapes: this one "
                    f"{shape}, {counts[kept]} of the batch's {len(rows)} rows {kept}; add a "
                    "fixed-size op (resize, a crop, fix_length) or batch_transforms.padding"
                ).with_row(index=job.positions[row], key=job.key_at(row), slot=kernel.name)


def _column(
    job: BatchJob, kernel: SlotKernel, rows: list[int] | None, unstacked: frozenset[str]
) -> Any:
    """One slot's column over ``rows`` (``None``: every row)."""
    name = kernel.name
    whole = job.columns.get(name)
    if whole is not None:
        if job.arrow:  # an Arrow column (numeric ones may be NumPy already)
            if rows is not None:
                # int64 indices: an empty list would be typed null (all rows failed)
                at = np.asarray(rows, np.int64)
                whole = whole[at] if isinstance(whole, np.ndarray) else whole.take(at)
            return arrow_column(whole)
        picked = whole if rows is None else [whole[row] for row in rows]
        return picked if name in unstacked else _numeric(picked)
    inactive = job.inactive.get(name, set())
    if name in job.buffers:
        buffer = job.buffers[name]
        keep = range(job.size) if rows is None else rows
        if inactive:
            return [None if row in inactive else buffer[row] for row in keep]
        column: Any = buffer if rows is None else buffer[rows]
    else:
        values = job.values[name]
        picked = values if rows is None else [values[row] for row in rows]
        if kernel.passthrough and name not in unstacked and not inactive:
            return _numeric(picked)
        if kernel.passthrough or kernel.objects or name in unstacked or inactive:
            return picked
        column = _stack(name, picked)
    for op in kernel.custom:
        column = _custom(op, name, column)
    return column


def _custom(op: Op, name: str, column: np.ndarray) -> Any:
    result = op(column)
    if len(result) != len(column):
        raise ShapeMismatchError(
            f"custom op {op.param('op')!r} (version {op.param('version')}) on slot {name!r} "
            f"returned {len(result)} rows for a batch of {len(column)}; it must keep the "
            "batch axis"
        )
    return result


def assemble(
    job: BatchJob, policy: FailurePolicy, unstacked: frozenset[str] = frozenset()
) -> Batch:
    """Apply the failure policy and build the batch; Python map errors re-raise as is.

    Slots in ``unstacked`` stay lists of rows (a later batch transform pads them). Rows
    of a stacked slot whose shape is not the batch's most common one are row errors
    (:func:`_mark_odd_shapes`), dropped under ``skip`` like any other bad row. Every
    bad row goes to the policy's rejects log, skipped or failed.
    """
    rejects = policy.rejects
    if job.fatal:
        fatal = sorted(job.fatal, key=lambda item: item[0])
        if rejects is not None:
            rejects.record(job, fatal, failed=True, stage="record map")
        raise fatal[0][1]
    kernels = job.kernels
    by_row = job.errors
    row_values = job.row_values
    if job.arrow and not job.readers and not by_row:
        # passthrough columns of Arrow rows: the common case, kept short
        columns = job.columns
        if not job.final:
            columns = {k.name: arrow_column(columns[k.name]) for k in kernels}
        return Batch.of_columns(columns, job.keys, job.positions, row_values, {})
    if job.values:
        _mark_odd_shapes(job, by_row, unstacked)
    if not by_row:
        return Batch(
            {k.name: _column(job, k, None, unstacked) for k in kernels},
            keys=job.keys,
            indices=job.positions,
            sizes=job.sizes,  # type: ignore[arg-type]
            row_values=row_values,
        )
    bad = sorted(by_row)
    errors = [by_row[row] for row in bad]
    policy.report(errors)
    keep = [row for row in range(job.size) if row not in by_row]
    if rejects is not None:
        failures = [(row, by_row[row]) for row in bad]
        failed = not policy.survives(len(keep))
        rejects.record(job, failures, failed=failed)
    policy.check(errors, len(keep), job.size)
    columns = {k.name: _column(job, k, keep, unstacked) for k in kernels}
    sizes = {name: [s[row] for row in keep] for name, s in job.sizes.items()}
    keys = None if job.keys is None else [job.key_at(row) for row in keep]
    return Batch(
        columns,
        keys=keys,
        indices=[job.positions[row] for row in keep],
        errors=errors,
        sizes=sizes,  # type: ignore[arg-type]
        row_values=row_values,
    )
