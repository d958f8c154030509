"""Small Arrow record sources for executor tests (independent of ``dataio.records``).

* :class:`TableSource`: an :class:`IndexedSource` over a ``pa.Table`` (``take_batch``
  with Arrow's ``take``), counting the positions it was asked for;
* :class:`StreamSource`: a reusable stream of small record batches (not indexed);
* :class:`BlockSource`: a table source that deals contiguous blocks to ranks
  (``shard_positions``), as a source stored in row groups does;
* :class:`FrameLike`: not indexed, but addressable through ``by_position()``.

Their Python path (``iterate``/``get_many``) builds dicts; tests that must not build
rows add a :func:`tripwire` column, whose values raise when converted to Python.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from dataio.sources.base import IndexedSource, Source


class TableSource(IndexedSource):
    """A table read by position; ``taken`` records every ``take_batch`` call."""

    def __init__(self, table: pa.Table, *, chunk: int = 5) -> None:
        self.table = table
        self.chunk = chunk
        self.taken: list[list[int]] = []

    def arrow_schema(self) -> pa.Schema:
        return self.table.schema

    def length(self) -> int:
        return self.table.num_rows

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self.table.to_batches(max_chunksize=self.chunk))

    def take_batch(self, positions: Sequence[int]) -> pa.RecordBatch:
        wanted = [int(p) for p in positions]
        self.taken.append(wanted)
        taken = self.table.take(pa.array(wanted, pa.int64())).combine_chunks()
        batches = taken.to_batches()
        return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=self.table.schema)

    def get(self, index: int) -> Any:
        return self.table.slice(index, 1).to_pylist()[0]

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        return [self.get(i) for i in indices]

    def iterate(self) -> Iterator[Any]:
        return iter(self.table.to_pylist())

    def describe(self) -> dict[str, Any]:
        return {"source": "test-table", "rows": self.table.num_rows}


class StreamSource(Source):
    """The same rows as a stream of record batches of ``chunk`` rows (not indexed)."""

    def __init__(self, table: pa.Table, *, chunk: int = 5) -> None:
        self.table = table
        self.chunk = chunk

    def arrow_schema(self) -> pa.Schema:
        return self.table.schema

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self.table.to_batches(max_chunksize=self.chunk))

    def iterate(self) -> Iterator[Any]:
        return iter(self.table.to_pylist())

    def length(self) -> int:
        return self.table.num_rows

    def describe(self) -> dict[str, Any]:
        return {"source": "test-stream", "rows": self.table.num_rows}


class BlockSource(TableSource):
    """Deals contiguous blocks: rank r of w reads rows [r*k, (r+1)*k), k = ceil(n/w)."""

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        raise AssertionError("a sharded pass reads by position")

    def shard_positions(self, rank: int, world: int, *, pad: bool) -> Sequence[int]:
        n = self.length()
        per = -(-n // world) if pad else n // world
        block = list(range(rank * per, min((rank + 1) * per, n)))
        while pad and len(block) < per:  # the last rank repeats its first row
            block.append(block[0] if block else rank % n)
        return np.array(block, dtype=np.int64)  # a source may hand NumPy positions


class FrameLike(Source):
    """Not an IndexedSource, but ``by_position()`` reads the same rows by position."""

    def __init__(self, table: pa.Table) -> None:
        self.rows = TableSource(table)
        self.table = table

    def arrow_schema(self) -> pa.Schema:
        return self.table.schema

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        return iter(self.table.to_batches(max_chunksize=4))

    def by_position(self) -> IndexedSource:
        return self.rows

    def length(self) -> int:
        return self.table.num_rows

    def iterate(self) -> Iterator[Any]:
        return iter(self.table.to_pylist())

    def describe(self) -> dict[str, Any]:
        return {"source": "test-frame", "rows": self.table.num_rows}


class RowBuilt(AssertionError):
    """A tripwire value was converted to Python: a row was built."""


class _TripScalar(pa.ExtensionScalar):
    def as_py(self, *args: Any, **kwargs: Any) -> Any:
        raise RowBuilt("a tripwire value was converted to Python (a row dict was built)")


class TripType(pa.ExtensionType):
    """int64 storage whose values refuse conversion to Python."""

    def __init__(self) -> None:
        super().__init__(pa.int64(), "dataio.test.tripwire")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: Any, serialized: Any) -> TripType:
        return cls()

    def __arrow_ext_scalar_class__(self) -> type:
        return _TripScalar


def tripwire(n: int) -> pa.ExtensionArray:
    """A column of ``n`` values; ``to_pylist``/``as_py`` on it (or its table) raise."""
    return pa.ExtensionArray.from_storage(TripType(), pa.array(np.arange(n, dtype=np.int64)))
