"""Source combinators: map, flat map, filter, concat and shuffles. All lazy."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio.exceptions import DataioError
from dataio.sources.base import IndexedSource, Source, callable_name, epoch_seed

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["BufferShuffled", "Concat", "Filtered", "FlatMapped", "Mapped", "PermutedSequential"]


class _Derived(Source):
    """A source computed from one parent: single-pass when the parent is."""

    #: the epoch this copy reads (only shuffles use it)
    epoch: int = 0
    #: True when the records' order depends on the epoch
    per_epoch: bool = False

    def __init__(self, parent: Source) -> None:
        self.parent = parent
        self.single_pass = parent.single_pass

    @property
    def configured(self) -> bool:
        """Every combinator is tracked configuration."""
        return True

    def at_epoch(self, epoch: int) -> Source:
        """A copy over the parent as read in ``epoch`` (itself when nothing changes)."""
        parent = self.parent.at_epoch(epoch)
        if parent is self.parent and not self.per_epoch:
            return self
        derived = copy.copy(self)
        derived.parent = parent
        derived.epoch = epoch
        return derived


class Mapped(_Derived):
    """One record in, one record out. Keeps the length and indexed access."""

    def __new__(cls, parent: Source, fn: Callable[[Any], Any]) -> Mapped:
        if isinstance(parent, IndexedSource) and cls is Mapped:
            return super().__new__(MappedIndexed)
        return super().__new__(cls)

    def __init__(self, parent: Source, fn: Callable[[Any], Any]) -> None:
        super().__init__(parent)
        self.fn = fn

    def iterate(self) -> Iterator[Any]:
        """Map the parent's records in order."""
        return map(self.fn, self.parent.iterate())

    def length(self) -> int | None:
        """The parent's length."""
        return self.parent.length()

    def describe(self) -> dict[str, Any]:
        """The parent and the function's name."""
        return {"map_records": callable_name(self.fn), "of": self.parent.description()}

    def shard_records(
        self, rank: int, world: int, *, pad: bool, start: int = 0
    ) -> Iterator[tuple[int, Any]] | None:
        """The parent's own shard, mapped."""
        dealt = self.parent.shard_records(rank, world, pad=pad, start=start)
        return None if dealt is None else ((p, self.fn(r)) for p, r in dealt)


class MappedIndexed(Mapped, IndexedSource):
    """A map over an indexed source: rows are read (in bulk when possible), then mapped."""

    parent: IndexedSource

    def length(self) -> int:
        """The parent's length."""
        return self.parent.length()

    def get(self, index: int) -> Any:
        """Read and map one row."""
        return self.fn(self.parent.get(index))

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Read rows in bulk from the parent, then map each."""
        return [self.fn(row) for row in self.parent.get_many(indices)]

    def iterate(self) -> Iterator[Any]:
        """Map the parent's rows in order."""
        return map(self.fn, self.parent.iterate())


class FlatMapped(_Derived):
    """Each record expands into zero or more records; the length is unknown."""

    def __init__(self, parent: Source, fn: Callable[[Any], Iterable[Any]]) -> None:
        super().__init__(parent)
        self.fn = fn

    def iterate(self) -> Iterator[Any]:
        """Expand the parent's records in order."""
        for record in self.parent.iterate():
            children = self.fn(record)
            if isinstance(children, dict | bytes | str) or not isinstance(children, Iterable):
                raise DataioError(
                    f"flat_map_records function {callable_name(self.fn)} returned "
                    f"{type(children).__name__}; return an iterable of records "
                    "(wrap a single record in a list)"
                )
            yield from children

    def describe(self) -> dict[str, Any]:
        """The parent and the function's name."""
        return {"flat_map_records": callable_name(self.fn), "of": self.parent.description()}


class Filtered(_Derived):
    """Records for which a predicate holds; the length is unknown."""

    def __init__(self, parent: Source, predicate: Callable[[Any], bool]) -> None:
        super().__init__(parent)
        self.predicate = predicate

    def iterate(self) -> Iterator[Any]:
        """Filter the parent's records in order."""
        return filter(self.predicate, self.parent.iterate())

    def describe(self) -> dict[str, Any]:
        """The parent and the predicate's name."""
        return {"filter": callable_name(self.predicate), "of": self.parent.description()}


class Concat(Source):
    """Sources one after the other; a child is opened only when the one before ends."""

    def __init__(self, children: tuple[Source, ...]) -> None:
        self.children = children
        self.single_pass = any(c.single_pass for c in children)

    def iterate(self) -> Iterator[Any]:
        """Yield each child's records in turn, opening children lazily."""
        for child in self.children:
            yield from child.iterate()

    def arrow_schema(self) -> pa.Schema | None:
        """The children's schema when every child is Arrow with an equal schema, else ``None``."""
        schemas = [c.arrow_schema() for c in self.children]
        first = schemas[0] if schemas else None
        if first is None or any(s is None or not s.equals(first) for s in schemas):
            return None
        return first

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """Each child's record batches in turn, opening children lazily."""
        for child in self.children:
            yield from child.iterate_batches()

    def length(self) -> int | None:
        """The sum of the children's lengths when all are known."""
        lengths = [c.length() for c in self.children]
        return None if any(n is None for n in lengths) else sum(lengths)  # type: ignore[arg-type]

    def describe(self) -> dict[str, Any]:
        """Every child, in order."""
        return {"concat": [c.description() for c in self.children]}

    def at_epoch(self, epoch: int) -> Source:
        """Every child as read in ``epoch``."""
        children = tuple(c.at_epoch(epoch) for c in self.children)
        if all(a is b for a, b in zip(children, self.children, strict=True)):
            return self
        return Concat(children)

    @property
    def configured(self) -> bool:
        """Composition is tracked configuration."""
        return True


class BufferShuffled(_Derived):
    """A bounded shuffle buffer of ``buffer_size`` pending records, seeded."""

    def __init__(self, parent: Source, seed: int, buffer_size: int, reshuffle: bool = True) -> None:
        super().__init__(parent)
        self.seed = seed
        self.buffer_size = buffer_size
        self.reshuffle = reshuffle
        self.per_epoch = reshuffle

    def iterate(self) -> Iterator[Any]:
        """Fill the buffer, then emit a random pending record for each new one."""
        rng = random.Random(epoch_seed(self.seed, self.epoch, self.reshuffle))
        buffer: list[Any] = []
        for record in self.parent.iterate():
            if len(buffer) < self.buffer_size:
                buffer.append(record)
                continue
            slot = rng.randrange(self.buffer_size)
            yield buffer[slot]
            buffer[slot] = record
        rng.shuffle(buffer)
        yield from buffer

    def length(self) -> int | None:
        """The parent's length."""
        return self.parent.length()

    def describe(self) -> dict[str, Any]:
        """Shuffle settings and the parent."""
        settings = {
            "seed": self.seed,
            "buffer_size": self.buffer_size,
            "reshuffle_each_epoch": self.reshuffle,
        }
        return {"shuffle": settings, "of": self.parent.description()}


class PermutedSequential(_Derived):
    """A full permutation of a reusable, non-indexed source: read into a list first."""

    def __init__(self, parent: Source, seed: int, reshuffle: bool = True) -> None:
        super().__init__(parent)
        self.seed = seed
        self.reshuffle = reshuffle
        self.per_epoch = reshuffle

    def iterate(self) -> Iterator[Any]:
        """Materialize one pass, then yield it in a seeded order."""
        rows = list(self.parent.iterate())
        order = self._order(len(rows))
        return (rows[i] for i in order)

    def _order(self, n: int) -> np.ndarray:
        seed = epoch_seed(self.seed, self.epoch, self.reshuffle)
        return np.random.default_rng(seed).permutation(n)

    def arrow_schema(self) -> pa.Schema | None:
        """The parent's schema: a shuffled Arrow stream stays Arrow."""
        return self.parent.arrow_schema()

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """Read one pass into a table, then gather it in the order :meth:`iterate` uses."""
        import pyarrow as pa

        from dataio.sources.arrow import ArrowTableSource
        from dataio.sources.permutation import BLOCK_ROWS

        schema = self.parent.arrow_schema()
        table = pa.Table.from_batches(list(self.parent.iterate_batches()), schema=schema)
        rows = ArrowTableSource(table, mode="shuffled", what="a shuffled Arrow stream")
        order = self._order(table.num_rows)
        for start in range(0, order.size, BLOCK_ROWS):
            yield rows.take_batch(order[start : start + BLOCK_ROWS])

    def length(self) -> int | None:
        """The parent's length."""
        return self.parent.length()

    def describe(self) -> dict[str, Any]:
        """Shuffle settings and the parent."""
        settings = {"seed": self.seed, "buffer_size": None, "reshuffle_each_epoch": self.reshuffle}
        return {"shuffle": settings, "of": self.parent.description()}
