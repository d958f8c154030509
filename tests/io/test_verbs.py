from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers.object_servers import RangeServer

import dataio.io as dio
from dataio.exceptions import DataioError, NotFoundError, OutOfRangeError

PAYLOAD = bytes(range(256)) * 40


def test_write_read_head_exists_delete(base: str) -> None:
    uri = f"{base}/dir/obj.bin"
    etag = dio.write(uri, PAYLOAD)
    assert etag is None or isinstance(etag, str)
    assert dio.exists(uri)
    assert dio.read(uri) == PAYLOAD
    assert dio.read_bytes(uri) == PAYLOAD
    meta = dio.head(uri)
    assert meta["size"] == len(PAYLOAD)
    assert meta["last_modified"] is not None
    if etag is not None:
        assert meta["etag"] == etag
    dio.delete(uri)
    assert not dio.exists(uri)
    dio.delete(uri)  # deleting a missing object is not an error


@pytest.mark.parametrize(
    ("offset", "size", "expected"),
    [
        (0, 10, PAYLOAD[:10]),
        (100, 50, PAYLOAD[100:150]),
        (10000, None, PAYLOAD[10000:]),
        (len(PAYLOAD) - 5, 100, PAYLOAD[-5:]),
        (7, 0, b""),
    ],
    ids=["head", "middle", "to-end", "past-end", "empty"],
)
def test_ranged_reads(base: str, offset: int, size: int | None, expected: bytes) -> None:
    uri = f"{base}/ranged.bin"
    dio.write(uri, PAYLOAD)
    assert dio.read(uri, offset=offset, size=size) == expected


def test_a_range_past_the_end_is_out_of_range(base: str) -> None:
    uri = f"{base}/short.bin"
    dio.write(uri, b"0123")
    with pytest.raises(OutOfRangeError):
        dio.read(uri, offset=10, size=2)


def test_fetch_into_fills_a_caller_buffer(base: str) -> None:
    uri = f"{base}/fill.bin"
    dio.write(uri, PAYLOAD)
    buffer = np.zeros(len(PAYLOAD) + 100, dtype=np.uint8)
    n = dio.fetch_into(uri, buffer)
    assert n == len(PAYLOAD) and buffer[:n].tobytes() == PAYLOAD
    with pytest.raises(DataioError, match="allocate at least"):
        dio.fetch_into(uri, bytearray(10))
    with pytest.raises(DataioError, match="writable"):
        dio.fetch_into(uri, b"\0" * len(PAYLOAD))


def test_missing_objects_are_not_found_on_every_verb(base: str) -> None:
    uri = f"{base}/missing.bin"
    for verb in (dio.read, dio.read_bytes, dio.head, lambda u: dio.fetch_into(u, bytearray(9))):
        with pytest.raises(NotFoundError) as info:
            verb(uri)
        assert isinstance(info.value, FileNotFoundError)
    assert not dio.exists(uri)


@pytest.mark.parametrize("kind", ["local-path", "file-uri", "s3"])
def test_ls_and_glob(kind: str, request: pytest.FixtureRequest, tmp_path) -> None:
    base = {"local-path": str(tmp_path), "file-uri": tmp_path.as_uri()}.get(kind) or str(
        request.getfixturevalue("s3")
    )
    for key in ["a.jpg", "b.png", "sub/c.jpg", "sub/deep/d.jpg"]:
        dio.write(f"{base}/{key}", b"x")
    assert dio.ls(f"{base}/") == [f"{base}/a.jpg", f"{base}/b.png", f"{base}/sub/"]
    assert dio.ls(f"{base}/sub") == [f"{base}/sub/c.jpg", f"{base}/sub/deep/"]
    assert dio.glob(f"{base}/**/*.jpg") == [
        f"{base}/a.jpg",
        f"{base}/sub/c.jpg",
        f"{base}/sub/deep/d.jpg",
    ]
    assert dio.glob(f"{base}/sub/*.jpg") == [f"{base}/sub/c.jpg"]
    assert dio.glob(f"{base}/b.png") == [f"{base}/b.png"]
    assert dio.glob(f"{base}/nothing/*.x") == []


@pytest.mark.parametrize("kind", ["s3", "http"])
@pytest.mark.usefixtures("always_split")
def test_large_reads_split_into_ranges_pinned_to_the_etag(
    kind: str, request: pytest.FixtureRequest
) -> None:
    base = str(request.getfixturevalue(kind))
    scheme = base.split("://")[0]
    big = np.random.default_rng(0).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes()
    uri = f"{base}/big.bin"
    dio.write(uri, big)
    dio.configure_transport(scheme, readall_chunk_mib=1, readall_concurrency=3)
    assert dio.read(uri) == big
    buffer = bytearray(len(big))
    assert dio.fetch_into(uri, buffer) == len(big) and buffer == big
    if kind == "http":
        server = request.getfixturevalue("http_server")
        gets = [h for c, _, h in server.requests if c == "GET"]
        ranged = [h for h in gets if "Range" in h or "range" in h]
        assert ranged and all(("If-Match" in h or "if-match" in h) for h in ranged)


def test_small_reads_stay_single_requests(http: str, http_server) -> None:
    dio.configure_transport("http", readall_chunk_mib=1, readall_concurrency=8)
    dio.write(f"{http}/small.bin", PAYLOAD)
    http_server.requests.clear()
    assert dio.read(f"{http}/small.bin") == PAYLOAD
    assert [c for c, _, _ in http_server.requests] == ["GET"]


def test_configuration_is_validated() -> None:
    with pytest.raises(DataioError, match="choose one of"):
        dio.configure_transport("ftp", timeout_secs=1)
    with pytest.raises(DataioError, match="positive"):
        dio.configure_transport("s3", readall_concurrency=0)
    with pytest.raises(DataioError, match="both"):
        dio.configure_credentials("s3", access_key_id="only-half")
    with pytest.raises(DataioError, match="http"):
        dio.configure_endpoint("s3", "127.0.0.1:9000")
    with pytest.raises(DataioError, match="needs an endpoint"):
        dio.read("r2://bucket/key")


@pytest.mark.parametrize("kind", ["s3", "http"])
def test_large_single_request_bodies_stream_into_the_bytes_returned(
    kind: str, request: pytest.FixtureRequest
) -> None:
    from dataio.io.verbs import STREAM_BYTES

    base = str(request.getfixturevalue(kind))
    scheme = base.split("://")[0]
    big = np.random.default_rng(1).integers(0, 256, STREAM_BYTES + 12345, dtype=np.uint8)
    data = big.tobytes()
    uri = f"{base}/streamed.bin"
    dio.write(uri, data)
    dio.configure_transport(scheme, readall_concurrency=1)
    got = dio.read(uri)
    assert type(got) is bytes and got == data and hash(got) == hash(data)
    assert bytes(dio.reader(uri).read_buffer()) == data
    window = dio.read(uri, offset=1000, size=STREAM_BYTES + 5)
    assert type(window) is bytes and window == data[1000 : 1000 + STREAM_BYTES + 5]
    assert dio.read(uri, offset=STREAM_BYTES // 2) == data[STREAM_BYTES // 2 :]
    buffer = np.zeros(len(data) + 7, np.uint8)
    assert dio.fetch_into(uri, buffer) == len(data)
    np.testing.assert_array_equal(buffer[: len(data)], big)


def _ranged(server: RangeServer) -> list[dict[str, str]]:
    return [h for c, _, h in server.requests if c == "GET" and ("Range" in h or "range" in h)]


def test_a_slow_first_chunk_splits_the_rest(http: str, http_server: RangeServer) -> None:
    data = np.random.default_rng(2).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes()
    dio.write(f"{http}/slow.bin", data)
    dio.configure_transport("http", readall_chunk_mib=1, readall_concurrency=4)
    http_server.requests.clear()
    http_server.bytes_per_sec = 4e6  # one connection: 4 MB/s, far below SPLIT_BELOW
    assert dio.read(f"{http}/slow.bin") == data
    ranged = _ranged(http_server)
    assert len(ranged) == 4 and all("If-Match" in h or "if-match" in h for h in ranged)


def test_a_fast_first_chunk_reads_on_in_one_request(
    http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataio.io import verbs

    monkeypatch.setattr(verbs, "SPLIT_BELOW", 1e6)  # loopback is always faster than 1 MB/s
    data = np.random.default_rng(3).integers(0, 256, 5 << 20, dtype=np.uint8).tobytes()
    dio.write(f"{http}/fast.bin", data)
    dio.configure_transport("http", readall_chunk_mib=1, readall_concurrency=4)
    http_server.requests.clear()
    assert dio.read(f"{http}/fast.bin") == data
    assert [c for c, _, _ in http_server.requests] == ["GET"] and not _ranged(http_server)


class _Body:
    """A stand-in obstore result whose body yields the given pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def stream(self, min_chunk_size: int) -> list[bytes]:
        return self.pieces


def _pieces_of(body: _Body) -> Any:
    from dataio.io.verbs import _pieces

    return _pieces(body)


def test_a_body_shorter_than_announced_is_an_error_not_garbage() -> None:
    from dataio.io.verbs import _stream

    seen: list[tuple[int, bytes]] = []
    with pytest.raises(ConnectionError, match="unexpected end of body after 6 of 10"):
        _stream(_pieces_of(_Body([b"abc", b"def"])), lambda at, p: seen.append((at, p)), 100, 10)
    assert seen == [(100, b"abc"), (103, b"def")]
    # with a stop, the pieces up to the one that reaches it are handed over
    seen.clear()
    pieces = _pieces_of(_Body([b"abc", b"def", b"ghi"]))
    assert _stream(pieces, lambda at, p: seen.append((at, p)), 0, 9, stop=4) == 6
    assert seen == [(0, b"abc"), (3, b"def")]
    assert _stream(pieces, lambda at, p: seen.append((at, p)), 6, 3) == 3  # reads on
    assert seen[-1] == (6, b"ghi")


def test_without_the_bytes_helper_large_bodies_are_joined(
    http: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataio.io import verbs

    monkeypatch.setattr(verbs, "_bytes", None)
    data = np.random.default_rng(4).integers(0, 256, verbs.STREAM_BYTES + 999, np.uint8)
    dio.write(f"{http}/joined.bin", data.tobytes())
    dio.configure_transport("http", readall_concurrency=1)
    got = dio.read(f"{http}/joined.bin")
    assert type(got) is bytes and got == data.tobytes()
