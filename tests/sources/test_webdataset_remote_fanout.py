"""Remote tar shards read ahead: one streamed request on a fast link, parallel ranged
windows on a slow one, the next shard requested before the current one ends.

Oracles: the same shards read from local files (the samples and their order), the
server's own log of ranged GETs (how many were answered at once, which ranges), and a
server that cuts a body short (the error names the URI and the offset).
"""

from __future__ import annotations

import io
import itertools
import re
import socket
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.object_servers import ObjectHandler
from helpers.resume import check_resume

import dataio
from dataio.exceptions import TransportError
from dataio.io import config, spans
from dataio.sources import archives

SAMPLES = 12  # per shard
SHARDS = 4
WINDOW = 64 << 10  # small windows: a few per shard of ~300 KB
DEPTH = 3


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    config.reset()
    archives._KNOWN.clear()
    monkeypatch.setattr(spans, "WINDOW_BYTES", WINDOW)
    monkeypatch.setattr(spans, "PIECE_BYTES", 16 << 10)
    yield
    config.reset()
    archives._KNOWN.clear()


def shard_bytes(shard: int) -> bytes:
    """``SAMPLES`` samples: a ``jpg`` of 20-28 KB (distinct bytes) and a ``cls``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for n in range(SAMPLES):
            key = f"s{shard}/{n:04d}"
            body = bytes((shard * 31 + n + i) % 251 for i in range(20_000 + 701 * n))
            for field, data in (("jpg", body), ("cls", b"%d" % (shard * SAMPLES + n))):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put(base: str, local: Path) -> tuple[str, str]:
    """The shards under ``base`` and in ``local``; both patterns."""
    for i in range(SHARDS):
        data = shard_bytes(i)
        (local / f"s-{i}.tar").write_bytes(data)
        dataio.write(f"{base}/s-{i}.tar", data)
    return f"{base}/s-{{0..{SHARDS - 1}}}.tar", str(local / f"s-{{0..{SHARDS - 1}}}.tar")


def plain(samples: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "__url__"} for s in samples]


def dealt(source: Any, rank: int, world: int, start: int = 0) -> list[Any]:
    records = source.shard_records(rank, world, pad=True, start=start)
    return [(at, plain([s])[0]) for at, s in records]


@pytest.fixture
def fan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every span read by windows, as on a slow link (the first window's rate never
    reaches the split threshold)."""
    monkeypatch.setattr(spans, "_split_below", lambda: float("inf"))


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every span streamed in one request, as on a fast link (any rate is fast enough)."""
    monkeypatch.setattr(spans, "_split_below", lambda: 0.0)


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> list[spans.SpanReader]:
    """The span readers the archives make, recorded (``DEPTH`` windows ahead)."""
    made: list[spans.SpanReader] = []

    class Recorded(spans.SpanReader):
        def __init__(self) -> None:
            super().__init__(depth=DEPTH)
            made.append(self)

    monkeypatch.setattr(archives, "SpanReader", Recorded)
    return made


def ranged(server: Any, since: int = 0) -> list[tuple[str, str]]:
    """The ranged GETs the server answered: (path, range)."""
    found = []
    for method, path, headers in server.requests[since:]:
        spec = {k.lower(): v for k, v in headers.items()}.get("range")
        if method == "GET" and spec is not None:
            found.append((path, spec))
    return found


# -- the samples, on every backend -------------------------------------------------------------


@pytest.mark.parametrize("backend", ["s3", "gs", "az", "http"])
@pytest.mark.parametrize("windows", [False, True], ids=["streamed", "windows"])
def test_samples_and_order_equal_the_local_shards(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    backend: str,
    windows: bool,
    readers: list[spans.SpanReader],
) -> None:
    request.getfixturevalue("fan_out" if windows else "streamed")
    remote, local = put(request.getfixturevalue(backend), tmp_path)
    expected = plain(dataio.webdataset(local))
    assert len(expected) == SHARDS * SAMPLES
    assert plain(dataio.webdataset(remote)) == expected
    assert plain(dataio.archive(remote.replace(f"{{0..{SHARDS - 1}}}", "2"))) == expected[24:36]
    index = dataio.write_webdataset_index(remote)
    for rank in range(3):
        archives._KNOWN.clear()
        want = dealt(dataio.webdataset(local, index=False), rank, 3)
        assert dealt(dataio.webdataset(remote, index=index), rank, 3) == want
        assert dealt(dataio.webdataset(remote, index=False), rank, 3) == want
    assert readers and all(r.peak_ahead <= DEPTH * WINDOW for r in readers)
    assert any(r.fanned for r in readers) == windows


@pytest.mark.parametrize("windows", [False, True], ids=["streamed", "windows"])
def test_resume_mid_shard_equals_the_uninterrupted_pass(
    request: pytest.FixtureRequest, tmp_path: Path, s3: str, windows: bool
) -> None:
    request.getfixturevalue("fan_out" if windows else "streamed")
    remote, local = put(s3, tmp_path)
    index = dataio.write_webdataset_index(remote)
    for rank, world in ((0, 2), (1, 3)):
        full = dealt(dataio.webdataset(remote, index=index), rank, world)
        assert full == dealt(dataio.webdataset(local, index=False), rank, world)
        for start in (1, SAMPLES // 2 + 1, SAMPLES + 5, len(full) - 1):  # inside a shard
            again = dealt(dataio.webdataset(remote, index=index), rank, world, start)
            assert again == full[start:]
    pipe = dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(5))

    def make_loader(**options: Any) -> dataio.Loader:
        source = dataio.webdataset(remote, index=index)
        return pipe.bind(source).run(shard={"id": 1, "of": 2}, **options)

    check_resume(make_loader, 3)


# -- fan-out and read-ahead, as the server sees them ------------------------------------------


def test_a_slow_link_fans_out_to_parallel_windows_within_the_depth(
    http_server: Any, tmp_path: Path, readers: list[spans.SpanReader]
) -> None:
    """No threshold forced: a first window arriving at 1 MB/s is slow, so the rest of each
    shard is read by ``DEPTH`` windows at a time, each as large as ``WINDOW``."""
    remote, local = put(http_server.url + "/objects", tmp_path)
    http_server.bytes_per_sec = 1e6
    since = len(http_server.requests)
    assert plain(dataio.webdataset(remote)) == plain(dataio.webdataset(local))
    # the windows, the dropped head the server still paces out, the next shard
    assert 3 <= http_server.most_ranged_at_once(margin=0.005) <= DEPTH + 2
    reader = readers[0]  # the remote pass (the local one made the second)
    assert 0 < reader.peak_ahead <= DEPTH * WINDOW
    by_shard: dict[str, list[tuple[int, int]]] = {}
    for path, spec in ranged(http_server, since):
        first, _, last = spec.removeprefix("bytes=").partition("-")
        by_shard.setdefault(path, []).append((int(first), int(last) + 1))
    assert len(by_shard) == SHARDS
    fanned = []
    for path, got in by_shard.items():
        size = len(http_server.objects[path])
        head, windows = got[0], sorted(got[1:])
        assert head == (0, size)  # streamed until its first window came in slowly
        if not windows:  # requested early: under load its first window was already
            continue  # waiting when the parser came to it, so it streamed on
        fanned.append(path)
        assert all(b - a <= WINDOW for a, b in windows)
        assert windows[-1][1] == size
        assert all(b == c for (_, b), (c, _) in itertools.pairwise(windows))
    # the first shard has no early request: its first window always arrives at 1 MB/s
    assert min(by_shard) in fanned and reader.fanned == len(fanned)


@pytest.mark.parametrize("shards", [1, 4])
def test_dataio_object_shards_sets_the_windows_in_flight(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_out: None, shards: int
) -> None:
    """``DATAIO_OBJECT_SHARDS`` (the verbs' fan-out) is the depth: at most that many
    windows at once; the server also still paces out the streamed head the client
    dropped when it fanned out, and answers the next shard's request. At 1, no fan-out."""
    monkeypatch.setenv("DATAIO_OBJECT_SHARDS", str(shards))
    remote, local = put(http_server.url + "/objects", tmp_path)
    index = dataio.write_webdataset_index(remote)
    http_server.bytes_per_sec = 2e6
    http_server.ranged_spans.clear()
    since = len(http_server.requests)
    got = dealt(dataio.webdataset(remote, index=index), 0, 2)
    assert [s for _, s in got] == plain(dataio.webdataset(local))[: 2 * SAMPLES]
    time.sleep(0.1)  # the last handlers return after their pacing sleep
    most = http_server.most_ranged_at_once(margin=0.005)
    assert most <= shards + 2
    if shards > 1:
        assert most >= 3
    else:
        assert len(ranged(http_server, since)) == 2  # one streamed request per shard


def test_a_small_shards_successor_is_requested_with_it(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards within one window: each answer waits 0.3 s, and the request for shard k + 1
    is answered while shard k's is."""
    monkeypatch.setattr(spans, "WINDOW_BYTES", 8 << 20)
    remote, local = put(http_server.url + "/objects", tmp_path)
    index = dataio.write_webdataset_index(remote)
    http_server.stall_secs = 0.3
    http_server.ranged_spans.clear()
    source = dataio.webdataset(remote, index=index)
    assert [s for _, s in dealt(source, 0, 2)] == plain(dataio.webdataset(local))[: 2 * SAMPLES]
    assert http_server.most_ranged_at_once(margin=0.05) >= 2


def test_a_large_shards_successor_is_requested_in_its_last_window(
    http_server: Any, tmp_path: Path, streamed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shards streamed at 1 MB/s: the request for shard k + 1 arrives while the last
    window of shard k (half the shard here: ~0.15 s of sending) is still being sent (one
    request per shard, no more)."""
    monkeypatch.setattr(spans, "WINDOW_BYTES", 160 << 10)
    remote, local = put(http_server.url + "/objects", tmp_path)
    index = dataio.write_webdataset_index(remote)
    http_server.bytes_per_sec = 1e6
    http_server.ranged_spans.clear()
    since = len(http_server.requests)
    source = dataio.webdataset(remote, index=index)
    assert [s for _, s in dealt(source, 1, 2)] == plain(dataio.webdataset(local))[2 * SAMPLES :]
    deadline = time.monotonic() + 10
    while len(http_server.ranged_spans) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the handler of the last answer returns after its pacing sleep
    assert http_server.most_ranged_at_once(margin=0.005) == 2
    assert sorted(p for p, _ in ranged(http_server, since)) == [
        "/objects/s-2.tar",
        "/objects/s-3.tar",
    ]


def test_a_fast_link_streams_each_span_in_one_request(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first window arriving at the split threshold or faster: no windows."""
    monkeypatch.setattr(spans, "_split_below", lambda: 0.0)
    remote, local = put(http_server.url + "/objects", tmp_path)
    index = dataio.write_webdataset_index(remote)
    since = len(http_server.requests)
    assert [s for _, s in dealt(dataio.webdataset(remote, index=index), 1, 2)] == plain(
        dataio.webdataset(local)
    )[2 * SAMPLES :]
    got = ranged(http_server, since)
    sizes = {f"/objects/s-{i}.tar": len(shard_bytes(i)) for i in (2, 3)}
    assert sorted(got) == sorted((p, f"bytes=0-{n - 1}") for p, n in sizes.items())


# -- a body cut short ----------------------------------------------------------------------------


class CuttingHandler(ObjectHandler):
    """Answers a range holding byte ``server.cut_at`` with its full ``Content-Length`` but
    closes the connection at that byte, every time: a client that resumes the body from
    there (obstore retries so) gets no further."""

    def reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        cut = getattr(self.server, "cut_at", None)
        start = int(self.headers.get("Range", "bytes=0-").removeprefix("bytes=").split("-")[0])
        if status != 206 or cut is None or not start <= cut < start + len(body):
            super().reply(status, body, headers)
            return
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: cut - start])
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True


@pytest.mark.parametrize("windows", [False, True], ids=["streamed", "windows"])
def test_a_body_cut_mid_range_is_a_transport_error_naming_uri_and_offset(
    request: pytest.FixtureRequest, http_server: Any, tmp_path: Path, windows: bool
) -> None:
    request.getfixturevalue("fan_out" if windows else "streamed")
    http_server.RequestHandlerClass = CuttingHandler  # before any connection is kept alive
    remote, _ = put(http_server.url + "/objects", tmp_path)
    index = dataio.write_webdataset_index(remote)
    cut = 3 * WINDOW + 1000  # past the first window: a windowed read has fanned out
    http_server.cut_at = cut
    uri = f"{http_server.url}/objects/s-0.tar"
    for source in (dataio.webdataset(remote), dataio.archive(uri)):
        with pytest.raises(TransportError, match=r"offset (\d+)") as caught:
            list(source)
        message = str(caught.value)
        assert repr(uri) in message
        found = re.search(r"offset (\d+)", message)
        assert found is not None
        offset = int(found.group(1))
        if windows:  # the window holding the cut, named by where it starts
            assert offset <= cut < offset + WINDOW and "range from offset" in message
        else:  # where the bytes handed out stopped (a piece in the making is lost)
            assert cut - spans.PIECE_BYTES <= offset <= cut and "broke off" in message
    # dealt to ranks: the samples after the cut (in shards 0 and 1) become stand-ins
    dealt_records = dataio.webdataset(remote, index=index).shard_records(0, 2, pad=True)
    assert dealt_records is not None
    got = list(dealt_records)
    assert [at for at, _ in got] == list(range(2 * SAMPLES))
    stand_ins = [s for _, s in got if isinstance(s, archives._FailedSample)]
    assert 0 < len(stand_ins) < 2 * SAMPLES
    assert isinstance(stand_ins[0].error, TransportError) and repr(uri) in str(stand_ins[0].error)
    good = [(at, plain([s])[0]) for at, s in got if not isinstance(s, archives._FailedSample)]
    expected = plain(dataio.webdataset(str(tmp_path / f"s-{{0..{SHARDS - 1}}}.tar")))
    assert good == [(at, expected[at]) for at, _ in good]


def test_a_short_window_is_a_transport_error_naming_its_offset(
    http_server: Any, tmp_path: Path, fan_out: None
) -> None:
    """A window whose body holds fewer bytes than its range (the object shrank between
    requests, on a server that ignores the If-Match pin) is refused, naming the offset."""
    put(http_server.url + "/objects", tmp_path)
    uri = f"{http_server.url}/objects/s-1.tar"
    full = http_server.objects["/objects/s-1.tar"]
    reader = spans.SpanReader(depth=2)
    pieces = reader.pieces(uri, 0, len(full))
    first = bytes(next(pieces))
    http_server.objects["/objects/s-1.tar"] = full[: 3 * WINDOW + 100]
    try:
        with pytest.raises(TransportError, match=rf"{uri!r}.*offset \d+") as caught:
            for piece in pieces:
                first += bytes(piece)
    finally:
        reader.close()
    assert full.startswith(first)
    assert "offset" in str(caught.value)


# -- the byte cache --------------------------------------------------------------------------------


def test_the_byte_cache_serves_a_second_pass(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_out: None
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "local").mkdir()
    remote, local = put(http_server.url + "/objects", tmp_path / "local")
    expected = plain(dataio.webdataset(local))
    assert plain(dataio.webdataset(remote)) == expected
    since = len(http_server.requests)
    assert plain(dataio.webdataset(remote)) == expected
    assert ranged(http_server, since) == []
