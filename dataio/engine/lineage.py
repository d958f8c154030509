"""Lineage: which samples each delivered batch held, for the newest batches.

Each delivered batch adds one entry holding references to the batch's positions and
keys as the batch already has them (a ``range``, a list, an Arrow or NumPy key column);
nothing is converted per row until :meth:`Lineage.table` is called. Keys a batch would
compute from its records on demand are null (passthrough-only plans over Python
records whose key fields the C helper cannot take at once). The newest
``limits.max_lineage_batches`` entries are kept.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from dataio import limits

__all__ = ["Lineage"]


class Lineage:
    """Batch number -> sample positions and keys, for a loader's newest batches."""

    def __init__(self) -> None:
        self.entries: deque[tuple[int, int, Any, Any]] = deque(maxlen=1)
        self.dropped = 0

    def begin(self) -> None:
        """Start a pass: take ``limits.max_lineage_batches`` as it now stands."""
        limit = limits.get().max_lineage_batches
        if self.entries.maxlen != limit:
            self.dropped += max(len(self.entries) - limit, 0)
            self.entries = deque(self.entries, maxlen=limit)

    def record(self, epoch: int, batch: int, positions: Any, keys: Any) -> None:
        """Remember batch ``batch`` of ``epoch`` (its positions and keys, unconverted).

        Keys still to be computed by a function are not kept (null): the function holds
        the chunk's records, which lineage must not keep alive.
        """
        entries = self.entries
        if len(entries) == entries.maxlen:
            self.dropped += 1
        entries.append((epoch, batch, positions, None if callable(keys) else keys))

    def table(self) -> Any:
        """One row per sample: ``epoch``, ``batch``, ``row`` (in the batch), ``position``
        and ``key`` (as text); schema metadata ``dropped`` counts forgotten batches."""
        import pyarrow as pa

        epochs: list[int] = []
        batches: list[int] = []
        rows: list[int] = []
        positions: list[int] = []
        keys: list[str | None] = []
        for epoch, batch, where, which in list(self.entries):
            where = list(where)
            n = len(where)
            epochs += [epoch] * n
            batches += [batch] * n
            rows += range(n)
            positions += [int(p) for p in where]
            keys += [None if k is None else str(k) for k in _key_list(which, n)]
        schema = pa.schema(
            [
                ("epoch", pa.int64()),
                ("batch", pa.int64()),
                ("row", pa.int64()),
                ("position", pa.int64()),
                ("key", pa.string()),
            ],
            metadata={"dropped": str(self.dropped)},
        )
        return pa.Table.from_arrays(
            [
                pa.array(v, type=f.type)
                for v, f in zip((epochs, batches, rows, positions, keys), schema, strict=True)
            ],
            schema=schema,
        )


def _key_list(keys: Any, n: int) -> list[Any]:
    """The keys as a list, from any form a batch holds them in."""
    if keys is None:
        return [None] * n
    if isinstance(keys, list):
        return keys
    if hasattr(keys, "to_pylist"):
        return list(keys.to_pylist())
    if hasattr(keys, "tolist"):
        return list(keys.tolist())
    return list(keys)
