"""The C scan of plain tar members (``dataio/io/_tarscan.c``) against the Python walk.

Oracles: :func:`dataio.io.tar.walk` with the C scan turned off (every header parsed in
Python, with all its refusals) on the same bytes cut into the same pieces, and
:mod:`tarfile` for the members of valid archives.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataio import limits
from dataio.exceptions import DataioError
from dataio.io import _tarscan, tar  # the build makes it (optional only where no compiler)

assert tar._tarscan is _tarscan


def make_tar(members: list[tuple[str, bytes]], fmt: int, *, dirs: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as archive:
        for name, data in members:
            if dirs:
                folder = tarfile.TarInfo(name.rsplit(".", 1)[0] + "-dir")
                folder.type = tarfile.DIRTYPE
                archive.addfile(folder)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pieces(data: bytes, cuts: list[int]) -> Iterator[Any]:
    """``data`` in pieces at ``cuts`` (memoryviews, as network bodies arrive)."""
    view = memoryview(data)
    at = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts} | {len(data)}):
        if cut > at:
            yield view[at:cut]
            at = cut


def walked(data: bytes, cuts: list[int], *, scan: bool, total: int | None) -> Any:
    """What walk() gives over the pieces: the members, or the error's type and text."""
    saved = tar._tarscan
    if not scan:
        tar._tarscan = None
    try:
        parts = pieces(data, cuts)
        blocks = tar.Blocks(lambda _: next(parts, b""), 0)
        return [(n, o, bytes(d or b"")) for n, o, d in tar.walk(blocks, "t.tar", total)]
    except DataioError as exc:
        return type(exc).__name__, str(exc)
    finally:
        tar._tarscan = saved


NAMES = st.from_regex(r"[a-z0-9_]{1,12}(/[a-z0-9]{1,8})?\.(jpg|cls|json)", fullmatch=True)
MEMBERS = st.lists(st.tuples(NAMES, st.binary(max_size=1500)), max_size=8)
FORMATS = st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
CUTS = st.lists(st.integers(0, 20_000), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(members=MEMBERS, fmt=FORMATS, cuts=CUTS, dirs=st.booleans())
def test_valid_archives_read_as_tarfile_and_the_python_walk_do(
    members: list[tuple[str, bytes]], fmt: int, cuts: list[int], dirs: bool
) -> None:
    data = make_tar(members, fmt, dirs=dirs)
    fast = walked(data, cuts, scan=True, total=len(data))
    assert fast == walked(data, cuts, scan=False, total=len(data))
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        expected = [
            (m.name, m.offset, archive.extractfile(m).read())  # type: ignore[union-attr]
            for m in archive
            if m.isfile()
        ]
    assert fast == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=MEMBERS.filter(bool),
    fmt=FORMATS,
    cuts=CUTS,
    flips=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 255)), min_size=1, max_size=4),
    known=st.booleans(),
)
def test_damaged_archives_end_as_the_python_walk_ends(
    members: list[tuple[str, bytes]],
    fmt: int,
    cuts: list[int],
    flips: list[tuple[int, int]],
    known: bool,
) -> None:
    """Bytes changed anywhere (headers, checksums, sizes, types) and cuts anywhere: the
    same members, or the same refusal with the same message."""
    data = bytearray(make_tar(members, fmt))
    for at, value in flips:
        data[at % len(data)] = value
    damaged = bytes(data)
    total = len(damaged) if known else None
    assert walked(damaged, cuts, scan=True, total=total) == walked(
        damaged, cuts, scan=False, total=total
    )


def header(name: bytes, size_field: bytes, *, kind: bytes = b"0", prefix: bytes = b"") -> bytes:
    """A ustar header with chosen raw fields and a correct checksum."""
    block = bytearray(512)
    block[: len(name)] = name
    block[100:108] = b"0000644\0"
    block[124:136] = size_field
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[345 : 345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


@pytest.mark.parametrize(
    "size_field",
    [
        b"00000000012\0",  # octal, NUL-ended
        b"         12\0",  # spaces before
        b"12          ",  # spaces after, no NUL
        b"\t12\0\0\0\0\0\0\0\0\0",  # a tab: Python's strip takes it, the C scan leaves it
        b"0_12\0\0\0\0\0\0\0\0",  # an underscore: int() takes it
        b"\x80" + (10).to_bytes(11, "big"),  # base-256
        b"\xff" * 12,  # base-256, negative
        b"1" * 12,  # larger than the archive
        b"\0" * 12,  # empty: size 0
        b"9\0\0\0\0\0\0\0\0\0\0\0",  # not octal
    ],
)
@pytest.mark.parametrize("kind", [b"0", b"\0", b"7", b"5", b"S", b"x"])
def test_header_fields_read_as_the_python_walk_reads_them(size_field: bytes, kind: bytes) -> None:
    body = b"x" * 10
    one = header(b"k.bin", size_field, kind=kind) + body + bytes(502)
    data = one + header(b"d/", b"0\0", kind=b"\0") + header(b"p.cls", b"1\0", prefix=b"dir")
    data += b"7" + bytes(511) + bytes(1024)
    for cuts in ([], [600], [512], [1024, 1536]):
        assert walked(data, cuts, scan=True, total=len(data)) == walked(
            data, cuts, scan=False, total=len(data)
        )


def test_the_member_limit_holds_in_the_scan() -> None:
    data = make_tar([("a.bin", b"x" * 5000), ("b.bin", b"y" * 10)], tarfile.USTAR_FORMAT)
    with limits.scoped(max_member_bytes=4096):
        fast = walked(data, [], scan=True, total=len(data))
        assert fast == walked(data, [], scan=False, total=len(data))
    assert fast[0] == "LimitError" and "max_member_bytes" in fast[1]


def test_the_scan_reads_most_members() -> None:
    """The fast path is taken: only members crossing a piece's end go through Python."""
    members = [(f"{n:05d}.bin", bytes([n % 256]) * 700) for n in range(400)]
    data = make_tar(members, tarfile.GNU_FORMAT)
    scanned = 0
    real = tar._tarscan

    class Counting:
        @staticmethod
        def scan(*args: Any) -> Any:
            nonlocal scanned
            found, pos = real.scan(*args)
            scanned += len(found)
            return found, pos

    tar._tarscan = Counting
    try:
        got = walked(data, [100_000, 200_000], scan=True, total=len(data))
    finally:
        tar._tarscan = real
    assert [n for n, _, _ in got] == [n for n, _ in members]
    assert scanned >= 395
