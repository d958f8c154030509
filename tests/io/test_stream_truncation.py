"""Streams never end short: a body that stops before its ``Content-Length``, a reset, a
connection closed mid-body, a file that shrinks and a read cut by ``close()`` from another
thread are each a ``TransportError`` naming the URI and the byte offset, through every
reader (``read_all``, ``read``, ``iter_bytes``, ``iter_lines``, ``iter_sse``)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.stream_server import Script, StreamServer, split

import dataio.io as dio
from dataio.exceptions import DataioError, TransportError
from dataio.io.stream import Stream


def _read_all(s: Stream, got: bytearray) -> None:
    got += s.read_all()


def _read(s: Stream, got: bytearray) -> None:
    while chunk := s.read(4096):
        got += chunk


def _iter_bytes(s: Stream, got: bytearray) -> None:
    for chunk in s.iter_bytes():
        got += chunk


def _iter_lines(s: Stream, got: bytearray) -> None:
    for line in s.iter_lines():
        got += line.encode() + b"\n"


READERS: dict[str, Callable[[Stream, bytearray], None]] = {
    "read_all": _read_all,
    "read": _read,
    "iter_bytes": _iter_bytes,
    "iter_lines": _iter_lines,
}


def lines_of(size: int) -> bytes:
    """``size`` bytes of 10-byte lines, so iter_lines hands out exactly the bytes read."""
    return (b"abcdefghi\n" * (size // 10 + 1))[:size]


def route(server: StreamServer, scheme: str, name: str, script: Script) -> str:
    """Serve ``script``; the URI reading it over plain HTTP or as an S3 object (obstore)."""
    if scheme == "s3":
        server.routes[f"/bucket/{name}"] = script
        return f"s3://bucket/{name}"
    server.routes[f"/{name}"] = script
    return f"{server.url}/{name}"


@pytest.fixture(params=["http", "s3"])
def scheme(request: pytest.FixtureRequest, stream_server: StreamServer) -> str:
    if request.param == "s3":
        request.getfixturevalue("scripted_s3")
    return str(request.param)


def offset_in(error: BaseException) -> int:
    found = re.search(r"at byte (\d+)", str(error))
    assert found, f"no byte offset in {error}"
    return int(found.group(1))


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(("total", "sent"), [(10, 5), (1_000_000, 100_000)])
def test_a_body_shorter_than_its_content_length_is_an_error(
    stream_server: StreamServer, scheme: str, reader: str, total: int, sent: int
) -> None:
    data = lines_of(total)
    pieces = [data[:sent], data[sent:]]
    uri = route(stream_server, scheme, "short", Script(pieces, chunked=False, die_after=1))
    got = bytearray()
    with pytest.raises(TransportError) as info, dio.stream(uri) as s:
        assert s.size == total
        READERS[reader](s, got)
    message = str(info.value)
    assert uri in message and f"at byte {sent} of {total}" in message
    assert data.startswith(bytes(got)) and len(got) <= sent
    path = "/bucket/short" if scheme == "s3" else "/short"
    assert stream_server.gets(path) == 1  # never requested again


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_reset_mid_body_is_an_error_at_the_bytes_received(
    stream_server: StreamServer, scheme: str, reader: str
) -> None:
    data = lines_of(300_000)
    # obstore refuses S3 answers without a Content-Length, so S3 bodies are never chunked
    for chunked in (False, True) if scheme == "http" else (False,):
        script = Script(split(data, 30_000), chunked=chunked, die_after=3, reset=True)
        uri = route(stream_server, scheme, f"reset-{chunked}", script)
        got = bytearray()
        with pytest.raises(TransportError) as info, dio.stream(uri) as s:
            READERS[reader](s, got)
        assert uri in str(info.value)
        offset = offset_in(info.value)
        assert offset <= 90_000  # a reset may drop bytes that were sent but not yet read
        assert data.startswith(bytes(got)) and len(got) <= offset


def test_a_chunked_body_closed_before_its_last_chunk_is_an_error(
    stream_server: StreamServer,
) -> None:
    data = lines_of(200_000)
    uri = route(stream_server, "http", "cut", Script(split(data, 20_000), die_after=4))
    got = bytearray()
    with pytest.raises(TransportError) as info, dio.stream(uri) as s:
        assert s.size is None  # no declared size: only the missing last chunk tells
        _iter_lines(s, got)
    assert uri in str(info.value) and offset_in(info.value) == 80_000
    assert data.startswith(bytes(got))


@pytest.mark.parametrize("reader", sorted(READERS))
def test_whole_bodies_are_read_without_error(
    stream_server: StreamServer, scheme: str, reader: str
) -> None:
    data = lines_of(250_000)
    for chunked in (False, True) if scheme == "http" else (False,):
        uri = route(stream_server, scheme, f"whole-{chunked}", Script(split(data, 7_000), chunked))
        got = bytearray()
        with dio.stream(uri) as s:
            READERS[reader](s, got)
            assert s.tell() == len(data)
        assert bytes(got) == data


def test_a_local_file_that_shrinks_while_read_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "shrinks.txt"
    data = lines_of(1_000_000)
    path.write_bytes(data)
    with dio.stream(str(path)) as s:
        head = s.read(10)
        os.truncate(path, 100_000)
        with pytest.raises(TransportError) as info:
            s.read_all()
    assert head == data[:10]
    assert str(path) in str(info.value) and "at byte 100000 of 1000000" in str(info.value)


def _block_then_close(
    server: StreamServer, scheme: str, read: Callable[[Stream], object], name: str
) -> tuple[Stream, BaseException | None, float]:
    """Open a stream whose second piece never comes, start ``read`` in a thread, and
    close the stream from this thread once the reader waits; what the reader raised."""
    never = threading.Event()  # set only when the server stops
    script = Script([b"data: one\n\n", b"data: two\n\n"], chunked=scheme == "http")
    script.hold[1] = never
    uri = route(server, scheme, name, script)
    dio.configure_transport(scheme, timeout_secs=60)  # the reader must not time out
    s = dio.stream(uri)
    raised: list[BaseException] = []

    def consume() -> None:
        try:
            read(s)
        except BaseException as exc:
            raised.append(exc)

    reader = threading.Thread(target=consume)
    reader.start()
    assert script.reached[0].wait(5)
    deadline = time.monotonic() + 5
    while s._received == 0 and time.monotonic() < deadline:  # the reader took piece 0
        time.sleep(0.01)
    time.sleep(0.2)  # and now waits for piece 1
    started = time.monotonic()
    s.close()
    reader.join(10)
    assert not reader.is_alive()
    return s, (raised[0] if raised else None), time.monotonic() - started


CUT_READS: dict[str, Callable[[Stream], object]] = {
    "read_all": lambda s: s.read_all(),
    "read": lambda s: s.read(1 << 20),
    "iter_bytes": lambda s: list(s.iter_bytes()),
    "iter_lines": lambda s: list(s.iter_lines()),
    "iter_sse": lambda s: list(s.iter_sse()),
}


@pytest.mark.parametrize("reader", sorted(CUT_READS))
def test_close_from_another_thread_makes_a_blocked_read_raise(
    stream_server: StreamServer, scheme: str, reader: str
) -> None:
    s, raised, waited = _block_then_close(stream_server, scheme, CUT_READS[reader], reader)
    assert isinstance(raised, TransportError), raised
    assert "closed by close() during a read" in str(raised) and f"/{reader}" in str(raised)
    assert offset_in(raised) == len(b"data: one\n\n")
    assert waited < 5  # cut at once, not at the 60 s read timeout
    with pytest.raises(DataioError, match="is closed"):
        s.read(1)
    with pytest.raises(DataioError, match="is closed"):
        next(s.iter_lines())


def test_close_hands_back_what_arrived_before_the_cut(stream_server: StreamServer) -> None:
    got: list[str] = []

    def read(s: Stream) -> None:
        for event in s.iter_sse():
            got.append(event.data)

    _, raised, _ = _block_then_close(stream_server, "http", read, "events")
    assert got == ["one"] and isinstance(raised, TransportError)


def test_a_read_under_way_is_cut_by_close_and_one_begun_after_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "body.txt"
    path.write_bytes(lines_of(1_000_000))
    s = dio.stream(str(path))
    chunks = s.iter_bytes()
    first = next(chunks)
    s.close()
    with pytest.raises(TransportError, match="during a read") as info:
        next(chunks)  # this iteration began before close(): it ends in an error
    assert offset_in(info.value) == len(first) and str(path) in str(info.value)
    for begun_after in (lambda: s.read(1), s.read_all, lambda: next(s.iter_lines())):
        with pytest.raises(DataioError, match="is closed") as refused:
            begun_after()
        assert not isinstance(refused.value, TransportError)
