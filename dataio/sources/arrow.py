"""Arrow record sources: tables, record batches, readers and Arrow C streams.

Every source here knows its Arrow schema and reads a pass as record batches
(:meth:`Source.iterate_batches`), so a loader can move its rows as columns. Rows become
Python dicts only on the Python path (:meth:`Source.iterate`, :meth:`IndexedSource.get_many`)
that record maps, filters and buffered shuffles take.

* Indexed (read by position, :meth:`ArrowTableSource.take_batch`): ``pa.Table``,
  ``pa.RecordBatch``, a polars ``DataFrame`` and an in-memory ``pyarrow.dataset``.
* Reusable streams (each pass exports the object again): a polars ``LazyFrame``
  (collected per pass), a duckdb relation (the query runs per pass), a file
  ``pyarrow.dataset.Dataset`` (scanned per pass) and any other object with
  ``__arrow_c_stream__``.
* Single pass: a ``pa.RecordBatchReader``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from dataio.exceptions import DataioError, FormatError
from dataio.sources.base import IndexedSource, Source, single_pass_error

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "ArrowReaderSource",
    "ArrowStreamSource",
    "ArrowTableSource",
    "arrow_source",
    "takeable_type",
]

#: rows converted to Python dicts at a time on the Python path
ROWS_PER_CHUNK = 1024
#: shortest mean run of consecutive positions that ``take_batch`` reads as slices
MIN_SLICE_RUN = 4


def type_name(x: Any) -> str:
    """``module.QualName`` of an object's type, as sources describe foreign objects."""
    return f"{type(x).__module__}.{type(x).__qualname__}"


def describe_schema(schema: pa.Schema) -> list[list[str]]:
    """A schema as ``[[name, type], ...]`` for signatures (never the data)."""
    return [[field.name, str(field.type)] for field in schema]


def batch_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    """The rows of record batches as dicts, a bounded slice at a time."""
    for batch in batches:
        for offset in range(0, batch.num_rows, ROWS_PER_CHUNK):
            yield from batch.slice(offset, ROWS_PER_CHUNK).to_pylist()


def describe_object(mode: str, what: str, schema: pa.Schema) -> dict[str, Any]:
    """The description of a reusable Arrow object source (mode, type, schema)."""
    return {"source": "records", "mode": mode, "type": what, "schema": describe_schema(schema)}


class ArrowTableSource(IndexedSource):
    """An Arrow table (or an object exported to one on first use), read by position.

    ``take_batch`` returns zero-copy slices for runs of consecutive positions inside one
    record batch, and gathers scattered positions with Arrow's ``take``.
    """

    def __init__(self, table: pa.Table | Callable[[], pa.Table], *, mode: str, what: str) -> None:
        self._table: pa.Table | None = None if callable(table) else table
        self._load = table if callable(table) else None
        self.mode = mode
        self.what = what
        self._batches: list[pa.RecordBatch] | None = None
        self._offsets: np.ndarray | None = None
        self._takeable: pa.RecordBatch | None = None

    def __getstate__(self) -> dict[str, Any]:
        # once exported, the table travels instead of the object (an in-memory
        # pyarrow dataset does not pickle); the gather copy is rebuilt on demand
        state = {**self.__dict__, "_takeable": None, "_batches": None, "_offsets": None}
        if self._table is not None:
            state["_load"] = None
        return state

    @property
    def table(self) -> pa.Table:
        """The rows as a ``pa.Table`` (exported from the object on first use)."""
        if self._table is None:
            assert self._load is not None
            self._table = _arrow_call(self._load, self.what)
        return self._table

    def arrow_schema(self) -> pa.Schema:
        """The table's schema."""
        return self.table.schema

    def select(self, columns: Sequence[str]) -> ArrowTableSource:
        """The same rows with only ``columns`` (zero-copy): what a shuffle gathers."""
        return ArrowTableSource(self.table.select(list(columns)), mode=self.mode, what=self.what)

    def length(self) -> int:
        """The number of rows."""
        return int(self.table.num_rows)

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """The table's record batches in order (zero-length ones left out)."""
        return (b for b in self.table.to_batches() if b.num_rows)

    def iterate(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts, in order (the Python path)."""
        return batch_rows(self.iterate_batches())

    def get(self, index: int) -> dict[str, Any]:
        """One row as a dict; negative indices count from the end."""
        n = self.length()
        position = index + n if index < 0 else index
        if not 0 <= position < n:
            raise IndexError(f"row {index} is out of range for {self.what} of {n} rows")
        rows: list[dict[str, Any]] = self.take_batch([position]).to_pylist()
        return rows[0]

    def get_many(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Rows as dicts, in the order given (the Python path)."""
        rows: list[dict[str, Any]] = self.take_batch(indices).to_pylist()
        return rows

    def take_batch(self, positions: Sequence[int] | np.ndarray) -> pa.RecordBatch:
        """The rows at ``positions`` (order kept, duplicates allowed) as one record batch."""
        import pyarrow as pa

        table = self.table
        wanted = np.asarray(positions, dtype=np.int64).reshape(-1)
        n = table.num_rows
        if wanted.size and (int(wanted.min()) < 0 or int(wanted.max()) >= n):
            bad = int(wanted.min()) if int(wanted.min()) < 0 else int(wanted.max())
            raise IndexError(f"position {bad} is out of range for {self.what} of {n} rows")
        if table.num_columns == 0:  # Arrow's take would lose the row count
            return pa.RecordBatch.from_arrays([pa.nulls(wanted.size)], names=["_"]).drop_columns(
                ["_"]
            )
        if wanted.size == 0:
            return _empty_batch(table)
        starts = np.flatnonzero(np.diff(wanted) != 1) + 1
        if (starts.size + 1) * MIN_SLICE_RUN <= wanted.size:
            bounds = zip([0, *starts.tolist()], [*starts.tolist(), wanted.size], strict=True)
            pieces = [p for lo, hi in bounds for p in self._slices(int(wanted[lo]), hi - lo)]
            return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
        return self._gather(wanted)

    def _gather(self, wanted: np.ndarray) -> pa.RecordBatch:
        """Arrow's ``take`` over a single-chunk version of the table.

        Arrow's chunked ``take`` concatenates variable-width chunks on every call, so a
        table of several chunks is combined once (one copy, kept). View columns (polars'
        strings), which ``take`` cannot gather, are gathered in the matching large type
        and cast back.
        """
        import pyarrow as pa

        schema = self.table.schema
        if self._takeable is None:
            self._takeable = _takeable_batch(self.table)
        try:
            batch = self._takeable.take(pa.array(wanted))
            return batch if batch.schema.equals(schema) else batch.cast(schema)
        except pa.ArrowException as exc:
            raise DataioError(
                f"cannot gather rows of {self.what} with schema "
                f"{schema.to_string(show_schema_metadata=False)!r}: {exc}"
            ) from exc

    def _slices(self, start: int, count: int) -> list[pa.RecordBatch]:
        """Zero-copy slices of the table's batches covering ``count`` rows from ``start``."""
        if self._batches is None:
            self._batches = self.table.to_batches()
            self._offsets = np.cumsum([0, *(b.num_rows for b in self._batches)])
        batches, offsets = self._batches, self._offsets
        assert offsets is not None
        out = []
        index = int(np.searchsorted(offsets, start, side="right")) - 1
        while count > 0:
            piece = batches[index].slice(start - int(offsets[index]), count)
            if piece.num_rows:
                out.append(piece)
            start += piece.num_rows
            count -= piece.num_rows
            index += 1
        return out

    def describe(self) -> dict[str, Any]:
        """Adapter mode, the object's type and the schema; the data is not hashed."""
        return describe_object(self.mode, self.what, self.arrow_schema())


def takeable_type(kind: pa.DataType) -> pa.DataType:
    """``kind`` with view types (which Arrow's ``take`` cannot gather: polars' strings)
    replaced by the matching large types, inside lists and structs too."""
    import pyarrow as pa

    if pa.types.is_string_view(kind):
        return pa.large_string()
    if pa.types.is_binary_view(kind):
        return pa.large_binary()
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        item = kind.value_field.with_type(takeable_type(kind.value_type))
        return pa.large_list(item) if pa.types.is_large_list(kind) else pa.list_(item)
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(takeable_type(kind.value_type)), kind.list_size)
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(takeable_type(f.type)) for f in kind])
    return kind


def _takeable_batch(table: pa.Table) -> pa.RecordBatch:
    """The table as one batch that ``take`` can gather from (view types made large)."""
    import pyarrow as pa

    target = pa.schema([f.with_type(takeable_type(f.type)) for f in table.schema])
    if not target.equals(table.schema):
        table = table.cast(target)
    batches = table.combine_chunks().to_batches()
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_arrays(
        [pa.array([], type=f.type) for f in target], schema=target
    )  # a table without rows


def _empty_batch(table: pa.Table) -> pa.RecordBatch:
    import pyarrow as pa

    batches = table.to_batches()
    if batches:
        return batches[0].slice(0, 0)
    columns = [pa.array([], type=field.type) for field in table.schema]
    return pa.RecordBatch.from_arrays(columns, schema=table.schema)


class ArrowStreamSource(Source):
    """A reusable Arrow stream: every pass calls ``open()`` for a fresh reader.

    The schema is read from the first reader opened, which then serves the next pass, so
    finding the schema costs no extra export.
    """

    def __init__(
        self,
        open: Callable[[], pa.RecordBatchReader],
        *,
        mode: str,
        what: str,
        schema: Callable[[], pa.Schema] | None = None,
        length: Callable[[], int | None] | None = None,
    ) -> None:
        self._open = open
        self._schema_fn = schema
        self._length_fn = length
        self._schema: pa.Schema | None = None
        self._length: int | None = None
        self._rows_last_pass = 0
        self._pending: pa.RecordBatchReader | None = None
        self.mode = mode
        self.what = what

    def __getstate__(self) -> dict[str, Any]:
        # an open reader kept for the next pass does not travel (to worker processes)
        return {**self.__dict__, "_pending": None}

    def _reader(self) -> pa.RecordBatchReader:
        reader = _arrow_call(self._open, self.what)
        if self._schema is not None and not reader.schema.equals(self._schema):
            raise DataioError(
                f"{self.what} exported a different schema on this pass "
                f"({reader.schema.to_string(show_schema_metadata=False)!r}); a source must "
                "give the same columns every pass"
            )
        return reader

    def arrow_schema(self) -> pa.Schema:
        """The stream's schema (from the object, else from a reader kept for the next pass)."""
        if self._schema is None:
            if self._schema_fn is not None:
                self._schema = _arrow_call(self._schema_fn, self.what)
            else:
                self._pending = self._reader()
                self._schema = self._pending.schema
        return self._schema

    def length(self) -> int | None:
        """The row count when the object gives it cheaply (dataset metadata), else ``None``."""
        if self._length is None and self._length_fn is not None:
            self._length = _arrow_call(self._length_fn, self.what)
        return self._length

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """Export the object again and stream its record batches."""
        self.arrow_schema()
        reader, self._pending = self._pending, None
        return self._counted(_read_batches(reader or self._reader(), self.what))

    def _counted(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # A one-shot stream (a consumed reader behind __arrow_c_stream__) exports again
        # as an empty stream: refuse that instead of training on an empty epoch.
        rows = 0
        for batch in batches:
            rows += batch.num_rows
            yield batch
        if rows == 0 and self._rows_last_pass:
            raise DataioError(
                f"{self.what} gave no rows on this pass after {self._rows_last_pass} on the "
                "last: its Arrow stream can be exported only once; bind an object that "
                "exports again (a table, a polars or duckdb object), or read it once with "
                "pyarrow.RecordBatchReader.from_stream(x)"
            )
        self._rows_last_pass = rows

    def iterate(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts, in order (the Python path)."""
        return batch_rows(self.iterate_batches())

    def describe(self) -> dict[str, Any]:
        """Adapter mode, the object's type and the schema; the data is not hashed."""
        return describe_object(self.mode, self.what, self.arrow_schema())


class ArrowReaderSource(Source):
    """A ``pa.RecordBatchReader``: one pass; a second pass is an error."""

    single_pass = True

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader: pa.RecordBatchReader | None = reader
        self._schema = reader.schema
        self.what = type_name(reader)

    def arrow_schema(self) -> pa.Schema:
        """The reader's schema."""
        return self._schema

    def iterate_batches(self) -> Iterator[pa.RecordBatch]:
        """Read the reader's batches (once)."""
        if self._reader is None:
            raise single_pass_error(f"records({self.what})")
        reader, self._reader = self._reader, None
        return _read_batches(reader, self.what)

    def iterate(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts, in order (the Python path)."""
        return batch_rows(self.iterate_batches())

    def describe(self) -> dict[str, Any]:
        """Adapter mode and the schema."""
        return {
            "source": "records",
            "mode": "arrow-reader",
            "schema": describe_schema(self._schema),
        }


def _read_batches(reader: pa.RecordBatchReader, what: str) -> Iterator[pa.RecordBatch]:
    import pyarrow as pa

    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except (pa.ArrowException, OSError) as exc:  # truncated IPC is an OSError
                raise FormatError(f"reading the Arrow stream of {what} failed: {exc}") from exc
            if batch.num_rows:
                yield batch
    finally:
        reader.close()


def _arrow_call(fn: Callable[[], Any], what: str) -> Any:
    """Call an exporter; whatever it raises becomes a DataioError naming the object."""
    try:
        return fn()
    except DataioError:
        raise
    except Exception as exc:
        raise DataioError(
            f"cannot read Arrow data from {what}: its export raised {type(exc).__name__}: {exc}"
        ) from exc


# -- adapters -------------------------------------------------------------------------------------


def arrow_source(x: Any) -> Source | None:
    """The Arrow source for ``x``, or ``None`` when ``x`` is not Arrow data.

    Nothing is read or exported here; that happens on the first pass (or when the
    schema is first asked for).
    """
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        if isinstance(x, pa.Table):
            return ArrowTableSource(x, mode="arrow-table", what="pyarrow.Table")
        if isinstance(x, pa.RecordBatch):
            table = pa.Table.from_batches([x])
            return ArrowTableSource(table, mode="arrow-record-batch", what="pyarrow.RecordBatch")
        if isinstance(x, pa.RecordBatchReader):
            return ArrowReaderSource(x)
    dataset = sys.modules.get("pyarrow.dataset")
    if dataset is not None and isinstance(x, dataset.Dataset):
        return _dataset_source(x)
    polars = sys.modules.get("polars")
    if polars is not None:
        if isinstance(x, polars.DataFrame):
            return ArrowTableSource(
                partial(_export_table, x), mode="polars-dataframe", what=type_name(x)
            )
        if isinstance(x, polars.LazyFrame):
            return ArrowStreamSource(
                partial(_collect_polars, x),
                mode="polars-lazyframe",
                what=type_name(x),
                schema=partial(_polars_schema, x),
            )
    if callable(getattr(type(x), "__arrow_c_stream__", None)):
        return ArrowStreamSource(
            partial(_export_stream, x), mode="arrow-c-stream", what=type_name(x)
        )
    return None


def _export_stream(x: Any) -> pa.RecordBatchReader:
    import pyarrow as pa

    return pa.RecordBatchReader.from_stream(x)


def _export_table(x: Any) -> pa.Table:
    import pyarrow as pa

    return pa.table(_export_stream(x))


def _collect_polars(frame: Any) -> pa.RecordBatchReader:
    return _export_stream(frame.collect())


def _polars_schema(frame: Any) -> pa.Schema:
    import polars as pl

    return _export_stream(pl.DataFrame(schema=frame.collect_schema())).schema


_METADATA_COUNTED = ("parquet", "ipc", "feather", "arrow")


def _dataset_source(dataset: Any) -> Source:
    import pyarrow.dataset as ds

    what = type_name(dataset)
    if isinstance(dataset, ds.InMemoryDataset):
        return ArrowTableSource(dataset.to_table, mode="arrow-dataset", what=what)
    length = None
    if getattr(getattr(dataset, "format", None), "default_extname", None) in _METADATA_COUNTED:
        length = dataset.count_rows  # from file footers, without reading the data
    return ArrowStreamSource(
        partial(_scan_dataset, dataset),
        mode="arrow-dataset",
        what=what,
        schema=partial(getattr, dataset, "schema"),
        length=length,
    )


def _scan_dataset(dataset: Any) -> pa.RecordBatchReader:
    import pyarrow as pa

    return pa.RecordBatchReader.from_batches(dataset.schema, dataset.to_batches())
