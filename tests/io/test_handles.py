from __future__ import annotations

import gzip
import io
import os
import tarfile

import numpy as np
import pytest
from helpers.stream_server import Script, StreamServer, split

import dataio.io as dio
from dataio.exceptions import DecodeError, NotFoundError


def make_tar(entries: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def make_tar_gz(entries: dict[str, bytes]) -> bytes:
    return gzip.compress(make_tar(entries))


def test_reader_gunzip_and_tar_entry(base: str) -> None:
    uri = f"{base}/shard.tar.gz"
    dio.write(uri, make_tar_gz({"0001.jpg": b"first", "0002.cls": b"7"}))
    src = dio.reader(uri)
    assert src.gunzip().tar_entry("0001.jpg").read_all() == b"first"
    assert src.tar_entry("0002.cls").read_all() == b"7"  # compressed tar read directly
    assert repr(src.gunzip()) == f"reader({uri!r}).gunzip()"
    with pytest.raises(NotFoundError, match=r"0003\.jpg"):
        src.gunzip().tar_entry("0003.jpg").read_all()
    with pytest.raises(DecodeError):
        dio.reader(uri).gunzip().gunzip().read_all()


def test_reader_is_lazy_and_read_buffer_is_a_read_only_view(base: str) -> None:
    uri = f"{base}/values.bin"
    reader = dio.reader(uri)  # nothing exists yet: no IO happens here
    values = np.arange(1000, dtype=np.float32)
    dio.write(uri, values.tobytes())
    view = reader.read_buffer()
    assert view.readonly
    np.testing.assert_array_equal(np.frombuffer(view, dtype=np.float32), values)
    assert reader.read_all() == values.tobytes()


@pytest.mark.parametrize("kind", ["local-path", "s3"])
def test_writer_uploads_in_parts_and_shows_nothing_on_failure(
    kind: str, request: pytest.FixtureRequest, tmp_path
) -> None:
    base = str(tmp_path) if kind == "local-path" else str(request.getfixturevalue("s3"))
    part = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    uri = f"{base}/checkpoint.bin"
    with (
        pytest.raises(RuntimeError, match="generator broke"),
        dio.writer(uri, part_size_mib=5) as w,
    ):
        w.write_chunks(part for _ in range(3))  # past one part: multipart is under way
        raise RuntimeError("generator broke")
    assert not dio.exists(uri)
    assert dio.ls(f"{base}/") == []
    if kind == "local-path":
        assert list(tmp_path.iterdir()) == []  # no staging file left behind
    with dio.writer(uri, part_size_mib=5) as w:
        assert w.write_chunks(part for _ in range(4)) == 4 * len(part)
        w.write(b"tail")
    assert dio.read(uri) == part * 4 + b"tail"


@pytest.mark.parametrize("scheme", ["http", "s3"])
def test_an_early_tar_member_does_not_download_the_rest(
    scheme: str, stream_server: StreamServer, request: pytest.FixtureRequest
) -> None:
    first, bulk = os.urandom(100_000), os.urandom(48 << 20)  # incompressible
    archive = gzip.compress(make_tar({"0001.jpg": first, "0002.bin": bulk}), compresslevel=0)
    path = "/objects/shard.tar.gz"
    uri = f"{stream_server.url}{path}"
    if scheme == "s3":
        request.getfixturevalue("scripted_s3")
        path, uri = "/bucket/shard.tar.gz", "s3://bucket/shard.tar.gz"
    stream_server.routes[path] = Script(split(archive, 64 << 10), chunked=False)
    for chain in (
        dio.reader(uri).gunzip().tar_entry("0001.jpg"),
        dio.reader(uri).tar_entry("0001.jpg"),
    ):
        before = stream_server.sent.get(path, 0)
        assert chain.read_all() == first
        assert stream_server.wait_idle()  # the reply ended: the client hung up
        # what socket buffers absorbed, not the archive
        assert stream_server.sent[path] - before < len(archive) // 4
    assert stream_server.gets(path) == 2


def test_chained_steps_stream_through_nested_archives(base: str) -> None:
    inner = make_tar({"a.txt": b"alpha", "b.txt": b"beta" * 1000})
    outer = make_tar({"skip.bin": b"\0" * 5000, "inner.tar.gz": gzip.compress(inner)})
    uri = f"{base}/nested.tar"
    dio.write(uri, outer)
    chain = dio.reader(uri).tar_entry("inner.tar.gz").gunzip().tar_entry("b.txt")
    assert chain.read_all() == b"beta" * 1000
    assert dio.reader(uri).tar_entry("inner.tar.gz").tar_entry("a.txt").read_all() == b"alpha"
    assert dio.reader(uri).tar_entry("inner.tar.gz").gunzip().read_all() == inner
    with pytest.raises(NotFoundError, match=r"\['skip\.bin', 'inner\.tar\.gz'\]"):
        dio.reader(uri).tar_entry("nope").read_all()


def test_broken_archives_are_decode_errors(base: str) -> None:
    whole = gzip.compress(make_tar({"a.txt": b"alpha" * 10_000}))
    dio.write(f"{base}/cut.tar.gz", whole[: len(whole) // 2])
    dio.write(f"{base}/plain.bin", b"not an archive at all" * 100)
    with pytest.raises(DecodeError, match=r"cut\.tar\.gz"):
        dio.reader(f"{base}/cut.tar.gz").gunzip().read_all()
    with pytest.raises(DecodeError, match=r"cut\.tar\.gz"):
        dio.reader(f"{base}/cut.tar.gz").tar_entry("a.txt").read_all()
    with pytest.raises(DecodeError, match=r"plain\.bin"):
        dio.reader(f"{base}/plain.bin").tar_entry("a.txt").read_all()
    with pytest.raises(DecodeError, match=r"plain\.bin"):
        dio.reader(f"{base}/plain.bin").gunzip().read_all()
