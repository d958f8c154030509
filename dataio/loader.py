"""``Loader``: a running pipeline — iterable, context-managed, Arrow-exportable."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from dataio.engine.assemble import FailurePolicy, assemble
from dataio.engine.executor import Executor
from dataio.engine.export import to_arrow, to_torch
from dataio.engine.lower import lower
from dataio.exceptions import DataioError, PlanError
from dataio.pipeline import Pipeline

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

    Use it as a context manager or iterate it to the end; leaving the ``with`` block,
    breaking out of the ``for`` loop, an exception or garbage collection all cancel
    queued work and release the batch buffers. A loader makes one pass over its records.
    ``next(loader)`` takes one batch without ending the pass.
    """

    def __init__(
        self,
        plan: Pipeline,
        records: Iterable[Any],
        *,
        output: str,
        concurrency: int | str,
        order: str,
        on_failure: str | int,
        log_errors: bool | Callable[[Exception], Any],
        seed: int,
        epoch: int,
        max_prefetch_bytes: int | None,
        device: str | None,
    ) -> None:
        _check_options(output, concurrency, order, on_failure, log_errors, seed, epoch)
        if device is not None and output != "torch":
            raise PlanError(f"device={device!r} needs run('torch'), not run({output!r})")
        self.plan = plan
        self.output = output
        self.device = device
        self._records = records
        self._policy = FailurePolicy(on_failure, log_errors)
        kernels = lower(plan)
        shape = plan.shape
        prefetch = shape.prefetch
        if max_prefetch_bytes is not None:
            prefetch = min(prefetch, _prefetch_for_bytes(kernels, shape.size, max_prefetch_bytes))
        window = shape.size * prefetch if concurrency == "auto" else int(concurrency)
        self._executor = Executor(
            iter(records),
            kernels,
            plan.record_maps,
            batch_size=shape.size,
            drop_last=shape.drop_last,
            prefetch=prefetch,
            concurrency=window,
            ordered=order == "submit",
            seed=seed,
            epoch=epoch,
        )
        self._closed = False

    def __len__(self) -> int:
        if not isinstance(self._records, Sequence):
            raise TypeError("this loader's record source has no known length")
        size, n = self.plan.shape.size, len(self._records)
        return n // size if self.plan.shape.drop_last else math.ceil(n / size)

    def __next__(self) -> Any:
        try:
            job = self._executor.next_job()
        except BaseException:
            self.close()
            raise
        if job is None:
            self.close()
            raise StopIteration
        try:
            return self._deliver(job)
        except BaseException:
            self.close()
            raise

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            return
        try:
            while True:
                try:
                    item = next(self)
                except StopIteration:
                    return
                yield item
        finally:
            self.close()

    def _deliver(self, job: Any) -> Any:
        batch = assemble(job, self._policy)
        item: Any = batch
        if self.output == "torch":
            item = to_torch(batch, self.device)
        elif self.output == "arrow":
            item = to_arrow(batch)
        for batch_map in self.plan.batch_maps:
            item = batch_map.fn(item)
        return item

    def close(self) -> None:
        """Stop: cancel queued records, wait for running ones, release buffers."""
        if not self._closed:
            self._closed = True
            self._executor.close()

    @property
    def closed(self) -> bool:
        """True once the loader has finished, failed or been closed."""
        return self._closed

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._executor.close(wait=False)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """Export the remaining batches as an Arrow C stream (consumes the loader)."""
        import pyarrow as pa

        batches = (item if isinstance(item, pa.RecordBatch) else _as_arrow(item) for item in self)
        first = next(batches, None)
        if first is None:
            raise DataioError("the loader produced no batches to export")

        def chained() -> Iterator[Any]:
            yield first
            yield from batches

        reader = pa.RecordBatchReader.from_batches(first.schema, chained())
        return reader.__arrow_c_stream__(requested_schema)


def _as_arrow(item: Any) -> Any:
    from dataio.batch import Batch

    if isinstance(item, Batch):
        return to_arrow(item)
    raise DataioError(
        f"a batch map returned {type(item).__name__}; Arrow export needs Batch or "
        "pyarrow.RecordBatch items"
    )


def _prefetch_for_bytes(kernels: Sequence[Any], batch_size: int, limit: int) -> int:
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
        per_batch += batch_size * math.prod(shape) * kernel.dtype.itemsize
    if per_batch > limit:
        raise PlanError(
            f"one batch needs {per_batch} bytes, more than max_prefetch_bytes={limit}; "
            "raise the limit or lower the batch size"
        )
    return max(1, limit // per_batch) if per_batch else 1 << 30
