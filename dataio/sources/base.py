"""Record sources: immutable descriptions of a record stream, opened once per pass.

A :class:`Source` knows how to start a pass (:meth:`Source.iterate`), whether its length
is known, and — for indexed sources — how to read rows by position, alone or in bulk.
Combinators (:meth:`Source.map_records`, :meth:`Source.filter`, :meth:`Source.shuffle`,
...) return new sources; nothing is read until a loader starts a pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from dataio.exceptions import DataioError, PlanError
from dataio.plan.naming import callable_name

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["IndexedSource", "Source", "callable_name", "source_signature"]


class Source:
    """A record stream. Subclasses implement :meth:`iterate` and :meth:`describe`."""

    #: True when :meth:`iterate` may be called once only.
    single_pass: bool = False

    def iterate(self) -> Iterator[Any]:
        """Start a pass over the records."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description of the tracked configuration (for signatures)."""
        raise NotImplementedError

    def description(self) -> dict[str, Any]:
        """What :meth:`signature` digests: :meth:`describe`, except for a frame, whose
        ``describe()`` gives statistics as polars' does (its plan is its description)."""
        return self.describe()

    def length(self) -> int | None:
        """The number of records when known without reading them, else ``None``."""
        return None

    # -- columnar access (sources whose records are Arrow rows) ----------------------

    def arrow_schema(self) -> pa.Schema | None:
        """The records' Arrow schema when a pass can be read as record batches, else ``None``.

        Sources of Python records return ``None``: the executor reads them with
        :meth:`iterate` and carries what Arrow cannot hold in an object side column.
        """
        return None

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """Start a pass as Arrow record batches of any sizes, rows in source order.

        Only for sources whose :meth:`arrow_schema` is not ``None``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no Arrow batches")

    def by_position(self) -> IndexedSource | None:
        """An indexed view of the same rows in the same order, when rows are addressable.

        Sources that are not :class:`IndexedSource` but can read rows by position (a
        Parquet or Feather frame) return one, so shuffles and shards read only the rows
        they need; ``None`` otherwise.
        """
        return self if isinstance(self, IndexedSource) else None

    def shard_records(
        self, rank: int, world: int, *, pad: bool, start: int = 0
    ) -> Iterator[tuple[int, Any]] | None:
        """Rank ``rank`` of ``world``'s records from its ``start``-th on, with their
        positions in the unsharded stream, when the source deals its own shards.

        Sources stored in files (WebDataset shards) deal contiguous runs so a rank reads
        about ``1/world`` of the bytes, with the counts of a round-robin shard (``pad`` as
        in ``run(shard=...)``). ``None`` (the default) keeps the round-robin assignment.
        """
        return None

    @property
    def configured(self) -> bool:
        """True when the source carries tracked configuration beyond its adapter."""
        return False

    def at_epoch(self, epoch: int) -> Source:
        """This source as read in ``epoch``: shuffles below it reorder per epoch.

        Sources without a shuffle return themselves; the loader calls this at the start
        of every pass.
        """
        return self

    def signature(self) -> str:
        """A stable hex digest of :meth:`description`."""
        return source_signature(self.description())

    def __repr__(self) -> str:
        from dataio.sources.display import source_text

        # only an indexed source's length is free; others may have to read to know it
        rows = self.length() if isinstance(self, IndexedSource) else None
        return source_text(self.description(), rows)

    def __len__(self) -> int:
        n = self.length()
        if n is None:
            raise TypeError(f"{type(self).__name__} has no known length")
        return n

    def __iter__(self) -> Iterator[Any]:
        return self.iterate()

    # -- combinators ---------------------------------------------------------------

    def map_records(self, fn: Callable[[Any], Any]) -> Source:
        """Map each record to one record (lazily, in order).

        Example:
            >>> dataio.records([1, 2]).map_records(lambda x: {"v": x})  # doctest: +SKIP
        """
        from dataio.sources.combinators import Mapped

        return Mapped(self, _check_callable(fn, "map_records"))

    def flat_map_records(self, fn: Callable[[Any], Iterable[Any]]) -> Source:
        """Expand each record into zero or more records, in order; the length becomes unknown.

        ``fn`` returns an iterable of complete records: wrap a single mapping in a list.
        """
        from dataio.sources.combinators import FlatMapped

        return FlatMapped(self, _check_callable(fn, "flat_map_records"))

    def filter(self, predicate: Callable[[Any], bool]) -> Source:
        """Keep the records for which ``predicate`` is true; the length becomes unknown."""
        from dataio.sources.combinators import Filtered

        return Filtered(self, _check_callable(predicate, "filter"))

    def concat(self, *others: Any) -> Source:
        """Append other sources; each is opened only when the previous one is exhausted."""
        from dataio.sources.adapters import records
        from dataio.sources.combinators import Concat

        children = [self, *(o if isinstance(o, Source) else records(o) for o in others)]
        return Concat(tuple(children))

    def shuffle(
        self, *, seed: int, buffer_size: int | None = None, reshuffle_each_epoch: bool = True
    ) -> Source:
        """Shuffle, seeded by ``seed`` and the loader's epoch.

        Each epoch gets its own order, derived from ``(seed, epoch)`` as torch's
        ``DistributedSampler`` does; the same seed and epoch give the same order on any
        worker count. ``reshuffle_each_epoch=False`` repeats epoch 0's order every epoch.

        With ``buffer_size`` a bounded buffer mixes nearby records (works on single-pass
        sources). Without it the whole order is permuted: indexed sources use a seeded
        permutation of positions in O(1) memory; other reusable sources of known length
        are read into a list first; single-pass sources and expansions
        (``flat_map_records``) are refused: pass ``buffer_size``.

        Example:
            >>> dataio.records(range(10)).shuffle(seed=1)  # doctest: +SKIP
        """
        from dataio.sources.combinators import BufferShuffled, PermutedSequential
        from dataio.sources.permutation import PermutedIndexed

        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise PlanError(f"shuffle seed must be a non-negative integer, got {seed!r}")
        if not isinstance(reshuffle_each_epoch, bool):
            raise PlanError(
                f"shuffle reshuffle_each_epoch must be True or False, got {reshuffle_each_epoch!r}"
            )
        if buffer_size is not None:
            if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) or buffer_size < 1:
                raise PlanError(
                    f"shuffle buffer_size must be a positive integer, got {buffer_size!r}"
                )
            return BufferShuffled(self, seed, buffer_size, reshuffle_each_epoch)
        if isinstance(self, IndexedSource):
            return PermutedIndexed(self, seed, reshuffle_each_epoch)
        if self.single_pass:
            raise PlanError(
                "a full shuffle of a single-pass source would need to read it all first; "
                "pass buffer_size= for a bounded shuffle, or bind a reusable source"
            )
        if _expands(self):
            raise PlanError(
                "a full shuffle after flat_map_records would hold the whole expansion in "
                "memory; pass buffer_size= for a bounded shuffle (e.g. shuffle(seed=..., "
                "buffer_size=4096))"
            )
        return PermutedSequential(self, seed, reshuffle_each_epoch)


class IndexedSource(Source):
    """A finite source read by position: :meth:`get` and, in bulk, :meth:`get_many`."""

    def length(self) -> int:
        """The number of rows."""
        raise NotImplementedError

    def get(self, index: int) -> Any:
        """Read the row at ``index``."""
        raise NotImplementedError

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Read several rows, in the order given (duplicates included)."""
        return [self.get(i) for i in indices]

    def iterate(self) -> Iterator[Any]:
        """Read the rows in order, one at a time."""
        return (self.get(i) for i in range(self.length()))

    def take_batch(self, positions: Sequence[int]) -> pa.RecordBatch:
        """The rows at ``positions`` (in the order given, duplicates included) as one batch.

        Only for sources whose :meth:`arrow_schema` is not ``None``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no Arrow batches")

    def shard_positions(self, rank: int, world: int, *, pad: bool) -> Sequence[int] | None:
        """The positions rank ``rank`` of ``world`` reads, when the source chooses them.

        A source stored in blocks (Parquet row groups, files) returns contiguous runs so
        that each rank reads about ``1/world`` of the bytes; every rank must get the same
        count (``pad`` as in ``run(shard=...)``). ``None`` (the default) keeps the
        round-robin assignment ``position % world == rank``.
        """
        return None


def epoch_seed(seed: int, epoch: int, reshuffle: bool) -> int:
    """The seed a shuffle uses in ``epoch``: ``seed`` itself in epoch 0 (or when fixed)."""
    if not reshuffle or epoch == 0:
        return seed
    from dataio.sources.permutation import mix

    return mix(mix(seed) ^ mix(epoch)) >> 1  # 63 bits: any RNG takes it


def _expands(source: Source) -> bool:
    """True when ``source`` has a flat map upstream (through maps and filters)."""
    from dataio.sources.combinators import FlatMapped, _Derived

    while isinstance(source, _Derived):
        if isinstance(source, FlatMapped):
            return True
        source = source.parent
    return False


def source_signature(description: dict[str, Any]) -> str:
    """Hash a source description into the ``record_source_signature`` of checkpoints."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _check_callable(fn: Any, what: str) -> Any:
    if not callable(fn):
        raise PlanError(f"{what} needs a callable, got {fn!r}")
    return fn


def single_pass_error(what: str) -> DataioError:
    """The error for a second pass over a single-pass source."""
    return DataioError(
        f"{what} is single-pass and was already read; build a new adapter for another "
        "pass, or bind a reusable iterable or a zero-argument factory"
    )
