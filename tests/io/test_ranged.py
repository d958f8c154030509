"""RangedFile: a seekable file over a URI, read by ranges, checked against io.BytesIO."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest
from helpers.object_servers import RangeServer

import dataio
from dataio.exceptions import DataioError, NotFoundError, TransportError
from dataio.io.ranged import RangedFile


def test_reads_and_seeks_as_a_bytes_file_does(http: str) -> None:
    data = os.urandom(700_000)
    uri = f"{http}/blob.bin"
    dataio.write(uri, data)
    oracle = io.BytesIO(data)
    rng = random.Random(5)
    with RangedFile(uri, read_ahead=64 << 10) as f:
        assert f.size == len(data) and f.seekable() and f.readable()
        for _ in range(300):
            op = rng.random()
            if op < 0.3:
                target = rng.randrange(-10, len(data) + 10)
                whence = rng.choice([io.SEEK_SET, io.SEEK_CUR, io.SEEK_END])
                base = {io.SEEK_SET: 0, io.SEEK_CUR: oracle.tell(), io.SEEK_END: len(data)}
                offset = target - base[whence]
                if target < 0:
                    with pytest.raises(OSError):
                        f.seek(offset, whence)
                    continue
                assert f.seek(offset, whence) == oracle.seek(offset, whence)
            else:
                n = rng.choice([1, 7, 512, 4096, 70_000, 200_000])
                assert f.read(n) == oracle.read(n)
            assert f.tell() == oracle.tell()
        f.seek(123)
        assert f.read() == data[123:]
        buffer = bytearray(10)
        f.seek(len(data) - 4)
        assert f.readinto(buffer) == 4 and bytes(buffer[:4]) == data[-4:]


def test_small_reads_share_one_block_and_large_ones_fetch_exactly(
    http_server: RangeServer, http: str
) -> None:
    data = os.urandom(1 << 20)
    uri = f"{http}/blob.bin"
    dataio.write(uri, data)
    with RangedFile(uri, read_ahead=64 << 10) as f:
        for _ in range(100):  # 100 reads of 100 bytes: one 64 KiB block
            f.read(100)
        assert (f.requests, f.fetched) == (1, 64 << 10)
        f.seek(300_000)
        assert f.read(500_000) == data[300_000:800_000]
        assert (f.requests, f.fetched) == (2, (64 << 10) + 500_000)
    ranges = [
        {k.lower(): v for k, v in h.items()}.get("range")
        for method, _, h in http_server.requests
        if method == "GET"
    ]
    assert ranges[-2:] == ["bytes=0-65535", "bytes=300000-799999"]


def test_cached_objects_are_read_from_the_cache(
    http_server: RangeServer, http: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    data = os.urandom(300_000)
    uri = f"{http}/blob.bin"
    dataio.write(uri, data)
    assert dataio.read(uri) == data  # now cached whole
    gets = sum(1 for method, _, _ in http_server.requests if method == "GET")
    with RangedFile(uri) as f:
        f.seek(1000)
        assert f.read(5000) == data[1000:6000]
    assert sum(1 for method, _, _ in http_server.requests if method == "GET") == gets


def test_missing_object_and_closed_file(http: str) -> None:
    with pytest.raises(NotFoundError, match=r"nope\.bin"):
        RangedFile(f"{http}/nope.bin")
    dataio.write(f"{http}/a.bin", b"abc")
    f = RangedFile(f"{http}/a.bin")
    f.close()
    with pytest.raises(DataioError, match="closed"):
        f.read(1)


def test_pread_past_the_end_of_a_cached_object_stops_at_its_end(
    http: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache entry ends in a footer: ``pread`` must not hand its bytes out as data."""
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    data = bytes(range(256)) * 4
    uri = f"{http}/blob.bin"
    dataio.write(uri, data)
    assert dataio.read(uri) == data  # cached whole now
    with RangedFile(uri) as f:
        assert f._cached is not None
        assert f.pread(len(data) - 4, 32) == data[-4:]
        assert f.pread(len(data), 32) == b""


@pytest.mark.parametrize("read_ahead", [64, 1 << 20])
def test_an_object_shorter_than_its_known_size_is_a_transport_error(
    http: str, read_ahead: int
) -> None:
    """Small reads (through the read-ahead block) and large ones fail alike, naming the
    size the file was opened with and the size the server reports, instead of a silent
    short read."""
    uri = f"{http}/blob.bin"
    dataio.write(uri, os.urandom(1000))
    with (
        RangedFile(uri, size=3000, read_ahead=read_ahead) as f,
        pytest.raises(TransportError, match=r"changed .*\(3000 bytes .*, 1000 bytes now\)"),
    ):
        f.read()
