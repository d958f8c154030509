"""The executor: ordered, bounded, cancellable batch production on the shared CPU pool.

Each batch is a :class:`BatchJob` with preallocated output buffers. Its rows run as
separate pool tasks (a record map, then every slot kernel writing into its row), so
a batch spreads over all workers. At most ``prefetch`` jobs exist at once and at most
``concurrency`` records are running or queued on the pool; nothing runs further ahead.
Jobs are delivered in submit order (or as they complete); values never depend on
timing because every random op draws from a generator seeded by
``(seed, epoch, record index, slot number)``.

A job's rows are an Arrow record batch or a list of Python records (see
:class:`~dataio.engine.stream.Chunk`). Over Arrow rows, passthrough slots take whole
columns and media slots read each value zero-copy from the column's buffers
(:mod:`dataio.engine.columns`); no Python row is built. A chunk whose rows must be
Python records (record maps, ``active_when`` conditions, a required field the schema
lacks) is converted for that chunk only: its records become the job's object side
column, and everything then runs exactly as for Python sources.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from time import perf_counter_ns
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio.engine.buffers import BufferPool
from dataio.engine.columns import arrow_column, value_reader
from dataio.engine.lower import SlotKernel
from dataio.engine.pool import cpu_pool, cpu_workers
from dataio.engine.stats import MAPS, READ, SLOTS, TASKS, PassStats
from dataio.engine.stream import Chunk
from dataio.exceptions import DataioError, DecodeError, FieldError
from dataio.io import read_bytes
from dataio.plan.pipeline import Map

if TYPE_CHECKING:
    import pyarrow as pa

_fast: Any
try:  # the C helper for dict records (optional build); Python does the same without it
    from dataio.engine import _columns as _fast
except ImportError:  # pragma: no cover - built with the package
    _fast = None

__all__ = ["BatchJob", "Executor", "record_rng"]

#: per schema: (slot, column index) of passthrough and media slots, the key column index
#: and the passthrough slot reading it ("" if none)
ArrowLayout = tuple[list[tuple[str, int]], list[tuple[str, int]], int, str]

#: per parent batch: its passthrough slots' (slot, whole column, is NumPy), the key
#: column (``None`` if none, or a passthrough slot's), the passthrough slot holding the
#: keys ("" if none), and whether every slice is final (see :class:`BatchJob`)
ColumnCuts = tuple[list[tuple[str, Any, bool]], Any, str, bool]

#: Media rows of an Arrow batch run on the pool up to this many per task. A task per row
#: costs the consumer and the pool ~20-50 us (future, locks, done callback, GIL handoffs):
#: for 2,000 photos that is ~5% of the decode work, which a frame otherwise spends reading
#: its row groups (issue #14's frame >= 0.95x files target). Rows are still processed, and
#: their errors recorded, one by one.
ARROW_ROWS_PER_TASK = 8


#: the per-row containers of a job that has none (read-only: a write would be a bug)
_NONE: Any = MappingProxyType({})
#: the fatal errors of a job that has none (read-only)
_NO_FATAL: Any = ()


def record_rng(seed: int, epoch: int, index: int, slot_number: int) -> np.random.Generator:
    """The generator a random op uses for one record of one slot."""
    return np.random.default_rng([seed, epoch, index, slot_number])


def record_key(record: Any) -> Any:
    """A record's user-facing key: its ``key`` or ``__key__`` field, else ``None``."""
    if isinstance(record, Mapping):
        return record.get("key", record.get("__key__"))
    return None


class BatchJob:
    """One batch in flight: its rows, preallocated buffers and per-row outcomes.

    ``positions`` are the rows' places in the unsharded stream (they seed random ops);
    ``end`` is the rank-local sample count once this batch is delivered. The rows are
    ``records`` (Python) or ``batch`` (Arrow). ``columns`` holds slots taken whole
    (Arrow arrays or lists); ``values`` per-row values of the other unbuffered slots;
    ``errors`` maps a row to its error, and ``stages`` (``None`` until a row fails
    outside its kernel) the stage it failed in, for the rejects table.
    """

    __slots__ = (
        "arrow",
        "batch",
        "buffers",
        "columns",
        "done",
        "end",
        "errors",
        "fatal",
        "final",
        "inactive",
        "kernels",
        "keys",
        "pending",
        "positions",
        "readers",
        "records",
        "remaining",
        "row_values",
        "size",
        "sizes",
        "stages",
        "values",
    )

    def __init__(
        self,
        positions: Sequence[int],
        records: list[Any] | None,
        kernels: tuple[SlotKernel, ...],
        end: int = 0,
        *,
        batch: pa.RecordBatch | None = None,
        pool: BufferPool | None = None,
        arrow: bool | None = None,
    ) -> None:
        n = len(positions)
        self.positions = positions
        self.records = records
        self.batch = batch
        #: the rows are Arrow rows (``batch``, or columns taken from a parent batch)
        self.arrow = batch is not None if arrow is None else arrow
        self.kernels = kernels
        self.end = end
        self.size = n
        self.remaining = n
        self.done = False
        self.buffers: dict[str, np.ndarray] = {}
        self.values: dict[str, list[Any]] = {}
        self.columns: dict[str, Any] = {}
        self.readers: dict[str, Callable[[int], Any]] = {}
        self.sizes: dict[str, list[tuple[int, ...] | None]] = {}
        #: per batch-step slot (``SlotKernel.finish``): each row's prepared input
        self.pending: dict[str, list[Any]] = {}
        #: a list of row keys, or a callable / Arrow array giving them (read lazily)
        self.keys: Any = None
        self.errors: dict[int, DataioError] = {}
        self.stages: dict[int, str] | None = None
        self.fatal: list[tuple[int, BaseException]] = []
        self.inactive: dict[str, set[int]] = {}
        #: slots holding one Python value per record (passthrough and object slots)
        self.row_values: frozenset[str] = frozenset()
        #: ``columns`` are the batch's columns as they are (no output rule left to apply)
        self.final = False

    def allocate(self, pool: BufferPool | None) -> None:
        """Make the output buffers (and per-row lists) of the slots run row by row."""
        n = self.size
        whole = self.arrow  # Arrow rows: passthrough columns are taken whole
        for kernel in self.kernels:
            if kernel.passthrough:
                if not whole:
                    self.values[kernel.name] = [None] * n
                continue
            shape = kernel.row_shape
            if shape is not None:
                rows = (n, *shape)
                self.buffers[kernel.name] = (
                    pool.empty(rows, kernel.dtype)
                    if pool is not None
                    else np.empty(rows, kernel.dtype)
                )
            else:
                self.values[kernel.name] = [None] * n
            self.sizes[kernel.name] = [None] * n
            if kernel.finish is not None:
                self.pending[kernel.name] = [None] * n

    def key_at(self, row: int) -> Any:
        """The key of one row (for error messages)."""
        keys = self.keys
        if keys is None:
            return None
        if isinstance(keys, list):
            return keys[row]
        if callable(keys):
            return keys()[row]
        if isinstance(keys, np.ndarray):
            return keys[row].item()
        scalar = keys[row]
        return scalar.as_py() if scalar.is_valid else None

    def nbytes(self) -> int:
        """Bytes held by the preallocated buffers."""
        return sum(b.nbytes for b in self.buffers.values())


class _ColumnsJob(BatchJob):
    """A finished job of Arrow passthrough columns (built by ``Executor._columns_job``).

    Its per-row parts are class constants, not per-job values: such a job is built for
    every batch of a passthrough pass (a few microseconds each), and setting twenty
    attributes was a tenth of that. Writing one of them raises ``AttributeError``.
    """

    __slots__ = ()

    records = batch = stages = None
    arrow = done = True
    remaining = 0
    buffers = values = readers = sizes = errors = inactive = pending = _NONE
    fatal = _NO_FATAL


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
        stats: PassStats | None = None,
    ) -> None:
        self._chunks = chunks
        #: the pass's clocks, or ``None`` when the loader collects no stats
        self._stats = stats
        # the clock slot of each kernel (media slots only; -1: passthrough), and whether
        # kernels are timed one by one (several media slots; one slot's is the rest)
        self._clock_slots = _clock_slots(kernels)
        self._per_slot = sum(1 for k in kernels if not k.passthrough) > 1
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
        self._next_chunk: Chunk | None = None  # inline mode reads one chunk ahead
        self._deferred: Exception | None = None  # ...and raises its error one call later
        # Arrow rows stay columns unless a record map or an active_when condition needs
        # Python records
        self._python_only = bool(self._maps) or any(k.active is not None for k in kernels)
        self._fields = tuple(k.field for k in kernels)
        self._names = tuple(k.name for k in kernels)
        self._row_values = frozenset(k.name for k in kernels if k.passthrough or k.objects)
        self._schema: pa.Schema | None = None  # the schema self._layout was made for
        self._layout: ArrowLayout | None = None
        self._parent: pa.RecordBatch | None = None  # the source batch chunks are slices of
        self._cuts: ColumnCuts | None = None  # ...and how its passthrough columns slice
        self._queue: deque[tuple[BatchJob, range]] = deque()
        self._running: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)

    # -- consumer side -------------------------------------------------------------

    def next_job(self) -> BatchJob | None:
        """Return the next finished job, or ``None`` when the source is exhausted."""
        return self._next_inline() if self._inline else self._next_pooled()

    @property
    def next_job_fn(self) -> Callable[[], BatchJob | None]:
        """:meth:`next_job` without its dispatch, for a consumer calling it per batch."""
        return self._next_inline if self._inline else self._next_pooled

    def _next_pooled(self) -> BatchJob | None:
        if self._closed:
            raise DataioError("the loader is closed; start a new run() to iterate again")
        self._fill()
        stats = self._stats
        with self._cond:
            while self._jobs and not self._closed:
                job = self._ready_job()
                if job is not None:
                    self._jobs.remove(job)
                    break
                if stats is None:
                    self._cond.wait()
                else:
                    start = perf_counter_ns()
                    self._cond.wait()
                    stats.wait_ns += perf_counter_ns() - start
            else:
                if self._closed:  # by another thread while this one waited
                    raise DataioError("the loader was closed while waiting for a batch")
                return None
        self._fill()
        return job

    def _next_inline(self) -> BatchJob | None:
        """Build the next batch on the caller's thread; one chunk is read ahead.

        A source error met while reading ahead is raised by the next call, after the
        batch already built was delivered.
        """
        if self._closed:
            raise DataioError("the loader is closed; start a new run() to iterate again")
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        chunk = self._next_chunk
        if chunk is None and not self._exhausted:
            chunk = next(self._chunks, None)
        if chunk is None:
            self._exhausted = True
            return None
        parent = chunk.parent
        job = None if parent is None else self._columns_job(chunk, parent)
        if job is not None:  # passthrough columns sliced from a parent batch: done
            pass
        elif (job := self._job(chunk)).arrow:  # passthrough columns: taken whole already
            job.remaining, job.done = 0, True
        elif self._stats is None:
            self._run_rows(job, range(job.size))
        else:
            # the loader counts this whole call as source; gathering the columns of
            # Python records is batch assembly
            start = perf_counter_ns()
            self._run_rows(job, range(job.size))
            gathered = perf_counter_ns() - start
            self._stats.assemble_ns += gathered
            self._stats.source_ns -= gathered
        try:
            self._next_chunk = next(self._chunks, None)
        except Exception as exc:
            self._next_chunk, self._deferred = None, exc
            return job
        if self._next_chunk is None:
            self._exhausted = True
        return job

    def _ready_job(self) -> BatchJob | None:
        if self._ordered:
            return self._jobs[0] if self._jobs[0].done else None
        return next((job for job in self._jobs if job.done), None)

    def _job(self, chunk: Chunk) -> BatchJob:
        if chunk.parent is not None and self._whole_jobs:
            job = self._columns_job(chunk, chunk.parent)
            if job is not None:
                return job
        job = BatchJob(chunk.positions, chunk.records, self._kernels, chunk.end, batch=chunk.batch)
        job.row_values = self._row_values
        if job.batch is not None and not self._arrow_rows(job, job.batch):
            # the object side column: this chunk's rows as Python records
            job.records, job.batch, job.arrow = job.batch.to_pylist(), None, False
        if not self._whole_jobs or not job.arrow:
            job.allocate(self._pool)
        return job

    def _layout_of(self, schema: pa.Schema) -> ArrowLayout | None:
        if schema is not self._schema and not (
            self._schema is not None and schema.equals(self._schema)
        ):
            self._layout = self._arrow_layout(schema)
        self._schema = schema
        return self._layout

    def _arrow_rows(self, job: BatchJob, batch: pa.RecordBatch) -> bool:
        """Take passthrough columns whole and prepare media readers; False when the
        chunk needs Python records instead (nothing changed then)."""
        layout = self._layout_of(batch.schema)
        if layout is None:
            return False
        passthrough, media, key, key_slot = layout
        n = batch.num_rows
        columns = job.columns
        for name, index in passthrough:
            columns[name] = batch.column(index) if index >= 0 else _nulls(n)
        for name, index in media:
            job.readers[name] = value_reader(batch.column(index)) if index >= 0 else _absent
        if key >= 0:
            job.keys = columns[key_slot] if key_slot else batch.column(key)
        return True

    def _columns_job(self, chunk: Chunk, parent: pa.RecordBatch) -> BatchJob | None:
        """A passthrough job over a slice of ``parent``, its columns sliced from columns
        taken from ``parent`` once; ``None`` when the rows must be Python records."""
        if parent is not self._parent:
            self._parent, self._cuts = parent, self._cuts_of(parent)
        cuts = self._cuts
        if cuts is None:
            return None
        slicers, key, key_slot, final = cuts
        at = chunk.offset
        positions = chunk.positions
        n = len(positions)
        stop = at + n
        columns = {}
        # a NumPy column slices as a view; an Arrow column by offset and length
        for name, whole, numpy in slicers:
            columns[name] = whole[at:stop] if numpy else whole.slice(at, n)
        if key_slot:
            keys = columns[key_slot]
        elif key is None:
            keys = None
        else:
            keys = key[at:stop] if isinstance(key, np.ndarray) else key.slice(at, n)
        job = _ColumnsJob.__new__(_ColumnsJob)  # (no __init__: its per-row parts are fixed)
        job.positions, job.kernels, job.end, job.size = positions, self._kernels, chunk.start + n, n
        job.columns, job.keys, job.final, job.row_values = columns, keys, final, self._row_values
        return job

    def _cuts_of(self, parent: pa.RecordBatch) -> ColumnCuts | None:
        """The passthrough columns of ``parent`` as :meth:`_columns_job` slices them, its
        key column, and whether every slice is the batch's column as is (see
        :func:`arrow_column`); ``None`` when the rows must be Python records."""
        layout = self._layout_of(parent.schema)
        if layout is None:
            return None
        passthrough, _, key, key_slot = layout
        slicers: list[tuple[str, Any, bool]] = []
        final = True
        for name, index in passthrough:
            # numeric columns become NumPy once per parent, as arrow_column gives them
            whole = arrow_column(parent.column(index)) if index >= 0 else _nulls(parent.num_rows)
            final = final and _stays_arrow(whole)
            slicers.append((name, whole, isinstance(whole, np.ndarray)))
        keys = None
        if key >= 0 and not key_slot:
            keys = arrow_column(parent.column(key))
        return slicers, keys, key_slot, final

    def _arrow_layout(self, schema: pa.Schema) -> ArrowLayout | None:
        """Where each slot's column is in ``schema``; ``None`` when rows must be Python:
        record maps, ``active_when`` conditions, or a required field that is absent (the
        Python path then names the field in each row's error)."""
        if self._python_only:
            return None
        passthrough: list[tuple[str, int]] = []
        media: list[tuple[str, int]] = []
        for kernel in self._kernels:
            index = schema.get_field_index(kernel.field)
            if index < 0 and not kernel.optional:
                return None
            (passthrough if kernel.passthrough else media).append((kernel.name, index))
        key = schema.get_field_index("key")
        if key < 0:
            key = schema.get_field_index("__key__")
        # a passthrough slot of the key column: the keys are its column
        key_slot = next((name for name, index in passthrough if index == key >= 0), "")
        return passthrough, media, key, key_slot

    def _fill(self) -> None:
        stats = self._stats
        while not self._exhausted and len(self._jobs) < self._prefetch:
            start = 0 if stats is None else perf_counter_ns()
            chunk = next(self._chunks, None)
            if chunk is None:
                self._exhausted = True
                break
            job = self._job(chunk)
            if stats is not None:
                stats.source_ns += perf_counter_ns() - start
            with self._lock:
                self._jobs.append(job)
                rows = range(job.size)
                if self._whole_jobs:
                    self._queue.append((job, rows))
                else:
                    step = _rows_per_task(job.size, self._limit) if job.arrow else 1
                    self._queue.extend((job, rows[row : row + step]) for row in rows[::step])
            self._admit()

    @property
    def inline(self) -> bool:
        """Whether :meth:`next_job` builds each batch on the caller's thread (plans of
        passthrough slots only, without record maps): the whole call reads the source."""
        return self._inline

    @property
    def drained(self) -> bool:
        """True once the last job was taken: the chunks ran out and nothing is pending."""
        return self._exhausted and not self._jobs and self._next_chunk is None

    def close(self, *, wait: bool = True) -> None:
        """Cancel queued work, wait for running tasks (unless ``wait=False``), drop buffers."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            running = list(self._running)
            self._jobs.clear()
            self._next_chunk = None
        for future in running:
            future.cancel()
        with self._cond:  # a consumer waiting in next_job (another thread) ends now
            self._cond.notify_all()
        if wait:
            concurrent.futures.wait(running)
            _close_chunks(self._chunks)

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
        stats = self._stats
        clock = None if stats is None or self._inline else stats.clock()
        start = 0 if clock is None else perf_counter_ns()
        try:
            if job.arrow:
                if job.readers:
                    for row in rows:
                        self._process_arrow(job, row, clock)
            elif not (self._whole_jobs and self._columns_at_once(job)):
                for row in rows:
                    self._process(job, row, clock)
        finally:
            if self._inline:
                job.remaining = 0
                job.done = True
            else:
                if clock is not None:
                    clock[TASKS] += perf_counter_ns() - start
                with self._cond:
                    job.remaining -= len(rows)
                    last = job.remaining == 0
                    if last and not job.pending:
                        job.done = True
                        self._cond.notify_all()
                if last and job.pending:  # the batch steps run once every row is prepared
                    try:
                        _finish(job)
                    finally:
                        with self._cond:
                            job.done = True
                            self._cond.notify_all()

    def _columns_at_once(self, job: BatchJob) -> bool:
        """Passthrough-only batches of plain dicts: one list per column, no per-row calls.

        Returns False (having changed nothing) when a record needs the per-row path:
        record maps, a record that is not a dict, a missing field or an optional field
        holding ``None``, so errors and inactive rows stay per row.
        """
        records = job.records
        assert records is not None
        if self._maps:
            return False
        if _fast is not None and type(records) is list:
            found = _fast.columns(records, self._fields)
            if found is None:
                return False
            columns = dict(zip(self._names, found, strict=True))
        else:
            # only plain dicts: other mappings may compute a field (and fail) on access
            if set(map(type, records)) != {dict}:
                return False
            try:
                columns = {k.name: [record[k.field] for record in records] for k in self._kernels}
            except KeyError:
                return False
        for kernel in self._kernels:
            if kernel.optional and None in columns[kernel.name]:
                return False  # None rows are inactive rows: the per-row path marks them
        job.columns.update(columns)
        job.keys = self._record_keys(records)
        return True

    def _record_keys(self, records: list[Any]) -> Any:
        """The rows' keys, read when asked; with stats on (lineage keeps keys, and must
        not keep the records a function over them would) taken at once in C when every
        record has a ``key`` (or every one a ``__key__``) field."""
        if self._stats is not None and _fast is not None:
            for name in ("key", "__key__"):
                found = _fast.columns(records, (name,))
                if found is not None:
                    return found[0]
        return lambda: [record_key(record) for record in records]

    def _process(self, job: BatchJob, row: int, clock: list[int] | None = None) -> None:
        index = job.positions[row]
        assert job.records is not None
        record = job.records[row]
        if self._maps:
            start = 0 if clock is None else perf_counter_ns()
            try:
                for fn in self._maps:
                    record = fn(record)
            except BaseException as exc:
                job.fatal.append((row, exc))
                return
            finally:
                if clock is not None:
                    clock[MAPS] += perf_counter_ns() - start
        key = record_key(record)
        if job.keys is None:
            job.keys = [None] * job.size
        job.keys[row] = key
        if not isinstance(record, Mapping):
            job.errors[row] = FieldError(
                f"a record must be a mapping of fields, got {type(record).__name__}"
            ).with_row(index=index, key=None, slot=None)
            return
        for number, kernel in enumerate(self._kernels):
            try:
                self._run_slot(job, row, index, number, kernel, record, clock)
            except DataioError as exc:
                job.errors[row] = exc.with_row(index=index, key=key, slot=kernel.name)
                return
            except Exception as exc:  # a kernel library failed in a way it does not document
                job.errors[row] = _undocumented(exc).with_row(
                    index=index, key=key, slot=kernel.name
                )
                return

    def _run_slot(
        self,
        job: BatchJob,
        row: int,
        index: int,
        number: int,
        kernel: SlotKernel,
        record: Mapping[str, Any],
        clock: list[int] | None,
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
        self._decode(job, row, index, number, kernel, value, clock)

    def _decode(
        self,
        job: BatchJob,
        row: int,
        index: int,
        number: int,
        kernel: SlotKernel,
        value: Any,
        clock: list[int] | None,
    ) -> None:
        assert kernel.run is not None
        rng = record_rng(self._seed, self._epoch, index, number) if kernel.random else None
        buffer = job.buffers.get(kernel.name)
        if kernel.finish is not None:  # prepare the row; the batch step computes it
            buffer = None
        # a value in memory needs no read: no clock read for it
        start = 0 if clock is None or isinstance(value, _IN_MEMORY) else perf_counter_ns()
        try:
            data = _field_bytes(value, kernel)
        except BaseException:
            _failed_in(job, row, "read")
            raise
        if start and clock is not None:
            clock[READ] += perf_counter_ns() - start
        if clock is None or not self._per_slot:
            out, source_size = kernel.run(data, rng, None if buffer is None else buffer[row])
        else:
            begin = perf_counter_ns()
            try:
                out, source_size = kernel.run(data, rng, None if buffer is None else buffer[row])
            finally:
                clock[self._clock_slots[number]] += perf_counter_ns() - begin
        if kernel.finish is not None:
            job.pending[kernel.name][row] = out
        elif buffer is None:
            job.values[kernel.name][row] = out
        job.sizes[kernel.name][row] = source_size

    def _process_arrow(self, job: BatchJob, row: int, clock: list[int] | None = None) -> None:
        """Run the media slots of one Arrow row; passthrough columns were taken whole."""
        index = job.positions[row]
        for number, kernel in enumerate(self._kernels):
            if kernel.passthrough:
                continue
            try:
                value = job.readers[kernel.name](row)
                if value is None and kernel.optional:
                    job.inactive.setdefault(kernel.name, set()).add(row)
                    if kernel.name in job.values:
                        job.values[kernel.name][row] = None
                    continue
                self._decode(job, row, index, number, kernel, value, clock)
            except DataioError as exc:
                job.errors[row] = exc.with_row(index=index, key=job.key_at(row), slot=kernel.name)
                return
            except Exception as exc:  # a kernel library failed in a way it does not document
                error = _undocumented(exc)
                job.errors[row] = error.with_row(index=index, key=job.key_at(row), slot=kernel.name)
                return


def _failed_in(job: BatchJob, row: int, stage: str) -> None:
    """Mark the stage a row failed in, outside its kernel (for the rejects table)."""
    if job.stages is None:
        job.stages = {}
    job.stages[row] = stage


#: field values that are the bytes themselves (nothing to read)
_IN_MEMORY = (bytes, bytearray, memoryview)


def _clock_slots(kernels: Sequence[SlotKernel]) -> tuple[int, ...]:
    """Each kernel's index in a worker clock (see :meth:`PassStats.clock`): media slots
    in order from :data:`SLOTS`; passthrough slots -1 (they never decode)."""
    slots: list[int] = []
    for kernel in kernels:
        slots.append(-1 if kernel.passthrough else SLOTS + sum(1 for s in slots if s >= 0))
    return tuple(slots)


def _finish(job: BatchJob) -> None:
    """Run the batch steps of ``job`` over its prepared rows (rows that failed earlier or
    are inactive were not prepared); a row the step fails gets that row's error."""
    for kernel in job.kernels:
        prepared = job.pending.get(kernel.name)
        if prepared is None or kernel.finish is None:
            continue
        rows = [r for r, value in enumerate(prepared) if value is not None and r not in job.errors]
        if not rows:
            continue
        buffer = job.buffers.get(kernel.name)
        outs = [None if buffer is None else buffer[r] for r in rows]
        try:
            results = kernel.finish([prepared[r] for r in rows], outs)
        except Exception as exc:  # the step failed as a whole: every row carries it
            error = exc if isinstance(exc, DataioError) else _undocumented(exc)
            results = [copy.copy(error) for _ in rows]  # each row gets its own position
        for row, result in zip(rows, results, strict=True):
            prepared[row] = None  # the input (encoded bytes) is no longer needed
            if isinstance(result, DataioError):
                index, key = job.positions[row], job.key_at(row)
                job.errors[row] = result.with_row(index=index, key=key, slot=kernel.name)
            elif buffer is None:
                job.values[kernel.name][row] = result


def _rows_per_task(size: int, concurrency: int) -> int:
    """Rows of an Arrow job per pool task: up to :data:`ARROW_ROWS_PER_TASK`, fewer when
    the batch is small (each pool thread still gets about two tasks per batch) and never
    more than ``concurrency`` (a loader limited to N records in flight submits <= N)."""
    return max(1, min(ARROW_ROWS_PER_TASK, size // (2 * cpu_workers()), concurrency))


def _close_chunks(chunks: Iterator[Chunk]) -> None:
    """End the chunk stream, so the source's reads ahead (a frame's row groups) stop."""
    close = getattr(chunks, "close", None)
    if close is None:
        return
    with contextlib.suppress(ValueError):  # advanced on another thread: ends when collected
        close()


def _undocumented(exc: Exception) -> DecodeError:
    error = DecodeError(f"{type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


def _stays_arrow(column: Any) -> bool:
    """Whether every slice of an Arrow column stays an Arrow array in the batch: a type
    :func:`arrow_column` never turns into NumPy, whatever the nulls."""
    import pyarrow as pa

    if isinstance(column, np.ndarray):
        return True
    kind = column.type
    return not (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or isinstance(kind, pa.FixedShapeTensorType)
    )


def _absent(row: int) -> None:
    """The reader of an optional field the schema does not have: every row is ``None``."""
    return None


def _nulls(n: int) -> pa.Array:
    import pyarrow as pa

    return pa.nulls(n)
