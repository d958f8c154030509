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
from collections.abc import Callable, Iterator
from typing import Any

from dataio import limits
from dataio.exceptions import FormatError

_tarscan: Any
try:  # plain members parsed in C; without it walk() parses every header itself
    from dataio.io import _tarscan
except ImportError:  # pragma: no cover - an optional extension
    _tarscan = None

__all__ = ["Blocks", "SeekBlocks", "checked_tarinfo", "read_member", "walk"]

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


# -- a direct reader -------------------------------------------------------------------
#
# ``tarfile`` spends most of a WebDataset pass building ``TarInfo`` objects (every
# field parsed, every name decoded twice). The reader below parses only what a sample
# needs (name, size, type, pax ``path``/``size``, GNU long names) with the checks above:
# a cut or garbled header, a negative size, a size past the archive's end, and sizes
# over ``max_header_bytes`` / ``max_member_bytes`` are refused, by archive name and
# offset, before anything of the declared size is read.

_ZERO = bytes(_BLOCK)
_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_REGULAR = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE})
# types whose size field does not count blocks of the archive (tarfile does not skip)
_NO_DATA = frozenset(tarfile.SUPPORTED_TYPES) - _REGULAR - {tarfile.GNUTYPE_SPARSE}


class Blocks:
    """Bytes of an archive from ``offset`` on, read from ``read(n)`` in large pieces:
    ``bytes`` or any buffer (a network body's own, not copied first)."""

    def __init__(self, read: Callable[[int], Any], offset: int = 0) -> None:
        self._read = read
        self._buf: Any = b""
        self._pos = 0
        self.offset = offset

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end of the archive)."""
        end = self._pos + n
        if end <= len(self._buf):
            out = self._buf[self._pos : end]
            self._pos = end
            self.offset += n
            return out if type(out) is bytes else bytes(out)
        parts = [self._buf[self._pos :]]
        have = len(parts[0])
        self._buf, self._pos = b"", 0
        while have < n:
            chunk = self._read(_CHUNK)  # memory follows the bytes that arrive
            if not len(chunk):
                break
            if type(chunk) is not bytes:
                chunk = memoryview(chunk)  # sliced without copies; each member copied once
            if have + len(chunk) > n:
                keep = n - have
                parts.append(chunk[:keep])
                self._buf, self._pos = chunk, keep
                have = n
                break
            parts.append(chunk)
            have += len(chunk)
        out = parts[0] if len(parts) == 1 and type(parts[0]) is bytes else b"".join(parts)
        self.offset += len(out)
        return out

    def plain(self, total: int | None) -> list[tuple[str, int, bytes]]:
        """The plain members held whole in the piece at hand, read (see ``_tarscan.c``):
        ``(name, header offset, bytes)``; empty when the next header needs walk()."""
        if _tarscan is None or len(self._buf) - self._pos < _BLOCK:
            return []
        limit = min(limits.get().max_member_bytes, 1 << 62)  # a C long long, with room
        found, pos = _tarscan.scan(
            self._buf, self._pos, self.offset, -1 if total is None else total, limit
        )
        self.offset += pos - self._pos
        self._pos = pos
        return found

    def skip(self, n: int) -> int:
        """Pass over ``n`` bytes; how many there were."""
        done = 0
        while done < n:
            piece = self.take(min(n - done, _CHUNK))
            if not piece:
                break
            done += len(piece)
        return done


class SeekBlocks:
    """Bytes of an archive read at offsets (``read_at(offset, n)``): skips cost nothing."""

    def __init__(
        self, read_at: Callable[[int, int], bytes], offset: int = 0, *, total: int | None = None
    ) -> None:
        self._read_at = read_at
        self.offset = offset
        self._total = total  # the archive's length: a skip past it is short, as a read is

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes (fewer at the end of the archive)."""
        out = self._read_at(self.offset, n) if n else b""
        self.offset += len(out)
        return out

    def skip(self, n: int) -> int:
        """Pass over ``n`` bytes without reading them; how many there were (fewer at the
        end of the archive, when its length is known)."""
        if self._total is not None:
            n = max(0, min(n, self._total - self.offset))
        self.offset += n
        return n


def _number(field: bytes, name: str, offset: int) -> int:
    """A header number: octal text or GNU base-256 (negative when the sign bit is set)."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * len(field) - 8)) if field[0] == 0xFF else value
    text = field.split(b"\0", 1)[0].strip()
    try:
        return int(text, 8) if text else 0
    except ValueError:
        raise _garbled(name, offset, f"bad number {field!r}") from None


def _garbled(name: str, offset: int, why: str) -> FormatError:
    return FormatError(
        f"tar {name!r}: the block at offset {offset} is not a tar header ({why}); "
        "the archive is corrupt, re-create or re-download it"
    )


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _pax_records(data: bytes, name: str, offset: int) -> dict[str, str]:
    """``"%d %s=%s\\n"`` records of a pax header block."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos, pos + 24)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        record = data[pos : pos + length]
        key, eq, value = record[space - pos + 1 : -1].partition(b"=")
        if length <= space - pos or pos + length > len(data) or not eq or record[-1:] != b"\n":
            raise FormatError(
                f"tar {name!r}: the pax header at offset {offset} has a malformed record "
                f"at byte {pos}; the archive is corrupt, re-create or re-download it"
            )
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _pax_size(value: str, where: str) -> int:
    try:
        size = int(value)
    except ValueError:
        raise FormatError(f"{where}: pax size {value!r} is not a number") from None
    if size < 0:
        raise FormatError(f"{where} declares a negative size {size}; the archive is corrupt")
    return size


def _sparse_check(block: bytes, size: int, pax: dict[str, str], where: str) -> None:
    """Bound a sparse member's holes (``max_inflation_ratio``); then refuse it: a sample
    reader has no use for sparse files and would have to expand them."""
    real = size
    if "GNU.sparse.realsize" in pax or "GNU.sparse.size" in pax:
        real = _pax_size(pax.get("GNU.sparse.realsize", pax.get("GNU.sparse.size", "0")), where)
    elif block[156:157] == tarfile.GNUTYPE_SPARSE:
        real = _number(block[483:495], where, 0)
    limits.check("max_member_bytes", real, what=where)
    if real > limits.get().inflation_floor_bytes:
        limits.check(
            "max_inflation_ratio",
            real // max(size, 1),
            what=f"{where}: sparse member of {real} bytes stored in {size}",
        )
    raise FormatError(
        f"{where} is a sparse file; WebDataset and archive sources read plain members "
        "only, re-create the archive without --sparse"
    )


def walk(
    blocks: Blocks | SeekBlocks, name: str, total: int | None, *, data: bool = True
) -> Iterator[tuple[str, int, bytes | None]]:
    """The regular members of a tar archive: ``(member name, offset of its first
    header block, its bytes)`` (``None`` for the bytes when ``data`` is false: the
    members are skipped, not read).

    Args:
        blocks: the archive from some header's offset on.
        name: the archive, for messages.
        total: the archive's length in bytes, when known: sizes running past it are refused.
        data: read the members' bytes.

    Raises:
        FormatError: a cut, garbled or negative-size header, or a member cut short.
        LimitError: a header block, the extended headers before one member or the
            global pax headers over ``max_header_bytes``; a member over ``max_member_bytes``.
    """
    pending: dict[str, str] = {}  # pax records for the next member
    global_pax: dict[str, str] = {}
    long_name: str | None = None
    first: int | None = None  # the offset of the member's first header block
    # extended headers are kept until their member: bounded together, not one by one
    extended = 0  # pax and long-name bytes since the last member
    global_bytes = 0  # global pax bytes so far (they hold for every later member)
    fast = blocks if data and isinstance(blocks, Blocks) else None
    while True:
        if fast and first is None and not pending and long_name is None and not global_pax:
            yield from fast.plain(total)  # the common members, in C; the rest below
        offset = blocks.offset
        block = blocks.take(_BLOCK)
        if len(block) < _BLOCK:
            if block:
                raise FormatError(
                    f"tar {name!r}: the header at offset {offset} is cut short ({len(block)} "
                    f"of {_BLOCK} bytes); the archive is truncated, re-create or re-download it"
                )
            return  # an archive without its end-of-archive blocks, as GNU tar accepts
        if block == _ZERO:
            return
        stored = _number(block[148:156], name, offset)
        total_sum = sum(block) - sum(block[148:156]) + 256  # the checksum field as spaces
        if stored != total_sum and stored != _signed_sum(block):
            raise _garbled(name, offset, "bad checksum")
        kind = block[156:157]
        size = _number(block[124:136], name, offset)
        raw_name = block[:100]
        if first is None:
            first = offset
        where = f"tar {name!r} member {_text(raw_name)!r} at offset {offset}"
        if size < 0:
            raise FormatError(f"{where} declares a negative size {size}; the archive is corrupt")
        if kind in _LONG or kind in _PAX:
            limits.check("max_header_bytes", size, what=f"{where}: extended header")
            if kind == tarfile.XGLTYPE:
                global_bytes += size
                limits.check(
                    "max_header_bytes", global_bytes, what=f"{where}: global pax headers in all"
                )
            else:
                extended += size
                limits.check(
                    "max_header_bytes",
                    extended,
                    what=f"{where}: extended headers for one member in all",
                )
            _room(size, offset + _BLOCK, where, total)
            body = blocks.take(size)
            if len(body) < size:
                raise _cut(where, blocks.offset)
            if blocks.skip(-size % _BLOCK) < -size % _BLOCK:
                raise _cut(where, blocks.offset)
            if kind == tarfile.GNUTYPE_LONGNAME:
                long_name = _text(body)
            elif kind == tarfile.XGLTYPE:
                global_pax.update(_pax_records(body, name, offset))
            elif kind != tarfile.GNUTYPE_LONGLINK:
                pending.update(_pax_records(body, name, offset))
            continue
        pax = {**global_pax, **pending} if global_pax else pending
        member = pax.get("path") or long_name
        if member is None:
            member = _text(raw_name)
            prefix = block[345:500]
            if prefix[0] and kind not in (tarfile.GNUTYPE_SPARSE,):
                member = _text(prefix) + "/" + member
        where = f"tar {name!r} member {member!r} at offset {offset}"
        if "size" in pax:
            size = _pax_size(pax["size"], where)
        start, pending, long_name, first, extended = first, {}, None, None, 0
        if kind == tarfile.GNUTYPE_SPARSE or any(k.startswith("GNU.sparse.") for k in pax):
            _sparse_check(block, size, pax, where)
        if kind in _NO_DATA or (kind == tarfile.AREGTYPE and member.endswith("/")):
            continue  # a directory (tarfile's rule for an old-style one), link or device
        limits.check("max_member_bytes", size, what=where)
        _room(size, offset + _BLOCK, where, total)
        regular = kind in _REGULAR
        if data and regular:
            payload = blocks.take(size)
            if len(payload) < size:
                raise _cut(where, blocks.offset)
        else:
            payload = None
            if blocks.skip(size) < size:
                raise _cut(where, blocks.offset)
        if blocks.skip(-size % _BLOCK) < -size % _BLOCK:
            raise _cut(where, blocks.offset)
        if regular:
            yield member, start, payload


def _signed_sum(block: bytes) -> int:
    """The checksum as old tar programs computed it (signed chars)."""
    signed = sum(b - 256 if b > 127 else b for b in block)
    return signed - sum(b - 256 if b > 127 else b for b in block[148:156]) + 256


def _room(size: int, start: int, where: str, total: int | None) -> None:
    _check_room(size, start, where, total)


def _cut(where: str, offset: int) -> FormatError:
    return FormatError(
        f"{where} is cut short at offset {offset}; the archive is truncated, "
        "re-create or re-download it"
    )
