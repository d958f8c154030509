"""Zip members read under the limits: one reader for NPZ arrays and zip archives.

A zip header declares each member's inflated size, and an LZMA member's first bytes
declare the dictionary its decoder allocates up front (up to 4 GiB). Both are checked
before anything is allocated, and the bytes actually produced are checked as they come.
"""

from __future__ import annotations

import lzma
import struct
import zipfile
import zlib

from dataio import limits

__all__ = ["LOCAL_HEADER", "ZIP_ERRORS", "read_member"]

# What zipfile and its decompressors raise on a hostile archive (seen by fuzzing):
# names that are not UTF-8, short or bogus headers, unknown methods, encrypted members
# (RuntimeError), corrupt deflate/bzip2/LZMA streams, CRC mismatches (BadZipFile).
ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,
    EOFError,
    RuntimeError,
    zlib.error,
    lzma.LZMAError,
    UnicodeDecodeError,
    struct.error,
    OSError,
    ValueError,
    OverflowError,
    IndexError,
    KeyError,
)

_CHUNK = 1 << 20  # inflate this much at a time, checking limits in between
LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
# zip's LZMA data: version (2 bytes), properties size (2), then lc/lp/pb (1) and the
# dictionary size (4, little-endian)
_LZMA_PROPERTIES = struct.Struct("<4xxI")


def _lzma_dictionary(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> int:
    """The dictionary size an LZMA member's properties declare (0 if unreadable)."""
    fp = zf.fp
    if fp is None:
        return 0
    position = fp.tell()
    try:
        fp.seek(info.header_offset)
        header = fp.read(LOCAL_HEADER.size)
        if len(header) < LOCAL_HEADER.size:
            return 0
        _, name_length, extra_length = LOCAL_HEADER.unpack(header)
        fp.seek(info.header_offset + LOCAL_HEADER.size + name_length + extra_length)
        properties = fp.read(_LZMA_PROPERTIES.size)
    finally:
        fp.seek(position)
    if len(properties) < _LZMA_PROPERTIES.size:
        return 0  # zipfile reports the short stream itself
    return int(_LZMA_PROPERTIES.unpack(properties)[0])


def read_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, *, archive_size: int, where: str
) -> bytearray:
    """A member's bytes, inflated a chunk at a time under the limits.

    The declared size is checked first, then the bytes actually produced: the header's
    size is not trusted alone. ``archive_size`` bounds the compressed bytes whatever the
    header claims. ``where`` names the member in errors.

    Raises:
        LimitError: over ``max_member_bytes`` / ``max_decoded_bytes``, an LZMA
            dictionary over ``max_decoded_bytes``, or over ``max_inflation_ratio``
            once past ``inflation_floor_bytes``.
    """
    bounds = limits.get()
    name = "max_member_bytes"
    if bounds.max_decoded_bytes < bounds.max_member_bytes:
        name = "max_decoded_bytes"
    limits.check(name, info.file_size, what=f"{where}: declared inflated size")
    if info.compress_type == zipfile.ZIP_LZMA:
        limits.check(
            "max_decoded_bytes",
            _lzma_dictionary(zf, info),
            what=f"{where}: declared LZMA dictionary size",
        )
    compressed = max(min(info.compress_size, archive_size), 1)
    out = bytearray()
    with zf.open(info) as member:
        while chunk := member.read(_CHUNK):
            out += chunk
            limits.check(name, len(out), what=f"{where}: inflated size")
            if len(out) > bounds.inflation_floor_bytes:
                limits.check(
                    "max_inflation_ratio",
                    len(out) // compressed,
                    what=f"{where}: {compressed:,} bytes inflating to {len(out):,}",
                )
    return out
