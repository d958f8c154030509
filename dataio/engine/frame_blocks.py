"""The blocks of a positional frame: their layout, the Parquet and Feather readers, the cache.

A block is a Parquet row group or a Feather record batch, the unit read from a file.
:class:`FrameBlocks` (a base of :class:`~dataio.engine.frame_rows.FrameRows`) reads the
files' footers once into a layout of blocks by scan position, reads blocks projected,
renamed and typed as the frame, and keeps decoded blocks in a bounded cache.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dataio.exceptions import FormatError, NotFoundError, OutOfRangeError

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.engine.frame_address import Addressed

__all__ = [
    "CACHE_BYTES",
    "OPEN_FILES",
    "Block",
    "FrameBlocks",
    "check_range",
    "empty_batch",
    "one_batch",
]

#: Bytes of decoded blocks a :class:`FrameRows` keeps (least recently used first out):
#: consecutive batches of an unshuffled pass fall in the same row group, which is then
#: decoded once, not once per batch.
CACHE_BYTES = 256 << 20

#: Feather files kept open (memory-mapped) at once: a scan of thousands of files must not
#: hold a descriptor for each.
OPEN_FILES = 64

_MAX_ROWS = 1 << 62


@dataclass(frozen=True)
class Block:
    """A row group (Parquet) or record batch (Feather): the unit read from a file."""

    file: int
    index: int
    start: int  # scan position of its first row
    rows: int


class FrameBlocks:
    """Block layout, reads and the decoded-block cache of a positional frame.

    The state is set by :class:`~dataio.engine.frame_rows.FrameRows`; the lock, cache and
    open readers are process-local (a pickled copy reopens what it reads).
    """

    addressed: Addressed
    _schema: pa.Schema
    _base: pa.Schema
    _blocks: list[Block] | None
    _starts: Any
    _start_list: list[int]
    _length: int
    _metadata: list[Any]

    def _init_state(self) -> None:
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], pa.RecordBatch] = OrderedDict()
        self._cached_bytes = 0
        self._readers: OrderedDict[int, Any] = OrderedDict()  # Feather: open memory maps

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_cache", "_cached_bytes", "_readers"):
            del state[name]  # process-local: a copy reopens what it reads
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_state()

    def length(self) -> int:
        """The frame's row count, from file metadata."""
        self._layout()
        return self._length

    def _layout(self) -> list[Block]:
        import numpy as np

        if self._blocks is None:
            with self._lock:
                if self._blocks is None:
                    blocks = self._read_layout()
                    self._start_list = [b.start for b in blocks]
                    self._starts = np.asarray(self._start_list, np.int64)
                    total = blocks[-1].start + blocks[-1].rows if blocks else 0
                    rows = max(0, total - self.addressed.offset)
                    length = self.addressed.length
                    self._length = rows if length is None else min(rows, length)
                    self._blocks = blocks
        return self._blocks

    def _read_layout(self) -> list[Block]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from dataio.formats._arrow import check_ipc_file, check_regular, open_error

        scan = self.addressed.scan
        blocks: list[Block] = []
        start = 0
        for number, path in enumerate(scan.files):
            try:
                check_regular(path, scan.label())
                if scan.format == "parquet":
                    metadata = pq.read_metadata(path)
                    self._metadata.append(metadata)
                    sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
                else:
                    check_ipc_file(path, scan.label())  # damaged offsets would crash reads
                    with pa.memory_map(path) as source:
                        reader = pa.ipc.open_file(source)
                        sizes = [
                            reader.get_batch(i).num_rows for i in range(reader.num_record_batches)
                        ]
            except pa.ArrowException as exc:
                raise FormatError(f"{scan.label()}: cannot read {path!r}: {exc}") from None
            except OSError as exc:
                raise open_error(exc, path, scan.label()) from None
            for index, rows in enumerate(sizes):
                if rows < 0 or start + rows >= _MAX_ROWS:  # positions must fit in int64
                    raise FormatError(
                        f"{scan.label()}: {path!r} declares {rows} rows in block {index}; "
                        "the file is damaged"
                    )
                if rows:
                    blocks.append(Block(number, index, start, rows))
                    start += rows
        return blocks

    def _blocks_read(self, blocks: list[Block]) -> list[pa.RecordBatch]:
        """The decoded blocks, from the cache or read (one read per file)."""
        found: dict[tuple[int, int], pa.RecordBatch] = {}
        with self._lock:
            for block in blocks:
                key = (block.file, block.index)
                if key in self._cache:
                    self._cache.move_to_end(key)
                    found[key] = self._cache[key]
        missing: dict[int, list[int]] = {}
        for block in blocks:
            if (block.file, block.index) not in found:
                missing.setdefault(block.file, []).append(block.index)
        for file, indices in missing.items():
            for index, table in zip(indices, self._read(file, indices), strict=True):
                batch = one_batch(table, self._base)  # one chunk: takes need no concat
                found[(file, index)] = batch
                self._remember((file, index), batch)
        return [found[(b.file, b.index)] for b in blocks]

    def _remember(self, key: tuple[int, int], batch: pa.RecordBatch) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = batch
            self._cached_bytes += batch.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= old.nbytes

    def _read(self, file: int, indices: list[int]) -> list[pa.Table]:
        """Blocks ``indices`` of file ``file``, projected, renamed and typed as the frame."""
        scan = self.addressed.scan
        with self._mapped_errors(file):
            if scan.format == "parquet":
                tables = self._read_parquet(file, indices)
            else:
                tables = self._read_feather(file, indices)
        return [self._conform(table, scan.files[file]) for table in tables]

    @contextmanager
    def _mapped_errors(self, file: int) -> Iterator[None]:
        """Errors reading file ``file`` as dataio's (naming the file)."""
        import pyarrow as pa

        from dataio.formats._arrow import open_error

        scan = self.addressed.scan
        path = scan.files[file]
        try:
            yield
        except FileNotFoundError:
            raise NotFoundError(f"{scan.label()}: the file {path!r} is gone") from None
        except pa.ArrowException as exc:
            raise FormatError(f"{scan.label()}: cannot read {path!r}: {exc}") from None
        except OSError as exc:
            raise open_error(exc, path, scan.label()) from None

    def _file_columns(self) -> list[str] | None:
        columns = self.addressed.columns
        return None if columns is None else list(dict.fromkeys(src for src, _ in columns))

    def _read_parquet(self, file: int, indices: list[int]) -> list[pa.Table]:
        metadata = self._metadata[file]
        reader, columns = self._parquet_file(file, indices, pooled=False)
        with reader:
            table = reader.read_row_groups(indices, columns=columns)
        out, first = [], 0
        for index in indices:  # one read, split back into its row groups (no copy)
            rows = metadata.row_group(index).num_rows
            out.append(table.slice(first, rows))
            first += rows
        return out

    def _parquet_file(
        self, file: int, indices: list[int], *, pooled: bool
    ) -> tuple[Any, list[str] | None]:
        """File ``file`` opened to read row groups ``indices`` (within the decode limit),
        and the columns to read."""
        import pyarrow.parquet as pq

        from dataio import limits

        scan = self.addressed.scan
        path = scan.files[file]
        metadata = self._metadata[file]
        wanted = self._file_columns()
        for index in indices:
            group = metadata.row_group(index)
            size = sum(
                group.column(j).total_uncompressed_size
                for j in range(group.num_columns)
                if wanted is None or group.column(j).path_in_schema.split(".")[0] in wanted
            )
            limits.check(
                "max_decoded_bytes",
                size,
                what=f"{scan.label()}: row group {index} of {path!r} ({size} bytes decoded)",
            )
        names = set(metadata.schema.to_arrow_schema().names)
        columns = None if wanted is None else [c for c in wanted if c in names]
        # Read on the pool (one thread per row group, no Arrow threads to oversubscribe
        # the cores), a memory map saves a copy: row groups of JPEGs read ~15% faster
        return pq.ParquetFile(path, metadata=metadata, memory_map=pooled), columns

    def _read_feather(self, file: int, indices: list[int]) -> list[pa.Table]:
        import pyarrow as pa

        from dataio.formats._arrow import check_ipc_file

        scan = self.addressed.scan
        path = scan.files[file]
        with self._lock:
            reader = self._readers.get(file)
            if reader is None:
                check_ipc_file(path, scan.label())
                reader = pa.ipc.open_file(pa.memory_map(path))
                self._readers[file] = reader
                if len(self._readers) > OPEN_FILES:
                    self._readers.popitem(last=False)  # its batches keep their mapping
            self._readers.move_to_end(file)
        wanted = self._file_columns()
        out = []
        for index in indices:
            with self._lock:  # one reader per file, shared by the pool's threads
                batch = reader.get_batch(index)
            table = pa.Table.from_batches([batch])
            if wanted is not None:
                table = table.select([c for c in wanted if c in table.schema.names])
            out.append(table)
        return out

    def _conform(self, table: pa.Table, path: str) -> pa.Table:
        """``table`` with the frame's column names and types (nulls for absent columns)."""
        import pyarrow as pa

        columns = self.addressed.columns or tuple((n, n) for n in self._base.names)
        arrays = []
        for (source, _), field in zip(columns, self._base, strict=True):
            if source not in table.schema.names:
                arrays.append(pa.nulls(table.num_rows, field.type))  # as DataFusion fills it
                continue
            column = table.column(source)
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowException, ValueError) as exc:
                    raise FormatError(
                        f"{self.addressed.scan.label()}: column {source!r} of {path!r} is "
                        f"{column.type}, not the frame's {field.type}: {exc}"
                    ) from None
            arrays.append(column)
        return pa.Table.from_arrays(arrays, schema=self._base)


def check_range(low: int, high: int, n: int) -> None:
    if low < 0 or high >= n:
        bad = low if low < 0 else high
        raise OutOfRangeError(f"position {bad} is outside the frame's {n} rows")


def one_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    # combine_chunks copies even a single chunk (29 ms for a row group of 256 JPEGs)
    arrays = [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    arrays = []
    for field in schema:
        if isinstance(field.type, pa.BaseExtensionType):
            storage = pa.array([], field.type.storage_type)
            arrays.append(pa.ExtensionArray.from_storage(field.type, storage))
        else:
            arrays.append(pa.array([], field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
