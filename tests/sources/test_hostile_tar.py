"""Hostile tar and zip archives: lying size fields, cut headers, garbled blocks, path
tricks in member names. Each is refused with a dataio error naming the archive (and
offset), before anything of the declared size is allocated, skipped or read."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

import dataio
from dataio.exceptions import DataioError, FormatError, LimitError

BIG = 1 << 40  # a member "of" 1 TiB in an archive of a few KiB
HUGE_LIMITS = {"max_member_bytes": 1 << 62, "max_header_bytes": 1 << 62}


def header(
    name: str, *, size: int = 0, type: bytes = tarfile.REGTYPE, size_field: bytes | None = None
) -> bytes:
    """One 512-byte ustar/GNU header; ``size_field`` overwrites the raw 12-byte field."""
    info = tarfile.TarInfo(name)
    info.size, info.type = size, type
    buf = bytearray(info.tobuf(format=tarfile.GNU_FORMAT)[:512])
    if size_field is not None:
        assert len(size_field) == 12
        buf[124:136] = size_field
    return _checksummed(buf)


def _checksummed(buf: bytearray) -> bytes:
    buf[148:156] = b" " * 8
    buf[148:156] = b"%06o\0 " % sum(buf)
    return bytes(buf)


def member(name: str, data: bytes) -> bytes:
    pad = -len(data) % 512
    return header(name, size=len(data)) + data + b"\0" * pad


def good_tar(n: int = 3) -> bytes:
    """``n`` samples of two members each, and the end-of-archive blocks."""
    out = b"".join(
        member(f"s{i}.txt", b"text %d" % i) + member(f"s{i}.cls", b"%d" % i) for i in range(n)
    )
    return out + b"\0" * 1024


def base256(value: int) -> bytes:
    return b"\x80" + value.to_bytes(11, "big")


def sparse_header(name: str, real_size: int) -> bytes:
    """A GNU sparse member storing no data but claiming ``real_size`` bytes of holes."""
    buf = bytearray(header(name, type=tarfile.GNUTYPE_SPARSE))
    buf[386:398] = b"%011o\0" % 0  # one map entry: offset 0 ...
    buf[398:410] = b"%011o\0" % 0  # ... 0 bytes of data
    buf[483:495] = base256(real_size)  # the real (expanded) size
    return _checksummed(buf)


def pax(records: dict[str, str]) -> bytes:
    body = b""
    for key, value in records.items():
        line = f" {key}={value}\n".encode()
        n = len(line) + 1
        while len(str(n)) + len(line) != n:
            n = len(str(n)) + len(line)
        body += str(n).encode() + line
    return (
        header("././@PaxHeader", size=len(body), type=tarfile.XHDTYPE)
        + body
        + b"\0" * (-len(body) % 512)
    )


HOSTILE: dict[str, bytes] = {
    # octal size field: 8 GiB - 1 declared, nothing stored
    "octal-size": good_tar(1)[:-1024] + header("x.bin", size_field=b"77777777777\0") + b"\0" * 1024,
    "base256-size": header("x.bin", size_field=base256(BIG)) + b"\0" * 1024,
    "negative-size": member("a.txt", b"a")
    + header("x.bin", size_field=b"\xff" * 12)
    + b"\0" * 1024,
    "gnu-sparse-realsize": member("a.txt", b"a") + sparse_header("x.bin", BIG) + b"\0" * 1024,
    "gnu-longname-size": member("a.txt", b"a")
    + header("././@LongLink", type=tarfile.GNUTYPE_LONGNAME, size_field=base256(BIG))
    + b"\0" * 1024,
    "pax-header-size": member("a.txt", b"a")
    + header("././@PaxHeader", type=tarfile.XHDTYPE, size_field=base256(BIG))
    + b"\0" * 1024,
    "pax-size-record": member("a.txt", b"a")
    + pax({"size": str(BIG)})
    + header("x.bin")
    + b"\0" * 1024,
}


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_lying_size_fields_are_refused_before_allocating(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, f"{kind}.tar", HOSTILE[kind])
    with pytest.raises(FormatError if kind == "negative-size" else LimitError) as info:
        list(dataio.archive(path))
    assert path in str(info.value)
    # with the limits lifted, the archive's own length still refutes the claim
    with dataio.limits.scoped(**HUGE_LIMITS), pytest.raises(DataioError) as info2:
        list(dataio.archive(path))
    assert path in str(info2.value)
    assert isinstance(info2.value, FormatError | LimitError)


def test_negative_size_is_a_format_error(tmp_path: Path) -> None:
    path = write(tmp_path, "neg.tar", HOSTILE["negative-size"])
    with pytest.raises(FormatError, match="negative size"):
        list(dataio.archive(path))


def test_sparse_holes_are_bounded_by_the_inflation_ratio(tmp_path: Path) -> None:
    path = write(tmp_path, "sparse.tar", HOSTILE["gnu-sparse-realsize"])
    with dataio.limits.scoped(**HUGE_LIMITS), pytest.raises(LimitError, match="max_inflation"):
        list(dataio.archive(path))


def test_compressed_tar_with_lying_size_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "big.tar.gz", gzip.compress(HOSTILE["base256-size"]))
    with pytest.raises(LimitError, match="max_member_bytes"):
        list(dataio.archive(path))
    # lifted limit: the member is read as its bytes arrive, and they end early
    with dataio.limits.scoped(**HUGE_LIMITS), pytest.raises(FormatError, match=r"big\.tar\.gz"):
        list(dataio.archive(path))


@pytest.mark.parametrize("cut", [100, 511])
def test_tar_cut_inside_a_header_is_a_format_error(tmp_path: Path, cut: int) -> None:
    data = good_tar(3)
    third = 4 * 1024  # two samples of two members of 1024 bytes each
    with tarfile.open(fileobj=io.BytesIO(data)) as oracle:
        assert oracle.getnames()[4] == "s2.txt"
    path = write(tmp_path, "cut.tar", data[: third + cut])
    with pytest.raises(FormatError, match=rf"cut\.tar.*offset {third}.*cut short"):
        list(dataio.archive(path))


def test_tar_cut_inside_member_data_is_a_format_error(tmp_path: Path) -> None:
    data = member("a.txt", b"a" * 2000) + b"\0" * 1024
    path = write(tmp_path, "cut.tar", data[:1200])
    with pytest.raises(FormatError, match=r"cut\.tar"):
        list(dataio.archive(path))


def test_garbled_header_mid_archive_is_a_format_error(tmp_path: Path) -> None:
    data = good_tar(1)[:-1024] + b"garbage!" * 64 + good_tar(1)
    path = write(tmp_path, "garbled.tar", data)
    with pytest.raises(FormatError, match=r"garbled\.tar.*offset 2048.*not a tar header"):
        list(dataio.archive(path))


def test_honest_archives_still_read(tmp_path: Path) -> None:
    path = write(tmp_path, "ok.tar", good_tar(3))
    # an archive without its end-of-archive blocks is accepted, as GNU tar does
    bare = write(tmp_path, "bare.tar", good_tar(3)[:-1024])
    gz = write(tmp_path, "ok.tar.gz", gzip.compress(good_tar(3)))
    for p in (path, bare, gz):
        samples = list(dataio.archive(p))
        assert [s["__key__"] for s in samples] == ["s0", "s1", "s2"]
        assert [s["txt"] for s in samples] == [b"text 0", b"text 1", b"text 2"]


def test_pax_and_longname_members_still_read(tmp_path: Path) -> None:
    long = "d" * 150 + "/k.txt"
    buf = io.BytesIO()
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            info = tarfile.TarInfo(long)
            info.size = 5
            tar.addfile(info, io.BytesIO(b"hello"))
        path = write(tmp_path, f"long-{fmt}.tar", buf.getvalue())
        assert list(dataio.archive(path)) == [
            {"__key__": "d" * 150 + "/k", "__url__": path, "txt": b"hello"}
        ]
        assert dataio.reader(path).tar_entry(long).read_all() == b"hello"


def test_loader_records_truncation_as_a_row_error(tmp_path: Path) -> None:
    write(tmp_path, "s-0.tar", good_tar(3)[: 4 * 1024 + 100])  # third sample cut
    write(tmp_path, "s-1.tar", good_tar(2))
    plan = dataio.pipeline(
        dataio.slot("txt").passthrough(), dataio.slot("cls").passthrough(), dataio.batch(10)
    )
    source = dataio.webdataset(str(tmp_path / "s-{0..1}.tar"))
    batch = next(iter(plan.bind(source).run(on_failure="skip")))
    # s-0's first sample, then (its second possibly incomplete, so dropped with the
    # error) the whole of s-1
    assert [bytes(t) for t in batch["txt"]] == [b"text 0", b"text 0", b"text 1"]
    assert len(batch.errors) == 1
    error = batch.errors[0]
    assert isinstance(error, FormatError) and "s-0.tar" in str(error) and "4096" in str(error)
    with pytest.raises(FormatError, match=r"s-0\.tar"):
        list(plan.bind(source).run())
    with pytest.raises(FormatError, match=r"s-0\.tar"):
        list(source)  # iterating the source directly raises


def test_tar_entry_does_not_hang_skipping_a_huge_member(tmp_path: Path) -> None:
    data = header("big.bin", size_field=base256(BIG)) + member("b.txt", b"b") + b"\0" * 1024
    path = write(tmp_path, "skip.tar", data)
    gz = write(tmp_path, "skip.tar.gz", gzip.compress(data))
    started = time.monotonic()
    with pytest.raises(LimitError, match="max_member_bytes"):
        dataio.reader(path).tar_entry("b.txt").read_all()
    with pytest.raises(LimitError, match="max_member_bytes"):
        dataio.reader(gz).gunzip().tar_entry("b.txt").read_all()
    # the stream's length is known for a plain tar: the claim is refuted at once
    with dataio.limits.scoped(**HUGE_LIMITS), pytest.raises(FormatError, match="remain"):
        dataio.reader(path).tar_entry("b.txt").read_all()
    assert time.monotonic() - started < 10


def test_tar_entry_cut_header_is_a_format_error(tmp_path: Path) -> None:
    path = write(tmp_path, "cut.tar", good_tar(3)[: 4 * 1024 + 100])
    assert dataio.reader(path).tar_entry("s1.cls").read_all() == b"1"
    with pytest.raises(FormatError, match="cut short"):
        dataio.reader(path).tar_entry("s2.txt").read_all()


def test_gunzip_is_bounded_by_max_decoded_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, "zeros.gz", gzip.compress(bytes(1 << 20)))
    with dataio.limits.scoped(max_decoded_bytes=1 << 16), pytest.raises(LimitError):
        dataio.reader(path).gunzip().read_all()
    assert dataio.reader(path).gunzip().read_all() == bytes(1 << 20)


def test_member_names_are_never_paths(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    data = member("../evil.txt", b"up") + member("/abs/evil.txt", b"abs") + b"\0" * 1024
    path = write(work, "names.tar", data)
    zpath = str(work / "names.zip")
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr("../evil.txt", b"up")
        z.writestr("/abs/evil.txt", b"abs")
    before = sorted(os.listdir(tmp_path)), sorted(os.listdir(work))
    for p in (path, zpath):
        samples = {s["__key__"]: s["txt"] for s in dataio.archive(p)}
        assert samples[next(k for k in samples if k.endswith("abs/evil"))] == b"abs"
        assert samples["../evil"] == b"up"
    assert dataio.reader(path).tar_entry("../evil.txt").read_all() == b"up"
    assert (sorted(os.listdir(tmp_path)), sorted(os.listdir(work))) == before
    assert not Path("/abs").exists()


def test_truncated_zip_is_a_format_error(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.txt", b"a" * 1000)
    path = write(tmp_path, "cut.zip", buf.getvalue()[:-30])
    with pytest.raises(FormatError, match=r"cut\.zip"):
        list(dataio.archive(path))


def test_fifo_archive_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "shard.tar"
    os.mkfifo(fifo)
    with pytest.raises(DataioError, match="FIFO"):
        list(dataio.archive(fifo))


def _zip_with(name: str, data: bytes, *, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        z.writestr(name, data)
    return buf.getvalue()


def test_zip_member_declaring_more_than_max_member_bytes_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "big.zip", _zip_with("a.bin", bytes(1 << 16)))
    with dataio.limits.scoped(max_member_bytes=1 << 15), pytest.raises(LimitError) as info:
        list(dataio.archive(path))
    assert "a.bin" in str(info.value) and path in str(info.value)


def test_zip_bomb_ratio_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "bomb.zip", _zip_with("z.bin", bytes(1 << 22)))  # ~1000:1
    lowered = dataio.limits.scoped(inflation_floor_bytes=1 << 20, max_inflation_ratio=100)
    with lowered, pytest.raises(LimitError, match="max_inflation_ratio"):
        list(dataio.archive(path))
    (sample,) = dataio.archive(path)  # honest under the defaults
    assert sample["bin"] == bytes(1 << 22)


def test_zip_unknown_method_and_encryption_are_format_errors(tmp_path: Path) -> None:
    data = bytearray(_zip_with("a.txt", b"hello", method=zipfile.ZIP_STORED))
    # method 99 (AES) in the local and central headers; flag bit 0 (encrypted) in both
    unknown = bytearray(data)
    unknown[8:10] = (99).to_bytes(2, "little")
    central = unknown.index(b"PK\x01\x02")
    unknown[central + 10 : central + 12] = (99).to_bytes(2, "little")
    encrypted = bytearray(data)
    encrypted[6:8] = (1).to_bytes(2, "little")
    encrypted[central + 8 : central + 10] = (1).to_bytes(2, "little")
    for name, raw in (("method.zip", unknown), ("encrypted.zip", encrypted)):
        path = write(tmp_path, name, bytes(raw))
        with pytest.raises(FormatError) as info:
            list(dataio.archive(path))
        assert path in str(info.value)
