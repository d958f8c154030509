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
(:meth:`FrameRows.stream_run`), reading the next
:data:`~dataio.engine.frame_readahead.READ_AHEAD` (with Arrow's threads or on
dataio's pool) while the caller delivers this one. Columns that compute values
(``col("x") * 2``, an op chain) are evaluated by DataFusion on each batch read, after
the read.

Filters, joins, SQL, sorts and aggregates change which rows exist or their order; those
frames, remote ones (``s3://`` and other object stores: their scans are
downloaded or streamed by DataFusion) and CSV/JSON/TFRecord scans are not addressable:
:func:`frame_rows` returns ``None`` and they stream.

The parts: :mod:`~dataio.engine.frame_address` (which plans have positions),
:mod:`~dataio.engine.frame_blocks` (block layout, the cache),
:mod:`~dataio.engine.frame_readers` (Parquet/Feather block reads),
:mod:`~dataio.engine.frame_readahead` (sequential passes), :mod:`~dataio.engine.frame_steps`
(computed columns) and :mod:`~dataio.engine.frame_shards` (shard positions).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dataio.engine.frame_address import Addressed, addressable, base_schema
from dataio.engine.frame_blocks import check_range, empty_batch
from dataio.engine.frame_readahead import ReadAhead
from dataio.engine.frame_shards import ShardPositions, shard_positions
from dataio.engine.frame_steps import computed
from dataio.sources.base import IndexedSource

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.frame import LazyFrame

__all__ = ["FrameRows", "frame_rows"]


def frame_rows(frame: LazyFrame) -> FrameRows | None:
    """The indexed view of ``frame``, or ``None`` when its rows have no fixed positions."""
    found = addressable(frame.plan)
    if not isinstance(found, Addressed):
        return None
    return FrameRows(frame, found)


class FrameRows(ReadAhead, IndexedSource):
    """The rows of an addressable frame, read by position from the blocks holding them.

    Built by :meth:`dataio.frame.LazyFrame.by_position`; it describes itself as the frame
    (same signature). File footers are read on first use, once.
    """

    def __init__(self, frame: LazyFrame, addressed: Addressed) -> None:
        self.frame = frame
        self.addressed = addressed
        self._schema = frame.schema
        self._base = self._schema if not addressed.steps else base_schema(addressed)
        self._blocks = None
        self._starts = None  # numpy int64: each block's first scan position
        self._start_list = []
        self._length = 0
        self._metadata = []  # Parquet FileMetaData per file
        self._init_state()

    # -- source ------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """The frame's description: a shuffle or a shard of it keeps the frame's signature."""
        return self.frame.description()

    @property
    def configured(self) -> bool:
        """As the frame: steps beyond the scan are tracked configuration."""
        return self.frame.configured

    def arrow_schema(self) -> pa.Schema:
        """The frame's schema."""
        return self._schema

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
        return computed(
            self.addressed, self._schema, self._take_base(positions), positions, frame=True
        )

    def _take_base(self, positions: Sequence[int]) -> pa.RecordBatch:
        """The rows at ``positions`` as read from the files (before computed steps)."""
        import numpy as np
        import pyarrow as pa

        n = self.length()
        if isinstance(positions, range) and positions.step == 1:
            if not positions:
                return empty_batch(self._base)
            check_range(positions.start, positions.stop - 1, n)
            return self._run(positions.start, positions.stop)
        wanted = np.asarray(positions, dtype=np.int64).reshape(-1)
        if wanted.size == 0:
            return empty_batch(self._base)
        check_range(int(wanted.min()), int(wanted.max()), n)
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

        (See :func:`dataio.engine.frame_shards.shard_positions`.)
        """
        return shard_positions(self.length(), rank, world, pad=pad)
