"""Frames read by position: the rows of local Parquet and Feather scans, addressed by number.

A frame whose plan is a scan of local Parquet or Feather files under projections, new
columns and limits only (steps that map rows one to one) numbers its rows: position ``p``
is the ``p``-th row of the frame's stream (files in order, then rows). :class:`FrameRows` reads
such positions without DataFusion, touching only the *blocks* that hold them: Parquet row
groups (``ParquetFile.read_row_groups`` with the projected columns) or Feather record
batches (from a memory map, no copy for uncompressed files). Shuffles permute positions
(:class:`dataio.sources.permutation.PermutedIndexed`) and shards take contiguous position
ranges (:meth:`FrameRows.shard_positions`), so neither reads the whole frame. A pass in
position order (unshuffled, or a rank's run) streams whole blocks instead
(:meth:`FrameRows.stream_run`), reading the next :data:`READ_AHEAD` on dataio's pool while
the caller delivers this one. Columns that compute values (``col("x") * 2``, an op chain)
are evaluated by DataFusion on each batch read, after the read.

Filters, joins, SQL, sorts and aggregates change which rows exist or their order; those
frames, remote ones (``s3://`` and other object stores: their scans are
downloaded or streamed by DataFusion) and CSV/JSON/TFRecord scans are not addressable:
:func:`frame_rows` returns ``None`` and they stream.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from dataio.exceptions import FormatError, NotFoundError, OutOfRangeError
from dataio.plan.frame import Limit, Memory, Node, Scan, Select, WithColumns
from dataio.sources.base import IndexedSource

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = [
    "Addressed",
    "FrameRows",
    "ShardPositions",
    "addressable",
    "frame_rows",
    "reads_in_flight",
]

#: Bytes of decoded blocks a :class:`FrameRows` keeps (least recently used first out):
#: consecutive batches of an unshuffled pass fall in the same row group, which is then
#: decoded once, not once per batch.
CACHE_BYTES = 256 << 20

#: Feather files kept open (memory-mapped) at once: a scan of thousands of files must not
#: hold a descriptor for each.
OPEN_FILES = 64

#: Blocks a sequential pass (:meth:`FrameRows.stream_run`) reads ahead of the one it
#: delivers, on dataio's pool: on two cores the next row groups decode while this one is
#: delivered. A pass holds at most ``READ_AHEAD + 1`` decoded blocks.
READ_AHEAD = 2

_FORMATS = ("parquet", "feather")
POOL_THREADS = "dataio-cpu"  # the name prefix of dataio's pool threads (engine/pool.py)
_inflight: set[Future[Any]] = set()
_inflight_lock = threading.Lock()


def reads_in_flight() -> int:
    """Block reads submitted ahead to dataio's pool and not finished (all frames)."""
    with _inflight_lock:
        return len(_inflight)


def _track(future: Future[Any]) -> None:
    with _inflight_lock:
        _inflight.add(future)
    future.add_done_callback(_untrack)


def _untrack(future: Future[Any]) -> None:
    with _inflight_lock:
        _inflight.discard(future)


_MAX_ROWS = 1 << 62


@dataclass(frozen=True)
class Addressed:
    """A frame's plan seen as positions over one scan.

    Attributes:
        scan: The scan node.
        columns: ``(file column, output name)`` pairs in output order; ``None`` for all.
        offset: Scan position of the frame's row 0 (from limits).
        length: Rows the limits keep; ``None`` for all after ``offset``.
        steps: Projections and new columns that compute values (``col("x") * 2``, an op
            chain), bottom-up: run by DataFusion on each batch read. They map rows one
            to one, so positions (and limits anywhere in the chain) are unchanged.
    """

    scan: Scan
    columns: tuple[tuple[str, str], ...] | None
    offset: int
    length: int | None
    steps: tuple[Select | WithColumns, ...] = ()
    #: per step, the scan position of its input's row 0 (the limits below it): a seeded
    #: chain numbers the rows of its step's input
    step_offsets: tuple[int, ...] = ()


def addressable(node: Node) -> Addressed | Node:
    """The plan as positions over a scan, or the first node that prevents it."""
    chain: list[Select | WithColumns | Limit] = []
    while isinstance(node, Select | WithColumns | Limit):
        chain.append(node)
        node = node.input
    if not isinstance(node, Scan) or node.format not in _FORMATS:
        return node
    from dataio.engine.remote import is_remote

    if any(is_remote(path) for path in node.files):
        return node
    columns: tuple[tuple[str, str], ...] | None = None
    offset, length = 0, None
    steps: list[Select | WithColumns] = []
    step_offsets: list[int] = []
    for step in reversed(chain):  # bottom-up
        if isinstance(step, Limit):
            offset, length = _compose(offset, length, step)
        elif steps or isinstance(step, WithColumns) or (plain := _plain(step)) is None:
            steps.append(step)  # computes values: from here on DataFusion runs the steps
            step_offsets.append(offset)
        else:
            picked = []
            for source, name in plain:
                if columns is not None:  # over an earlier projection: map its outputs back
                    source = {out: src for src, out in columns}.get(source, source)
                picked.append((source, name))
            columns = tuple(picked)
    if steps and isinstance(steps[0], Select):
        columns = _referenced(steps[0], columns or tuple((n, n) for n in node.schema.names))
    return Addressed(node, columns, offset, length, tuple(steps), tuple(step_offsets))


def _referenced(step: Select, columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The columns a computing projection reads: the only ones worth decoding."""
    names = {e.args[0] for expr in step.exprs for e in expr.walk() if e.op == "col"}
    kept = tuple((src, out) for src, out in columns if out in names)
    return kept or columns[:1]  # a projection of literals still needs the row count


def _plain(step: Select) -> list[tuple[str, str]] | None:
    """``(input column, output name)`` for a projection of columns (renamed or not)."""
    out = []
    for expr in step.exprs:
        inner, name = (expr.args[0], expr.args[1]) if expr.op == "alias" else (expr, None)
        if inner.op != "col":
            return None
        out.append((inner.args[0], name or inner.args[0]))
    return out


def _compose(offset: int, length: int | None, step: Limit) -> tuple[int, int | None]:
    start = offset + step.offset
    available = None if length is None else max(0, length - step.offset)
    if step.n is None:
        return start, available
    return start, step.n if available is None else min(step.n, available)


def frame_rows(frame: LazyFrame) -> FrameRows | None:
    """The indexed view of ``frame``, or ``None`` when its rows have no fixed positions."""
    found = addressable(frame.plan)
    if not isinstance(found, Addressed):
        return None
    return FrameRows(frame, found)


def unaddressable_reason(frame: LazyFrame) -> str:
    """Why ``frame`` cannot be read by position (for error messages)."""
    found = addressable(frame.plan)
    if isinstance(found, Addressed):
        return "it can"
    if isinstance(found, Scan):
        if found.format not in _FORMATS:
            return f"it scans {found.format} files, which have no row index"
        return "it reads remote files (object stores stream; they are not read by position)"
    if not found.children():
        return f"it reads {found.label()}, whose rows have no index"
    return f"its plan has {found.label()}, which decides which rows exist or their order"


@dataclass(frozen=True)
class _Block:
    """A row group (Parquet) or record batch (Feather): the unit read from a file."""

    file: int
    index: int
    start: int  # scan position of its first row
    rows: int


class ShardPositions(Sequence[int]):
    """``range(start, stop)`` followed by padding positions, without a list of them all."""

    def __init__(self, run: range, padding: Sequence[int] = ()) -> None:
        self.run = run
        self.padding = tuple(padding)

    def __len__(self) -> int:
        return len(self.run) + len(self.padding)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and stop <= len(self.run):
                return self.run[start:stop]
            return [self[i] for i in range(start, stop, step)]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        n = len(self.run)
        return self.run[index] if index < n else self.padding[index - n]

    def __iter__(self) -> Iterator[int]:
        yield from self.run
        yield from self.padding

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """The positions as one NumPy array (``np.asarray`` without a Python loop)."""
        import numpy as np

        run = np.arange(self.run.start, self.run.stop, dtype=np.int64)
        out = np.concatenate([run, np.asarray(self.padding, dtype=np.int64)])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"ShardPositions({self.run!r}, padding={list(self.padding)!r})"


class FrameRows(IndexedSource):
    """The rows of an addressable frame, read by position from the blocks holding them.

    Built by :meth:`dataio.frame.LazyFrame.by_position`; it describes itself as the frame
    (same signature). File footers are read on first use, once.
    """

    def __init__(self, frame: LazyFrame, addressed: Addressed) -> None:
        self.frame = frame
        self.addressed = addressed
        self._schema = frame.schema
        self._base = self._schema if not addressed.steps else _base_schema(addressed)
        self._blocks: list[_Block] | None = None
        self._starts: Any = None  # numpy int64: each block's first scan position
        self._start_list: list[int] = []
        self._length = 0
        self._metadata: list[Any] = []  # Parquet FileMetaData per file
        self._init_state()

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()
        self._cached_bytes = 0
        self._readers: OrderedDict[int, Any] = OrderedDict()  # Feather: open memory maps

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_cache", "_cached_bytes", "_readers"):
            del state[name]  # process-local: a copy reopens what it reads
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    # -- source ------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The frame's description: a shuffle or a shard of it keeps the frame's signature."""
        return self.frame.describe()

    @property
    def configured(self) -> bool:
        """As the frame: steps beyond the scan are tracked configuration."""
        return self.frame.configured

    def arrow_schema(self) -> pa.Schema:
        """The frame's schema."""
        return self._schema

    def length(self) -> int:
        """The frame's row count, from file metadata."""
        self._layout()
        return self._length

    def get(self, index: int) -> dict[str, Any]:
        """The row at ``index`` as a dict."""
        rows: list[dict[str, Any]] = self.take_batch([index]).to_pylist()
        return rows[0]

    def get_many(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """The rows at ``indices`` as dicts, in the order given (duplicates included)."""
        rows: list[dict[str, Any]] = self.take_batch(indices).to_pylist()
        return rows

    def iterate(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts, block by block, in position order."""
        for batch in self.iterate_batches():
            yield from batch.to_pylist()

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows in position order, one record batch per block (read ahead)."""
        for _, batch in self.stream_run(0, self.length()):
            yield batch

    def stream_run(self, start: int, stop: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Positions ``start .. stop - 1`` in order: ``(first position, batch)`` per block.

        A sequential pass reads whole blocks (no per-batch positional read) and reads the
        next :data:`READ_AHEAD` blocks on dataio's pool while the caller consumes this
        one, so decoding overlaps delivery. Blocks are read once and not cached (a pass
        does not come back to them). Closing the iterator (``break``, a closed loader)
        cancels the reads not started and waits for the running ones: nothing is left
        on the pool. An error reading a block is raised when the pass reaches it.

        Example:
            >>> rows = dataio.scan_parquet("t.parquet").by_position()  # doctest: +SKIP
            >>> for first, batch in rows.stream_run(0, rows.length()): ...  # doctest: +SKIP
        """
        n = self.length()
        if start >= stop:
            return
        _check_range(start, stop - 1, n)
        low, high = start + self.addressed.offset, stop + self.addressed.offset
        blocks = self._layout()
        first = bisect.bisect_right(self._start_list, low) - 1
        last = bisect.bisect_right(self._start_list, high - 1) - 1
        wanted = blocks[first : last + 1]
        ahead: deque[tuple[Future[Any], Any]] = deque()
        submitted = 0
        try:
            for block in wanted:
                while submitted < len(wanted) and len(ahead) <= READ_AHEAD:
                    ahead.append(self._read_ahead(wanted[submitted]))
                    submitted += 1
                batch = self._block_of(block, ahead.popleft())
                lo, hi = max(block.start, low), min(block.start + block.rows, high)
                if lo > block.start or hi < block.start + block.rows:
                    batch = batch.slice(lo - block.start, hi - lo)
                yield lo - self.addressed.offset, self._computed(batch, range(lo, hi))
        finally:
            for future, _ in ahead:
                future.cancel()
            if not threading.current_thread().name.startswith(POOL_THREADS):
                # (a pool thread collecting the pass must not wait for itself)
                wait([future for future, _ in ahead])
                for _, reader in ahead:
                    if reader is not None:
                        reader.close()

    def _read_ahead(self, block: _Block) -> tuple[Future[Any], Any]:
        """``block`` read on dataio's pool (or taken from the cache): a batch or a table,
        and the Parquet reader to close once it is read.

        The caller's thread checks limits and opens the file; the pool thread only runs
        the read, which releases the GIL: each time a pool thread takes the GIL back it
        may wait out the interpreter's switch interval (5 ms) while the caller runs
        Python, so the pool's side makes as few round trips as it can.
        """
        with self._lock:
            cached = self._cache.get((block.file, block.index))
        if cached is not None:
            done: Future[Any] = Future()
            done.set_result(cached)
            return done, None
        from dataio.engine.pool import cpu_pool

        opened = None
        if self.addressed.scan.format == "parquet":
            with self._mapped_errors(block.file):
                opened = self._parquet_file(block.file, [block.index], pooled=True)
        future = cpu_pool().submit(self._read_block, block, opened)
        _track(future)
        return future, None if opened is None else opened[0]

    def _read_block(self, block: _Block, opened: Any) -> pa.Table:
        """The pool's part of a read ahead: ``opened`` (a Parquet reader) read, or a
        Feather block."""
        if opened is None:
            return self._read_feather(block.file, [block.index])[0]
        reader, columns = opened
        return reader.read_row_groups([block.index], columns=columns, use_threads=False)

    def _block_of(self, block: _Block, ahead: tuple[Future[Any], Any]) -> pa.RecordBatch:
        """The block a read ahead gives, as the frame types it."""
        import pyarrow as pa

        future, reader = ahead
        try:
            with self._mapped_errors(block.file):
                found = future.result()
        finally:
            if reader is not None:
                reader.close()
        if isinstance(found, pa.RecordBatch):  # from the cache
            return found
        path = self.addressed.scan.files[block.file]
        return _one_batch(self._conform(found, path), self._base)

    # -- positional reads ------------------------------------------------------------------

    def take_batch(self, positions: Sequence[int]) -> pa.RecordBatch:
        """The rows at ``positions`` as one batch, in the order given, duplicates included.

        Reads only the blocks holding them (cached, see ``CACHE_BYTES``); a run of
        consecutive positions (a ``range`` is checked in O(1)) inside one block comes back
        as a zero-copy slice of it.

        Example:
            >>> rows = dataio.scan_parquet("t.parquet").by_position()  # doctest: +SKIP
            >>> rows.take_batch([5, 1, 5])  # doctest: +SKIP
        """
        return self._computed(self._take_base(positions), positions, frame=True)

    def _take_base(self, positions: Sequence[int]) -> pa.RecordBatch:
        """The rows at ``positions`` as read from the files (before computed steps)."""
        import numpy as np
        import pyarrow as pa

        n = self.length()
        if isinstance(positions, range) and positions.step == 1:
            if not positions:
                return _empty_batch(self._base)
            _check_range(positions.start, positions.stop - 1, n)
            return self._run(positions.start, positions.stop)
        wanted = np.asarray(positions, dtype=np.int64).reshape(-1)
        if wanted.size == 0:
            return _empty_batch(self._base)
        _check_range(int(wanted.min()), int(wanted.max()), n)
        if wanted.size > 1 and bool(np.all(np.diff(wanted) == 1)):
            return self._run(int(wanted[0]), int(wanted[-1]) + 1)
        scan_pos = wanted + self.addressed.offset
        blocks = self._layout()
        number = np.searchsorted(self._starts, scan_pos, side="right") - 1
        local = scan_pos - self._starts[number]  # row within its block
        needed = np.unique(number)
        batches = self._blocks_read([blocks[i] for i in needed.tolist()])
        if len(batches) == 1:
            return batches[0].take(pa.array(local))
        # Gather block by block (a take over all blocks at once would first concatenate
        # them, copying every cached row group), then put the rows in the order asked.
        order = np.argsort(number, kind="stable")
        bounds = [*np.searchsorted(number[order], needed, side="left").tolist(), wanted.size]
        parts = [
            batch.take(pa.array(local[order[lo:hi]]))
            for batch, lo, hi in zip(batches, bounds, bounds[1:], strict=False)
        ]
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        return pa.concat_batches(parts).take(pa.array(inverse))

    def _run(self, start: int, stop: int) -> pa.RecordBatch:
        """Frame positions ``start .. stop - 1``: slices of the blocks holding them."""
        import pyarrow as pa

        low, high = start + self.addressed.offset, stop + self.addressed.offset
        blocks = self._layout()
        first = bisect.bisect_right(self._start_list, low) - 1
        last = bisect.bisect_right(self._start_list, high - 1) - 1
        batches = self._blocks_read(blocks[first : last + 1])
        if first == last:
            return batches[0].slice(low - blocks[first].start, high - low)
        parts = []
        for batch, block in zip(batches, blocks[first : last + 1], strict=True):
            begin = max(low - block.start, 0)
            parts.append(batch.slice(begin, min(high - block.start, block.rows) - begin))
        return pa.concat_batches(parts)

    def shard_positions(self, rank: int, world: int, *, pad: bool) -> ShardPositions:
        """A contiguous run of positions for rank ``rank`` of ``world``; equal counts.

        The frame's ``n`` rows are cut into ``world`` consecutive runs in position order
        (files, then row groups or record batches): with ``pad=True`` the first
        ``n % world`` ranks take ``n // world + 1`` rows and the others ``n // world``
        plus a repeat of their own first row; with ``pad=False`` each rank takes
        ``n // world`` rows and the last ``n % world`` rows are dropped (the rows a
        round-robin shard drops). Counts equal the round-robin ones, so loader lengths
        and checkpoints keep their meaning. A rank reads the blocks its run overlaps:
        about ``1/world`` of the bytes, plus at most one block shared with each
        neighbour when a boundary falls inside a block (none when blocks divide evenly).
        With fewer rows than ranks, a rank without rows repeats row ``rank % n``.
        """
        n = self.length()
        base, rest = divmod(n, world)
        if not pad:
            return ShardPositions(range(rank * base, (rank + 1) * base))
        start = rank * base + min(rank, rest)
        run = range(start, start + base + (1 if rank < rest else 0))
        if not rest or rank < rest:
            return ShardPositions(run)
        return ShardPositions(run, (run.start if run else rank % n,))

    # -- blocks ------------------------------------------------------------------------

    def _layout(self) -> list[_Block]:
        import numpy as np

        if self._blocks is None:
            with self._lock:
                if self._blocks is None:
                    blocks = self._read_layout()
                    self._start_list = [b.start for b in blocks]
                    self._starts = np.asarray(self._start_list, np.int64)
                    total = blocks[-1].start + blocks[-1].rows if blocks else 0
                    rows = max(0, total - self.addressed.offset)
                    length = self.addressed.length
                    self._length = rows if length is None else min(rows, length)
                    self._blocks = blocks
        return self._blocks

    def _read_layout(self) -> list[_Block]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from dataio.formats._arrow import check_ipc_file, check_regular, open_error

        scan = self.addressed.scan
        blocks: list[_Block] = []
        start = 0
        for number, path in enumerate(scan.files):
            try:
                check_regular(path, scan.label())
                if scan.format == "parquet":
                    metadata = pq.read_metadata(path)
                    self._metadata.append(metadata)
                    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
                else:
                    check_ipc_file(path, scan.label())  # damaged offsets would crash reads
                    with pa.memory_map(path) as source:
                        reader = pa.ipc.open_file(source)
                        sizes = [
                            reader.get_batch(i).num_rows for i in range(reader.num_record_batches)
                        ]
            except pa.ArrowException as exc:
                raise FormatError(f"{scan.label()}: cannot read {path!r}: {exc}") from None
            except OSError as exc:
                raise open_error(exc, path, scan.label()) from None
            for index, rows in enumerate(sizes):
                if rows < 0 or start + rows >= _MAX_ROWS:  # positions must fit in int64
                    raise FormatError(
                        f"{scan.label()}: {path!r} declares {rows} rows in block {index}; "
                        "the file is damaged"
                    )
                if rows:
                    blocks.append(_Block(number, index, start, rows))
                    start += rows
        return blocks

    def _blocks_read(self, blocks: list[_Block]) -> list[pa.RecordBatch]:
        """The decoded blocks, from the cache or read (one read per file)."""
        found: dict[tuple[int, int], pa.RecordBatch] = {}
        with self._lock:
            for block in blocks:
                key = (block.file, block.index)
                if key in self._cache:
                    self._cache.move_to_end(key)
                    found[key] = self._cache[key]
        missing: dict[int, list[int]] = {}
        for block in blocks:
            if (block.file, block.index) not in found:
                missing.setdefault(block.file, []).append(block.index)
        for file, indices in missing.items():
            for index, table in zip(indices, self._read(file, indices), strict=True):
                batch = _one_batch(table, self._base)  # one chunk: takes need no concat
                found[(file, index)] = batch
                self._remember((file, index), batch)
        return [found[(b.file, b.index)] for b in blocks]

    def _remember(self, key: tuple[int, int], batch: pa.RecordBatch) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = batch
            self._cached_bytes += batch.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= old.nbytes

    def _read(self, file: int, indices: list[int]) -> list[pa.Table]:
        """Blocks ``indices`` of file ``file``, projected, renamed and typed as the frame."""
        scan = self.addressed.scan
        with self._mapped_errors(file):
            if scan.format == "parquet":
                tables = self._read_parquet(file, indices)
            else:
                tables = self._read_feather(file, indices)
        return [self._conform(table, scan.files[file]) for table in tables]

    @contextmanager
    def _mapped_errors(self, file: int) -> Iterator[None]:
        """Errors reading file ``file`` as dataio's (naming the file)."""
        import pyarrow as pa

        from dataio.formats._arrow import open_error

        scan = self.addressed.scan
        path = scan.files[file]
        try:
            yield
        except FileNotFoundError:
            raise NotFoundError(f"{scan.label()}: the file {path!r} is gone") from None
        except pa.ArrowException as exc:
            raise FormatError(f"{scan.label()}: cannot read {path!r}: {exc}") from None
        except OSError as exc:
            raise open_error(exc, path, scan.label()) from None

    def _file_columns(self) -> list[str] | None:
        columns = self.addressed.columns
        return None if columns is None else list(dict.fromkeys(src for src, _ in columns))

    def _read_parquet(self, file: int, indices: list[int]) -> list[pa.Table]:
        metadata = self._metadata[file]
        reader, columns = self._parquet_file(file, indices, pooled=False)
        with reader:
            table = reader.read_row_groups(indices, columns=columns)
        out, first = [], 0
        for index in indices:  # one read, split back into its row groups (no copy)
            rows = metadata.row_group(index).num_rows
            out.append(table.slice(first, rows))
            first += rows
        return out

    def _parquet_file(
        self, file: int, indices: list[int], *, pooled: bool
    ) -> tuple[Any, list[str] | None]:
        """File ``file`` opened to read row groups ``indices`` (within the decode limit),
        and the columns to read."""
        import pyarrow.parquet as pq

        from dataio import limits

        scan = self.addressed.scan
        path = scan.files[file]
        metadata = self._metadata[file]
        wanted = self._file_columns()
        for index in indices:
            group = metadata.row_group(index)
            size = sum(
                group.column(j).total_uncompressed_size
                for j in range(group.num_columns)
                if wanted is None or group.column(j).path_in_schema.split(".")[0] in wanted
            )
            limits.check(
                "max_decoded_bytes",
                size,
                what=f"{scan.label()}: row group {index} of {path!r} ({size} bytes decoded)",
            )
        names = set(metadata.schema.to_arrow_schema().names)
        columns = None if wanted is None else [c for c in wanted if c in names]
        # Read on the pool (one thread per row group, no Arrow threads to oversubscribe
        # the cores), a memory map saves a copy: row groups of JPEGs read ~15% faster
        return pq.ParquetFile(path, metadata=metadata, memory_map=pooled), columns

    def _read_feather(self, file: int, indices: list[int]) -> list[pa.Table]:
        import pyarrow as pa

        from dataio.formats._arrow import check_ipc_file

        scan = self.addressed.scan
        path = scan.files[file]
        with self._lock:
            reader = self._readers.get(file)
            if reader is None:
                check_ipc_file(path, scan.label())
                reader = pa.ipc.open_file(pa.memory_map(path))
                self._readers[file] = reader
                if len(self._readers) > OPEN_FILES:
                    self._readers.popitem(last=False)  # its batches keep their mapping
            self._readers.move_to_end(file)
        wanted = self._file_columns()
        out = []
        for index in indices:
            with self._lock:  # one reader per file, shared by the pool's threads
                batch = reader.get_batch(index)
            table = pa.Table.from_batches([batch])
            if wanted is not None:
                table = table.select([c for c in wanted if c in table.schema.names])
            out.append(table)
        return out

    def _conform(self, table: pa.Table, path: str) -> pa.Table:
        """``table`` with the frame's column names and types (nulls for absent columns)."""
        import pyarrow as pa

        columns = self.addressed.columns or tuple((n, n) for n in self._base.names)
        arrays = []
        for (source, _), field in zip(columns, self._base, strict=True):
            if source not in table.schema.names:
                arrays.append(pa.nulls(table.num_rows, field.type))  # as DataFusion fills it
                continue
            column = table.column(source)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowException, ValueError) as exc:
                    raise FormatError(
                        f"{self.addressed.scan.label()}: column {source!r} of {path!r} is "
                        f"{column.type}, not the frame's {field.type}: {exc}"
                    ) from None
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=self._base)

    def _computed(
        self, batch: pa.RecordBatch, positions: Sequence[int], *, frame: bool = False
    ) -> pa.RecordBatch:
        """``batch`` after the frame's computed steps (DataFusion, one small plan).

        ``positions`` are the rows' scan positions (frame positions when ``frame``): a
        step with seeded chains gets its input's position of each row (see
        :func:`dataio.engine.compile.positioned`), not the row's place in this batch.
        """
        import dataclasses

        import pyarrow as pa

        from dataio.engine.compile import positioned

        if not self.addressed.steps:
            return batch
        if not batch.num_rows:
            return _empty_batch(self._schema)
        from dataio.engine.run import collect_table

        node: Node = Memory(pa.Table.from_batches([batch]), "rows read by position")
        if not any(positioned(step) for step in self.addressed.steps):
            for step in self.addressed.steps:
                node = dataclasses.replace(step, input=node)
            return _one_batch(collect_table(node), self._schema)
        import numpy as np

        from dataio.engine.expressions import POSITION

        scan = np.asarray(positions, np.int64) + (self.addressed.offset if frame else 0)
        table = pa.Table.from_batches([batch])
        offsets = self.addressed.step_offsets
        for step, below in zip(self.addressed.steps, offsets, strict=True):
            if positioned(step):  # one step at a time: each numbers its own input
                table = table.append_column(POSITION, pa.array(scan - below))
            node = dataclasses.replace(step, input=Memory(table, "rows read by position"))
            table = collect_table(node)
        return _one_batch(table, self._schema)


def _check_range(low: int, high: int, n: int) -> None:
    if low < 0 or high >= n:
        bad = low if low < 0 else high
        raise OutOfRangeError(f"position {bad} is outside the frame's {n} rows")


def _base_schema(addressed: Addressed) -> pa.Schema:
    """The schema of the columns read from the files, before computed steps."""
    import pyarrow as pa

    schema = addressed.scan.schema
    if addressed.columns is None:
        return schema
    return pa.schema([schema.field(src).with_name(out) for src, out in addressed.columns])


def _one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    # combine_chunks copies even a single chunk (29 ms for a row group of 256 JPEGs)
    arrays = [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    arrays = []
    for field in schema:
        if isinstance(field.type, pa.BaseExtensionType):
            storage = pa.array([], field.type.storage_type)
            arrays.append(pa.ExtensionArray.from_storage(field.type, storage))
        else:
            arrays.append(pa.array([], field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
