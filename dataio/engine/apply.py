"""A pipeline's slots over one Arrow table whose rows carry explicit stream positions.

This is the batch entry point other engines (Ray Data's ``map_batches``) call: the rows
of a table are one job of the executor, numbered by the caller's ``positions`` instead of
the table's row offsets, so every random op draws from the generator a local loader gives
the same record (``record_rng(seed, epoch, position, slot)``). Rows that fail follow
``on_failure`` as in a loader's batch; the dropped ones are returned as a rejects table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dataio.engine.assemble import FailurePolicy, assemble
from dataio.engine.executor import Executor
from dataio.engine.export import to_arrow
from dataio.engine.lower import SlotKernel, lower
from dataio.engine.stream import Chunk
from dataio.exceptions import DataioError, PlanError
from dataio.plan.pipeline import Pipeline

__all__ = ["ERROR_COLUMN", "REJECT_COLUMNS", "ArrowResult", "apply_arrow"]

#: the rejects table's columns (a subset of ``loader.rejects()``'s, same names)
REJECT_COLUMNS = ("epoch", "position", "key", "slot", "error_type", "message")


@dataclass(frozen=True)
class ArrowResult:
    """What :meth:`~dataio.Pipeline.apply_arrow` returns.

    Attributes:
        table: the surviving rows in input order: one column per slot (tensor slots as
            ``fixed_shape_tensor``), ``__index__`` (each row's position) and ``__key__``
            when the rows have keys; the columns ``run("arrow")`` batches have.
        rejects: one row per dropped record: ``epoch``, ``position``, ``key``, ``slot``,
            ``error_type`` and ``message`` (empty when nothing failed).
    """

    table: Any
    rejects: Any

    def __repr__(self) -> str:
        return f"ArrowResult(rows={self.table.num_rows}, rejects={self.rejects.num_rows})"


def apply_arrow(
    plan: Pipeline,
    table: Any,
    *,
    positions: Any,
    seed: int,
    epoch: int,
    on_failure: str | int,
    log_errors: bool | Callable[[Exception], Any],
    errors: str = "table",
) -> ArrowResult:
    """Run ``plan``'s record maps and slots over ``table`` (see ``Pipeline.apply_arrow``)."""
    batch = _one_batch(table)
    at = _positions(positions, batch)
    result = _apply(plan, batch, at, seed, epoch, on_failure, log_errors)
    if errors == "column":
        return ArrowResult(_with_errors(result, batch, at), result.rejects)
    return result


def _apply(
    plan: Pipeline,
    batch: Any,
    at: np.ndarray,
    seed: int,
    epoch: int,
    on_failure: str | int,
    log_errors: bool | Callable[[Exception], Any],
) -> ArrowResult:
    import pyarrow as pa

    if plan.batch_ops or plan.batch_maps:
        raise PlanError(
            "apply_arrow runs record maps and slots only; batch transforms and batch maps "
            "depend on a loader's batch boundaries: apply them to the batches you train on"
        )
    kernels = lower(plan)
    if batch.num_rows == 0:  # no row task would ever finish the job
        return ArrowResult(_empty(kernels, batch), _rejects([], epoch))
    chunk = Chunk(0, at.tolist(), batch=batch)
    executor = Executor(
        iter([chunk]),
        kernels,
        plan.record_maps,
        prefetch=1,
        concurrency=max(1, batch.num_rows),
        ordered=True,
        seed=seed,
        epoch=epoch,
    )
    try:
        job = executor.next_job()
    finally:
        executor.close()
    assert job is not None  # one chunk in, one job out
    # a loader's "skip" wants a survivor per batch; a table is any slice of the stream,
    # where every row failing is no failure of the whole
    policy = FailurePolicy(0 if on_failure == "skip" else on_failure, log_errors)
    if len(job.errors) < job.size and not job.fatal:
        result = assemble(job, policy)
        return ArrowResult(
            pa.Table.from_batches([to_arrow(result)]), _rejects(result.errors, epoch)
        )
    # no row survives (or none came): Arrow has no tensor array from an empty ndarray
    errors = [job.errors[row] for row in sorted(job.errors)]
    if job.fatal:
        raise min(job.fatal, key=lambda item: item[0])[1]
    if errors:
        policy.report(errors)
        policy.check(errors, 0, job.size)
    return ArrowResult(_empty(kernels, batch), _rejects(errors, epoch))


def _empty(kernels: tuple[SlotKernel, ...], batch: Any) -> Any:
    """The result table with no rows: tensor slots typed from their kernels, passthrough
    slots as their input columns."""
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for kernel in kernels:
        index = batch.schema.get_field_index(kernel.field)
        if kernel.passthrough:
            columns[kernel.name] = batch.column(index).slice(0, 0) if index >= 0 else pa.nulls(0)
        elif kernel.row_shape is not None and kernel.row_shape:
            value = pa.from_numpy_dtype(np.dtype(kernel.dtype))
            shape = list(kernel.row_shape)
            # the permutation from_numpy_ndarray gives, so the schemas of all tables agree
            kind = pa.fixed_shape_tensor(value, shape, permutation=list(range(len(shape))))
            columns[kernel.name] = pa.ExtensionArray.from_storage(
                kind, pa.array([], kind.storage_type)
            )
        elif kernel.row_shape == ():
            columns[kernel.name] = pa.array([], pa.from_numpy_dtype(np.dtype(kernel.dtype)))
        else:  # a variable shape: no type to give it without rows
            columns[kernel.name] = pa.nulls(0)
    columns["__index__"] = pa.array([], pa.int64())
    for name in _KEYS:
        index = batch.schema.get_field_index(name)
        if index >= 0:
            columns["__key__"] = batch.column(index).slice(0, 0)
            break
    return pa.table(columns)


_KEYS = ("key", "__key__")

#: the error column of ``errors="column"`` results
ERROR_COLUMN = "__error__"


def _with_errors(result: ArrowResult, batch: Any, at: np.ndarray) -> Any:
    """Every input row in order: failed rows' slot values null and ``__error__`` set
    (``"ErrorType: message"``; null for rows that succeeded)."""
    import pyarrow as pa

    good, rejects = result.table, result.rejects
    kinds, texts = rejects["error_type"].to_pylist(), rejects["message"].to_pylist()
    messages = {
        position: f"{kind}: {text}"
        for position, kind, text in zip(rejects["position"].to_pylist(), kinds, texts, strict=True)
    }
    row_of = {position: row for row, position in enumerate(good["__index__"].to_pylist())}
    positions = at.tolist()
    take = pa.array([row_of.get(p) for p in positions], pa.int64())
    columns = {name: good[name].combine_chunks().take(take) for name in good.column_names}
    columns["__index__"] = pa.array(at)
    key = next((k for k in _KEYS if k in batch.schema.names), None)
    if key is not None:  # failed rows keep their keys
        columns["__key__"] = batch.column(batch.schema.get_field_index(key))
    columns[ERROR_COLUMN] = pa.array([messages.get(p) for p in positions], pa.string())
    return pa.table(columns)


def _one_batch(table: Any) -> Any:
    """``table`` (a Table, RecordBatch or anything with ``__arrow_c_stream__``) as one
    record batch with plain (non-view) types."""
    import pyarrow as pa

    from dataio.engine.plain import plain_batch, plain_schema

    if isinstance(table, pa.RecordBatch):
        batch = table
    else:
        if not isinstance(table, pa.Table):
            try:
                if not hasattr(table, "__arrow_c_stream__"):
                    raise TypeError(type(table).__name__)
                table = pa.table(table)
            except (TypeError, ValueError) as exc:  # ArrowInvalid is a ValueError
                raise PlanError(
                    f"apply_arrow takes a pyarrow Table or RecordBatch, got {type(table).__name__}"
                ) from exc
        batch = table.combine_chunks().to_batches()
        batch = batch[0] if batch else pa.RecordBatch.from_pylist([], schema=table.schema)
    return plain_batch(batch, plain_schema(batch.schema))


def _positions(positions: Any, batch: Any) -> np.ndarray:
    """Each row's stream position: a column name of ``batch`` or one integer per row."""
    import pyarrow as pa

    where = "apply_arrow positions"
    if isinstance(positions, str):
        index = batch.schema.get_field_index(positions)
        if index < 0:
            raise PlanError(
                f"{where}: the table has no column {positions!r}; columns: {batch.schema.names}"
            )
        positions = batch.column(index)
    if isinstance(positions, pa.ChunkedArray):
        positions = positions.combine_chunks()
    if isinstance(positions, pa.Array):
        if positions.null_count:
            raise PlanError(f"{where}: {positions.null_count} positions are null")
        if not pa.types.is_integer(positions.type):
            raise PlanError(f"{where} must be integers, got {positions.type}")
        positions = positions.to_numpy(zero_copy_only=False)
    try:
        at = np.asarray(positions)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{where} must be integers, one per row, got {positions!r}") from exc
    if at.ndim != 1 or (at.size and at.dtype.kind not in "iu"):
        raise PlanError(f"{where} must be integers, one per row, got {positions!r}")
    if len(at) != batch.num_rows:
        raise PlanError(f"{where}: {len(at)} positions for {batch.num_rows} rows")
    at = at.astype(np.int64)
    if (at < 0).any():
        raise PlanError(f"{where} must be >= 0, got {int(at[at < 0][0])}")
    unique, counts = np.unique(at, return_counts=True)
    if len(unique) != len(at):  # rows (and their rejects) are told apart by position
        raise PlanError(
            f"{where} must be unique within a table: {int(unique[counts > 1][0])} appears "
            f"{int(counts.max())} times; give each record its stream position"
        )
    return at


def _rejects(errors: list[DataioError], epoch: int) -> Any:
    import pyarrow as pa

    rows = [
        (
            epoch,
            error.index,
            None if error.key is None else str(error.key),
            error.slot,
            type(error).__name__,
            _message(error),
        )
        for error in errors
    ]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(REJECT_COLUMNS)
    types = [pa.int64(), pa.int64(), pa.string(), pa.string(), pa.string(), pa.string()]
    schema = pa.schema(list(zip(REJECT_COLUMNS, types, strict=True)))
    arrays = [pa.array(list(c), type=t) for c, t in zip(columns, types, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _message(error: DataioError) -> str:
    """The error's message without the record prefix ``DataioError`` adds."""
    message, where = str(error), error.where()
    if where and message.startswith(f"{where}: "):
        message = message[len(where) + 2 :]
    return message or type(error).__name__
