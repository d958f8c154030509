"""Lazy file scans: a value that resolves its paths and reads each file only when iterated."""

from __future__ import annotations

import glob as globlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dataio.exceptions import DataioError, NotFoundError, PlanError

__all__ = ["FailedRecord", "FileScan", "record_key"]

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def record_key(path: str) -> str:
    """A record key for a file: its name without the extension."""
    return os.path.splitext(os.path.basename(path))[0]


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


class FileScan:
    """Records read lazily from files: nothing is listed or opened until iteration.

    Each pass re-resolves the source (a glob, ``**`` recursing, or a list of paths) and
    yields one or more records per file, in sorted path order for globs and in the
    given order for lists. Usable anywhere dataio takes records, e.g. ``pipe.bind(scan)``.
    With ``fields``, a file that fails to read yields a :class:`FailedRecord` (those
    fields raise its error) and the scan goes on; without, the error ends the pass.
    """

    def __init__(
        self,
        source: Source,
        read: Callable[[str], Iterator[dict[str, Any]]],
        what: str,
        fields: tuple[str, ...] = (),
    ):
        if isinstance(source, str | os.PathLike):
            self._items: tuple[str, ...] = (os.fspath(source),)
        elif isinstance(source, Sequence) and all(isinstance(p, str | os.PathLike) for p in source):
            self._items = tuple(os.fspath(p) for p in source)
        else:
            raise PlanError(f"{what} takes a path, a glob or a list of paths, got {source!r}")
        self._read = read
        self._what = what
        self._fields = fields

    def paths(self) -> list[str]:
        """Resolve the source to file paths (lists directories, opens no file)."""
        out: list[str] = []
        for item in self._items:
            if any(c in item for c in "*?["):
                found = sorted(p for p in globlib.glob(item, recursive=True) if os.path.isfile(p))
                if not found:
                    raise NotFoundError(f"{self._what}: the pattern {item!r} matched no files")
                out.extend(found)
            else:
                out.append(item)
        return out

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for path in self.paths():
            try:
                yield from self._read(path)
            except DataioError as exc:
                if not self._fields:
                    raise
                # One damaged file is one bad record, not the end of the pass.
                yield FailedRecord(path, record_key(path), self._fields, exc)

    def __repr__(self) -> str:
        shown = self._items[0] if len(self._items) == 1 else list(self._items)
        return f"{self._what}({shown!r})"
