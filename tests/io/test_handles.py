from __future__ import annotations

import gzip
import io
import tarfile

import numpy as np
import pytest

import dataio.io as dio
from dataio.exceptions import DecodeError, NotFoundError


def make_tar_gz(entries: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue())


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
