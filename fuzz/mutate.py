"""Mutations of seed files: generic byte edits plus edits aimed at known length fields.

Every function takes a ``random.Random`` so a campaign is reproducible from its seed.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Callable

BOUNDARY = (
    0,
    1,
    0x7F,
    0xFF,
    0x7FFF,
    0xFFFF,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
MAX_SIZE = 1 << 20


def flip_bits(data: bytearray, rng: random.Random) -> bytearray:
    """Flip one to eight random bits."""
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    return data


def set_bytes(data: bytearray, rng: random.Random) -> bytearray:
    """Overwrite one to four bytes with interesting values."""
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
    return data


def truncate(data: bytearray, rng: random.Random) -> bytearray:
    """Cut the file short (often in the header)."""
    cut = rng.randrange(len(data)) if rng.random() < 0.6 else rng.randrange(min(len(data), 64))
    return data[:cut]


def integer(data: bytearray, rng: random.Random) -> bytearray:
    """Write a boundary value as a 1/2/4/8-byte integer, either byte order, anywhere."""
    width = rng.choice((1, 2, 4, 8))
    if len(data) < width:
        return data
    value = rng.choice(BOUNDARY) & ((1 << (8 * width)) - 1)
    at = rng.randrange(len(data) - width + 1)
    data[at : at + width] = value.to_bytes(width, rng.choice(("little", "big")))
    return data


def insert_chunk(data: bytearray, rng: random.Random) -> bytearray:
    """Repeat or insert a chunk of the file somewhere (duplicated headers, markers)."""
    start = rng.randrange(len(data))
    chunk = data[start : start + rng.randint(1, 256)]
    at = rng.randrange(len(data) + 1)
    return data[:at] + chunk * rng.randint(1, 16) + data[at:]


def delete_chunk(data: bytearray, rng: random.Random) -> bytearray:
    """Remove a chunk from the middle."""
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.randint(1, 128) :]


def splice(data: bytearray, rng: random.Random, other: bytes) -> bytearray:
    """Head of this file, tail of another seed of the same target."""
    if not other:
        return data
    return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other)) :]


# -- header-aware edits ---------------------------------------------------------------------


def jpeg_sof(data: bytearray, rng: random.Random) -> bytearray:
    """Set the frame's height/width (SOF0/1/2) or component count to extremes."""
    for match in re.finditer(rb"\xff[\xc0-\xc2]", bytes(data)):
        at = match.start() + 5
        if at + 4 <= len(data):
            value = rng.choice((0, 1, 0xFFFF, 65500, rng.randrange(1 << 16)))
            spot = rng.choice((at, at + 2))
            data[spot : spot + 2] = value.to_bytes(2, "big")
            if rng.random() < 0.2 and at + 4 < len(data):
                data[at + 4] = rng.choice((0, 2, 4, 255))
            return data
    return integer(data, rng)


def jpeg_scans(data: bytearray, rng: random.Random) -> bytearray:
    """Repeat the last SOS scan many times (progressive scan floods)."""
    text = bytes(data)
    start = text.rfind(b"\xff\xda")
    end = text.rfind(b"\xff\xd9")
    if start < 0 or end <= start:
        return insert_chunk(data, rng)
    scan = text[start:end]
    return bytearray(text[:start] + scan * rng.randint(2, 400) + text[start:])


def npy_header(data: bytearray, rng: random.Random) -> bytearray:
    """Rewrite the NPY header's shape or descr to huge, negative or odd values."""
    text = bytes(data)
    match = re.search(rb"'shape': \(([^)]*)\)", text)
    if match is None:
        return integer(data, rng)
    if rng.random() < 0.7:
        shape = rng.choice(
            (
                b"-1,",
                b"4611686018427387904,",
                b"2147483648, 2147483648",
                b"0,",
                b"1, 1, 1, 1, 1" * 8,
                b"99999999999999999999,",
            )
        )
        new = text[: match.start(1)] + shape + text[match.end(1) :]
    else:
        descr = rng.choice(
            (
                b"'|V0'",
                b"'|S0'",
                b"'<U0'",
                b"'O'",
                b"'<f16'",
                b"'>i8'",
                b"[('a', '<i4', (99999999,))]",
            )
        )
        new = re.sub(rb"'descr': ('[^']*'|\[.*?\])", b"'descr': " + descr, text, count=1)
    return _fix_npy_length(bytearray(new), rng)


def _fix_npy_length(data: bytearray, rng: random.Random) -> bytearray:
    if data[:6] != b"\x93NUMPY" or rng.random() < 0.2:
        return data
    end = data.find(b"\n", 10)
    if end > 0 and data[6] == 1:
        data[8:10] = struct.pack("<H", end + 1 - 10)
    return data


def tar_size(data: bytearray, rng: random.Random) -> bytearray:
    """Set a member's size field (octal huge, base-256, garbage) or its checksum."""
    blocks = [i for i in range(0, len(data) - 511, 512) if data[i + 257 : i + 262] == b"ustar"]
    if not blocks:
        return integer(data, rng)
    at = rng.choice(blocks)
    field = rng.choice(
        (
            b"77777777777\0",
            b"\x80" + (2**63).to_bytes(11, "big"),
            b"\xff" * 12,
            b"-0000000001\0",
            b"\x80" + (5 << 30).to_bytes(11, "big"),
            bytes(12),
        )
    )
    data[at + 124 : at + 136] = field
    if rng.random() < 0.8:  # a correct checksum gets past the header check
        data[at + 148 : at + 156] = b" " * 8
        checksum = sum(data[at : at + 512])
        data[at + 148 : at + 156] = b"%06o\0 " % checksum
    if rng.random() < 0.2:
        data[at + 156] = rng.choice(b"0257KLSgx")
    return data


def tfrecord_length(data: bytearray, rng: random.Random) -> bytearray:
    """Set the first (or a later) record length to a boundary value, CRC fixed or not."""
    if len(data) < 12:
        return integer(data, rng)
    value = rng.choice((0, 1, 2**31, 2**40, 2**63, 2**64 - 1, len(data)))
    data[0:8] = struct.pack("<Q", value)
    if rng.random() < 0.7:
        from seeds import masked_crc

        data[8:12] = struct.pack("<I", masked_crc(bytes(data[0:8])))
    return data


def safetensors_header(data: bytearray, rng: random.Random) -> bytearray:
    """Set the header length, or edit a shape / offset / dtype inside the JSON header."""
    if len(data) < 8:
        return integer(data, rng)
    if rng.random() < 0.4:
        data[0:8] = struct.pack("<Q", rng.choice((0, 1, 2**31, 2**63, 2**64 - 1, len(data) - 8)))
        return data
    (size,) = struct.unpack("<Q", data[:8])
    header = bytes(data[8 : 8 + size])
    edits = (
        (
            rb'"shape":\[[^\]]*\]',
            rng.choice(
                (
                    b'"shape":[-1]',
                    b'"shape":[4611686018427387904,4]',
                    b'"shape":[1e300]',
                    b'"shape":[]',
                )
            ),
        ),
        (
            rb'"data_offsets":\[[^\]]*\]',
            rng.choice(
                (
                    b'"data_offsets":[0,18446744073709551615]',
                    b'"data_offsets":[8,4]',
                    b'"data_offsets":[0,0]',
                )
            ),
        ),
        (
            rb'"dtype":"[A-Z0-9_]*"',
            rng.choice(
                (b'"dtype":"F64"', b'"dtype":"BOOL"', b'"dtype":"XX"', b'"dtype":"F8_E4M3"')
            ),
        ),
    )
    pattern, repl = rng.choice(edits)
    new = re.sub(pattern, repl, header, count=1)
    new = new.ljust(len(header)) if len(new) < len(header) else new
    return bytearray(struct.pack("<Q", len(new))) + new + data[8 + size :]


def wav_header(data: bytearray, rng: random.Random) -> bytearray:
    """Set the WAV fmt chunk's rate, channels or bits, or a chunk size, to extremes."""
    at = bytes(data).find(b"fmt ")
    if at < 0:
        return integer(data, rng)
    spot = rng.choice(((at + 10, 2), (at + 12, 4), (at + 16, 4), (at + 22, 2), (at + 4, 4), (4, 4)))
    where, width = spot
    value = rng.choice((0, 1, 999983, 2**31 - 1, 2**32 - 1, 65535)) & ((1 << (8 * width)) - 1)
    if where + width <= len(data):
        data[where : where + width] = value.to_bytes(width, "little")
    return data


HEADER_AWARE: dict[str, Callable[[bytearray, random.Random], bytearray]] = {
    "jpeg": jpeg_sof,
    "npy": npy_header,
    "tar": tar_size,
    "tfrecord": tfrecord_length,
    "safetensors": safetensors_header,
    "audio": wav_header,
}
GENERIC: tuple[Callable[[bytearray, random.Random], bytearray], ...] = (
    flip_bits,
    set_bytes,
    truncate,
    integer,
    insert_chunk,
    delete_chunk,
)


def mutate(target: str, seed_files: list[bytes], rng: random.Random) -> bytes:
    """One mutated input for ``target``: one to four stacked mutations of a seed."""
    data = bytearray(rng.choice(seed_files))
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        if not data:
            data = bytearray(rng.choice(seed_files))
        roll = rng.random()
        aware = HEADER_AWARE.get(target)
        if target == "jpeg" and roll < 0.1:
            data = jpeg_scans(data, rng)
        elif aware is not None and roll < 0.35:
            data = aware(data, rng)
        elif roll < 0.45:
            data = splice(data, rng, rng.choice(seed_files))
        else:
            data = rng.choice(GENERIC)(data, rng)
    return bytes(data[:MAX_SIZE])
