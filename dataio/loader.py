"""``Loader``: a running pipeline — iterable, context-managed, Arrow-exportable."""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from time import perf_counter_ns
from typing import Any

import numpy as np

from dataio import progress as progress_bars
from dataio.engine.assemble import FailurePolicy, assemble
from dataio.engine.batch_ops import apply_batch_ops, padded_slots
from dataio.engine.buffers import BufferPool
from dataio.engine.device_normalize import (
    DeviceConstants,
    DeviceNormalize,
    apply_on_device,
    on_device,
    split_normalize,
)
from dataio.engine.executor import Executor
from dataio.engine.export import check_device, to_arrow, to_torch
from dataio.engine.lineage import Lineage
from dataio.engine.lower import SlotKernel, lower
from dataio.engine.pool import cpu_workers
from dataio.engine.rejects import RejectLog
from dataio.engine.state import LoaderState, validate_state
from dataio.engine.stats import PassStats, StatsLog, bottleneck_line
from dataio.engine.stream import ShardSpec, plan_chunks
from dataio.exceptions import BatchFailedError, DataioError, PlanError
from dataio.pictures import pixel_formats
from dataio.plan.pipeline import BatchStage, Pipeline
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
    stats: Any,
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
    if stats is not None and not isinstance(stats, bool):
        raise PlanError(f"stats must be True, False or None, got {stats!r}")
    for name, value in (("seed", seed), ("epoch", epoch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PlanError(f"{name} must be a non-negative integer, got {value!r}")


def _lower(plan: Pipeline, backend: str, device: str | None) -> tuple[SlotKernel, ...]:
    """The slot kernels of ``backend``; DALI is imported only when asked for."""
    if backend == "native":
        return lower(plan)
    if backend == "dali":
        from dataio.engine.dali import lower_dali

        return lower_dali(plan, device=device)
    raise PlanError(f"backend must be 'native' or 'dali', got {backend!r}")


class Loader:
    """Iterates the batches of a bound pipeline; built by ``BoundPipeline.run()``.

    Passes behave like ``torch.utils.data.DataLoader``: every ``iter(loader)`` (every
    ``for`` loop, ``zip``, ``islice``) starts a pass over one epoch. A pass ends when it
    delivered its last batch, or when it is abandoned after a batch (``break``, then a
    new ``iter``); the next pass then runs the next epoch from its beginning.
    ``set_epoch(e)`` picks the next pass's epoch explicitly, as with
    ``DistributedSampler``. Only :meth:`load_state_dict` continues an epoch in the
    middle. Breaking out of a loop, an exception or garbage collection cancel the pass's
    queued work; :meth:`close` (or leaving the ``with`` block) ends the loader.
    ``next(loader)`` takes one batch of the current pass, starting one when none runs.

    What happened is kept for inspection: :meth:`rejects` (every row a pass skipped or
    failed on), :meth:`stats` and :meth:`bottleneck` (where each pass's time went) and
    :meth:`lineage` (which samples each batch held).
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
        shard: Mapping[str, Any] | str | None,
        max_prefetch_bytes: int | None,
        device: str | None,
        stats: bool | None = None,
        progress: bool | str | None = None,
        backend: str = "native",
    ) -> None:
        if device is not None and output == "torch":
            check_device(device)  # an absent device fails run() itself, before anything
        _check_options(output, concurrency, order, on_failure, log_errors, seed, epoch, stats)
        if device is not None and output != "torch":
            raise PlanError(f"device={device!r} needs run('torch'), not run({output!r})")
        self.plan = plan
        self.output = output
        self.device = device
        self.source: Source = records_source(records)
        self._progress = progress_bars.resolve(progress)  # type: ignore[arg-type]
        self.shard = ShardSpec.parse(shard)
        # the native kernels send a CUDA target uint8 image rows and normalize them there
        # (a quarter of the bytes over the bus); DALI normalizes in its own GPU pipeline
        self._device_steps: tuple[DeviceNormalize, ...] = ()
        host_plan = plan
        if backend == "native" and on_device(output, device):
            host_plan, self._device_steps = split_normalize(plan)
        self._device_constants = DeviceConstants()
        self._kernels = _lower(host_plan, backend, device)
        media = [
            (k.name, slot.ops[0].name)
            for k, slot in zip(self._kernels, plan.slots, strict=True)
            if not k.passthrough
        ]
        self._media_slots = tuple(name for name, _ in media)
        self._media_ops = tuple(op for _, op in media)
        if stats is None:  # off where a batch costs microseconds (passthrough columns only)
            stats = bool(plan.record_maps) or not all(k.passthrough for k in self._kernels)
        self._collect_stats = stats
        self._stats_log = StatsLog()
        self._rejects = RejectLog(dict(media))
        self._policy = FailurePolicy(on_failure, log_errors, self._rejects)
        self._lineage = Lineage()
        self._last_stats: PassStats | None = None  # the newest pass's clocks
        self._pixels = pixel_formats(plan)  # batches carry it for dataio.show
        self._unstacked = padded_slots(plan.batch_ops)
        self._plain = output == "numpy" and not plan.batch_ops and not plan.batch_maps
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
        self._submit_order = order == "submit"
        self._seed = seed
        self._epoch = epoch
        self._consumed = 0
        # True while the next pass starts at (epoch, consumed) as they stand: after
        # construction, a finished pass, set_epoch or load_state_dict. A pass that
        # delivered a batch and did not finish makes the next one move to the next
        # epoch; one that delivered nothing (Lightning's iter() probe) changes nothing.
        self._fresh = True
        # the running pass, held weakly: dropping the iterator (``break``) cancels it
        self._pass_ref: Callable[[], _Pass | None] = lambda: None
        self._stepping: _Pass | None = None  # the pass next(loader) walks
        self._pool = BufferPool(keep=2 * prefetch + 4)
        self._arrow_peek: Any = None
        self._closed = False
        #: narrows each pass's chunks (dataio.torch gives each worker its own batches)
        self.select_chunks: Callable[[Iterator[Any]], Iterator[Any]] | None = None

    @property
    def _executor(self) -> Executor | None:
        current = self._pass_ref()
        return None if current is None else current.executor

    # -- passes ----------------------------------------------------------------------

    def _begin_pass(self) -> _Pass:
        if self._closed:
            raise DataioError("the loader is closed; call run() again for a new loader")
        self._abandon()
        self._close_books()
        if not self._fresh:
            self._epoch += 1
            self._consumed = 0
            self._fresh = True
        stats = None
        if self._collect_stats:
            stats = self._stats_log.begin(
                self._epoch, self._media_slots, self._media_ops, cpu_workers()
            )
        self._last_stats = stats
        self._rejects.begin(self._epoch)
        self._lineage.begin()
        source = _projected(self.source.at_epoch(self._epoch), self._kernels, self.plan)
        chunks = plan_chunks(source, self.plan.shape, self.shard, self._consumed)
        if self.select_chunks is not None:
            chunks = self.select_chunks(chunks)
        executor = Executor(
            chunks,
            self._kernels,
            self.plan.record_maps,
            prefetch=self._prefetch,
            concurrency=self._concurrency,
            ordered=self._order == "submit",
            seed=self._seed,
            epoch=self._epoch,
            pool=self._pool,
            stats=stats,
        )
        shape = self.plan.shape
        first = self._consumed // shape.size if isinstance(shape, BatchStage) else 0
        current = _Pass(self, executor, self._epoch, stats, first)
        if self._progress:  # a bar per pass; nothing per batch when progress is off
            current.bar = progress_bars.pass_bar(True, total=_batches(self), epoch=self._epoch)
        self._pass_ref = weakref.ref(current)
        return current

    def _abandon(self, current: _Pass | None = None) -> None:
        """Cancel the running pass (only ``current`` when given)."""
        running = self._pass_ref()
        if running is None or (current is not None and running is not current):
            return
        self._pass_ref = lambda: None
        running.executor.close()
        if running.bar is not None:
            running.bar.close()
        self._close_books()

    def _close_books(self, *, finished: bool = False) -> None:
        """End the newest pass's clock and log its rejects summary (once per pass)."""
        stats = self._last_stats
        if stats is not None:
            stats.end()
            if stats.batches == 0:  # an iter() probe: nothing to report
                self._stats_log.forget(stats)
            self._last_stats = None
        self._rejects.end(finished=finished)

    def _finish(self, current: _Pass) -> None:
        """The pass delivered its last batch: the loader stands at the next epoch."""
        if self._pass_ref() is current:
            self._pass_ref = lambda: None
            current.executor.close()
            if current.bar is not None:
                current.bar.close()
            self._close_books(finished=True)
            self._epoch = current.epoch + 1
            self._consumed = 0
            self._fresh = True

    def _next_of(self, current: _Pass) -> Any:
        if self._closed:
            raise DataioError("the loader is closed; call run() again for a new loader")
        if self._pass_ref() is not current:
            raise StopIteration  # finished, or superseded by a newer pass
        stats = current.stats
        if stats is not None:
            entered = perf_counter_ns()
            if stats.last_return_ns is not None:  # the caller's own code since then
                stats.consumer_ns += entered - stats.last_return_ns
                stats.last_return_ns = None
        try:
            job = current.next_job()
            fetched = 0
            if stats is not None:
                fetched = perf_counter_ns()
                if current.executor.inline:  # the executor times its waits and reads otherwise
                    stats.source_ns += fetched - entered
            if job is None:
                self._finish(current)
                raise StopIteration
            self._fresh = False  # this pass delivered a batch: it now owns the epoch
            if self._submit_order:  # jobs in order: the last one delivered ends at its end
                if job.end > self._consumed:
                    self._consumed = job.end
            else:  # jobs arrive out of order: count what was delivered
                self._consumed += job.size
            last = current.executor.drained
            # the item, built here: a passthrough batch costs a few microseconds, and a
            # call more is a few percent of it
            number = current.batches
            current.batches = number + 1
            rejects = self._rejects
            rejects.batch = number  # the bad rows of this batch are recorded under it
            rejects.rows += job.size
            rejects.batches += 1
            try:
                if stats is not None:
                    stats.batches += 1
                    stats.rows += job.size
                    item = self._build_timed(job, current.epoch, number, stats, fetched)
                else:
                    item = assemble(job, self._policy, self._unstacked)
                    item.pixels = self._pixels
                    if not self._plain:  # numpy output, no batch transforms or maps: as built
                        item = self._export(item, current.epoch)
            except BatchFailedError:
                # a failed batch is consumed like any other: the pass goes on (or, when
                # it was the last one, ends)
                if last:
                    self._finish(current)
                raise
            if current.bar is not None:
                current.bar.batch(job.size, len(job.errors))
        except (StopIteration, BatchFailedError):
            raise
        except BaseException:
            self._abandon(current)
            raise
        if last:
            self._finish(current)
        if stats is not None:
            stats.last_return_ns = perf_counter_ns()
        return item

    def __next__(self) -> Any:
        # next(loader) walks one pass and raises StopIteration once at its end, like
        # next() on an iterator; the call after that starts the next pass
        current = self._stepping
        if current is None:
            current = self._stepping = self._pass_ref() or self._begin_pass()
        try:
            return self._next_of(current)
        except StopIteration:
            self._stepping = None
            raise

    def __iter__(self) -> Iterator[Any]:
        return self._begin_pass()

    def __len__(self) -> int:
        """Batches in a full pass for this rank, when the source length is known."""
        total = self.source.length()
        shape = self.plan.shape
        if total is None or not isinstance(shape, BatchStage):
            raise TypeError("this loader's batch count is not known before reading its records")
        rounds, rest = divmod(total, self.shard.of)
        mine = rounds + (1 if rest and self.shard.pad else 0)
        return mine // shape.size if shape.drop_last else math.ceil(mine / shape.size)

    def _export(self, batch: Any, epoch: int) -> Any:
        """The item of an assembled batch: batch transforms, output, batch maps."""
        if self.plan.batch_ops:
            batch = apply_batch_ops(batch, self.plan.batch_ops, self._seed, epoch)
        item: Any = batch
        if self.output == "torch":
            item = to_torch(batch, self.device)
            if self._device_steps:
                item = apply_on_device(item, self._device_steps, self._device_constants)
        elif self.output == "arrow":
            item = to_arrow(batch)
        for batch_map in self.plan.batch_maps:
            item = batch_map.fn(item)
        return item

    def _build_timed(
        self, job: Any, epoch: int, number: int, stats: PassStats, fetched: int
    ) -> Any:
        """The item built by :meth:`_next_of` with stats on, timing each step and recording the
        batch's lineage; ``fetched``: when the job was taken."""
        try:
            batch = assemble(job, self._policy, self._unstacked)
        finally:
            built = perf_counter_ns()
            stats.assemble_ns += built - fetched
        batch.pixels = self._pixels
        if self.plan.batch_ops:
            batch = apply_batch_ops(batch, self.plan.batch_ops, self._seed, epoch)
            stats.batch_ops_ns += perf_counter_ns() - built
        # after batch transforms: a batch shuffle reorders the rows the lineage lists
        self._lineage.record(epoch, number, batch._indices, batch._keys)
        if self._plain:
            return batch
        item: Any = batch
        start = perf_counter_ns()
        if self.output == "torch":
            item = to_torch(batch, self.device)
            if self._device_steps:
                item = apply_on_device(item, self._device_steps, self._device_constants)
        elif self.output == "arrow":
            item = to_arrow(batch)
        exported = perf_counter_ns()
        stats.export_ns += exported - start
        if self.plan.batch_maps:
            for batch_map in self.plan.batch_maps:
                item = batch_map.fn(item)
            stats.batch_ops_ns += perf_counter_ns() - exported
        return item

    # -- what happened ------------------------------------------------------------------

    def rejects(self) -> Any:
        """Every row a pass skipped or failed on, as a ``pyarrow.Table``.

        One row per rejected record: ``epoch``, ``batch`` (its number in the epoch, as
        in :meth:`lineage`), ``position`` (in the unsharded stream), ``key``, ``slot``,
        ``stage`` (``read``, ``decode``, ``field``, ``assemble`` or ``record map``),
        ``op`` (the slot's decoder for ``decode``), ``error_type``, ``message``,
        ``source`` (the path or URI the value came from, when the field holds one) and
        ``outcome`` (``skipped``: dropped from a delivered batch; ``failed``: its batch
        raised). The newest ``limits.max_rejects`` entries are kept; the schema metadata
        ``dropped`` counts older ones. Query it with ``dataio.sql``.

        Example:
            >>> dataio.sql(  # doctest: +SKIP
            ...     "SELECT error_type, count(*) AS n FROM rejects GROUP BY error_type",
            ...     rejects=loader.rejects(),
            ... ).collect()
        """
        return self._rejects.table()

    def stats(self) -> Any:
        """Per-stage timings of each pass (the newest 1024), as a ``pyarrow.Table``.

        One row per pass and stage: ``pass``, ``epoch``, ``stage`` (``source``,
        ``read``, ``decode`` per media slot, ``transform``, ``assemble``, ``export``,
        ``consumer wait``, ``consumer``), ``slot``, ``op``, ``thread`` (``workers`` or
        ``consumer``), ``seconds``, ``share`` (of worker time for worker stages, of the
        pass's wall time for consumer-thread stages), and per pass ``wall_seconds``,
        ``worker_seconds``, ``workers``, ``batches`` and ``rows``. The schema metadata
        ``summary`` is :meth:`bottleneck`. Empty when stats are off (``run(...,
        stats=False)``, the default for plans of passthrough slots only).

        Example:
            >>> loader.stats().to_pandas()  # doctest: +SKIP
        """
        return self._stats_log.table()

    def bottleneck(self) -> str:
        """One line naming what bound the newest pass, e.g. ``"decode-bound: 81% of
        worker time in decode_image (workers busy 97%); the consumer waited 0.2 s of
        3.4 s"``.

        Example:
            >>> print(loader.bottleneck())  # doctest: +SKIP
        """
        passes = self._stats_log.passes
        if not passes:
            if not self._collect_stats:
                return (
                    "no stats: the loader runs with stats=False (the default for plans of "
                    "passthrough slots only); run(..., stats=True) collects them"
                )
            return "no pass ran yet"
        return bottleneck_line(passes[-1])

    def lineage(self) -> Any:
        """Which samples each batch held, as a ``pyarrow.Table``, for the newest
        ``limits.max_lineage_batches`` batches (metadata ``dropped`` counts older ones).

        One row per sample: ``epoch``, ``batch`` (its number in the epoch as the
        caller received them: the step index of a training loop, counting from the
        checkpoint's batch on resume), ``row`` (in the batch, after batch transforms
        such as a shuffle), ``position`` (in the unsharded stream) and ``key``. Rows
        dropped under ``on_failure="skip"`` are absent. Empty when stats are off.

        Example:
            >>> table = loader.lineage()  # doctest: +SKIP
            >>> table.filter(pc.field("batch") == 1234)  # doctest: +SKIP
        """
        return self._lineage.table()

    # -- epochs and checkpoints --------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The epoch the next (or current) pass runs as."""
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Run the next pass as ``epoch``, from its beginning.

        Setting the epoch the loader already stands at, before its pass started, keeps
        the position: a checkpoint restored by :meth:`load_state_dict` still resumes.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise PlanError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch == self._epoch and self._fresh:
            return
        self._abandon()
        self._stepping = None
        self._epoch = epoch
        self._consumed = 0
        self._fresh = True

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

        The next pass (only that one) continues the checkpoint's epoch: it re-enumerates
        the source and skips what was consumed; a batch that was only partly consumed is
        replayed from its first sample.

        Raises:
            CheckpointError: the checkpoint is malformed or belongs to another pipeline,
                source or shard layout, or is a mid-epoch completion-order checkpoint.
        """
        restored = validate_state(state, self._state(), source_configured=self.source.configured)
        self._abandon()
        self._stepping = None
        self._consumed = restored.samples_consumed
        self._epoch = restored.epoch
        self._seed = restored.seed
        self._fresh = True

    # -- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """End the loader: cancel queued records, wait for running ones, release buffers."""
        if not self._closed:
            self._closed = True
            self._abandon()
            self._close_books()
            self._pool.release()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran (or the ``with`` block ended)."""
        return self._closed

    def __repr__(self) -> str:
        running = "closed" if self._closed else "running" if self._pass_ref() else "ready"
        return (
            f"Loader({self.plan.summary()}; source={self.source!r}; output={self.output!r}, "
            f"epoch={self._epoch}, position={self._consumed}, state={running!r})"
        )

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        current = getattr(self, "_pass_ref", lambda: None)()
        if current is not None:
            current.executor.close(wait=False)

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
    """The iterator of one pass, what ``iter(loader)`` returns.

    Not a generator: one survives a ``BatchFailedError``, so ``next()`` after catching
    it yields the next batch. The loader holds it weakly, so dropping it (a ``break``
    out of a ``for`` loop) cancels its pass's queued work at once.
    """

    bar: progress_bars.PassBar | None = None

    def __init__(
        self, loader: Loader, executor: Executor, epoch: int, stats: PassStats | None, first: int
    ) -> None:
        self.loader = loader
        self.executor = executor
        #: the executor's next_job, called per batch
        self.next_job = executor.next_job_fn
        self.epoch = epoch
        self.stats = stats
        #: the number (in the epoch) of the next batch delivered
        self.batches = first
        self._thread = threading.get_ident()

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        return self.loader._next_of(self)

    def close(self) -> None:
        """Abandon this pass: cancel its queued work (the next pass runs the next epoch)."""
        self.loader._abandon(self)

    def __del__(self) -> None:
        stats = getattr(self, "stats", None)
        if stats is not None:
            stats.end()
        executor = getattr(self, "executor", None)
        if executor is not None:  # a dropped iterator cancels its pass's queued work
            # wait for running tasks only on the consumer's thread: a garbage collection
            # that runs on a pool thread must not wait for that thread's own task
            executor.close(wait=threading.get_ident() == self._thread)


def _batches(loader: Loader) -> int | None:
    """A fresh pass's batch count for its bar, when known without reading."""
    if loader._consumed or loader.select_chunks is not None:
        return None
    try:
        return len(loader)
    except TypeError:
        return None


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


def _projected(source: Source, kernels: Sequence[Any], plan: Pipeline) -> Source:
    """A frame or a shuffle narrowed to the columns the plan reads: its slots' fields and
    the row key.

    Only a frame (its scans read only what it selects) or a shuffle of an Arrow table or
    a frame (its gathers copy only those columns), and only when no Python code sees
    whole records (record maps, ``active_when``) and every required field is there
    (otherwise the row errors list the record's fields). The pass reads the narrowed
    source; signatures and checkpoints stay those of the bound source.
    """
    from dataio.frame import LazyFrame
    from dataio.sources.permutation import PermutedIndexed

    if not isinstance(source, LazyFrame | PermutedIndexed) or plan.record_maps:
        return source
    if any(k.active is not None for k in kernels):
        return source
    schema = source.arrow_schema()
    if schema is None:
        return source
    names = schema.names
    fields = {k.field for k in kernels}
    if any(k.field not in names and not k.optional for k in kernels):
        return source
    keep = [name for name in names if name in fields or name in ("key", "__key__")]
    if len(keep) == len(names) or len(set(names)) != len(names):
        return source
    if isinstance(source, PermutedIndexed):
        return source.narrowed(keep)
    return source.select(*keep)


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
