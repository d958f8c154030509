"""The executor: ordered, bounded, cancellable batch production on the shared CPU pool.

Each batch is a :class:`BatchJob` with preallocated output buffers. Its records run as
separate pool tasks (a record map, then every slot kernel writing into its row), so
a batch spreads over all workers. At most ``prefetch`` jobs exist at once and at most
``concurrency`` records are running or queued on the pool; nothing runs further ahead.
Jobs are delivered in submit order (or as they complete); values never depend on
timing because every random op draws from a generator seeded by
``(seed, epoch, record index, slot number)``.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dataio.engine.buffers import BufferPool
from dataio.engine.lower import SlotKernel
from dataio.engine.pool import cpu_pool
from dataio.engine.stream import Chunk
from dataio.exceptions import DataioError, DecodeError, FieldError
from dataio.io import read_bytes
from dataio.plan.pipeline import Map

__all__ = ["BatchJob", "Executor", "record_rng"]


def record_rng(seed: int, epoch: int, index: int, slot_number: int) -> np.random.Generator:
    """The generator a random op uses for one record of one slot."""
    return np.random.default_rng([seed, epoch, index, slot_number])


def record_key(record: Any) -> Any:
    """A record's user-facing key: its ``key`` or ``__key__`` field, else ``None``."""
    if isinstance(record, Mapping):
        return record.get("key", record.get("__key__"))
    return None


@dataclass
class BatchJob:
    """One batch in flight: its records, preallocated buffers and per-row outcomes.

    ``positions`` are the records' places in the unsharded stream (they seed random
    ops); ``end`` is the rank-local sample count once this batch is delivered.
    """

    positions: list[int]
    records: list[Any]
    kernels: tuple[SlotKernel, ...]
    end: int = 0
    buffers: dict[str, np.ndarray] = field(default_factory=dict)
    values: dict[str, list[Any]] = field(default_factory=dict)
    sizes: dict[str, list[tuple[int, ...] | None]] = field(default_factory=dict)
    keys: list[Any] = field(default_factory=list)
    errors: list[DataioError | None] = field(default_factory=list)
    fatal: list[tuple[int, BaseException]] = field(default_factory=list)
    inactive: dict[str, set[int]] = field(default_factory=dict)
    remaining: int = 0
    done: bool = False
    pool: BufferPool | None = None

    def __post_init__(self) -> None:
        n = len(self.records)
        self.remaining = n
        self.keys = [None] * n
        self.errors = [None] * n
        for kernel in self.kernels:
            shape = kernel.row_shape
            if shape is not None:
                rows = (n, *shape)
                self.buffers[kernel.name] = (
                    self.pool.empty(rows, kernel.dtype)
                    if self.pool is not None
                    else np.empty(rows, kernel.dtype)
                )
            else:
                self.values[kernel.name] = [None] * n
            if not kernel.passthrough:
                self.sizes[kernel.name] = [None] * n

    def nbytes(self) -> int:
        """Bytes held by the preallocated buffers."""
        return sum(b.nbytes for b in self.buffers.values())


def _field_bytes(value: Any, kernel: SlotKernel) -> bytes | bytearray | memoryview:
    if isinstance(value, bytes | bytearray | memoryview):
        return value
    if isinstance(value, str | os.PathLike):
        return read_bytes(value)
    raise FieldError(
        f"field {kernel.field!r} holds {type(value).__name__}; an image slot needs bytes or a path"
    )


class Executor:
    """Produces finished :class:`BatchJob` objects from the chunks of one pass.

    Not thread-safe for consumers: one thread calls :meth:`next_job`. Pool threads
    only run record tasks.
    """

    def __init__(
        self,
        chunks: Iterator[Chunk],
        kernels: tuple[SlotKernel, ...],
        record_maps: tuple[Map, ...],
        *,
        prefetch: int,
        concurrency: int,
        ordered: bool,
        seed: int,
        epoch: int,
        pool: BufferPool | None = None,
    ) -> None:
        self._chunks = chunks
        self._pool = pool
        self._kernels = kernels
        self._maps = tuple(m.fn for m in record_maps)
        self._prefetch = prefetch
        self._limit = concurrency
        self._ordered = ordered
        self._seed, self._epoch = seed, epoch
        self._exhausted = False
        self._closed = False
        self._jobs: deque[BatchJob] = deque()
        # Passthrough-only plans have no kernel worth a task per record: one task per
        # batch avoids ~10 us of scheduling per record.
        self._whole_jobs = all(kernel.passthrough for kernel in kernels)
        # ...and without record maps there is nothing worth a thread handoff: the consumer
        # builds such batches itself (about 10x the records/s of a pool round trip).
        self._inline = self._whole_jobs and not self._maps
        self._queue: deque[tuple[BatchJob, range]] = deque()
        self._running: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)

    # -- consumer side -------------------------------------------------------------

    def next_job(self) -> BatchJob | None:
        """Return the next finished job, or ``None`` when the source is exhausted."""
        if self._closed:
            raise DataioError("the loader is closed; start a new run() to iterate again")
        self._fill()
        with self._cond:
            while self._jobs:
                job = self._ready_job()
                if job is not None:
                    self._jobs.remove(job)
                    break
                self._cond.wait()
            else:
                return None
        self._fill()
        return job

    def _ready_job(self) -> BatchJob | None:
        if self._ordered:
            return self._jobs[0] if self._jobs[0].done else None
        return next((job for job in self._jobs if job.done), None)

    def _fill(self) -> None:
        while not self._exhausted and len(self._jobs) < self._prefetch:
            chunk = next(self._chunks, None)
            if chunk is None:
                self._exhausted = True
                break
            job = BatchJob(
                chunk.positions, chunk.records, self._kernels, chunk.end, pool=self._pool
            )
            if self._inline:
                self._run_rows(job, range(len(chunk.records)))
                self._jobs.append(job)
                continue
            with self._lock:
                self._jobs.append(job)
                rows = range(len(chunk.records))
                if self._whole_jobs:
                    self._queue.append((job, rows))
                else:
                    self._queue.extend((job, rows[row : row + 1]) for row in rows)
            self._admit()

    @property
    def drained(self) -> bool:
        """True once the last job was taken: the chunks ran out and nothing is pending."""
        return self._exhausted and not self._jobs

    def close(self, *, wait: bool = True) -> None:
        """Cancel queued work, wait for running tasks (unless ``wait=False``), drop buffers."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            running = list(self._running)
            self._jobs.clear()
        for future in running:
            future.cancel()
        if wait:
            concurrent.futures.wait(running)

    @property
    def running_tasks(self) -> int:
        """Record tasks submitted to the pool and not yet finished."""
        with self._lock:
            return len(self._running)

    # -- pool side -----------------------------------------------------------------

    def _admit(self) -> None:
        with self._lock:
            while self._queue and len(self._running) < self._limit and not self._closed:
                job, rows = self._queue.popleft()
                future = cpu_pool().submit(self._run_rows, job, rows)
                self._running.add(future)
                future.add_done_callback(self._finished)

    def _finished(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._running.discard(future)
        self._admit()

    def _run_rows(self, job: BatchJob, rows: range) -> None:
        try:
            if not (self._whole_jobs and self._columns_at_once(job)):
                for row in rows:
                    self._process(job, row)
        finally:
            with self._cond:
                job.remaining -= len(rows)
                if job.remaining == 0:
                    job.done = True
                    self._cond.notify_all()

    def _columns_at_once(self, job: BatchJob) -> bool:
        """Passthrough-only batches of plain dicts: one list per column, no per-row calls.

        Returns False (having changed nothing) when a record needs the per-row path:
        record maps, a non-dict record or a missing field, so errors stay per row.
        """
        records = job.records
        if self._maps or not all(type(record) is dict for record in records):
            return False
        try:
            columns = {k.name: [record[k.field] for record in records] for k in self._kernels}
        except KeyError:
            return False
        job.values.update(columns)
        job.keys = [record_key(record) for record in records]
        return True

    def _process(self, job: BatchJob, row: int) -> None:
        index = job.positions[row]
        record = job.records[row]
        try:
            for fn in self._maps:
                record = fn(record)
        except BaseException as exc:
            job.fatal.append((row, exc))
            return
        key = record_key(record)
        job.keys[row] = key
        if not isinstance(record, Mapping):
            job.errors[row] = FieldError(
                f"a record must be a mapping of fields, got {type(record).__name__}"
            ).with_row(index=index, key=None, slot=None)
            return
        for number, kernel in enumerate(self._kernels):
            try:
                self._run_slot(job, row, index, number, kernel, record)
            except DataioError as exc:
                job.errors[row] = exc.with_row(index=index, key=key, slot=kernel.name)
                return
            except Exception as exc:  # a kernel library failed in a way it does not document
                error = DecodeError(f"{type(exc).__name__}: {exc}")
                error.__cause__ = exc
                job.errors[row] = error.with_row(index=index, key=key, slot=kernel.name)
                return

    def _run_slot(
        self,
        job: BatchJob,
        row: int,
        index: int,
        number: int,
        kernel: SlotKernel,
        record: Mapping[str, Any],
    ) -> None:
        if kernel.optional and (
            (kernel.active is not None and not kernel.active.evaluate(record))
            or record.get(kernel.field) is None
        ):
            job.inactive.setdefault(kernel.name, set()).add(row)  # no read, no decode
            if kernel.name in job.values:
                job.values[kernel.name][row] = None
            return
        if kernel.field not in record:
            raise FieldError(
                f"field {kernel.field!r} is not in the record; available fields: {sorted(record)}"
            )
        value = record[kernel.field]
        if kernel.run is None:
            job.values[kernel.name][row] = value
            return
        rng = record_rng(self._seed, self._epoch, index, number) if kernel.random else None
        buffer = job.buffers.get(kernel.name)
        out, source_size = kernel.run(
            _field_bytes(value, kernel), rng, None if buffer is None else buffer[row]
        )
        if buffer is None:
            job.values[kernel.name][row] = out
        job.sizes[kernel.name][row] = source_size
