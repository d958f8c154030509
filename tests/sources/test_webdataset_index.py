"""WebDataset shard indexes (the ``wids`` format): dealing shards to ranks without a
header walk of every shard.

Oracles: :mod:`tarfile` for each shard's sample count; the unindexed dealing (a walk of
every shard's headers) for what each rank gets; the range server's request log for
what each rank fetched.
"""

from __future__ import annotations

import io
import json
import logging
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.resume import check_resume
from hypothesis import given, settings
from hypothesis import strategies as st

import dataio
from dataio.exceptions import FormatError, NotFoundError, PlanError
from dataio.io import config
from dataio.sources import archives

COUNTS = [7, 7, 7, 3, 0, 5]
N = sum(COUNTS)


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    config.reset()
    archives._KNOWN.clear()
    yield
    config.reset()
    archives._KNOWN.clear()


def shard_bytes(first: int, count: int, *, size: int = 3000) -> bytes:
    """A shard of ``count`` samples numbered from ``first``: ``bin`` (about ``size``
    bytes) and ``cls`` (the sample's number) members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for n in range(first, first + count):
            body = bytes([n % 251]) * (size + 37 * (n % 7))
            for field, data in (("bin", body), ("cls", b"%d" % n)):
                info = tarfile.TarInfo(f"k{n:06d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_shards(base: str, counts: list[int] = COUNTS, *, size: int = 3000) -> str:
    """Shards ``s-00.tar ...`` under ``base`` (a directory or a URI prefix); the pattern."""
    first = 0
    for i, count in enumerate(counts):
        dataio.write(f"{base}/s-{i:02d}.tar", shard_bytes(first, count, size=size))
        first += count
    return f"{base}/s-{{00..{len(counts) - 1:02d}}}.tar"


def plan(size: int) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(size))


def rank_stream(source: Any, rank: int, world: int, size: int = 3) -> list[Any]:
    loader = plan(size).bind(source).run(shard={"id": rank, "of": world})
    return [(list(b.indices), [int(bytes(v)) for v in b["cls"]]) for b in loader]


def tar_count(data: bytes) -> int:
    """Samples of a shard by :mod:`tarfile` (members grouped by their key)."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return len({m.name.split(".", 1)[0] for m in tar if m.isfile()})


# -- writing ---------------------------------------------------------------------------------


def test_the_index_lists_each_shard_with_its_tarfile_count(tmp_path: Path) -> None:
    pattern = put_shards(str(tmp_path))
    written = dataio.write_webdataset_index(pattern)
    assert written == str(tmp_path / "shardindex.json")
    doc = json.loads(Path(written).read_text())
    assert doc["wids_version"] == 1 and doc["__kind__"] == "wids-shard-index-v1"
    expected = [
        {"url": p.name, "nsamples": tar_count(p.read_bytes()), "filesize": p.stat().st_size}
        for p in sorted(tmp_path.glob("s-*.tar"))
    ]
    assert doc["shardlist"] == expected
    assert [e["nsamples"] for e in expected] == COUNTS


def test_writing_refuses_compressed_and_corrupt_shards(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"plain \.tar"):
        dataio.write_webdataset_index(str(tmp_path / "s-{0..1}.tar.gz"))
    data = shard_bytes(0, 4)
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(FormatError, match=r"cut\.tar"):
        dataio.write_webdataset_index(str(tmp_path / "cut.tar"))
    assert not (tmp_path / "shardindex.json").exists()


# -- equal dealing with and without an index ---------------------------------------------------


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_the_index_deals_as_the_header_walk_does(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    base = str(tmp_path) if backend == "local" else request.getfixturevalue("s3")
    pattern = put_shards(base)
    index = dataio.write_webdataset_index(pattern, f"{base}/idx.json")
    for world in (1, 2, 3, 4):
        streams = []
        for rank in range(world):
            archives._KNOWN.clear()
            walked = rank_stream(dataio.webdataset(pattern, index=False), rank, world)
            indexed = rank_stream(dataio.webdataset(pattern, index=index), rank, world)
            assert indexed == walked
            streams.append(indexed)
        assert len({len(s) for s in streams}) == 1  # equal batch counts
        seen = {v for s in streams for _, vs in s for v in vs}
        assert seen == set(range(N))


def test_an_index_beside_the_shards_is_found(http_server: Any, tmp_path: Path) -> None:
    local = put_shards(str(tmp_path))
    dataio.write_webdataset_index(local)
    for path in tmp_path.iterdir():
        http_server.objects[f"/objects/{path.name}"] = path.read_bytes()
    pattern = f"{http_server.url}/objects/s-{{00..05}}.tar"
    since = len(http_server.requests)
    got = rank_stream(dataio.webdataset(pattern), 1, 2)
    assert got == rank_stream(dataio.webdataset(local, index=False), 1, 2)
    paths = [p for m, p, _ in http_server.requests[since:] if m == "GET"]
    assert "/objects/shardindex.json" in paths
    # no header walk: one read per shard of the rank's run (samples 15..28: s-02..s-05;
    # s-04, listed as empty, is read to check it), its padding (sample 15 again) kept
    # from the first read
    assert sorted(p for p in paths if p.endswith(".tar")) == [
        "/objects/s-02.tar",
        "/objects/s-03.tar",
        "/objects/s-04.tar",
        "/objects/s-05.tar",
    ]


def test_an_index_missing_a_shard(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pattern = put_shards(str(tmp_path))
    dataio.write_webdataset_index(str(tmp_path / "s-{00..04}.tar"))
    expected = rank_stream(dataio.webdataset(pattern, index=False), 0, 2)
    with caplog.at_level(logging.INFO, logger="dataio.sources"):
        # found beside the shards but incomplete: not used (the headers are walked)
        assert rank_stream(dataio.webdataset(pattern), 0, 2) == expected
    assert "does not list 1 of the 6 shards" in caplog.text
    with pytest.raises(PlanError, match=r"does not list 1 of the 6 shards.*s-05\.tar"):
        rank_stream(dataio.webdataset(pattern, index=tmp_path / "shardindex.json"), 0, 2)
    with pytest.raises(NotFoundError, match=r"nowhere\.json"):
        rank_stream(dataio.webdataset(pattern, index=tmp_path / "nowhere.json"), 0, 2)


def test_relative_urls_resolve_against_base_or_the_index_directory(tmp_path: Path) -> None:
    shards = tmp_path / "data"
    shards.mkdir()
    pattern = put_shards(str(shards))
    entries = [{"url": f"s-{i:02d}.tar", "nsamples": c} for i, c in enumerate(COUNTS)]
    (tmp_path / "by-base.json").write_text(
        json.dumps({"wids_version": 1, "base": "data", "shardlist": entries})
    )
    nested = [dict(e, url=f"data/{e['url']}") for e in entries]
    (tmp_path / "by-dir.json").write_text(json.dumps({"wids_version": 1, "shardlist": nested}))
    expected = rank_stream(dataio.webdataset(pattern, index=False), 2, 3)
    for name in ("by-base.json", "by-dir.json"):
        source = dataio.webdataset(pattern, index=str(tmp_path / name))
        assert rank_stream(source, 2, 3) == expected


@pytest.mark.parametrize(("world", "rank"), [(2, 1), (3, 2), (4, 0)])
@pytest.mark.parametrize("after", [0, 1, 3])
def test_indexed_resume_equals_the_uninterrupted_stream(
    tmp_path: Path, world: int, rank: int, after: int
) -> None:
    pattern = put_shards(str(tmp_path))
    index = dataio.write_webdataset_index(pattern)
    source = dataio.webdataset(pattern, index=index).map_records(lambda s: {"cls": s["cls"]})

    def make_loader(**options: Any) -> dataio.Loader:
        return plan(2).bind(source).run(shard={"id": rank, "of": world}, **options)

    check_resume(make_loader, after)


# -- a wrong index is refused -------------------------------------------------------------------


def lying_index(tmp_path: Path, shard: int, nsamples: int, **extra: Any) -> str:
    entries = [
        {"url": f"s-{i:02d}.tar", "nsamples": nsamples if i == shard else c, **extra}
        for i, c in enumerate(COUNTS)
    ]
    path = tmp_path / f"lie-{shard}-{nsamples}.json"
    path.write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    return str(path)


@pytest.mark.parametrize(
    ("shard", "nsamples", "actual"),
    [(0, 6, 7), (0, 9, 7), (3, 2, 3), (5, 4, 5), (5, 8, 5), (4, 1, 0), (1, 0, 7), (5, 0, 5)],
)
def test_counts_that_disagree_with_a_shard_are_refused(
    tmp_path: Path, shard: int, nsamples: int, actual: int
) -> None:
    """Every shard's end is read by some rank (a shard listed as empty by the rank where
    it falls): that rank refuses the index, naming the shard and both counts, rather
    than deal wrong runs."""
    pattern = put_shards(str(tmp_path))
    index = lying_index(tmp_path, shard, nsamples)
    errors = []
    for rank in range(2):
        try:
            rank_stream(dataio.webdataset(pattern, index=index), rank, 2)
        except FormatError as exc:
            errors.append(str(exc))
    assert errors, "no rank noticed the wrong count"
    name = f"s-{shard:02d}.tar"
    for text in errors:
        assert name in text and index in text
        assert f"holds {nsamples} samples but it holds {actual}" in text


def test_a_size_that_disagrees_is_refused(tmp_path: Path) -> None:
    pattern = put_shards(str(tmp_path))
    entries = [
        {"url": f"s-{i:02d}.tar", "nsamples": c, "filesize": 1} for i, c in enumerate(COUNTS)
    ]
    (tmp_path / "sizes.json").write_text(json.dumps({"wids_version": 1, "shardlist": entries}))
    with pytest.raises(FormatError, match=r"s-00.tar.*not the 1 it lists"):
        rank_stream(dataio.webdataset(pattern, index=str(tmp_path / "sizes.json")), 0, 2)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "is not JSON"),
        ('{"shardlist": []}', "wids_version"),
        ('{"wids_version": 1}', "shardlist"),
        ('{"wids_version": 1, "shardlist": [{"nsamples": 1}]}', "url"),
        ('{"wids_version": 1, "shardlist": [{"url": "a.tar", "nsamples": -1}]}', "nsamples -1"),
        ('{"wids_version": 1, "shardlist": [{"url": "a.tar", "nsamples": true}]}', "nsamples"),
        ('{"wids_version": 1, "shardlist": [], "datasets": [{"source_url": "x"}]}', "sub-data"),
        ("[" * 100_000, "is not JSON"),
    ],
)
def test_malformed_indexes_are_format_errors(tmp_path: Path, text: str, match: str) -> None:
    pattern = put_shards(str(tmp_path), [2, 2])
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(FormatError, match=match) as info:
        rank_stream(dataio.webdataset(pattern, index=str(tmp_path / "bad.json")), 0, 2)
    assert "bad.json" in str(info.value)


# -- what each rank touches --------------------------------------------------------------------


def serve(http_server: Any, tmp_path: Path, shards: int = 8) -> tuple[str, dict[str, int]]:
    """``shards`` shards of 50 samples on the range server, with their index."""
    local = put_shards(str(tmp_path), [50] * shards, size=20_000)
    dataio.write_webdataset_index(local)
    sizes = {}
    for path in tmp_path.iterdir():
        http_server.objects[f"/objects/{path.name}"] = path.read_bytes()
        sizes[f"/objects/{path.name}"] = path.stat().st_size
    return f"{http_server.url}/objects/s-{{00..{shards - 1:02d}}}.tar", sizes


def requested(server: Any, since: int) -> dict[str, tuple[int, int]]:
    """Per object: GET requests and body bytes asked for (by their Range headers)."""
    out: dict[str, tuple[int, int]] = {}
    for method, path, headers in server.requests[since:]:
        if method != "GET" or path not in server.objects:
            continue
        total = len(server.objects[path])
        spec = headers.get("Range") or headers.get("range")
        if spec is None:
            size = total
        else:
            first, _, last = spec.removeprefix("bytes=").partition("-")
            size = min(int(last) if last else total - 1, total - 1) - int(first) + 1
        n, b = out.get(path, (0, 0))
        out[path] = (n + 1, b + size)
    return out


@pytest.mark.parametrize("world", [2, 3, 4])
def test_with_an_index_no_rank_touches_another_ranks_shards(
    http_server: Any, tmp_path: Path, world: int
) -> None:
    pattern, sizes = serve(http_server, tmp_path)
    total = sum(v for k, v in sizes.items() if k.endswith(".tar"))
    per_shard = total / 8
    for rank in range(world):
        since = len(http_server.requests)
        got = rank_stream(dataio.webdataset(pattern), rank, world, size=10)
        base, rest = divmod(400, world)  # runs with the counts of a round-robin shard
        first = rank * base + min(rank, rest)
        last = first + base - (0 if rank < rest else 1)
        assert [v for _, vs in got for v in vs][: last - first + 1] == list(range(first, last + 1))
        touched = requested(http_server, since)
        mine = {f"/objects/s-{i:02d}.tar" for i in range(first // 50, last // 50 + 1)}
        assert set(touched) - {"/objects/shardindex.json"} == mine
        fetched = sum(b for p, (_, b) in touched.items() if p.endswith(".tar"))
        # the run's bytes, plus at most one shard before the run (a start inside a shard)
        assert fetched <= total / world + per_shard * 1.1, (rank, fetched / total)
        # a request or a few per shard (a run ending inside one reads growing windows)
        assert all(n <= 4 for p, (n, _) in touched.items())


def test_without_an_index_the_walk_overlaps_shards_and_says_so(
    http_server: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: Any
) -> None:
    pattern, _ = serve(http_server, tmp_path, shards=4)
    del http_server.objects["/objects/shardindex.json"]
    monkeypatch.setattr(archives, "_WALK_NOTED", type(archives._WALK_NOTED)())
    http_server.stall_secs = 0.02
    with caplog.at_level(logging.INFO, logger="dataio.sources"):
        got = rank_stream(dataio.webdataset(pattern), 1, 2, size=10)
        archives._KNOWN.clear()
        rank_stream(dataio.webdataset(pattern), 0, 2, size=10)
    assert [v for _, vs in got for v in vs] == list(range(100, 200))
    notes = [r for r in caplog.records if "write_webdataset_index" in r.getMessage()]
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert 1 < http_server.most_ranged_at_once(margin=0.005) <= 32


@settings(max_examples=20, deadline=None)
@given(
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=5),
    world=st.integers(1, 5),
    size=st.sampled_from([1, 2, 4]),
    pad=st.booleans(),
)
def test_any_counts_deal_as_the_header_walk_does(
    tmp_path_factory: pytest.TempPathFactory, counts: list[int], world: int, size: int, pad: bool
) -> None:
    root = tmp_path_factory.mktemp("any")
    pattern = put_shards(str(root), counts, size=100)
    index = dataio.write_webdataset_index(pattern)
    for rank in range(world):
        archives._KNOWN.clear()
        shard = {"id": rank, "of": world, "pad": pad}
        runs = [
            [
                (list(b.indices), [int(bytes(v)) for v in b["cls"]])
                for b in plan(size).bind(dataio.webdataset(pattern, index=i)).run(shard=shard)
            ]
            for i in (False, index)
        ]
        assert runs[0] == runs[1]


def test_an_index_in_place_of_the_pattern_names_the_shards(tmp_path: Path, s3: str) -> None:
    local = put_shards(str(tmp_path))
    pattern = put_shards(s3)
    index = dataio.write_webdataset_index(pattern)
    assert index == f"{s3}/shardindex.json"
    strip = lambda s: {k: v for k, v in s.items() if k != "__url__"}  # noqa: E731
    assert [strip(s) for s in dataio.webdataset(index)] == [
        strip(s) for s in dataio.webdataset(local)
    ]
    for rank in range(3):
        archives._KNOWN.clear()
        expected = rank_stream(dataio.webdataset(local, index=False), rank, 3)
        assert rank_stream(dataio.webdataset(index), rank, 3) == expected


@pytest.mark.parametrize("change", [+3000, -1000])
def test_a_remote_shard_of_another_size_is_refused(
    http_server: Any, tmp_path: Path, change: int
) -> None:
    """The index's ``filesize`` stands in for a HEAD request: the ranged GET's reported
    size is checked against it instead."""
    local = put_shards(str(tmp_path))
    dataio.write_webdataset_index(local)
    for path in tmp_path.iterdir():
        http_server.objects[f"/objects/{path.name}"] = path.read_bytes()
    before = len(http_server.objects["/objects/s-01.tar"])
    http_server.objects["/objects/s-01.tar"] = shard_bytes(7, 7, size=3000 + change)
    after = len(http_server.objects["/objects/s-01.tar"])
    assert after != before
    pattern = f"{http_server.url}/objects/s-{{00..05}}.tar"
    with pytest.raises(FormatError, match=rf"s-01\.tar.*{after} bytes, not the {before}"):
        rank_stream(dataio.webdataset(pattern), 0, 2)
    # with the right sizes, no HEAD request is sent
    http_server.objects["/objects/s-01.tar"] = (tmp_path / "s-01.tar").read_bytes()
    since = len(http_server.requests)
    rank_stream(dataio.webdataset(pattern), 0, 2)
    assert [m for m, _, _ in http_server.requests[since:] if m != "GET"] == []


@pytest.mark.parametrize("backend", ["gs", "az"])
def test_discovery_and_dealing_on_other_stores(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, monkeypatch: Any
) -> None:
    base = request.getfixturevalue(backend)
    local = put_shards(str(tmp_path))
    pattern = put_shards(base)
    for rank in range(2):
        archives._KNOWN.clear()  # no index yet: looked for, not found, the headers walked
        assert rank_stream(dataio.webdataset(pattern), rank, 2) == rank_stream(
            dataio.webdataset(local, index=False), rank, 2
        )
    assert dataio.write_webdataset_index(pattern) == f"{base}/shardindex.json"

    def no_walk(source: Any) -> Any:
        raise AssertionError(f"walked the headers of {source.uri}")

    for rank in range(2):
        archives._KNOWN.clear()
        expected = rank_stream(dataio.webdataset(local, index=False), rank, 2)
        with monkeypatch.context() as patch:
            patch.setattr(archives, "_walk_index", no_walk)
            assert rank_stream(dataio.webdataset(pattern), rank, 2) == expected


def test_an_impossible_count_is_refused_before_reading(tmp_path: Path) -> None:
    """A count no shard of that size can hold (a sample takes a 512-byte header at
    least) is refused at once: no run of 10**15 samples is planned or padded out."""
    pattern = put_shards(str(tmp_path))
    index = lying_index(tmp_path, 0, 10**15)
    size = (tmp_path / "s-00.tar").stat().st_size
    with pytest.raises(
        FormatError, match=rf"holds {10**15} samples but it holds at most {size // 512}"
    ):
        rank_stream(dataio.webdataset(pattern, index=index), 0, 2)
