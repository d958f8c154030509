"""File-backed sources: ``files``, ``urls`` and ``manifest`` (JSON lines, CSV, Parquet)."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from dataio.exceptions import (
    DataioError,
    FormatError,
    NotFoundError,
    PermissionDeniedError,
    PlanError,
)
from dataio.io.local import check_regular
from dataio.io.resolve import glob_files, has_magic
from dataio.sources.base import IndexedSource

__all__ = ["files", "manifest", "urls"]


class ListSource(IndexedSource):
    """Rows computed on first use (a glob, a manifest read), then read by position."""

    def __init__(self, description: dict[str, Any], load: Any) -> None:
        self._description = description
        self._load = load
        self._rows: list[Any] | None = None

    def rows(self) -> list[Any]:
        """The rows, loaded on first call."""
        if self._rows is None:
            self._rows = self._load()
        return self._rows

    def length(self) -> int:
        """The number of rows (loads them)."""
        return len(self.rows())

    def get(self, index: int) -> Any:
        """One row."""
        return self.rows()[index]

    def get_many(self, indices: Sequence[int]) -> list[Any]:
        """Several rows, in order."""
        rows = self.rows()
        return [rows[i] for i in indices]

    def describe(self) -> dict[str, Any]:
        """What was asked for (the pattern or path), not the rows."""
        return dict(self._description)


def _key_of(path: str) -> str:
    name = os.path.basename(path)
    return name.split(".", 1)[0] if not name.startswith(".") else name


def _glob_root(pattern: str) -> str:
    """The directory a glob is rooted at: its leading components without wildcards."""
    head, parts = pattern, []
    while True:
        head, tail = os.path.split(head)
        if not tail:
            break
        parts.append(tail)
    parts.reverse()
    fixed = 0
    while fixed < len(parts) - 1 and not has_magic(parts[fixed]):
        fixed += 1
    return os.path.join(head, *parts[:fixed]) if fixed else (head or ".")


def _relative_key(path: str, root: str) -> str:
    """``path`` relative to ``root``, posix separators, the file's extension dropped."""
    relative = os.path.relpath(path, root).replace(os.sep, "/")
    folder, _, name = relative.rpartition("/")
    stem = name.split(".", 1)[0] if not name.startswith(".") else name
    return f"{folder}/{stem}" if folder else stem


def _remote(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def _local(text: str) -> str:
    """A ``file://`` URI's path (a plain path as it is)."""
    if not text.startswith("file://"):
        return text
    from dataio.io.ranged import local_path

    return local_path(text)


def _remote_files(pattern: str) -> list[dict[str, str]]:
    """The objects a remote glob matches (through :func:`dataio.io.verbs.glob`), keyed
    relative to the pattern's root as local files are."""
    from dataio.io.uri import parse
    from dataio.io.verbs import glob

    parse(pattern)  # an unsupported scheme fails naming the choices
    found = glob(pattern)
    if not found:
        raise NotFoundError(
            f"no objects match {pattern!r}; check the pattern, the bucket and the prefix"
        )
    scheme, rest = pattern.split("://", 1)
    segments = rest.split("/")
    fixed = 0
    while fixed < len(segments) - 1 and not has_magic(segments[fixed]):
        fixed += 1
    root = f"{scheme}://" + "/".join(segments[:fixed])
    rows = []
    for uri in found:
        relative = uri[len(root) :].lstrip("/") if uri.startswith(root) else uri.rsplit("/", 1)[-1]
        folder, _, name = relative.rpartition("/")
        stem = name.split(".", 1)[0] if not name.startswith(".") else name
        rows.append({"key": f"{folder}/{stem}" if folder else stem, "path": uri})
    return rows


def files(pattern: str | os.PathLike[str]) -> ListSource:
    """Records ``{"key", "path"}`` for the files matching a glob (``**`` recurses), sorted.

    ``pattern`` may be a URI (``s3://bucket/train/**/*.jpg``, ``gs://``, ``az://``,
    ``hf://``, ``http(s)://`` on a server that lists, ``file://``): remote patterns are
    expanded by listing the objects under their fixed prefix, and each ``path`` is then
    the object's URI.

    A key is the file's path relative to the glob's root (its leading components without
    wildcards), with ``/`` separators and without the extension: ``/data/**/*.jpg``
    gives ``cat/001`` and ``dog/001`` for ``/data/cat/001.jpg`` and ``/data/dog/001.jpg``.
    The pattern is expanded when a loader starts, not here.

    Example:
        >>> source = dataio.files("/data/train/**/*.jpg")  # doctest: +SKIP
    """
    text = os.fspath(pattern)

    def load() -> list[dict[str, str]]:
        if _remote(text):
            return _remote_files(text)
        local = _local(text)
        paths = glob_files(local)
        if not paths:
            raise NotFoundError(f"no files match {text!r}; check the pattern and the directory")
        root = _glob_root(local)
        # a file:// pattern gives file:// paths, as listings answer in the style asked
        style = "file://" if local != text else ""
        return [{"key": _relative_key(p, root), "path": style + p} for p in paths]

    return ListSource({"source": "files", "pattern": text}, load)


def urls(items: Sequence[str]) -> ListSource:
    """Records ``{"key", "url"}`` for a list of URIs or paths, in order.

    Example:
        >>> len(dataio.urls(["s3://bucket/a.jpg", "s3://bucket/b.jpg"]))
        2
    """
    if isinstance(items, str) or not isinstance(items, Sequence):
        raise PlanError("urls() needs a list of strings; for one URI pass [uri]")
    listed = [os.fspath(u) for u in items]
    bad = [u for u in listed if not isinstance(u, str)]
    if bad:
        raise PlanError(f"urls() needs strings, got {bad[0]!r}")
    rows = [{"key": _key_of(u.rstrip("/")), "url": u} for u in listed]
    return ListSource({"source": "urls", "count": len(rows)}, lambda: rows)


def manifest(path: str | os.PathLike[str], *, format: str | None = None) -> ListSource:
    """Records from a manifest file: JSON lines, CSV (with a header) or Parquet.

    The format comes from the extension (``.jsonl``/``.json``/``.ndjson``, ``.csv``,
    ``.parquet``) unless ``format`` says otherwise. The file is read when a loader
    starts. ``path`` may be a URI (``s3://``, ``gs://``, ``az://``, ``hf://``,
    ``http(s)://``, ``file://``); a remote manifest is read whole.

    Example:
        >>> source = dataio.manifest("train.jsonl")  # doctest: +SKIP
    """
    text = os.fspath(path)
    kind = format or _manifest_format(text)

    def load() -> list[Any]:
        if _remote(text):
            from dataio.io.read import read_bytes

            return _parse_manifest(read_bytes(text), text, kind)  # NotFoundError names it
        local = _local(text)
        _check_manifest(local)
        try:
            if kind == "jsonl":
                with open(local, encoding="utf-8") as handle:
                    return _read_jsonl(handle, text)
            if kind == "csv":
                with open(local, newline="", encoding="utf-8") as handle:
                    return list(csv.DictReader(handle))
            import pyarrow.parquet as pq

            table = pq.read_table(local)
            table.validate(full=True)  # damaged offsets would crash to_pylist
            return table.to_pylist()
        except DataioError:
            raise
        except PermissionError:
            raise PermissionDeniedError(f"manifest {text!r}: permission denied") from None
        except (UnicodeDecodeError, csv.Error, OSError, ValueError, NotImplementedError) as exc:
            # pyarrow's ArrowInvalid is a ValueError, ArrowNotImplementedError (a damaged
            # schema: "integers with more than 64 bits") a NotImplementedError; a bad
            # Parquet file can raise OSError
            raise FormatError(
                f"manifest {text!r} is not a readable {kind} file ({exc}); check its format"
            ) from None

    return ListSource({"source": "manifest", "path": text, "format": kind}, load)


def _parse_manifest(data: bytes, uri: str, kind: str) -> list[Any]:
    """The rows of a manifest whose bytes are ``data``."""
    try:
        if kind == "jsonl":
            return _read_jsonl(io.StringIO(data.decode("utf-8")), uri)
        if kind == "csv":
            return list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(pa.BufferReader(data))
        table.validate(full=True)  # damaged offsets would crash to_pylist
        return table.to_pylist()
    except DataioError:
        raise
    except (UnicodeDecodeError, csv.Error, OSError, ValueError, NotImplementedError) as exc:
        raise FormatError(
            f"manifest {uri!r} is not a readable {kind} file ({exc}); check its format"
        ) from None


def _check_manifest(path: str) -> None:
    """Refuse a missing path, or one that is not a regular file (a FIFO would block the
    open, ``/dev/zero`` never ends), by name."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        raise NotFoundError(f"manifest {path!r} does not exist") from None
    check_regular(path, mode, "manifest")


def _manifest_format(path: str) -> str:
    lower = path.lower()
    for suffixes, kind in (
        ((".jsonl", ".ndjson", ".json"), "jsonl"),
        ((".csv",), "csv"),
        ((".parquet", ".pq"), "parquet"),
    ):
        if lower.endswith(suffixes):
            return kind
    raise PlanError(
        f"cannot tell the manifest format of {path!r}; use a .jsonl, .csv or .parquet "
        "file or pass format='jsonl' | 'csv' | 'parquet'"
    )


def _read_jsonl(lines: Iterable[str], path: str) -> list[Any]:
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"manifest {path!r} line {number} is not valid JSON ({exc.msg}); "
                "a JSON-lines manifest holds one object per line"
            ) from None
        except RecursionError:
            raise FormatError(
                f"manifest {path!r} line {number} nests too deeply to parse"
            ) from None
    return rows
