"""``Loader``: a running pipeline — iterable, context-managed, Arrow-exportable."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from dataio.engine.assemble import FailurePolicy, assemble
from dataio.engine.batch_ops import apply_batch_ops, padded_slots
from dataio.engine.buffers import batch_buffers
from dataio.engine.executor import Executor
from dataio.engine.export import to_arrow, to_torch
from dataio.engine.lower import lower
from dataio.engine.state import LoaderState, validate_state
from dataio.engine.stream import ShardSpec, plan_chunks
from dataio.exceptions import BatchFailedError, DataioError, PlanError
from dataio.pipeline import BatchStage, Pipeline
from dataio.sources import Source
from dataio.sources import records as records_source

__all__ = ["Loader"]

OUTPUTS = ("numpy", "torch", "arrow")


def _check_options(
    output: str,
    concurrency: Any,
    order: str,
    on_failure: Any,
    log_errors: Any,
    seed: Any,
    epoch: Any,
) -> None:
    if output not in OUTPUTS:
        raise PlanError(f"run() output must be one of {list(OUTPUTS)}, got {output!r}")
    if concurrency != "auto" and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency <= 0
    ):
        raise PlanError(f"concurrency must be 'auto' or a positive integer, got {concurrency!r}")
    if order not in ("submit", "completion"):
        raise PlanError(f"order must be 'submit' or 'completion', got {order!r}")
    if on_failure not in ("strict", "skip") and (
        isinstance(on_failure, bool) or not isinstance(on_failure, int) or on_failure < 0
    ):
        raise PlanError(
            f"on_failure must be 'strict', 'skip' or a survivor count >= 0, got {on_failure!r}"
        )
    if not (isinstance(log_errors, bool) or callable(log_errors)):
        raise PlanError(f"log_errors must be True, False or a callable, got {log_errors!r}")
    for name, value in (("seed", seed), ("epoch", epoch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PlanError(f"{name} must be a non-negative integer, got {value!r}")


class Loader:
    """Iterates the batches of a bound pipeline; built by ``BoundPipeline.run()``.

    Each ``for`` loop over the loader is a pass over its records that starts where the
    loader stands: at the beginning of the epoch, after the batches already delivered,
    or at a restored checkpoint. A completed pass moves to the next epoch. Breaking out
    of the loop, an exception or garbage collection cancel the pass's queued work and
    release its buffers; :meth:`close` (or leaving the ``with`` block) ends the loader.
    ``next(loader)`` takes one batch of the current pass.
    """

    def __init__(
        self,
        plan: Pipeline,
        records: Any,
        *,
        output: str,
        concurrency: int | str,
        order: str,
        on_failure: str | int,
        log_errors: bool | Callable[[Exception], Any],
        seed: int,
        epoch: int,
        shard: Mapping[str, Any] | None,
        max_prefetch_bytes: int | None,
        device: str | None,
    ) -> None:
        _check_options(output, concurrency, order, on_failure, log_errors, seed, epoch)
        if device is not None and output != "torch":
            raise PlanError(f"device={device!r} needs run('torch'), not run({output!r})")
        self.plan = plan
        self.output = output
        self.device = device
        self.source: Source = records_source(records)
        self.shard = ShardSpec.parse(shard)
        self._policy = FailurePolicy(on_failure, log_errors)
        self._kernels = lower(plan)
        self._unstacked = padded_slots(plan.batch_ops)
        shape = plan.shape
        prefetch = shape.prefetch
        if max_prefetch_bytes is not None:
            size = shape.size if isinstance(shape, BatchStage) else None
            prefetch = min(prefetch, _prefetch_for_bytes(self._kernels, size, max_prefetch_bytes))
        self._prefetch = prefetch
        if concurrency == "auto":
            per_batch = shape.size if isinstance(shape, BatchStage) else 64
            concurrency = per_batch * prefetch
        self._concurrency = int(concurrency)
        self._order = order
        self._seed = seed
        self._epoch = epoch
        self._consumed = 0
        self._executor: Executor | None = None
        self._arrow_peek: Any = None
        self._closed = False
        #: narrows each pass's chunks (dataio.torch gives each worker its own batches)
        self.select_chunks: Callable[[Iterator[Any]], Iterator[Any]] | None = None

    # -- passes ----------------------------------------------------------------------

    def _start_pass(self) -> Executor:
        if self._closed:
            raise DataioError("the loader is closed; call run() again for a new loader")
        if self._executor is None:
            chunks = plan_chunks(self.source, self.plan.shape, self.shard, self._consumed)
            if self.select_chunks is not None:
                chunks = self.select_chunks(chunks)
            self._executor = Executor(
                chunks,
                self._kernels,
                self.plan.record_maps,
                prefetch=self._prefetch,
                concurrency=self._concurrency,
                ordered=self._order == "submit",
                seed=self._seed,
                epoch=self._epoch,
            )
        return self._executor

    def _end_pass(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.close()

    def __next__(self) -> Any:
        executor = self._start_pass()
        try:
            job = executor.next_job()
            if job is None:
                self._end_pass()
                self._epoch += 1
                self._consumed = 0
                raise StopIteration
            self._consumed = max(self._consumed, job.end)
            return self._deliver(job)
        except (StopIteration, BatchFailedError):
            raise  # a failed batch is consumed like any other: the pass goes on
        except BaseException:
            self._end_pass()
            raise

    def __iter__(self) -> Iterator[Any]:
        return _Pass(self)

    def __len__(self) -> int:
        """Batches in a full pass for this rank, when the source length is known."""
        total = self.source.length()
        shape = self.plan.shape
        if total is None or not isinstance(shape, BatchStage):
            raise TypeError("this loader's batch count is not known before reading its records")
        rounds, rest = divmod(total, self.shard.of)
        mine = rounds + (1 if rest and self.shard.pad else 0)
        return mine // shape.size if shape.drop_last else math.ceil(mine / shape.size)

    def _deliver(self, job: Any) -> Any:
        batch = assemble(job, self._policy, self._unstacked)
        if self.plan.batch_ops:
            batch = apply_batch_ops(batch, self.plan.batch_ops, self._seed, self._epoch)
        item: Any = batch
        if self.output == "torch":
            item = to_torch(batch, self.device)
        elif self.output == "arrow":
            item = to_arrow(batch)
        for batch_map in self.plan.batch_maps:
            item = batch_map.fn(item)
        return item

    # -- epochs and checkpoints --------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass runs as."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Run the next pass as ``epoch``; a different epoch starts from its beginning."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise PlanError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch != self._epoch:
            self._end_pass()
            self._epoch = epoch
            self._consumed = 0

    def _state(self) -> LoaderState:
        return LoaderState(
            self._consumed,
            self._epoch,
            self._seed,
            self._order,
            self.plan.signature(),
            self.source.signature(),
            self.shard.as_dict(),
        )

    def state_dict(self) -> dict[str, Any]:
        """The loader's position: schema 3 with samples consumed, epoch, seed, order,
        plan and record-source signatures, and the shard.

        Example:
            >>> state = loader.state_dict()  # doctest: +SKIP
            >>> loader.load_state_dict(state)  # doctest: +SKIP
        """
        return self._state().as_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a position from :meth:`state_dict`, validating it first.

        The next pass re-enumerates the source and skips what was consumed; a batch that
        was only partly consumed is replayed from its first sample.

        Raises:
            CheckpointError: the checkpoint is malformed or belongs to another pipeline,
                source or shard layout, or is a mid-epoch completion-order checkpoint.
        """
        restored = validate_state(state, self._state(), source_configured=self.source.configured)
        self._end_pass()
        self._consumed = restored.samples_consumed
        self._epoch = restored.epoch
        self._seed = restored.seed

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """End the loader: cancel queued records, wait for running ones, release buffers."""
        if not self._closed:
            self._closed = True
            self._end_pass()
            batch_buffers.release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or the ``with`` block ended)."""
        return self._closed

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        executor = getattr(self, "_executor", None)
        if executor is not None:
            executor.close(wait=False)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """Export the rest of the current pass as an Arrow C stream.

        The first batch is read to learn the schema and kept until a stream yields it,
        so a consumer that asks twice (once for the schema, once for the data, as
        duckdb does) loses nothing.
        """
        import pyarrow as pa

        first = self._arrow_peek
        if first is None:
            try:
                first = _as_arrow(next(self))
            except StopIteration:
                raise DataioError("the loader produced no batches to export") from None
        self._arrow_peek = first

        def batches() -> Iterator[Any]:
            self._arrow_peek = None
            yield first
            while True:
                try:
                    item = next(self)
                except StopIteration:
                    return
                yield _as_arrow(item)

        reader = pa.RecordBatchReader.from_batches(first.schema, batches())
        return reader.__arrow_c_stream__(requested_schema)


class _Pass:
    """The iterator of one pass. Not a generator: one survives a ``BatchFailedError``,
    so ``next()`` after catching it yields the next batch. Dropping it (a ``break``
    out of a ``for`` loop) ends the pass it started, as a generator's ``finally`` would.
    """

    def __init__(self, loader: Loader) -> None:
        self._loader: Loader | None = loader
        self._executor: Executor | None = loader._start_pass()

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        if self._loader is None:
            raise StopIteration
        try:
            item = next(self._loader)
        except BatchFailedError:
            raise
        except BaseException:
            self.close()
            raise
        self._executor = self._loader._executor
        return item

    def close(self) -> None:
        """End the pass this iterator started (not a later one)."""
        loader, self._loader = self._loader, None
        if loader is not None and loader._executor is self._executor:
            loader._end_pass()

    def __del__(self) -> None:
        self.close()


def _as_arrow(item: Any) -> Any:
    import pyarrow as pa

    from dataio.batch import Batch

    if isinstance(item, pa.RecordBatch):
        return item
    if isinstance(item, Batch):
        return to_arrow(item)
    raise DataioError(
        f"a batch map returned {type(item).__name__}; Arrow export needs Batch or "
        "pyarrow.RecordBatch items"
    )


def _prefetch_for_bytes(kernels: Sequence[Any], batch_size: int | None, limit: int) -> int:
    if batch_size is None:
        raise PlanError("max_prefetch_bytes needs dataio.batch(n): other shape stages vary in size")
    per_batch = 0
    for kernel in kernels:
        if kernel.passthrough:
            continue
        shape = kernel.row_shape
        if shape is None:
            raise PlanError(
                f"max_prefetch_bytes needs fixed-size outputs; slot {kernel.name!r} has a "
                "variable shape (end its chain with resize or a crop)"
            )
        per_batch += batch_size * math.prod(shape) * np.dtype(kernel.dtype).itemsize
    if per_batch > limit:
        raise PlanError(
            f"one batch needs {per_batch} bytes, more than max_prefetch_bytes={limit}; "
            "raise the limit or lower the batch size"
        )
    return max(1, limit // per_batch) if per_batch else 1 << 30
