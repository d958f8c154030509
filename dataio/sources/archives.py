"""Archive sources: ``webdataset`` shards and single ``archive`` files (tar, tar.gz, zip).

Members are grouped into one record per sample key, WebDataset style: for a member
``dir/0001.seg.png`` the key is ``dir/0001`` and the field is ``seg.png``. Members of one
sample must be adjacent, as WebDataset writers produce them.
"""

from __future__ import annotations

import itertools
import lzma
import os
import re
import tarfile
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from dataio import limits
from dataio.exceptions import DataioError, FormatError, PlanError
from dataio.io.errors import call
from dataio.io.local import open_regular
from dataio.io.tar import checked_tarinfo, read_member
from dataio.sources.base import Source

__all__ = ["archive", "expand_braces", "webdataset"]

_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_braces(pattern: str) -> list[str]:
    """Expand WebDataset brace ranges: ``"s-{00..02}.tar"`` -> ``s-00.tar, s-01.tar, s-02.tar``.

    Zero padding follows the first bound's width; several ranges expand as a product.
    """
    parts = _BRACE.split(pattern)
    pieces: list[list[str]] = []
    for i, part in enumerate(parts):
        if i % 3 == 0:
            pieces.append([part])
        elif i % 3 == 1:
            low, high = part, parts[i + 1]
            if int(high) < int(low):
                raise PlanError(f"brace range {{{low}..{high}}} in {pattern!r} runs backwards")
            width = len(low)
            pieces.append([str(n).zfill(width) for n in range(int(low), int(high) + 1)])
    return ["".join(combo) for combo in itertools.product(*pieces)]


def _split_member(name: str) -> tuple[str, str]:
    directory, base = os.path.split(name)
    if "." not in base:
        return name, ""
    stem, ext = base.split(".", 1)
    return (os.path.join(directory, stem) if directory else stem), ext.lower()


def _open_archive(path: str) -> tuple[Any, int]:
    """The archive file (regular files only: a FIFO would block) and its size."""
    fd, size = call(lambda: open_regular(path, "archive"), path, "archive")
    return os.fdopen(fd, "rb"), size


def _corrupt(path: str, exc: BaseException) -> FormatError:
    return FormatError(
        f"archive {path!r} is corrupt or truncated ({exc}); re-create or re-download it"
    )


def _tar_members(path: str) -> Iterator[tuple[str, bytes]]:
    file, size = _open_archive(path)
    with file:
        compressed = file.read(6)[:2] in _COMPRESSED
        file.seek(0)
        total = None if compressed else size  # a compressed tar's length is unknown
        try:
            with tarfile.open(
                fileobj=file, mode="r:*", tarinfo=checked_tarinfo(path, total)
            ) as tar:
                for member in tar:
                    if not member.isfile():
                        continue
                    handle = tar.extractfile(member)
                    if handle is not None:
                        yield member.name, read_member(handle, member.size, whole=not compressed)
        except DataioError:
            raise
        except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
            raise _corrupt(path, exc) from exc


# gzip, bzip2 and xz magic: tarfile.open("r:*") inflates these
_COMPRESSED = (b"\x1f\x8b", b"BZ", b"\xfd7")


def _zip_members(path: str) -> Iterator[tuple[str, bytes]]:
    file, _ = _open_archive(path)
    with file:
        try:
            with zipfile.ZipFile(file) as archive_file:
                for info in archive_file.infolist():
                    if not info.is_dir():
                        _check_zip_member(path, info)
                        yield info.filename, archive_file.read(info)
        except DataioError:
            raise
        # RuntimeError: encrypted; NotImplementedError: an unknown compression method
        except (
            zipfile.BadZipFile,
            EOFError,
            OSError,
            zlib.error,
            lzma.LZMAError,
            RuntimeError,
            NotImplementedError,
            ValueError,
        ) as exc:
            raise _corrupt(path, exc) from exc


def _check_zip_member(path: str, info: zipfile.ZipInfo) -> None:
    """A member's declared size against the limits (zipfile stops inflating there)."""
    what = f"zip {path!r} member {info.filename!r}"
    limits.check("max_member_bytes", info.file_size, what=what)
    if info.file_size > limits.get().inflation_floor_bytes:
        ratio = info.file_size // max(info.compress_size, 1)
        limits.check("max_inflation_ratio", ratio, what=f"{what} of {info.file_size} bytes")


def _members(path: str) -> Iterator[tuple[str, bytes]]:
    if path.lower().endswith(".zip"):
        return _zip_members(path)
    return _tar_members(path)


class _FailedSample(Mapping[str, Any]):
    """Stands in for the samples an archive could not deliver: the loader reads a field
    of it, gets ``error`` and records a row error (dropped under ``on_failure="skip"``,
    raised under ``"strict"``) instead of the rest of the archive vanishing unseen."""

    def __init__(self, path: str, error: DataioError) -> None:
        self._meta = {"__key__": f"{path}:<unreadable>", "__url__": path}
        self.error = error

    def __getitem__(self, field: str) -> Any:
        if field in self._meta:
            return self._meta[field]
        if field == "key" or field.startswith("__"):
            raise KeyError(field)
        raise self.error

    def __iter__(self) -> Iterator[str]:
        return iter(self._meta)

    def __len__(self) -> int:
        return len(self._meta)


def _samples(path: str) -> Iterator[dict[str, Any]]:
    current: dict[str, Any] | None = None
    for name, data in _members(path):
        key, field = _split_member(name)
        if not field or field.startswith("__"):
            continue
        if current is None or current["__key__"] != key:
            if current is not None:
                yield current
            current = {"__key__": key, "__url__": path}
        current[field] = data
    if current is not None:
        yield current


class ArchiveSource(Source):
    """Samples of one or more archives, read in order; each pass reopens the files.

    An archive found corrupt, truncated or over a limit part-way ends with one stand-in
    sample whose fields raise the error, so the loader records it as a row error (and
    goes on to the next shard under ``on_failure="skip"``); iterating the source
    directly raises it.
    """

    def __init__(self, paths: list[str], description: dict[str, Any]) -> None:
        self.paths = paths
        self._description = description

    def iterate(self) -> Iterator[Any]:
        """Read the archives one after the other, grouping members into samples."""
        for path in self.paths:
            try:
                yield from _samples(path)
            except DataioError as exc:
                yield _FailedSample(path, exc)

    def __iter__(self) -> Iterator[Any]:
        for sample in self.iterate():
            if isinstance(sample, _FailedSample):
                raise sample.error
            yield sample

    def describe(self) -> dict[str, Any]:
        """The pattern or path."""
        return dict(self._description)


def webdataset(pattern: str | os.PathLike[str]) -> ArchiveSource:
    """Samples from WebDataset tar shards named by a brace pattern, in shard order.

    Example:
        >>> source = dataio.webdataset("/data/shard-{0000..0099}.tar")  # doctest: +SKIP
    """
    text = os.fspath(pattern)
    return ArchiveSource(expand_braces(text), {"source": "webdataset", "pattern": text})


def archive(path: str | os.PathLike[str]) -> ArchiveSource:
    """Samples from one tar (optionally compressed) or zip archive.

    Example:
        >>> source = dataio.archive("/data/images.zip")  # doctest: +SKIP
    """
    text = os.fspath(path)
    return ArchiveSource([text], {"source": "archive", "path": text})
