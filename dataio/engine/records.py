"""Run :class:`~dataio.plan.frame.FileRecords` nodes: their records, or one Arrow table."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dataio.exceptions import DataioError
from dataio.formats._scan import record_key
from dataio.io.resolve import resolve
from dataio.plan.frame import FileRecords

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FailedRecord", "iter_records", "records_table"]


class FailedRecord(Mapping[str, Any]):
    """The record of a file that could not be read: its data fields raise the error.

    ``key`` and ``path`` read as usual; reading a data field (``"array"``, ...) raises
    the file's error (a :class:`~dataio.exceptions.FormatError` naming it). In a
    pipeline that makes the file one row error: dropped under ``on_failure="skip"``,
    raised under ``"strict"``, while the files after it are still read.
    """

    def __init__(self, path: str, key: str, fields: tuple[str, ...], error: DataioError):
        self._plain = {"key": key, "path": path}
        self._fields = fields
        self.error = error

    def __getitem__(self, name: str) -> Any:
        if name in self._fields:
            raise self.error
        return self._plain[name]

    def __iter__(self) -> Iterator[str]:
        return iter((*self._plain, *self._fields))

    def __len__(self) -> int:
        return len(self._plain) + len(self._fields)

    def __repr__(self) -> str:
        return f"FailedRecord(path={self._plain['path']!r}, error={self.error!r})"


def _paths(node: FileRecords) -> list[str]:
    # plain paths are not checked here: a missing or damaged file is one failed record
    return resolve(node.spec, what=node.name, extensions=node.extensions, check=False)


def iter_records(node: FileRecords) -> Iterator[Mapping[str, Any]]:
    """The records, file after file; a file that fails to read is one
    :class:`FailedRecord` when the node has data fields, else its error ends the pass."""
    for path in _paths(node):
        try:
            yield from node.read(path)
        except DataioError as exc:
            if not node.fields:
                raise
            # One damaged file is one bad record, not the end of the pass.
            yield FailedRecord(path, record_key(path), node.fields, exc)


def records_table(node: FileRecords) -> pa.Table:
    """Every file's records as one ``pyarrow.Table`` of the node's schema (a damaged
    file raises its error: an Arrow value cannot carry it)."""
    import pyarrow as pa

    batches = [node.to_arrow(list(node.read(path))) for path in _paths(node)]
    return pa.Table.from_batches(batches, schema=node.schema)
