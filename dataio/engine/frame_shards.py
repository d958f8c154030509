"""Shards of a positional frame: each rank a contiguous run of positions, equal counts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

__all__ = ["ShardPositions", "shard_positions"]


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


def shard_positions(n: int, rank: int, world: int, *, pad: bool) -> ShardPositions:
    """A contiguous run of the frame's ``n`` positions for rank ``rank`` of ``world``.

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
    base, rest = divmod(n, world)
    if not pad:
        return ShardPositions(range(rank * base, (rank + 1) * base))
    start = rank * base + min(rank, rest)
    run = range(start, start + base + (1 if rank < rest else 0))
    if not rest or rank < rest:
        return ShardPositions(run)
    return ShardPositions(run, (run.start if run else rank % n,))
