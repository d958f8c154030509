"""File discovery, written once: what a path, a glob, a directory or a list of them names.

Scans (``scan_parquet``, ``scan_numpy``, ...), ``dataio.files`` and the frame's format
guess resolve their inputs here, so a glob, a directory and a remote prefix mean the
same thing everywhere: globs recurse on ``**`` and give regular files sorted by path,
directories give their files with the wanted extensions (recursively, sorted, hidden
``.``/``_`` names skipped), lists keep the order given.
"""

from __future__ import annotations

import glob as globlib
import os
from collections.abc import Sequence
from typing import Any

from dataio.exceptions import FormatError, NotFoundError, PlanError

__all__ = ["glob_files", "glob_in", "has_magic", "remote_prefix", "resolve", "spec_items"]


def has_magic(item: str) -> bool:
    """Whether ``item`` is a glob pattern (``*``, ``?`` or ``[``)."""
    return any(c in item for c in "*?[")


def spec_items(path: Any, what: str) -> tuple[str, ...]:
    """``path`` (one path or a list of them) as a tuple of strings, ``file://`` stripped.

    Remote URIs are parsed here, so an unsupported scheme fails when the scan is built.
    """
    items: tuple[str, ...]
    if isinstance(path, str | os.PathLike):
        items = (os.fspath(path),)
    elif (
        isinstance(path, Sequence)
        and not isinstance(path, bytes)
        and path
        and all(isinstance(p, str | os.PathLike) for p in path)
    ):
        items = tuple(os.fspath(p) for p in path)
    else:
        raise PlanError(f"{what} takes a path, a glob, a directory or a list of them, got {path!r}")
    for item in items:
        if "://" in item and not item.startswith("file://"):
            from dataio.io.uri import parse

            parse(item)  # an unsupported scheme fails here, naming the choices
    return tuple(i[len("file://") :] if i.startswith("file://") else i for i in items)


def glob_files(pattern: str) -> list[str]:
    """The regular files a local glob matches (``**`` recurses), sorted; maybe none."""
    return sorted(p for p in globlib.glob(pattern, recursive=True) if os.path.isfile(p))


def glob_in(directory: str, pattern: str) -> list[str]:
    """The regular files directly in ``directory`` whose names match ``pattern``, sorted
    (wildcards in ``directory`` itself are taken literally)."""
    return glob_files(os.path.join(globlib.escape(directory), pattern))


def _wanted(name: str, extensions: tuple[str, ...]) -> bool:
    return name.lower().endswith(extensions) and not name.startswith((".", "_"))


def resolve(
    items: Sequence[str],
    *,
    what: str,
    extensions: tuple[str, ...],
    kind: str = "",
    listings: dict[str, list[str]] | None = None,
    check: bool = True,
) -> list[str]:
    """The files ``items`` name, in order: each glob and directory expanded and sorted.

    ``what`` names the caller in errors (``"scan_parquet"``); ``extensions`` are the
    suffixes a directory or remote prefix is filtered by, ``kind`` their name in errors
    (``"parquet"``). ``listings`` remembers remote prefixes listed during one scan.
    With ``check=False`` a plain local path is returned without looking at it (its
    reader then says what is wrong, as one failed record).
    """
    kind = kind or what
    listings = {} if listings is None else listings
    files: list[str] = []
    for item in items:
        if "://" in item:
            files += _resolve_remote(item, what, extensions, kind, listings)
        elif has_magic(item):
            found = glob_files(item)
            if not found:
                raise NotFoundError(f"{what}: the pattern {item!r} matched no files")
            files += found
        elif os.path.isdir(item):
            found = sorted(
                os.path.join(root, name)
                for root, _, names in os.walk(item)
                for name in names
                if _wanted(name, extensions)
            )
            if not found:
                raise NotFoundError(
                    f"{what}: the directory {item!r} holds no {kind} files "
                    f"({', '.join(extensions)})"
                )
            files += found
        elif not check or os.path.isfile(item):
            files.append(item)
        elif os.path.exists(item):  # a FIFO or device: reading it could block forever
            raise FormatError(
                f"{what}: {item!r} is not a regular file (a FIFO, socket or device); "
                "pass a file or a directory"
            )
        else:
            raise NotFoundError(f"{what}: no such file or directory {item!r}")
    return files


def _resolve_remote(
    item: str, what: str, extensions: tuple[str, ...], kind: str, listings: dict[str, list[str]]
) -> list[str]:
    """The objects a remote path names: a pattern, a prefix ending in ``/``, or one object.

    A path ending in one of ``extensions`` is one object (one HEAD); any other is first
    a prefix (one listing, shared through ``listings``), then an object named without
    the extension.
    """
    from dataio.io.verbs import exists, glob

    if has_magic(item):
        found = glob(item)
        if not found:
            raise NotFoundError(f"{what}: the pattern {item!r} matched no objects")
        return found
    if item.lower().endswith(extensions):
        if not exists(item):
            raise NotFoundError(f"{what}: no object {item!r}")
        return [item]
    found = sorted(
        u for u in remote_prefix(item, listings) if _wanted(u.rsplit("/", 1)[-1], extensions)
    )
    if not found and not item.endswith("/") and exists(item):
        return [item]  # one object named without the format's extension
    if not found:
        raise NotFoundError(
            f"{what}: no object {item!r} and no {kind} objects under it ({', '.join(extensions)})"
        )
    return found


def remote_prefix(prefix: str, listings: dict[str, list[str]]) -> list[str]:
    """Every object under ``prefix``; ``listings`` remembers it for the rest of the scan."""
    from dataio.io.verbs import glob

    key = prefix.rstrip("/")
    if key not in listings:
        listings[key] = glob(key + "/**")
    return listings[key]
