"""Tar headers checked before :mod:`tarfile` acts on them.

A tar header's size field (octal, base-256 or a GNU sparse map) is only a claim. The
standard library reads a long-name or pax block of that size in one call, skips a
member by seeking (or, in stream mode, by reading) that far, and ends an archive
without a word when a header is cut short or garbled. :func:`checked_tarinfo` makes a
:class:`tarfile.TarInfo` class that refuses, by archive name and offset:

* a header cut short, or one that is not a tar header, past the first (the archive is
  truncated or corrupt);
* a negative size, or a size running past the end of the archive when its length is
  known (:class:`~dataio.FormatError`);
* a long-name or pax block over ``max_header_bytes``, a member over
  ``max_member_bytes``, and a sparse member whose holes inflate its stored data past
  ``max_inflation_ratio`` (:class:`~dataio.LimitError`).
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from typing import Any

from dataio import limits
from dataio.exceptions import FormatError

__all__ = ["checked_tarinfo", "read_member"]

_BLOCK = tarfile.BLOCKSIZE
# blocks that hold metadata for the next header; tarfile reads each in one call
_META = frozenset(
    {
        tarfile.GNUTYPE_LONGNAME,
        tarfile.GNUTYPE_LONGLINK,
        tarfile.XHDTYPE,
        tarfile.XGLTYPE,
        tarfile.SOLARIS_XHDTYPE,
    }
)
_CHUNK = 1 << 20
# tarfile's own names for these are private (not in its type stubs)
_InvalidHeader: type[Exception] = tarfile.InvalidHeaderError  # type: ignore[attr-defined]


def checked_tarinfo(
    name: str, total: int | Callable[[Any], int | None] | None
) -> type[tarfile.TarInfo]:
    """A ``TarInfo`` class for ``tarfile.open(..., tarinfo=...)`` that checks each header
    of archive ``name`` before tarfile allocates or seeks on it.

    Args:
        name: the archive, for messages.
        total: the archive's length in bytes; ``None`` when unknown (a compressed or
            streamed archive), or a function of the open ``TarFile`` returning it.
    """

    class CheckedTarInfo(tarfile.TarInfo):
        @classmethod
        def fromtarfile(cls, archive: Any) -> tarfile.TarInfo:  # type: ignore[override]
            # as the standard library's, with the checks around it
            offset = archive.fileobj.tell()
            buf = archive.fileobj.read(_BLOCK)
            if offset and 0 < len(buf) < _BLOCK:
                raise FormatError(
                    f"tar {name!r}: the header at offset {offset} is cut short ({len(buf)} "
                    f"of {_BLOCK} bytes); the archive is truncated, re-create or re-download it"
                )
            try:
                obj = cls.frombuf(buf, archive.encoding, archive.errors)
            except _InvalidHeader as exc:
                if not offset:
                    raise  # not a tar at all (tarfile.open then tries the compressions)
                raise FormatError(
                    f"tar {name!r}: the block at offset {offset} is not a tar header ({exc}); "
                    "the archive is corrupt, re-create or re-download it"
                ) from None
            obj.offset = offset
            length = total(archive) if callable(total) else total
            _check_header(obj, name, length)
            obj = obj._proc_member(archive)  # type: ignore[attr-defined]
            _check_member(obj, name, length)
            return obj

    return CheckedTarInfo


def _holds_data(info: tarfile.TarInfo) -> bool:
    """Whether the member's size counts blocks of the archive (tarfile skips them)."""
    return info.isreg() or info.type not in tarfile.SUPPORTED_TYPES or info.type in _META


def _check_header(info: tarfile.TarInfo, name: str, total: int | None) -> None:
    where = f"tar {name!r} member {info.name!r} at offset {info.offset}"
    if info.size < 0:
        raise FormatError(f"{where} declares a negative size {info.size}; the archive is corrupt")
    if not _holds_data(info):
        return
    info._dataio_stored = info.size  # type: ignore[attr-defined]
    if info.type in _META:
        limits.check("max_header_bytes", info.size, what=f"{where}: extended header")
    else:
        limits.check("max_member_bytes", info.size, what=where)
    _check_room(info.size, info.offset + _BLOCK, where, total)


def _check_member(info: tarfile.TarInfo, name: str, total: int | None) -> None:
    """The member as tarfile resolved it (a pax ``size``, a sparse real size)."""
    where = f"tar {name!r} member {info.name!r} at offset {info.offset}"
    if info.size < 0:
        raise FormatError(f"{where} declares a negative size {info.size}; the archive is corrupt")
    if not _holds_data(info):
        return
    limits.check("max_member_bytes", info.size, what=where)
    if info.issparse():
        stored = getattr(info, "_dataio_stored", 0)
        current = limits.get()
        if info.size > current.inflation_floor_bytes:
            limits.check(
                "max_inflation_ratio",
                info.size // max(stored, 1),
                what=f"{where}: sparse member of {info.size} bytes stored in {stored}",
            )
        return
    _check_room(info.size, info.offset_data, where, total)


def _check_room(size: int, start: int, where: str, total: int | None) -> None:
    if total is not None and size > total - start:
        raise FormatError(
            f"{where} declares {size} bytes but only {max(total - start, 0)} remain in the "
            "archive; it is truncated or corrupt, re-create or re-download it"
        )


def read_member(handle: Any, size: int, *, whole: bool) -> bytes:
    """A member's bytes. ``whole``: the archive's length is known and bounds ``size``,
    so one read suffices; otherwise read piece by piece, so memory follows the bytes
    that arrive rather than the declared size."""
    if whole:
        return bytes(handle.read())
    parts = []
    while chunk := handle.read(min(_CHUNK, size) or _CHUNK):
        parts.append(chunk)
    return b"".join(parts)
