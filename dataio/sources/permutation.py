"""A seeded permutation of ``range(n)`` computed per position, in O(1) memory.

A six-round Feistel network is a bijection on ``2**(2*half_bits)`` values; cycle walking
(re-applying it until the value falls below ``n``) restricts it to ``range(n)``. Each
position costs a few integer hashes, so shuffling a billion-row index needs no list.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dataio.sources.base import IndexedSource, epoch_seed

_permute: Any
try:  # the same order computed in C (optional build); NumPy computes it without
    from dataio.sources import _permute
except ImportError:  # pragma: no cover - built with the package
    _permute = None

__all__ = ["FeistelPermutation", "PermutedIndexed", "mix"]

_MASK64 = (1 << 64) - 1
#: up to this many rows a permutation is tabulated once per epoch (int32: 16 MiB)
TABULATE_ROWS = 1 << 22
#: rows per record batch when a shuffled Arrow source is read as a stream
BLOCK_ROWS = 8192
#: a batch read of consecutive pass positions reads ahead up to this many bytes of rows
READ_AHEAD_BYTES = 4 << 20
#: ...and at most this many rows
READ_AHEAD_ROWS = 16384
#: a shuffled parent stored in blocks whose rows total at most this is read once per pass
WHOLE_BYTES = 64 << 20


def mix(value: int) -> int:
    """splitmix64's finalizer over a 64-bit value."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _mix_array(value: np.ndarray) -> np.ndarray:
    value = value + np.uint64(0x9E3779B97F4A7C15)
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))


class FeistelPermutation:
    """``perm[i]`` for a seeded permutation of ``range(n)``."""

    ROUNDS = 6

    def __init__(self, n: int, seed: int) -> None:
        self.n = n
        bits = max(2, (max(n, 2) - 1).bit_length())
        self.half = (bits + 1) // 2
        self.mask = (1 << self.half) - 1
        self.keys = [mix(mix(seed) ^ (r + 1)) for r in range(self.ROUNDS)]
        self._order: np.ndarray | None = None

    def _encrypt(self, value: int) -> int:
        left, right = value >> self.half, value & self.mask
        for key in self.keys:
            left, right = right, left ^ (mix(right ^ key) & self.mask)
        return (left << self.half) | right

    def __getitem__(self, index: int) -> int:
        if not 0 <= index < self.n:
            raise IndexError(index)
        value = self._encrypt(index)
        while value >= self.n:  # cycle walking stays inside range(n)
            value = self._encrypt(value)
        return value

    def many(self, indices: Sequence[int]) -> list[int]:
        """``[self[i] for i in indices]``, computed with NumPy over the whole list."""
        return self.array(indices).tolist()

    def array(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """:meth:`many` as an ``int64`` array.

        Up to :data:`TABULATE_ROWS` rows the whole order is computed once (an ``int32``
        array of at most 16 MiB), so each batch is one lookup (a ``range`` of positions,
        a slice); above, each call encrypts its positions, in O(1) memory.
        """
        if type(indices) is range and indices.step == 1 and self.n <= TABULATE_ROWS:
            if indices and not (indices.start >= 0 and indices.stop <= self.n):
                raise IndexError(indices.start if indices.start < 0 else indices.stop - 1)
            return self.table()[indices.start : indices.stop].astype(np.int64)
        values = np.asarray(indices, dtype=np.int64).reshape(-1)
        if values.size and (int(values.min()) < 0 or int(values.max()) >= self.n):
            raise IndexError(int(values.min()) if int(values.min()) < 0 else int(values.max()))
        if self.n > TABULATE_ROWS:
            return self._at(values)
        return self.table()[values].astype(np.int64)

    def table(self) -> np.ndarray:
        """The whole order ``[self[i] for i in range(n)]`` as ``int32``, computed once.

        Only for ``n <= TABULATE_ROWS``.
        """
        if self._order is None:
            order = np.empty(self.n, dtype=np.int32)
            if _permute is not None:
                _permute.table(order, self.n, self.half, tuple(self.keys))
            else:
                for start in range(0, self.n, 1 << 18):  # blocks bound the temporaries
                    block = np.arange(start, min(start + (1 << 18), self.n), dtype=np.uint64)
                    order[start : start + block.size] = self._walk(block)
            self._order = order
        return self._order

    def _at(self, values: np.ndarray) -> np.ndarray:
        """The permuted values of in-range ``int64`` positions."""
        if _permute is not None:
            values = np.ascontiguousarray(values)
            out = np.empty_like(values)
            _permute.at(values, out, self.n, self.half, tuple(self.keys))
            return out
        return self._walk(values.astype(np.uint64)).astype(np.int64)

    def _walk(self, values: np.ndarray) -> np.ndarray:
        out = self._encrypt_array(values)
        walking = out >= self.n
        while walking.any():  # cycle walking, only for the values still outside range(n)
            out[walking] = self._encrypt_array(out[walking])
            walking = out >= self.n
        return out

    def _encrypt_array(self, values: np.ndarray) -> np.ndarray:
        half = np.uint64(self.half)
        mask = np.uint64(self.mask)
        left, right = values >> half, values & mask
        with np.errstate(over="ignore"):  # splitmix64 relies on wrapping multiplication
            for key in self.keys:
                left, right = right, left ^ (_mix_array(right ^ np.uint64(key)) & mask)
        return (left << half) | right

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[int]:
        return (self[i] for i in range(self.n))


class PermutedIndexed(IndexedSource):
    """An indexed source read in a seeded order; bulk reads get the remapped positions.

    A batch read of consecutive pass positions (a loader's block) reads further ahead,
    up to :data:`READ_AHEAD_BYTES`: the parent gathers many rows per call (Arrow's
    ``take`` and a frame's row-group gathers cost per call), later blocks are slices.
    A parent stored in blocks (a frame's row groups) whose rows total at most
    :data:`WHOLE_BYTES` is read whole instead, once per pass, in order, when a pass
    goes past its first read, and gathered from in memory: every shuffled block
    would otherwise gather from every row group.
    """

    def __init__(self, parent: IndexedSource, seed: int, reshuffle: bool = True) -> None:
        self.parent = parent
        self.seed = seed
        self.reshuffle = reshuffle
        self.epoch = 0
        self.single_pass = parent.single_pass
        self._perm: FeistelPermutation | None = None
        #: (start, stop, batch): the rows of pass positions start..stop-1, read ahead
        self._ahead: tuple[int, int, Any] | None = None
        self._row_bytes = 0.0  # the mean size of a row read, once one was read
        self._whole: IndexedSource | None = None  # the parent's rows read in one batch
        self._whole_checked = False
        #: narrowed views of a frame parent by column names (shared by every epoch's copy)
        self._views: dict[tuple[str, ...], IndexedSource] = {}

    def __getstate__(self) -> dict[str, Any]:
        # the rows read ahead stay behind (a worker process reads its own)
        # (narrowed views are rebuilt: they would carry a table's columns twice)
        state = {**self.__dict__, "_ahead": None, "_views": {}, "_whole": None}
        return {**state, "_whole_checked": False}

    def at_epoch(self, epoch: int) -> PermutedIndexed:
        """The same shuffle, permuted for ``epoch``."""
        copy = PermutedIndexed(self.parent.at_epoch(epoch), self.seed, self.reshuffle)  # type: ignore[arg-type]
        copy.epoch, copy._views = epoch, self._views
        if epoch == self.epoch or not self.reshuffle:
            copy._perm = self._perm  # the same order: keep a tabulated permutation
        return copy

    def over(self, parent: IndexedSource) -> PermutedIndexed:
        """The same shuffle (seed, epoch and order) over ``parent``: another view of the
        same rows at the same positions (a frame narrowed to fewer columns)."""
        copy = PermutedIndexed(parent, self.seed, self.reshuffle)
        copy.epoch, copy._perm = self.epoch, self._perm
        return copy

    def narrowed(self, columns: list[str]) -> PermutedIndexed:
        """This shuffle reading only ``columns`` of its parent (an Arrow table, or a
        frame's positional view); ``self`` for other parents. Views are kept per column
        list, for every epoch."""
        key = tuple(columns)
        rows = self._views.get(key)
        if rows is None:
            rows = self._narrowed_parent(columns)
            if rows is None:
                return self
            self._views[key] = rows
        return self.over(rows)

    def _narrowed_parent(self, columns: list[str]) -> IndexedSource | None:
        from dataio.sources.arrow import ArrowTableSource

        parent = self.parent
        if isinstance(parent, ArrowTableSource):
            return parent.select(columns)
        select = getattr(getattr(parent, "frame", None), "select", None)  # a frame's rows
        if select is None:
            return None
        rows: IndexedSource | None = select(*columns).by_position()
        if rows is None or rows.length() != parent.length():
            return None
        return rows

    def _permutation(self) -> FeistelPermutation:
        n = self.parent.length()
        if self._perm is None or self._perm.n != n:
            self._perm = FeistelPermutation(n, epoch_seed(self.seed, self.epoch, self.reshuffle))
        return self._perm

    def length(self) -> int:
        """The parent's length."""
        return self.parent.length()

    def get(self, index: int) -> Any:
        """The row at permuted position ``index``."""
        return self.parent.get(self._permutation()[index])

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Forward the remapped positions to the parent's bulk read."""
        from dataio.sources.adapters import SequenceSource

        wanted = self._permutation().array(indices)
        if isinstance(self.parent, SequenceSource):  # takes the array as it is
            return self.parent.get_many(wanted)  # type: ignore[arg-type]
        return self.parent.get_many(wanted.tolist())

    def arrow_schema(self) -> Any:
        """The parent's Arrow schema."""
        return self.parent.arrow_schema()

    def take_batch(self, positions: Sequence[int]) -> Any:
        """The parent's batch read of the remapped positions (consecutive ones read ahead)."""
        if self._row_bytes and not self._whole_checked:  # a pass past its first read
            self._whole_checked = True
            self._read_whole()
        run = _run(positions)
        if run is None:
            return self._measured(self._take(self._permutation().array(positions)))
        start, stop = run
        ahead = self._ahead  # one read of the attribute: a racing reader only reads again
        if ahead is not None and ahead[0] <= start and stop <= ahead[1]:
            return ahead[2].slice(start - ahead[0], stop - start)
        count = stop - start
        if self._row_bytes:  # read ahead
            count = max(count, min(READ_AHEAD_ROWS, int(READ_AHEAD_BYTES // self._row_bytes)))
        end = min(self.length(), start + count)
        batch = self._measured(self._take(self._permutation().array(range(start, end))))
        if end == stop:
            return batch
        self._ahead = (start, end, batch)
        return batch.slice(0, stop - start)

    def _measured(self, batch: Any) -> Any:
        """``batch``, its mean row size noted if none was yet."""
        if not self._row_bytes and batch.num_rows:
            self._row_bytes = max(batch.nbytes / batch.num_rows, 1.0)
        return batch

    def _take(self, rows: Any) -> Any:
        # an int64 array, as the loader hands positions to Arrow sources (take_batch's
        # Sequence[int] includes NumPy arrays for every Arrow source)
        return (self._whole or self.parent).take_batch(rows)

    def _read_whole(self) -> None:
        """Read a small parent stored in blocks at once (see the class docstring)."""
        import pyarrow as pa

        from dataio.sources.arrow import ArrowTableSource

        n = self.parent.length()
        if isinstance(self.parent, ArrowTableSource) or n * self._row_bytes > WHOLE_BYTES:
            return  # a table gathers from memory already; a large parent is read by block
        rows = pa.Table.from_batches([self.parent.take_batch(range(n))])
        self._whole = ArrowTableSource(rows, mode="shuffled", what="the shuffled rows")

    def iterate_batches(self) -> Iterator[Any]:
        """The permuted rows as record batches, gathered block by block from the parent."""
        n = self.length()
        for start in range(0, n, BLOCK_ROWS):
            yield self.take_batch(range(start, min(start + BLOCK_ROWS, n)))

    def describe(self) -> dict[str, Any]:
        """Shuffle settings and the parent."""
        settings = {"seed": self.seed, "buffer_size": None, "reshuffle_each_epoch": self.reshuffle}
        return {"shuffle": settings, "of": self.parent.description()}

    @property
    def configured(self) -> bool:
        """A shuffle is tracked configuration."""
        return True


def _run(positions: Sequence[int]) -> tuple[int, int] | None:
    """``(start, stop)`` when ``positions`` are ``start, start + 1, ..., stop - 1``."""
    if type(positions) is range:
        return (positions.start, positions.stop) if positions.step == 1 and positions else None
    if isinstance(positions, np.ndarray) and positions.ndim == 1 and positions.size > 1:
        first, last = int(positions[0]), int(positions[-1])
        if last - first == positions.size - 1 and bool(np.all(np.diff(positions) == 1)):
            return first, last + 1
    return None
