"""WebDataset shards: brace patterns, shards dealt to ranks whole, URIs on every backend.

Oracles: the ``braceexpand`` package for patterns, :mod:`tarfile` for the samples a
shard holds, the server's own request log for the bytes each rank fetched.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import braceexpand
import pytest
from helpers.resume import check_resume
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataio
from dataio.exceptions import FormatError, LimitError, NotFoundError, PlanError
from dataio.io import config
from dataio.sources import archives
from dataio.sources.archives import expand_braces

# -- brace patterns ------------------------------------------------------------------------

PATTERNS = [
    "shard-{0000..0007}.tar",
    "s-{train,val}-{00..02}.tar",
    "{a,b{1,2},c}.tar",
    "{a,{b,{c,d}}}x",
    "x{1..10..3}y",
    "{3..1}",
    "{-2..2}",
    "{-02..2}",
    "{08..11}",
    "{8..011}",
    "{a..e}",
    "{e..a..2}",
    "plain.tar",
    "{x}.tar",
    "{}.tar",
    "{a,}b",
    "{,a}b",
    "a{1..3}b{x,y}c",
    "s3://bucket/{train,val}/shard-{0..2}.tar",
    r"lit\{a,b\}.tar",
    r"{a\,b,c}",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_braces_expand_as_braceexpand_does(pattern: str) -> None:
    assert expand_braces(pattern) == list(braceexpand.braceexpand(pattern))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab01{},.", max_size=14))
def test_braces_agree_with_braceexpand_on_any_text(pattern: str) -> None:
    try:
        expected = list(braceexpand.braceexpand(pattern))
    except braceexpand.UnbalancedBracesError:
        with pytest.raises(PlanError, match="unbalanced"):
            expand_braces(pattern)
        return
    assert expand_braces(pattern) == expected


def test_webdataset_expands_comma_lists(tmp_path: Path) -> None:
    write_shard(tmp_path / "train.tar", 0, 2)
    write_shard(tmp_path / "val.tar", 2, 3)
    got = [s["__key__"] for s in dataio.webdataset(str(tmp_path / "{train,val}.tar"))]
    assert got == ["k000000", "k000001", "k000002", "k000003", "k000004"]


# -- shards ----------------------------------------------------------------------------------


def shard_bytes(first: int, count: int, *, size: int = 3000) -> bytes:
    """A WebDataset shard of ``count`` samples numbered from ``first``: ``bin`` (``size``
    bytes, varying) and ``cls`` members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for n in range(first, first + count):
            for field, data in (
                ("bin", bytes([n % 251]) * (size + 37 * (n % 7))),
                ("cls", str(n).encode()),
            ):
                info = tarfile.TarInfo(f"k{n:06d}.{field}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_shard(path: Path, first: int, count: int) -> Path:
    path.write_bytes(shard_bytes(first, count))
    return path


#: unequal shards, as writers leave them (the last one short), and an empty one
COUNTS = [7, 7, 7, 3, 0, 5]


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("shards")
    first = 0
    for i, count in enumerate(COUNTS):
        write_shard(root / f"shard-{i:02d}.tar", first, count)
        first += count
    return str(root / f"shard-{{00..{len(COUNTS) - 1:02d}}}.tar")


N = sum(COUNTS)


def plan(size: int, drop: bool = False) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(size, drop_last=drop))


def labels(batch: dataio.Batch) -> list[int]:
    return [int(bytes(v)) for v in batch["cls"]]


def rank_stream(
    pattern: str, rank: int, world: int, *, size: int, pad: bool, drop: bool = False
) -> list[Any]:
    loader = (
        plan(size, drop)
        .bind(dataio.webdataset(pattern))
        .run(shard={"id": rank, "of": world, "pad": pad})
    )
    return [(list(b.indices), labels(b)) for b in loader]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    world=st.integers(1, 7),
    size=st.sampled_from([1, 2, 3, 5]),
    pad=st.booleans(),
    drop=st.booleans(),
)
def test_ranks_get_contiguous_runs_with_equal_batch_counts(shards, world, size, pad, drop) -> None:
    ranks = [rank_stream(shards, r, world, size=size, pad=pad, drop=drop) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1, "ranks disagree on the batch count"
    rounds, rest = divmod(N, world)
    per_rank = rounds + (1 if rest and pad else 0)
    for stream in ranks:
        delivered = [v for _, vs in stream for v in vs]
        positions = [p for ps, _ in stream for p in ps]
        assert delivered == positions  # sample n holds label n: each position is its sample
        assert len(delivered) == (per_rank - per_rank % size if drop else per_rank)
    if not drop:
        seen = [v for stream in ranks for _, vs in stream for v in vs]
        if pad:
            assert set(seen) == set(range(N))
        else:
            assert sorted(seen) == list(range(rounds * world))
        # a rank's samples run in order, apart from one repeat padding its last round
        for stream in ranks:
            delivered = [v for _, vs in stream for v in vs]
            run = delivered[: rounds + (1 if rest and pad and len(set(delivered)) > rounds else 0)]
            assert run == list(range(run[0], run[0] + len(run))) if run else True


def test_unsharded_pass_is_every_sample_in_order(shards) -> None:
    loader = plan(4).bind(dataio.webdataset(shards)).run()
    assert [v for b in loader for v in labels(b)] == list(range(N))


@pytest.mark.parametrize(
    ("world", "rank", "pad"), [(2, 0, True), (2, 1, True), (3, 2, False), (4, 3, True)]
)
@pytest.mark.parametrize("after", [0, 1, 3])
def test_sharded_resume_equals_the_uninterrupted_stream(shards, world, rank, pad, after) -> None:
    source = dataio.webdataset(shards).map_records(lambda s: {"cls": s["cls"]})

    def make_loader(**options: Any) -> dataio.Loader:
        return plan(2).bind(source).run(shard={"id": rank, "of": world, "pad": pad}, **options)

    check_resume(make_loader, after)


def test_map_records_keeps_the_shard_dealing(shards) -> None:
    source = dataio.webdataset(shards).map_records(lambda s: {"cls": s["cls"], "k": s["__key__"]})
    got = rank_stream_of(source, 1, 2)
    assert N == 29 and got == [*range(15, 29), 15]  # a contiguous run, padded by its first


def rank_stream_of(source: Any, rank: int, world: int) -> list[int]:
    loader = plan(3).bind(source).run(shard={"id": rank, "of": world})
    return [v for b in loader for v in labels(b)]


def test_compressed_shards_keep_round_robin(tmp_path: Path) -> None:
    import gzip

    for i in range(2):
        (tmp_path / f"s-{i}.tar.gz").write_bytes(gzip.compress(shard_bytes(3 * i, 3)))
    source = dataio.webdataset(str(tmp_path / "s-{0..1}.tar.gz"))
    assert rank_stream_of(source, 0, 2) == [0, 2, 4]
    assert rank_stream_of(source, 1, 2) == [1, 3, 5]


def test_a_broken_shard_stands_in_for_its_samples_on_every_rank(tmp_path: Path) -> None:
    write_shard(tmp_path / "s-0.tar", 0, 4)
    cut = shard_bytes(4, 4)
    (tmp_path / "s-1.tar").write_bytes(cut[: len(cut) // 2 + 100])
    write_shard(tmp_path / "s-2.tar", 8, 4)
    pattern = str(tmp_path / "s-{0..2}.tar")
    unsharded = [
        v
        for b in plan(20).bind(dataio.webdataset(pattern)).run(on_failure="skip")
        for v in labels(b)
    ]
    counts = []
    seen: list[int] = []
    for rank in range(2):
        loader = (
            plan(2)
            .bind(dataio.webdataset(pattern))
            .run(shard={"id": rank, "of": 2}, on_failure="skip")
        )
        batches = list(loader)
        counts.append(len(batches))
        seen += [v for b in batches for v in labels(b)]
        assert all(
            isinstance(e, FormatError) and "s-1.tar" in str(e) for b in batches for e in b.errors
        )
    assert counts[0] == counts[1]
    assert sorted(seen) == sorted(unsharded)
    raised = []
    for rank in range(2):
        try:
            list(plan(2).bind(dataio.webdataset(pattern)).run(shard={"id": rank, "of": 2}))
        except FormatError as exc:
            raised.append(str(exc))
    assert raised and all("s-1.tar" in text for text in raised)  # the rank holding it


# -- the direct tar reader against tarfile ----------------------------------------------------


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_samples_match_tarfile(tmp_path: Path, fmt: int) -> None:
    buf = io.BytesIO()
    names = ["a/0.txt", "a/0.json", "d" * 120 + "/1.txt", "ü/2.txt", "x/3.seg.png", "noext"]
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        directory = tarfile.TarInfo("dir")
        directory.type = tarfile.DIRTYPE
        tar.addfile(directory)
        for i, name in enumerate(names):
            data = bytes([i]) * (i * 300 + 1)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("a/0.lnk")
        link.type, link.linkname = tarfile.SYMTYPE, "a/0.txt"
        tar.addfile(link)
    path = tmp_path / "s.tar"
    path.write_bytes(buf.getvalue())
    with tarfile.open(path) as oracle:
        expected = [(m.name, oracle.extractfile(m).read()) for m in oracle if m.isfile()]  # type: ignore[union-attr]
    got = [
        (f"{s['__key__']}.{field}", data)
        for s in dataio.webdataset(str(path))
        for field, data in s.items()
        if not field.startswith("__")
    ]
    assert sorted(got) == sorted((n, d) for n, d in expected if "." in n.rsplit("/", 1)[-1])


def hostile(name: str) -> bytes:
    """A few hostile tars (the lying sizes of tests/sources/test_hostile_tar.py)."""

    def header(
        member: str, *, size: int = 0, kind: bytes = tarfile.REGTYPE, field: bytes | None = None
    ) -> bytes:
        info = tarfile.TarInfo(member)
        info.size, info.type = size, kind
        buf = bytearray(info.tobuf(format=tarfile.GNU_FORMAT)[:512])
        if field is not None:
            buf[124:136] = field
        buf[148:156] = b" " * 8
        buf[148:156] = b"%06o\0 " % sum(buf)
        return bytes(buf)

    ok = header("a.txt", size=1) + b"a" + b"\0" * 511
    big = b"\x80" + (1 << 40).to_bytes(11, "big")
    return {
        "octal-size": ok + header("x.bin", field=b"77777777777\0") + b"\0" * 1024,
        "negative-size": ok + header("x.bin", field=b"\xff" * 12) + b"\0" * 1024,
        "longname-size": ok
        + header("././@LongLink", kind=tarfile.GNUTYPE_LONGNAME, field=big)
        + b"\0" * 1024,
        "pax-size": ok + header("././@PaxHeader", kind=tarfile.XHDTYPE, field=big) + b"\0" * 1024,
        "garbled": ok + b"garbage!" * 64 + ok,
        "cut-header": ok + header("b.txt", size=1)[:300],
        "cut-data": ok + header("b.txt", size=2000) + b"b" * 700,
    }[name]


@pytest.mark.parametrize(
    ("name", "error", "match"),
    [
        ("octal-size", LimitError, "max_member_bytes"),
        ("negative-size", FormatError, "negative size"),
        ("longname-size", LimitError, "max_header_bytes"),
        ("pax-size", LimitError, "max_header_bytes"),
        ("garbled", FormatError, "offset 1024.*not a tar header"),
        ("cut-header", FormatError, "offset 1024.*cut short"),
        ("cut-data", FormatError, "remain|cut short"),
    ],
)
@pytest.mark.parametrize("sharded", [False, True])
def test_hostile_shards_are_refused_by_name_and_offset(
    tmp_path: Path, name: str, error: type, match: str, sharded: bool
) -> None:
    path = tmp_path / f"{name}.tar"
    data = hostile(name)
    path.write_bytes(data)
    source = dataio.webdataset(str(path))
    with pytest.raises(error, match=match) as info:
        if sharded:
            list(plan(1).bind(source).run(shard={"id": 1, "of": 2}))
        else:
            list(source)
    assert str(path) in str(info.value)


# -- URIs ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _fresh_config() -> Iterator[None]:
    config.reset()
    yield
    config.reset()


BACKENDS = ["s3", "gs", "az", "http"]


def upload(base: str, server: Any, names_and_data: list[tuple[str, bytes]]) -> None:
    for name, data in names_and_data:
        if server is not None:  # the range server holds objects in memory
            server.objects[f"/objects/{name}"] = data
        else:
            dataio.write(f"{base}/{name}", data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_webdataset_reads_uris_on_every_backend(
    request: pytest.FixtureRequest, backend: str, shards: str
) -> None:
    base = request.getfixturevalue(backend)
    server = request.getfixturevalue("http_server") if backend == "http" else None
    local = expand_braces(shards)
    upload(base, server, [(Path(p).name, Path(p).read_bytes()) for p in local])
    pattern = f"{base}/shard-{{00..{len(COUNTS) - 1:02d}}}.tar"
    strip = lambda s: {k: v for k, v in s.items() if k != "__url__"}  # noqa: E731
    assert [strip(s) for s in dataio.webdataset(pattern)] == [
        strip(s) for s in dataio.webdataset(shards)
    ]
    assert [strip(s) for s in dataio.archive(f"{base}/shard-01.tar")] == [
        strip(s) for s in dataio.archive(local[1])
    ]
    for world in (2, 3):
        for rank in range(world):
            assert rank_stream(pattern, rank, world, size=2, pad=True) == rank_stream(
                shards, rank, world, size=2, pad=True
            )
    with pytest.raises(NotFoundError, match="shard-99"):
        list(dataio.webdataset(f"{base}/shard-99.tar"))


def fetched(server: Any, since: int) -> int:
    """Body bytes the range server sent for GETs logged after request ``since``."""
    total = 0
    for method, path, headers in server.requests[since:]:
        if method != "GET" or path not in server.objects:  # a 404 (no shard index) sends none
            continue
        data = server.objects[path]
        spec = headers.get("Range") or headers.get("range")
        if spec is None:
            total += len(data)
            continue
        first, _, last = spec.removeprefix("bytes=").partition("-")
        end = min(int(last), len(data) - 1) if last else len(data) - 1
        total += end - int(first) + 1
    return total


@pytest.mark.parametrize("world", [2, 4])
def test_each_rank_fetches_about_its_share_of_the_bytes(http_server: Any, world: int) -> None:
    base = http_server.url + "/objects"
    sizes = 0
    for i in range(8):
        data = shard_bytes(50 * i, 50, size=40_000)
        http_server.objects[f"/objects/w-{i}.tar"] = data
        sizes += len(data)
    pattern = f"{base}/w-{{0..7}}.tar"
    for rank in range(world):
        archives._KNOWN.clear()  # each rank is a process of its own
        since = len(http_server.requests)
        got = rank_stream(pattern, rank, world, size=10, pad=True)
        assert [v for _, vs in got for v in vs] == list(
            range(rank * 400 // world, (rank + 1) * 400 // world)
        )
        share = fetched(http_server, since) / sizes
        # the run's bytes plus the header walk (a header block per member: ~2.5% here)
        assert 1 / world - 0.02 <= share < 1 / world + 0.04, share


def test_remote_shards_stream_in_pieces(http_server: Any) -> None:
    """A shard is read by one ranged request per pass and handed on in pieces; no request
    asks for the whole object without a range (a whole-object download)."""
    data = shard_bytes(0, 40, size=100_000)
    http_server.objects["/objects/big.tar"] = data
    since = len(http_server.requests)
    n = sum(1 for _ in dataio.webdataset(http_server.url + "/objects/big.tar"))
    assert n == 40
    gets = [h for m, _, h in http_server.requests[since:] if m == "GET"]
    assert gets and all("Range" in h or "range" in h for h in gets)


def pax_block(body: bytes) -> bytes:
    info = tarfile.TarInfo("././@PaxHeader")
    info.size, info.type = len(body), tarfile.XHDTYPE
    head = info.tobuf(format=tarfile.USTAR_FORMAT)[:512]
    return head + body + b"\0" * (-len(body) % 512)


def plain_member(name: str, data: bytes) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info.tobuf(format=tarfile.USTAR_FORMAT) + data + b"\0" * (-len(data) % 512)


PAX_CASES = {
    # a record whose length runs past its block; one without '='; a non-number length
    "pax-record-overruns": pax_block(b"99 path=x.txt\n") + plain_member("a.txt", b"a"),
    "pax-record-no-equals": pax_block(b"12 pathx.txt\n") + plain_member("a.txt", b"a"),
    "pax-record-bad-length": pax_block(b"zz path=x.txt\n") + plain_member("a.txt", b"a"),
    "pax-size-not-a-number": pax_block(b"13 size=12ab\n") + plain_member("a.txt", b"a"),
    # a pax sparse member claiming 1 TiB of holes over 1 stored byte
    "pax-sparse-realsize": pax_block(b"37 GNU.sparse.realsize=1099511627776\n")
    + plain_member("s.bin", b"x"),
    "cut-inside-padding": plain_member("a.txt", b"a" * 700)[:1000],
}


@pytest.mark.parametrize("name", sorted(PAX_CASES))
def test_malformed_pax_and_padding_are_dataio_errors(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.tar"
    path.write_bytes(PAX_CASES[name] + (b"\0" * 1024 if "cut" not in name else b""))
    with (
        dataio.limits.scoped(max_member_bytes=1 << 62),
        pytest.raises(LimitError if "sparse" in name else FormatError) as info,
    ):
        list(dataio.webdataset(str(path)))
    assert str(path) in str(info.value)


def test_remote_shards_read_from_the_byte_cache(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    data = shard_bytes(0, 6)
    http_server.objects["/objects/c.tar"] = data
    uri = http_server.url + "/objects/c.tar"
    # a pass over the whole shard fills the cache as it streams (and a damaged entry
    # would be a miss: the footer and CRC are the cache's own)
    assert [int(s["cls"]) for s in dataio.webdataset(uri)] == list(range(6))
    since = len(http_server.requests)
    assert dataio.read(uri) == data  # served by the entry the pass wrote
    assert [int(s["cls"]) for s in dataio.webdataset(uri)] == list(range(6))
    assert [m for m, _, _ in http_server.requests[since:] if m == "GET"] == []


def test_the_header_walk_is_saved_in_the_cache_directory(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    for i in range(4):
        http_server.objects[f"/objects/x-{i}.tar"] = shard_bytes(10 * i, 10)
    pattern = http_server.url + "/objects/x-{0..3}.tar"

    def gets() -> int:  # of the shards (not the look for a shard index beside them)
        return sum(1 for m, p, _ in http_server.requests if m == "GET" and p.endswith(".tar"))

    before = gets()
    first = rank_stream(pattern, 1, 2, size=4, pad=True)
    walked = gets() - before
    assert walked > 40  # a request per member header
    monkeypatch.setattr(archives, "_KNOWN", {})  # as a new process would start
    before = gets()
    assert rank_stream(pattern, 1, 2, size=4, pad=True) == first
    assert gets() - before == 2  # the rank's two shards, one ranged request each
    # a new version of a shard (another ETag) is walked again
    http_server.objects["/objects/x-3.tar"] = shard_bytes(30, 12)
    monkeypatch.setattr(archives, "_KNOWN", {})
    got = [v for _, vs in rank_stream(pattern, 1, 2, size=4, pad=True) for v in vs]
    assert got == list(range(21, 42))
