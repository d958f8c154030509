"""Sequential passes over a positional frame: whole blocks, the next ones read ahead.

:class:`ReadAhead` (a base of :class:`~dataio.engine.frame_rows.FrameRows`) gives
:meth:`~ReadAhead.stream_run`: a pass in position order reads the next blocks while the
caller delivers this one, with Arrow's threads (:data:`SCAN_AHEAD` row groups of Parquet
files holding several of the pass's) or on dataio's pool (:data:`READ_AHEAD` blocks).
"""

from __future__ import annotations

import bisect
import functools
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from dataio.engine.frame_blocks import Block, FrameBlocks, check_range, one_batch
from dataio.engine.frame_steps import computed

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["POOL_THREADS", "READ_AHEAD", "SCAN_AHEAD", "ReadAhead", "reads_in_flight"]

#: Blocks a sequential pass (:meth:`FrameRows.stream_run`) reads ahead of the one it
#: delivers on dataio's pool: on two cores the next row groups decode while this one is
#: delivered. A pass on the pool holds at most ``READ_AHEAD + 1`` decoded blocks.
READ_AHEAD = 2

#: Row groups Arrow's scan of a file decodes ahead of the one delivered (see
#: :meth:`ReadAhead._scanned`): one more than the pool's, as its threads cost the caller
#: nothing to keep busy (~5% faster passes of 64K-row groups of short strings on two
#: cores than with two).
SCAN_AHEAD = 3

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


@functools.cache
def _parquet_format() -> Any:
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat()


@functools.cache
def _local_files() -> Any:
    """Local files, memory-mapped: a row group's values are copied once, out of the map
    (row groups of JPEGs read ~15% faster than through read calls)."""
    import pyarrow.fs as fs

    return fs.LocalFileSystem(use_mmap=True)


class _ScanOrder(Exception):
    """Arrow would not scan a file's row groups in the order asked (the pool reads them)."""


class ReadAhead(FrameBlocks):
    """:meth:`stream_run`: positions in order, block by block, reading ahead."""

    def stream_run(self, start: int, stop: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """Positions ``start .. stop - 1`` in order: ``(first position, batch)`` per block.

        A sequential pass reads whole blocks (no per-batch positional read) and reads the
        next ones while the caller consumes this one, so decoding overlaps delivery.
        Blocks are read once and not cached (a pass does not come back to them). An
        error reading a block is raised when the pass reaches it, after every row
        before it.

        Row groups of Parquet files holding several of the pass's blocks are decoded by
        Arrow's own threads (:meth:`_scanned`), which never take the GIL. Other blocks
        (Feather, single row groups) are read on dataio's pool (:meth:`_pooled`), whose
        threads take the GIL to start and to finish each read: while the caller runs
        Python (cutting batches), each such handoff waits up to the interpreter's
        switch interval (5 ms, against ~2.5 ms to decode a row group of 64K short
        strings). Closing the iterator (``break``, a closed loader) cancels the reads
        not started: pool reads running are waited for (nothing is left on the pool),
        Arrow's end on their own.

        Example:
            >>> rows = dataio.scan_parquet("t.parquet").by_position()  # doctest: +SKIP
            >>> for first, batch in rows.stream_run(0, rows.length()): ...  # doctest: +SKIP
        """
        n = self.length()
        if start >= stop:
            return
        check_range(start, stop - 1, n)
        low, high = start + self.addressed.offset, stop + self.addressed.offset
        blocks = self._layout()
        first = bisect.bisect_right(self._start_list, low) - 1
        last = bisect.bisect_right(self._start_list, high - 1) - 1
        wanted = blocks[first : last + 1]
        read = self._scanned if self._scans(wanted) else self._pooled
        for block, batch in read(wanted):
            lo, hi = max(block.start, low), min(block.start + block.rows, high)
            if lo > block.start or hi < block.start + block.rows:
                batch = batch.slice(lo - block.start, hi - lo)
            out = computed(self.addressed, self._schema, batch, range(lo, hi))
            yield lo - self.addressed.offset, out

    def _scans(self, wanted: list[Block]) -> bool:
        """Whether Arrow's threads read ``wanted``: Parquet files, each holding two or more
        of its blocks (a scan costs ~0.4 ms to start; within a file it reads ahead), and
        columns to read (an empty projection is read on the pool)."""
        if self.addressed.scan.format != "parquet" or len(wanted) < 2:
            return False
        if self._file_columns() == []:
            return False
        counts: dict[int, int] = {}
        for block in wanted:
            counts[block.file] = counts.get(block.file, 0) + 1
        return min(counts.values()) >= 2

    def _pooled(self, wanted: list[Block]) -> Iterator[tuple[Block, pa.RecordBatch]]:
        """``wanted`` read on dataio's pool, :data:`READ_AHEAD` ahead of the caller."""
        ahead: deque[tuple[Future[Any], Any]] = deque()
        submitted = 0
        try:
            for block in wanted:
                while submitted < len(wanted) and len(ahead) <= READ_AHEAD:
                    ahead.append(self._read_ahead(wanted[submitted]))
                    submitted += 1
                yield block, self._block_of(block, ahead.popleft())
        finally:
            for future, _ in ahead:
                future.cancel()
            if not threading.current_thread().name.startswith(POOL_THREADS):
                # (a pool thread collecting the pass must not wait for itself)
                wait([future for future, _ in ahead])
                for _, reader in ahead:
                    if reader is not None:
                        reader.close()

    def _scanned(self, wanted: list[Block]) -> Iterator[tuple[Block, pa.RecordBatch]]:
        """``wanted`` (runs of two or more row groups per Parquet file) decoded by Arrow's
        threads, :data:`SCAN_AHEAD` row groups ahead within a file; the next file's scan
        starts while this file's last :data:`SCAN_AHEAD` row groups are delivered."""
        runs: list[list[Block]] = []
        for block in wanted:
            if runs and runs[-1][0].file == block.file:
                runs[-1].append(block)
            else:
                runs.append([block])
        scans: deque[Iterator[tuple[Block, pa.RecordBatch]]] = deque()
        started = 0
        try:
            while started < len(runs) or scans:
                if not scans:
                    scans.append(self._file_scan(runs[started]))
                    started += 1
                left = len(runs[started - len(scans)])
                for block, batch in scans[0]:
                    left -= 1
                    if left <= SCAN_AHEAD and len(scans) == 1 and started < len(runs):
                        scans.append(self._file_scan(runs[started]))  # reads as this ends
                        started += 1
                    yield block, batch
                scans.popleft()
        finally:
            for scan in scans:
                close = getattr(scan, "close", None)
                if close is not None:
                    close()

    def _file_scan(self, blocks: list[Block]) -> Iterator[tuple[Block, pa.RecordBatch]]:
        """The row groups ``blocks`` of one Parquet file: their scan starts now.

        Row groups over ``limits.max_decoded_bytes`` are refused when reached (the scan
        stops before the first). A scan failing to start, or failing later, leaves the
        row groups it did not deliver to :meth:`_pooled`, which raises each read's
        error at its row group: Arrow may report an error of a row group read ahead
        before the row groups ahead of it.
        """
        from dataio.exceptions import LimitError

        file = blocks[0].file
        allowed = blocks
        for number, block in enumerate(blocks):
            try:
                self._check_decoded(file, block.index)
            except LimitError:
                allowed = blocks[:number]
                break
        try:
            batches = self._scan(file, allowed) if allowed else iter(())
        except Exception:
            return self._pooled(blocks)
        return self._scan_blocks(blocks, allowed, batches)

    def _scan(self, file: int, blocks: list[Block]) -> Iterator[pa.RecordBatch]:
        """Arrow's scan of row groups ``blocks`` of file ``file`` (decoding at once)."""
        import pyarrow.dataset as ds

        wanted = [block.index for block in blocks]
        # make_fragment(row_groups=...) may scan them in another order ([7, 8, 9, 10] as
        # [8, 9, 10, 7]); a subset of the whole file's fragment keeps the order asked
        whole = _parquet_format().make_fragment(
            self.addressed.scan.files[file], filesystem=_local_files()
        )
        fragment = whole.subset(row_group_ids=wanted)
        if [group.id for group in fragment.row_groups] != wanted:
            # _scan_blocks pairs batches with row groups by order and checks only their
            # rows: a reorder would deliver other rows, so such a scan is not started
            raise _ScanOrder(f"row groups {wanted} would be scanned out of order")
        batches: Iterator[pa.RecordBatch] = fragment.to_batches(
            columns=self._columns_in(file),
            batch_size=max(block.rows for block in blocks),  # a row group is one batch
            batch_readahead=SCAN_AHEAD,
            fragment_readahead=1,
            fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False),
            use_threads=True,
        )
        return batches

    def _scan_blocks(
        self, blocks: list[Block], allowed: list[Block], batches: Iterator[pa.RecordBatch]
    ) -> Iterator[tuple[Block, pa.RecordBatch]]:
        """Each of ``blocks`` as the frame types it, from ``batches`` (the scan of the
        ``allowed`` first ones), then from :meth:`_pooled` where the scan ends early."""
        import pyarrow as pa

        path = self.addressed.scan.files[blocks[0].file]
        done = 0
        try:
            for block in allowed:
                parts, rows = [], 0
                while rows < block.rows:  # one batch per row group, unless Arrow cut it
                    part = next(batches)
                    parts.append(part)
                    rows += part.num_rows
                if rows != block.rows:  # not this row group's rows: read it on the pool
                    break
                table = pa.Table.from_batches(parts)
                yield block, one_batch(self._conform(table, path), self._base)
                done += 1
        except Exception:  # StopIteration included
            pass  # read what is left on the pool: its errors are raised where they are
        finally:
            del batches  # a scan dropped unfinished stops reading ahead
        yield from self._pooled(blocks[done:])

    def _read_ahead(self, block: Block) -> tuple[Future[Any], Any]:
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
        from dataio.exceptions import DataioError

        opened = None
        if self.addressed.scan.format == "parquet":
            try:
                with self._mapped_errors(block.file):
                    opened = self._parquet_file(block.file, [block.index], pooled=True)
            except DataioError as exc:
                # (a row group over max_decoded_bytes, a file gone): raised when the pass
                # reaches this block, after every row before it, not when read ahead
                failed: Future[Any] = Future()
                failed.set_exception(exc)
                return failed, None
        future = cpu_pool().submit(self._read_block, block, opened)
        _track(future)
        return future, None if opened is None else opened[0]

    def _read_block(self, block: Block, opened: Any) -> pa.Table:
        """The pool's part of a read ahead: ``opened`` (a Parquet reader) read, or a
        Feather block."""
        if opened is None:
            return self._read_feather(block.file, [block.index])[0]
        reader, columns = opened
        return reader.read_row_groups([block.index], columns=columns, use_threads=False)

    def _block_of(self, block: Block, ahead: tuple[Future[Any], Any]) -> pa.RecordBatch:
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
        return one_batch(self._conform(found, path), self._base)
