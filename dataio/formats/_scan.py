"""Lazy file scans: a value that resolves its paths and reads each file only when iterated."""

from __future__ import annotations

import glob as globlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from dataio.exceptions import NotFoundError, PlanError

__all__ = ["FileScan", "record_key"]

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def record_key(path: str) -> str:
    """A record key for a file: its name without the extension."""
    return os.path.splitext(os.path.basename(path))[0]


class FileScan:
    """Records read lazily from files: nothing is listed or opened until iteration.

    Each pass re-resolves the source (a glob, ``**`` recursing, or a list of paths) and
    yields one or more records per file, in sorted path order for globs and in the
    given order for lists. Usable anywhere dataio takes records, e.g. ``pipe.bind(scan)``.
    """

    def __init__(self, source: Source, read: Callable[[str], Iterator[dict[str, Any]]], what: str):
        if isinstance(source, str | os.PathLike):
            self._items: tuple[str, ...] = (os.fspath(source),)
        elif isinstance(source, Sequence) and all(isinstance(p, str | os.PathLike) for p in source):
            self._items = tuple(os.fspath(p) for p in source)
        else:
            raise PlanError(f"{what} takes a path, a glob or a list of paths, got {source!r}")
        self._read = read
        self._what = what

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

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for path in self.paths():
            yield from self._read(path)

    def __repr__(self) -> str:
        shown = self._items[0] if len(self._items) == 1 else list(self._items)
        return f"{self._what}({shown!r})"
