"""A remote tar shard is read from one version of its object: the streamed request, all
its ranged windows and its header walk. A shard overwritten between two of its requests
is a TransportError naming the URI, never samples of two versions; under
``on_failure="skip"`` its unread samples become row errors, as a cut body's do.

On s3 (moto), gs (emulator), az (azurite) and http (RangeServer, with and without
If-Match support: without it, only each answer's ETag tells the new version). Oracles:
the samples of the shards written (tarfile), the local shards read by dataio.
"""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.object_servers import RangeServer

import dataio
from dataio.exceptions import TransportError
from dataio.io import config, spans
from dataio.sources import archives

SAMPLES = 24  # per shard: ~600 KB, ~10 windows
SHARDS = 3
WINDOW = 64 << 10
DEPTH = 3
CHANGED = "changed while it was being read"
REMOTE = ("s3", "gs", "az", "http", "http-no-if-match")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    config.reset()
    archives._KNOWN.clear()
    monkeypatch.setattr(spans, "WINDOW_BYTES", WINDOW)
    monkeypatch.setattr(spans, "PIECE_BYTES", 16 << 10)
    yield
    config.reset()
    archives._KNOWN.clear()


@pytest.fixture(params=REMOTE)
def remote(request: pytest.FixtureRequest) -> str:
    """A base URI on each backend; ``http-no-if-match``: a web server ignoring If-Match."""
    if request.param == "http-no-if-match":
        server: RangeServer = request.getfixturevalue("http_server")
        server.if_match = False
        return str(request.getfixturevalue("http"))
    return str(request.getfixturevalue(request.param))


@pytest.fixture
def fan_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every span read by windows after its streamed head, as on a slow link."""
    monkeypatch.setattr(spans, "_split_below", lambda: float("inf"))


def shard_bytes(shard: int, *, version: int = 0, samples: int = SAMPLES, grow: int = 0) -> bytes:
    """``samples`` samples (a ``jpg`` of 20-28 KB, ``grow`` bytes more, and a ``cls``);
    another ``version`` has the same members and sizes, other bytes: only its ETag
    tells it apart."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for n in range(samples):
            key = f"s{shard}/{n:04d}"
            body = bytes(
                (shard * 31 + n + i + 97 * version) % 251 for i in range(20_000 + 701 * n + grow)
            )
            label = b"%06d" % (shard * SAMPLES + n + 100_000 * version)
            for field, data in (("jpg", body), ("cls", label)):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put(base: str, local: Path) -> tuple[str, str]:
    for i in range(SHARDS):
        data = shard_bytes(i)
        (local / f"s-{i}.tar").write_bytes(data)
        dataio.write(f"{base}/s-{i}.tar", data)
    return f"{base}/s-{{0..{SHARDS - 1}}}.tar", str(local / f"s-{{0..{SHARDS - 1}}}.tar")


def plain(samples: Any) -> list[dict[str, Any]]:
    return [
        {k: v if k == "__key__" else bytes(v) for k, v in s.items() if k != "__url__"}
        for s in samples
    ]


def overwrite_before_windows(monkeypatch: pytest.MonkeyPatch, uri: str, data: bytes) -> list[int]:
    """Overwrite ``uri`` with ``data`` just before its first window is requested (after
    its streamed head): every window waits for the write. Returns the windows' count."""
    original = spans._window
    lock = threading.Lock()
    done: list[int] = []

    def window(at: str, span: Any, pin: Any) -> Any:
        if at == uri:
            with lock:
                if not done:
                    dataio.write(uri, data)
                done.append(span[0])
        return original(at, span, pin)

    monkeypatch.setattr(spans, "_window", window)
    return done


def drain(source: Any) -> tuple[list[dict[str, Any]], BaseException | None]:
    """The samples ``source`` yields before it raises, and what it raised."""
    got: list[dict[str, Any]] = []
    try:
        for sample in source:
            got.append(sample)
    except dataio.DataioError as exc:
        return plain(got), exc
    return plain(got), None


# -- windows of a shard overwritten mid-read --------------------------------------------------


def test_a_shard_overwritten_between_windows_is_a_transport_error(
    remote: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_out: None
) -> None:
    pattern, local = put(remote, tmp_path)
    expected = plain(dataio.webdataset(local))
    uri = f"{remote}/s-1.tar"
    shard_1 = expected[SAMPLES : 2 * SAMPLES]
    for make, before in (
        (lambda: dataio.webdataset(pattern), expected[:SAMPLES]),
        (lambda: dataio.archive(uri), []),
    ):
        dataio.write(uri, shard_bytes(1))
        windows = overwrite_before_windows(monkeypatch, uri, shard_bytes(1, version=1))
        got, error = drain(make())
        assert windows  # the overwrite came between the streamed head and the windows
        assert isinstance(error, TransportError), error
        assert repr(uri) in str(error) and CHANGED in str(error)
        assert "range from offset" in str(error)
        # what came before the refusal is the first version's, in order: a prefix
        assert got[: len(before)] == before
        read = got[len(before) :]
        assert read == shard_1[: len(read)] and len(read) < SAMPLES
    # read again from the start: the new version, whole (no pin survives a pass)
    assert plain(dataio.archive(uri)) == plain(
        dataio.archive(_local(tmp_path, shard_bytes(1, version=1)))
    )


def _local(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "new.tar"
    path.write_bytes(data)
    return str(path)


def test_unchanged_shards_read_through_windows_as_before(
    remote: str, tmp_path: Path, fan_out: None
) -> None:
    pattern, local = put(remote, tmp_path)
    for i in range(SHARDS):  # rewritten with the same bytes: still one version
        dataio.write(f"{remote}/s-{i}.tar", shard_bytes(i))
    assert plain(dataio.webdataset(pattern)) == plain(dataio.webdataset(local))


def test_an_overwrite_under_on_failure_skip_drops_the_rest_of_the_shard(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_out: None
) -> None:
    """The loader's view: the changed shard's unread samples are row errors (dropped
    under ``"skip"``, raised under ``"strict"``), the other shards' samples all arrive."""
    http_server.if_match = False  # the answer's ETag tells
    base = http_server.url + "/objects"
    pattern, _ = put(base, tmp_path)
    uri = f"{base}/s-1.tar"
    overwrite_before_windows(monkeypatch, uri, shard_bytes(1, version=1))
    plan = dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(8))
    batches = list(plan.bind(dataio.webdataset(pattern)).run(on_failure="skip"))
    labels = [int(bytes(v)) for b in batches for v in b["cls"]]
    errors = [e for b in batches for e in b.errors]
    shard_1 = list(range(SAMPLES, 2 * SAMPLES))
    others = [n for n in range(SHARDS * SAMPLES) if n not in shard_1]
    assert [n for n in labels if n not in shard_1] == others
    kept = [n for n in labels if n in shard_1]
    assert kept == shard_1[: len(kept)] and len(kept) < SAMPLES  # the first version's only
    assert errors and all(isinstance(e, TransportError) for e in errors)
    assert all(repr(uri) in str(e) and CHANGED in str(e) for e in errors)
    dataio.write(uri, shard_bytes(1))
    overwrite_before_windows(monkeypatch, uri, shard_bytes(1, version=1))
    with pytest.raises(TransportError, match=CHANGED):  # strict: raised
        list(plan.bind(dataio.webdataset(pattern)).run())


def test_dealt_ranks_get_stand_ins_for_a_changed_shard(
    s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_out: None
) -> None:
    """A shard dealt to a rank (walked, then read by windows) overwritten between its
    windows: its unread samples are stand-ins carrying the error, positions kept."""
    pattern, local = put(s3, tmp_path)
    expected = plain(dataio.webdataset(local))
    uri = f"{s3}/s-0.tar"
    for index in (dataio.write_webdataset_index(pattern), False):
        dataio.write(uri, shard_bytes(0))
        archives._KNOWN.clear()
        overwrite_before_windows(monkeypatch, uri, shard_bytes(0, version=1))
        records = dataio.webdataset(pattern, index=index).shard_records(0, 2, pad=True)
        assert records is not None
        got = list(records)
        n = (SHARDS * SAMPLES + 1) // 2
        assert [at for at, _ in got] == list(range(n))
        stand_ins = [s for _, s in got if isinstance(s, archives._FailedSample)]
        assert 0 < len(stand_ins) < SAMPLES
        assert all(isinstance(s.error, TransportError) for s in stand_ins)
        assert repr(uri) in str(stand_ins[0].error) and CHANGED in str(stand_ins[0].error)
        good = [(at, s) for at, s in got if not isinstance(s, archives._FailedSample)]
        assert [(at, plain([s])[0]) for at, s in good] == [(at, expected[at]) for at, _ in good]


# -- the streamed request: a version other than the head's -------------------------------------


def overwrite_after_head(monkeypatch: pytest.MonkeyPatch, uri: str, data: bytes) -> list[str]:
    """Overwrite ``uri`` with ``data`` right after its ``head`` (the size a pass plans
    its span by), before its GET. Returns the URIs whose head was asked."""
    original: Callable[[Any], str] = archives._Archive.version
    asked: list[str] = []

    def version(self: Any) -> str:
        found = original(self)
        asked.append(self.uri)
        if self.uri == uri and asked.count(uri) == 1:
            dataio.write(uri, data)
        return found

    monkeypatch.setattr(archives._Archive, "version", version)
    return asked


@pytest.mark.parametrize("backend", ["s3", "http"])
@pytest.mark.parametrize("shard", [0, 1], ids=["first", "requested-early"])
def test_a_shard_grown_between_its_head_and_get_is_refused(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    shard: int,
) -> None:
    """The span is planned from the head's size; a longer version (more samples) read to
    that size would end mid-archive (or, cut at a sample boundary, lose samples
    silently). Shard 1's request goes out early, on a worker, while shard 0 is read."""
    base = str(request.getfixturevalue(backend))
    pattern, local = put(base, tmp_path)
    uri = f"{base}/s-{shard}.tar"
    asked = overwrite_after_head(monkeypatch, uri, shard_bytes(shard, samples=SAMPLES + 3))
    got, error = drain(dataio.webdataset(pattern))
    assert isinstance(error, TransportError), error
    assert repr(uri) in str(error) and CHANGED in str(error) and "bytes" in str(error)
    assert uri in asked
    expected = plain(dataio.webdataset(local))
    assert got == expected[: SAMPLES * shard]


# -- the header walk of a dealt pass ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["s3", "http-no-if-match"])
def test_a_shard_overwritten_during_its_header_walk_is_walked_again(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Dealing without an index walks each shard's headers, one small ranged read per
    member. An overwrite part-way (members of other sizes: the old offsets land
    mid-member in the new bytes) is refused, never an index of two versions; the pass
    walks that shard again and reads the new version throughout."""
    if backend == "http-no-if-match":
        request.getfixturevalue("http_server").if_match = False
    base = str(request.getfixturevalue(backend.removesuffix("-no-if-match")))
    pattern, local = put(base, tmp_path)
    uri = f"{base}/s-0.tar"
    new = shard_bytes(0, version=1, grow=300)
    from dataio.io import verbs

    original, walk = verbs._download, archives._walk_index
    calls: list[int] = []
    walks: list[Any] = []

    def download(loc: Any, at: Any, **options: Any) -> Any:
        if str(at) == uri and options.get("size") is not None:  # a ranged read
            calls.append(options["offset"])
            if len(calls) == 5:  # a few headers in
                dataio.write(uri, new)
        return original(loc, at, **options)

    def walk_index(source: Any) -> Any:
        found = walk(source)
        walks.append((source.uri, found.error))
        return found

    monkeypatch.setattr(verbs, "_download", download)
    monkeypatch.setattr(archives, "_walk_index", walk_index)
    records = dataio.webdataset(pattern, index=False).shard_records(0, 2, pad=True)
    assert records is not None
    got = [s for _, s in records]
    first = next(error for at, error in walks if at == uri)
    assert isinstance(first, TransportError) and CHANGED in str(first) and repr(uri) in str(first)
    assert [error for at, error in walks if at == uri][-1] is None  # walked again
    (tmp_path / "s-0.tar").write_bytes(new)
    assert plain(got) == plain(dataio.webdataset(local))[: len(got)]
    assert len(got) == (SHARDS * SAMPLES + 1) // 2
