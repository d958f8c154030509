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

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dataio.exceptions import DataioError, FieldError, PlanError
from dataio.plan.pipeline import BatchStage, CollateStage, ShapeStage
from dataio.sources.base import IndexedSource, Source

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


@dataclass
class Chunk:
    """The records of one batch, their stream positions and the rank-local offset."""

    start: int
    positions: list[int]
    records: list[Any]

    @property
    def end(self) -> int:
        """Rank-local sample count once this chunk is delivered."""
        return self.start + len(self.records)


Unit = tuple[list[int], list[Any]]


def plan_chunks(
    source: Source, shape: ShapeStage, shard: ShardSpec, skip: int = 0
) -> Iterator[Chunk]:
    """The chunks of one pass for this rank, starting at the chunk holding sample ``skip``."""
    if isinstance(shape, BatchStage) and isinstance(source, IndexedSource):
        return _indexed_batches(source, shape, shard, skip)
    units = _units(source, shape)
    mine = _shard_units(units, shard)
    if isinstance(shape, BatchStage):
        chunks = _rebatch(mine, shape.size, shape.drop_last)
    else:
        chunks = _unit_chunks(mine)
    return _skip(chunks, skip)


def _indexed_batches(
    source: IndexedSource, shape: BatchStage, shard: ShardSpec, skip: int
) -> Iterator[Chunk]:
    total = source.length()
    rank, world = shard.id, shard.of
    rounds, rest = divmod(total, world)
    positions: list[int] | range = range(rank, rounds * world, world)
    if rest and shard.pad:
        extra = rank + rounds * world if rank < rest else (rank if rounds else rank % total)
        positions = [*positions, extra]
    size = shape.size
    count = len(positions)
    if shape.drop_last:
        count -= count % size
    first = (skip // size) * size if skip < count else count
    for start in range(first, count, size):
        wanted = list(positions[start : min(start + size, count)])
        yield Chunk(start, wanted, source.get_many(wanted))


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


def _unit_chunks(units: Iterator[Unit]) -> Iterator[Chunk]:
    start = 0
    for positions, rows in units:
        yield Chunk(start, positions, rows)
        start += len(rows)


def _skip(chunks: Iterator[Chunk], skip: int) -> Iterator[Chunk]:
    for chunk in chunks:
        if chunk.end <= skip and skip > 0:
            continue
        yield chunk
