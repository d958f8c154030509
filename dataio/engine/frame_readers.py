"""Block reads of a positional frame: Parquet row groups and Feather record batches.

:class:`BlockReaders` (a base of :class:`~dataio.engine.frame_blocks.FrameBlocks`) reads
blocks of one file projected to the frame's file columns, renamed and typed as the frame,
with Arrow and OS errors mapped to dataio's (naming the file). Feather files stay open as
memory maps, at most :data:`OPEN_FILES` at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from dataio.exceptions import FormatError

if TYPE_CHECKING:
    import pyarrow as pa

    from dataio.engine.frame_address import Addressed

__all__ = ["OPEN_FILES", "BlockReaders"]

#: Feather files kept open (memory-mapped) at once: a scan of thousands of files must not
#: hold a descriptor for each.
OPEN_FILES = 64


class BlockReaders:
    """Reads of blocks of one file, as the frame types them."""

    addressed: Addressed
    _base: pa.Schema
    _metadata: list[Any]  # Parquet FileMetaData per file
    _lock: threading.Lock
    _readers: OrderedDict[int, Any]  # Feather: open memory maps

    def _read(self, file: int, indices: list[int]) -> list[pa.Table]:
        """Blocks ``indices`` of file ``file``, projected, renamed and typed as the frame."""
        scan = self.addressed.scan
        with self._mapped_errors(file):
            if scan.format == "parquet":
                tables = self._read_parquet(file, indices)
            else:
                tables = self._read_feather(file, indices)
        return [self._conform(table, scan.files[file]) for table in tables]

    def _mapped_errors(self, file: int) -> AbstractContextManager[None]:
        """Errors reading file ``file`` as dataio's (naming the file)."""
        from dataio.formats._arrow import read_errors

        scan = self.addressed.scan
        return read_errors(scan.files[file], scan.label())

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

        path = self.addressed.scan.files[file]
        for index in indices:
            self._check_decoded(file, index)
        # Read on the pool (one thread per row group, no Arrow threads to oversubscribe
        # the cores), a memory map saves a copy: row groups of JPEGs read ~15% faster
        metadata = self._metadata[file]
        return pq.ParquetFile(path, metadata=metadata, memory_map=pooled), self._columns_in(file)

    def _check_decoded(self, file: int, index: int) -> None:
        """Refuse row group ``index`` of file ``file`` when decoding the frame's columns
        of it would exceed ``limits.max_decoded_bytes`` (as its footer declares)."""
        from dataio import limits

        scan = self.addressed.scan
        wanted = self._file_columns()
        group = self._metadata[file].row_group(index)
        size = sum(
            group.column(j).total_uncompressed_size
            for j in range(group.num_columns)
            if wanted is None or group.column(j).path_in_schema.split(".")[0] in wanted
        )
        path = scan.files[file]
        limits.check(
            "max_decoded_bytes",
            size,
            what=f"{scan.label()}: row group {index} of {path!r} ({size} bytes decoded)",
        )

    def _columns_in(self, file: int) -> list[str] | None:
        """The frame's file columns that Parquet file ``file`` has (``None``: all)."""
        wanted = self._file_columns()
        if wanted is None:
            return None
        names = set(self._metadata[file].schema.to_arrow_schema().names)
        return [c for c in wanted if c in names]

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
