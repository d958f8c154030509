"""From a source to the chunks of one pass: shape stage, shard and resume offset.

A *unit* is what sharding deals out: a record under ``batch(N)``, an upstream list under
``collate()``, a run of equal keys under ``group_by()``. Unit ``u`` goes to rank
``u % world``; a rank releases a unit only once its round of ``world`` units is complete,
so every rank agrees on where the stream ends:

* ``pad=True``: a rank short of a unit in the last, incomplete round repeats its first
  unit, so every rank gets ``ceil(units / world)``;
* ``pad=False``: the incomplete round is dropped, so every rank gets ``units // world``.

Records keep their position in the unsharded stream; random ops and ``Batch.indices``
use it, so a record's augmentation does not depend on the world size. Resume skips whole
chunks of the rank's stream; the chunk holding the checkpoint is replayed from its start.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio.exceptions import DataioError, FieldError, PlanError
from dataio.plan.pipeline import BatchStage, CollateStage, ShapeStage
from dataio.sources.adapters import SequenceSource
from dataio.sources.arrow import takeable_type
from dataio.sources.base import IndexedSource, Source
from dataio.sources.permutation import PermutedIndexed

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Chunk", "ShardSpec", "plan_chunks"]


@dataclass(frozen=True)
class ShardSpec:
    """Rank ``id`` of ``of``; ``pad`` evens out the last round."""

    id: int = 0
    of: int = 1
    pad: bool = True

    @classmethod
    def parse(cls, shard: Mapping[str, Any] | str | None) -> ShardSpec:
        """Validate ``run(shard={"id": r, "of": w, "pad": True})`` or ``shard="auto"``."""
        if shard is None:
            return cls()
        if shard == "auto":
            return cls.auto()
        if not isinstance(shard, Mapping):
            raise PlanError(f'shard must be a dict like {{"id": 0, "of": 8}}, got {shard!r}')
        unknown = set(shard) - {"id", "of", "pad"}
        if unknown:
            raise PlanError(f"shard has unknown keys {sorted(unknown)}; use id, of and pad")
        rank, world, pad = shard.get("id"), shard.get("of"), shard.get("pad", True)
        for name, value in (("id", rank), ("of", world)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(f"shard {name!r} must be an integer, got {value!r}")
        assert isinstance(rank, int) and isinstance(world, int)
        if world < 1 or not 0 <= rank < world:
            raise PlanError(f"shard needs 0 <= id < of, got id={rank} of={world}")
        if not isinstance(pad, bool):
            raise PlanError(f"shard 'pad' must be True or False, got {pad!r}")
        return cls(rank, world, pad)

    @classmethod
    def auto(cls) -> ShardSpec:
        """This process's rank and world size, padded.

        From an initialized ``torch.distributed`` process group, else from the ``RANK``
        and ``WORLD_SIZE`` environment variables (as ``torchrun`` sets them).
        """
        import os
        import sys

        dist = sys.modules.get("torch.distributed")  # never import torch just to look
        if dist is not None and dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if rank is None or world is None:
            raise PlanError(
                'shard="auto" needs an initialized torch.distributed process group or the '
                "RANK and WORLD_SIZE environment variables (torchrun sets them); pass "
                'shard={"id": rank, "of": world_size} otherwise'
            )
        try:
            spec = {"id": int(rank), "of": int(world)}
        except ValueError:
            raise PlanError(
                f'shard="auto": RANK={rank!r} and WORLD_SIZE={world!r} must be integers'
            ) from None
        return cls.parse(spec)

    def as_dict(self) -> dict[str, Any]:
        """The spec as the dict ``run(shard=...)`` takes."""
        return {"id": self.id, "of": self.of, "pad": self.pad}


class Chunk:
    """The rows of one batch, their stream positions and the rank-local offset.

    A chunk holds its rows either as an Arrow record batch (``batch``: sources whose
    ``arrow_schema()`` is not ``None``) or as Python records (``records``). ``positions``
    is a ``range`` when the rows are consecutive, else a list. A batch that is a slice of
    a larger one read from the source names it (``parent``, ``offset``), so the executor
    can slice columns it already took from the parent.
    """

    __slots__ = ("_batch", "offset", "parent", "positions", "records", "start")

    def __init__(
        self,
        start: int,
        positions: Sequence[int],
        records: list[Any] | None = None,
        batch: pa.RecordBatch | None = None,
        parent: pa.RecordBatch | None = None,
        offset: int = 0,
    ) -> None:
        self.start = start
        self.positions = positions
        self.records = records
        self._batch = batch
        self.parent = parent
        self.offset = offset

    @property
    def batch(self) -> pa.RecordBatch | None:
        """The Arrow rows (sliced from ``parent`` on first use), or ``None``."""
        if self._batch is None and self.parent is not None:
            self._batch = self.parent.slice(self.offset, len(self.positions))
        return self._batch

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def end(self) -> int:
        """Rank-local sample count once this chunk is delivered."""
        return self.start + len(self.positions)


#: a unit's stream positions and its rows (a list of records or a record batch)
Unit = tuple[Sequence[int], Any]


def plan_chunks(
    source: Source, shape: ShapeStage, shard: ShardSpec, skip: int = 0
) -> Iterator[Chunk]:
    """The chunks of one pass for this rank, starting at the chunk holding sample ``skip``.

    Sources with an Arrow schema give chunks of record batches; others, chunks of
    Python records. ``batch(N)`` over a source addressable by position
    (:meth:`~dataio.sources.Source.by_position`) reads each chunk's rows in bulk, with
    the positions :meth:`~dataio.sources.IndexedSource.shard_positions` chooses for
    this rank when the source chooses them.
    """
    if isinstance(shape, BatchStage):
        indexed = source.by_position()
        if indexed is not None:
            chosen = None
            if shard.of > 1:
                chosen = indexed.shard_positions(shard.id, shard.of, pad=shard.pad)
            # An indexed source read from the start over round-robin positions reads
            # every record batch anyway: its stream, sliced and strided, is cheapest. A
            # frame's positional view reads its files directly (no query engine), which
            # is cheaper than the frame's stream.
            streams = skip == 0 and indexed is source and _streams(source)
            if chosen is not None or not (streams and source.arrow_schema() is not None):
                return _indexed_batches(indexed, shape, shard, skip, chosen)
    arrow = source.arrow_schema() is not None
    if arrow and not isinstance(shape, CollateStage):
        pieces = _arrow_pieces(source.iterate_batches())
        if isinstance(shape, BatchStage):
            mine = _shard_rows(pieces, shard)
            return _skip(_arrow_rebatch(mine, shape.size, shape.drop_last), skip)
        units = _shard_units(_arrow_groups(pieces, shape.key), shard)
        return _skip(_unit_chunks(units, arrow=True), skip)
    if isinstance(shape, BatchStage):
        if shard.of > 1:  # a source dealing its own shards (WebDataset: whole shards)
            first = (skip // shape.size) * shape.size
            dealt = source.shard_records(shard.id, shard.of, pad=shard.pad, start=first)
            if dealt is not None:
                return _pair_batches(dealt, shape.size, shape.drop_last, start=first)
        records = source.iterate()
        if shard.of == 1:
            return _skip(_record_batches(records, shape.size, shape.drop_last), skip)
        pairs = _rank_records(records, shard)
        return _skip(_pair_batches(pairs, shape.size, shape.drop_last), skip)
    units = _units(source, shape)
    mine_units = _shard_units(units, shard)
    if isinstance(shape, BatchStage):
        chunks = _rebatch(mine_units, shape.size, shape.drop_last)
    else:
        chunks = _unit_chunks(mine_units)
    return _skip(chunks, skip)


def _streams(source: Source) -> bool:
    """Whether ``source`` reads a pass as record batches itself (the same rows in the
    same order as by position)."""
    return type(source).iterate_batches is not Source.iterate_batches


def _rank_positions(source: IndexedSource, shard: ShardSpec) -> Sequence[int]:
    """This rank's round-robin positions (padded as asked)."""
    rank, world = shard.id, shard.of
    total = source.length()
    rounds, rest = divmod(total, world)
    positions: Sequence[int] = range(rank, rounds * world, world)
    if rest and shard.pad:
        extra = rank + rounds * world if rank < rest else (rank if rounds else rank % total)
        positions = [*positions, extra]
    return positions


def _indexed_batches(
    source: IndexedSource,
    shape: BatchStage,
    shard: ShardSpec,
    skip: int,
    chosen: Sequence[int] | None = None,
) -> Iterator[Chunk]:
    """Chunks read by position: ``chosen`` (the source's shard) or round robin.

    Arrow sources are read :data:`BLOCK_ROWS` rows at a time (whole chunks), each block
    sliced into chunks: one read per block spreads a source's per-call cost.
    """
    arrow = source.arrow_schema() is not None
    positions = _rank_positions(source, shard) if chosen is None else chosen
    size = shape.size
    count = len(positions)
    if shape.drop_last:
        count -= count % size
    first = (skip // size) * size if skip < count else count
    if arrow:
        yield from _arrow_blocks(source, positions, first, count, size)
        return
    for start in range(first, count, size):
        wanted = _plain(positions[start : min(start + size, count)])
        if not isinstance(source, SequenceSource | PermutedIndexed):  # others get lists
            wanted = list(wanted)
        yield Chunk(start, wanted, source.get_many(wanted))


#: rows an Arrow source is asked for at once when read by position (whole chunks)
BLOCK_ROWS = 1024


def _arrow_blocks(
    source: IndexedSource, positions: Sequence[int], first: int, count: int, size: int
) -> Iterator[Chunk]:
    stream = getattr(source, "stream_run", None)
    run = _leading_run(positions)
    if stream is not None and run is not None and first < min(count, len(run)):
        # Consecutive positions of a source that streams them (a frame's row groups,
        # read ahead): chunks are slices of whole blocks, not positional reads. Chunks
        # past the run (a shard's padding) are read by position below.
        stop = count if count <= len(run) else first + (len(run) - first) // size * size
        if first < stop:
            yield from _streamed_chunks(stream, run, positions, first, stop, size)
            first = stop
    step = size * max(1, BLOCK_ROWS // size)
    for block in range(first, count, step):
        wanted = _plain(positions[block : min(block + step, count)])
        # NumPy positions: Arrow sources index with arrays, and a range converts slowly
        at: Any = wanted
        if isinstance(wanted, range):
            at = np.arange(wanted.start, wanted.stop, wanted.step)
        rows = source.take_batch(at)
        for offset in range(0, len(wanted), size):
            mine = wanted[offset : offset + size]
            yield Chunk(block + offset, mine, None, None, rows, offset)  # sliced when needed


def _leading_run(positions: Sequence[int]) -> range | None:
    """The consecutive positions ``positions`` starts with, when known without a scan."""
    if isinstance(positions, range):
        return positions if positions.step == 1 else None
    run = getattr(positions, "run", None)  # a frame's shard: a run, then padding
    return run if isinstance(run, range) and run.step == 1 else None


def _streamed_chunks(
    stream: Any, run: range, positions: Sequence[int], first: int, stop: int, size: int
) -> Iterator[Chunk]:
    """Chunks ``first .. stop - 1`` (rank-local) of ``run``, cut from the blocks
    ``stream(start, stop)`` yields; a chunk across two blocks is a small concatenation."""
    import pyarrow as pa

    index = first
    carry: list[pa.RecordBatch] = []
    held = 0
    ranged = isinstance(positions, range)  # a range slices into a range: kept as is
    for _, batch in stream(run[first], run[stop - 1] + 1):
        offset, n = 0, batch.num_rows
        if carry:
            offset = min(size - held, n)
            carry.append(batch.slice(0, offset))
            held += offset
            if held < size:
                continue
            yield Chunk(
                index, _plain(positions[index : index + size]), batch=pa.concat_batches(carry)
            )
            index, carry, held = index + size, [], 0
        while offset + size <= n:
            wanted = positions[index : index + size]
            yield Chunk(index, wanted if ranged else _plain(wanted), None, None, batch, offset)
            index += size
            offset += size
        if offset < n:
            carry, held = [batch.slice(offset)], n - offset
    if carry:  # the last, short chunk
        yield Chunk(index, _plain(positions[index:stop]), batch=pa.concat_batches(carry))


def _plain(wanted: Sequence[int]) -> Sequence[int]:
    """Positions as a range or a list of ints (a source's own sequence or NumPy array)."""
    if isinstance(wanted, range | list):
        return wanted
    return wanted.tolist() if isinstance(wanted, np.ndarray) else [int(p) for p in wanted]


# -- Arrow streams -----------------------------------------------------------------------

#: consecutive rows of a stream: their positions and a record batch holding them
Piece = tuple[Sequence[int], "pa.RecordBatch"]


def _arrow_pieces(batches: Iterable[pa.RecordBatch]) -> Iterator[Piece]:
    offset = 0
    for batch in batches:
        n = batch.num_rows
        if n:
            yield range(offset, offset + n), batch
            offset += n


def _shard_rows(pieces: Iterator[Piece], shard: ShardSpec) -> Iterator[Piece]:
    """Rows ``position % world == rank``, released by complete rounds (see module doc)."""
    rank, world = shard.id, shard.of
    if world == 1:
        yield from pieces
        return
    import pyarrow as pa

    pending: Piece | None = None  # my row of a round not yet complete
    first: Piece | None = None
    early: list[pa.RecordBatch] = []  # the first `world` rows: padding for a rank with none
    total = 0
    for positions, batch in pieces:
        offset, n = positions[0], len(positions)
        end = offset + n
        if offset < world:
            early.append(batch.slice(0, world - offset))
        complete = (end // world) * world  # rows below this belong to complete rounds
        if pending is not None and pending[0][0] < complete:
            yield pending
            pending = None
        mine = range(offset + (rank - offset) % world, end, world)
        if mine:
            if first is None:
                first = (mine[:1], batch.slice(mine[0] - offset, 1))
            ready = range(mine.start, min(end, complete), world)
            if ready:
                rows = np.arange(ready.start - offset, ready.stop - offset, world)
                yield ready, _take(batch, pa.array(rows))
            if len(ready) < len(mine):
                last = mine[-1]
                pending = (range(last, last + 1), batch.slice(last - offset, 1))
        total = end
    if total % world and shard.pad:
        if pending is not None:
            yield pending
        elif first is not None:
            yield first
        else:
            row = rank % total
            yield range(row, row + 1), _concat(early).slice(row, 1)


def _take(batch: pa.RecordBatch, rows: pa.Array) -> pa.RecordBatch:
    """``batch.take(rows)``; view columns (polars' strings), which Arrow's ``take`` cannot
    gather, are gathered in the matching large type and cast back."""
    import pyarrow as pa

    try:
        return batch.take(rows)
    except pa.ArrowNotImplementedError:
        schema = batch.schema
        wide = pa.schema([f.with_type(takeable_type(f.type)) for f in schema])
        return batch.cast(wide).take(rows).cast(schema)


def _arrow_rebatch(pieces: Iterator[Piece], size: int, drop_last: bool) -> Iterator[Chunk]:
    start = 0
    held: list[Piece] = []
    have = 0
    for positions, batch in pieces:
        n = len(positions)
        at = 0
        while at < n:
            if not have and at + size <= n:  # a whole chunk inside one source batch: a slice
                wanted = positions if size == n else positions[at : at + size]
                # (positional arguments: keywords cost a tenth of a passthrough batch)
                yield Chunk(start, wanted, None, None, batch, at)  # sliced when needed
                start += size
                at += size
                continue
            take = min(size - have, n - at)
            if at == 0 and take == n:
                held.append((positions, batch))
            else:
                held.append((positions[at : at + take], batch.slice(at, take)))
            have += take
            at += take
            if have == size:
                yield _joined(start, held)
                start += size
                held, have = [], 0
    if held and not drop_last:
        yield _joined(start, held)


def _joined(start: int, pieces: list[Piece]) -> Chunk:
    if len(pieces) == 1:
        positions, batch = pieces[0]
        return Chunk(start, positions, batch=batch)
    return Chunk(
        start, _join_positions([p for p, _ in pieces]), batch=_concat([b for _, b in pieces])
    )


def _join_positions(parts: list[Sequence[int]]) -> Sequence[int]:
    if all(isinstance(p, range) and p.step == 1 for p in parts):
        ranges: list[range] = parts  # type: ignore[assignment]
        if all(a.stop == b.start for a, b in pairwise(ranges)):
            return range(ranges[0].start, ranges[-1].stop)
    return [position for part in parts for position in part]


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    import pyarrow as pa

    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _arrow_groups(pieces: Iterator[Piece], key: str) -> Iterator[Unit]:
    """Runs of equal ``key`` values, found with vectorized comparisons per batch."""
    held: list[Piece] = []  # the run still open at the end of the last batch
    last: Any = None
    for positions, batch in pieces:
        index = batch.schema.get_field_index(key)
        if index < 0:
            raise FieldError(
                f"group_by({key!r}): record {positions[0]} has no field {key!r}; "
                "every record needs the grouping key (from_sampler adds 'batch_id')"
            )
        column = batch.column(index)
        starts = _run_starts(column)
        if held and not _same(last, column[0]):
            yield _merged(held)
            held = []
        bounds = [0, *starts.tolist(), len(column)]
        for lo, hi in pairwise(bounds):
            if held and lo > 0:
                yield _merged(held)
                held = []
            held.append((positions[lo:hi], batch.slice(lo, hi - lo)))
        last = column[len(column) - 1]
    if held:
        yield _merged(held)


def _run_starts(column: pa.Array) -> np.ndarray:
    """Row numbers (after the first) where the value differs from the row before."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(column)
    if n < 2:
        return np.zeros(0, np.int64)
    head, tail = column.slice(0, n - 1), column.slice(1)
    try:
        differs = pc.not_equal(tail, head)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # nested keys: compare values
        values = column.to_pylist()
        return np.array([i for i in range(1, n) if values[i] != values[i - 1]], dtype=np.int64)
    if column.null_count:
        one_null = pc.xor(head.is_null(), tail.is_null())
        differs = pc.or_kleene(pc.fill_null(differs, False), one_null)
    mask = differs.to_numpy(zero_copy_only=False)
    return np.flatnonzero(mask) + 1


def _same(a: Any, b: Any) -> bool:
    """Whether two key scalars are equal (nulls equal nulls, as ``None == None``)."""
    if not a.is_valid or not b.is_valid:
        return not a.is_valid and not b.is_valid
    return bool(a.as_py() == b.as_py())


def _merged(pieces: list[Piece]) -> Unit:
    return _join_positions([p for p, _ in pieces]), _concat([b for _, b in pieces])


# -- Python records ----------------------------------------------------------------------


def _units(source: Source, shape: ShapeStage) -> Iterator[Unit]:
    records = source.iterate()
    if isinstance(shape, BatchStage):
        return (([position], [record]) for position, record in enumerate(records))
    if isinstance(shape, CollateStage):
        return _collate_units(records)
    return _group_units(records, shape.key)


def _collate_units(items: Iterable[Any]) -> Iterator[Unit]:
    position = 0
    for number, item in enumerate(items):
        if isinstance(item, Mapping | str | bytes) or not isinstance(item, Iterable):
            raise DataioError(
                f"collate() needs each source item to be a list of records; item {number} "
                f"is a {type(item).__name__} (use dataio.batch(n) for single records)"
            )
        rows = list(item)
        if not rows:
            continue  # an empty upstream batch delivers nothing
        yield list(range(position, position + len(rows))), rows
        position += len(rows)


def _group_units(records: Iterable[Any], key: str) -> Iterator[Unit]:
    positions: list[int] = []
    rows: list[Any] = []
    current: Any = None
    for position, record in enumerate(records):
        if not isinstance(record, Mapping) or key not in record:
            raise FieldError(
                f"group_by({key!r}): record {position} has no field {key!r}; "
                "every record needs the grouping key (from_sampler adds 'batch_id')"
            )
        value = record[key]
        if rows and value != current:
            yield positions, rows
            positions, rows = [], []
        current = value
        positions.append(position)
        rows.append(record)
    if rows:
        yield positions, rows


def _shard_units(units: Iterator[Unit], shard: ShardSpec) -> Iterator[Unit]:
    rank, world = shard.id, shard.of
    if world == 1:
        yield from units
        return
    early: list[Unit] = []  # the first `world` units: padding for a rank with none
    first: Unit | None = None
    pending: Unit | None = None
    total = 0
    for number, unit in enumerate(units):
        total += 1
        if number < world:
            early.append(unit)
        if number % world == rank:
            pending = unit
            first = first or unit
        if number % world == world - 1 and pending is not None:
            yield pending
            pending = None
    if total % world and shard.pad:
        yield pending or first or early[rank % total]


def _record_batches(records: Iterator[Any], size: int, drop_last: bool) -> Iterator[Chunk]:
    """``batch(N)`` over an unsharded stream: ``N`` records at a time."""
    start = 0
    while True:
        rows = list(islice(records, size))
        if not rows or (drop_last and len(rows) < size):
            return
        yield Chunk(start, range(start, start + len(rows)), rows)
        start += len(rows)
        if len(rows) < size:
            return


def _rank_records(records: Iterator[Any], shard: ShardSpec) -> Iterator[tuple[int, Any]]:
    """This rank's ``(position, record)`` of a stream, a round of ``world`` at a time
    (the rule of :func:`_shard_units` for single records)."""
    rank, world = shard.id, shard.of
    first: tuple[int, Any] | None = None
    position = 0
    while True:
        block = list(islice(records, world))
        if len(block) == world:
            mine = (position + rank, block[rank])
            first = first or mine
            yield mine
            position += world
            continue
        if block and shard.pad:  # the incomplete last round
            if rank < len(block):
                yield position + rank, block[rank]
            elif first is not None:
                yield first
            else:  # fewer records than ranks: position is 0 and block holds them all
                yield rank % len(block), block[rank % len(block)]
        return


def _pair_batches(
    pairs: Iterator[tuple[int, Any]], size: int, drop_last: bool, *, start: int = 0
) -> Iterator[Chunk]:
    while True:
        rows = list(islice(pairs, size))
        if not rows or (drop_last and len(rows) < size):
            return
        yield Chunk(start, [p for p, _ in rows], [r for _, r in rows])
        start += len(rows)
        if len(rows) < size:
            return


def _rebatch(units: Iterator[Unit], size: int, drop_last: bool) -> Iterator[Chunk]:
    start = 0
    positions: list[int] = []
    rows: list[Any] = []
    for unit_positions, unit_rows in units:
        positions += unit_positions
        rows += unit_rows
        if len(rows) == size:
            yield Chunk(start, positions, rows)
            start += size
            positions, rows = [], []
    if rows and not drop_last:
        yield Chunk(start, positions, rows)


def _unit_chunks(units: Iterator[Unit], *, arrow: bool = False) -> Iterator[Chunk]:
    start = 0
    for positions, rows in units:
        if arrow:
            yield Chunk(start, positions, batch=rows)
        else:
            yield Chunk(start, positions, rows)
        start += len(positions)


def _skip(chunks: Iterator[Chunk], skip: int) -> Iterator[Chunk]:
    return chunks if skip == 0 else _skipped(chunks, skip)


def _skipped(chunks: Iterator[Chunk], skip: int) -> Iterator[Chunk]:
    for chunk in chunks:
        if chunk.end <= skip and skip > 0:
            continue
        yield chunk
