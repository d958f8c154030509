"""Sequential passes over a positional frame: whole blocks, the next ones read ahead.

:class:`ReadAhead` (a base of :class:`~dataio.engine.frame_rows.FrameRows`) gives
:meth:`~ReadAhead.stream_run`: a pass in position order reads the next
:data:`READ_AHEAD` blocks on dataio's pool while the caller delivers this one.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from dataio.engine.frame_blocks import Block, FrameBlocks, check_range, one_batch
from dataio.engine.frame_steps import computed

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["POOL_THREADS", "READ_AHEAD", "ReadAhead", "reads_in_flight"]

#: Blocks a sequential pass (:meth:`FrameRows.stream_run`) reads ahead of the one it
#: delivers, on dataio's pool: on two cores the next row groups decode while this one is
#: delivered. A pass holds at most ``READ_AHEAD + 1`` decoded blocks.
READ_AHEAD = 2

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


class ReadAhead(FrameBlocks):
    """:meth:`stream_run`: positions in order, block by block, reading ahead on the pool."""

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
        check_range(start, stop - 1, n)
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
                out = computed(self.addressed, self._schema, batch, range(lo, hi))
                yield lo - self.addressed.offset, out
        finally:
            for future, _ in ahead:
                future.cancel()
            if not threading.current_thread().name.startswith(POOL_THREADS):
                # (a pool thread collecting the pass must not wait for itself)
                wait([future for future, _ in ahead])
                for _, reader in ahead:
                    if reader is not None:
                        reader.close()

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

        opened = None
        if self.addressed.scan.format == "parquet":
            with self._mapped_errors(block.file):
                opened = self._parquet_file(block.file, [block.index], pooled=True)
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
