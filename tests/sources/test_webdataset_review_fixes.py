"""WebDataset/tar defects found in review: each test builds the damaged or hostile shard
it needs and checks the sharded pass against the unsharded one (the oracle: what
:mod:`tarfile` wrote, read in order).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

import dataio
from dataio import limits
from dataio.exceptions import FormatError, LimitError, PlanError
from dataio.io import config
from dataio.sources.archives import _Archive, _walk_index, webdataset


def tar_bytes(keys: list[str], *, labels: list[int] | None = None) -> bytes:
    """A ustar archive of one ``.cls`` member per key (its label, or ``1``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for i, k in enumerate(keys):
            data = b"1" if labels is None else str(labels[i]).encode()
            info = tarfile.TarInfo(f"{k}.cls")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def loader_labels(source: object, rank: int, world: int) -> list[int]:
    plan = dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(1))
    loader = plan.bind(source).run(shard={"id": rank, "of": world, "pad": False})  # type: ignore[arg-type]
    return [int(bytes(v)) for b in loader for v in b["cls"]]


def key(sample: object) -> str:
    """A sample's key (a stand-in for a broken shard's samples: ``'<uri>:<unreadable>'``)."""
    return str(sample["__key__"])  # type: ignore[index]


def rank_keys(pattern: str, rank: int, world: int, **options: object) -> list[tuple[int, str]]:
    return rank_keys_of(webdataset(pattern, **options), rank, world)  # type: ignore[arg-type]


def rank_keys_of(source: object, rank: int, world: int) -> list[tuple[int, str]]:
    records = source.shard_records(rank, world, pad=False)  # type: ignore[attr-defined]
    assert records is not None
    return [(at, key(r)) for at, r in records]


# -- 1: a cut inside a member's padding ----------------------------------------------------


def test_a_cut_in_the_last_members_padding_is_a_truncated_shard(tmp_path: Path) -> None:
    raw = tar_bytes(["a", "b", "c", "d"])
    # d.cls: header at 3072, its one byte at 3584, padding to 4096: cut after 100 bytes
    cut = raw[: 3 * 1024 + 512 + 100]
    assert cut[3584:] == b"1" + bytes(99) and len(raw) > 4096  # d's byte kept, padding cut
    path = tmp_path / "s-0.tar"
    path.write_bytes(cut)
    index = _walk_index(_Archive(str(path)))
    assert isinstance(index.error, FormatError) and "cut short" in str(index.error)
    unsharded = [key(r) for r in webdataset(str(path), index=False).iterate()]
    assert unsharded[:2] == ["a", "b"] and unsharded[2].endswith(":<unreadable>")
    dealt = sorted(p for rank in range(2) for p in rank_keys(str(path), rank, 2, index=False))
    assert dealt == [(0, "a"), (1, "b")]  # 3 // 2 each, as a round robin of the stream


# -- 5: gzip bytes in a shard named .tar ---------------------------------------------------


@pytest.mark.parametrize("compress", ["gzip", "bz2", "lzma"])
def test_compressed_bytes_named_tar_are_dealt_round_robin(tmp_path: Path, compress: str) -> None:
    import importlib

    module = importlib.import_module(compress)
    for i in range(2):
        plain = tar_bytes([f"s{i}k{j}" for j in range(3)], labels=[3 * i + j for j in range(3)])
        (tmp_path / f"s-{i}.tar").write_bytes(module.compress(plain))  # the name says plain
    pattern = str(tmp_path / "s-{0..1}.tar")
    assert [key(r) for r in webdataset(pattern)] == [f"s{i}k{j}" for i in (0, 1) for j in range(3)]
    # a header walk by offsets would read compressed bytes as headers: no dealing by runs
    assert webdataset(pattern, index=False).shard_records(0, 2, pad=False) is None
    assert loader_labels(webdataset(pattern), 0, 2) == [0, 2, 4]
    assert loader_labels(webdataset(pattern), 1, 2) == [1, 3, 5]


# -- 3: a failure during the header walk ---------------------------------------------------


def test_a_shard_missing_for_one_pass_is_walked_again_the_next(tmp_path: Path) -> None:
    for i in range(2):
        (tmp_path / f"s-{i}.tar").write_bytes(tar_bytes([f"s{i}k{j}" for j in range(3)]))
    pattern = str(tmp_path / "s-{0..1}.tar")
    source = webdataset(pattern, index=False)
    (tmp_path / "s-1.tar").rename(tmp_path / "hidden")  # transient: a pass sees it missing
    first = rank_keys_of(source, 1, 2)
    assert first[0] == (2, "s0k2") and first[1][0] == 3 and first[1][1].endswith("<unreadable>")
    (tmp_path / "hidden").rename(tmp_path / "s-1.tar")
    expected = [(3, "s1k0"), (4, "s1k1"), (5, "s1k2")]
    assert rank_keys_of(source.at_epoch(2), 1, 2) == expected
    assert rank_keys_of(source, 1, 2) == expected
    assert rank_keys(pattern, 1, 2, index=False) == expected  # a fresh source agrees


# -- 6: a chain of pax headers -------------------------------------------------------------


def header(name: bytes, size: int, kind: bytes) -> bytes:
    """One ustar header block with a valid checksum."""
    b = bytearray(512)
    b[: len(name)] = name
    b[100:108], b[108:116], b[116:124] = b"0000644\0", b"0000000\0", b"0000000\0"
    b[124:136], b[136:148] = b"%011o\0" % size, b"00000000000\0"
    b[156:157], b[257:263], b[263:265] = kind, b"ustar\0", b"00"
    b[148:156] = b" " * 8
    b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


def pax_chain(count: int, value_bytes: int, *, kind: bytes = b"x", member: bytes = b"a") -> bytes:
    """``count`` pax headers in a row, each with its own key (so none replaces another),
    then one member ``a.cls``: tar keeps every record until that member."""
    parts = []
    for i in range(count):
        body = b"k%07d=" % i + b"v" * value_bytes + b"\n"
        n = len(body) + len(b"%d " % (len(body) + 6))
        record = b"%d " % n + body
        assert len(record) == n
        parts.append(header(b"pax", n, kind) + record + bytes(-n % 512))
    member_header = header(member + b".cls", 1, b"0")
    return b"".join(parts) + member_header + b"1" + bytes(511) + bytes(1024)


@pytest.mark.parametrize("kind", [b"x", b"g"])
def test_a_chain_of_pax_headers_is_bounded_in_all(tmp_path: Path, kind: bytes) -> None:
    path = tmp_path / "s.tar"
    path.write_bytes(pax_chain(16, 8000, kind=kind))  # 16 headers of 8 KB: 128 KB in all
    with tarfile.open(path) as oracle:  # tarfile reads it: one member, many pax records
        assert oracle.getnames() == ["a.cls"]
    with limits.scoped(max_header_bytes=64 * 1024):  # each header alone is well under
        with pytest.raises(LimitError, match="max_header_bytes"):
            list(webdataset(str(path)))
        assert isinstance(_walk_index(_Archive(str(path))).error, LimitError)
        path.write_bytes(pax_chain(4, 8000, kind=kind))  # 32 KB in all: read as before
        assert [key(r) for r in webdataset(str(path))] == ["a"]


def test_extended_headers_count_per_member(tmp_path: Path) -> None:
    chains = [pax_chain(4, 8000, member=m)[:-1024] for m in (b"a", b"b", b"c")]
    path = tmp_path / "s.tar"
    path.write_bytes(b"".join(chains) + bytes(1024))  # 32 KB of pax per member, 96 KB in all
    with limits.scoped(max_header_bytes=64 * 1024):
        assert [key(r) for r in webdataset(str(path))] == ["a", "b", "c"]


# -- 4: a shard index applied to another shard of the same file name ----------------------


def test_an_index_found_beside_one_shard_is_not_applied_to_its_namesake(tmp_path: Path) -> None:
    for sub, keys in (("a", ["a0", "a1"]), ("b", ["b0", "b1", "b2", "b3"])):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "shard.tar").write_bytes(tar_bytes(keys))
    dataio.write_webdataset_index(str(tmp_path / "a" / "shard.tar"))  # lists a/shard.tar only
    assert (tmp_path / "a" / "shardindex.json").exists()
    pattern = str(tmp_path / "{a,b}" / "shard.tar")
    unsharded = [key(r) for r in webdataset(pattern)]
    assert unsharded == ["a0", "a1", "b0", "b1", "b2", "b3"]
    dealt = [p for rank in range(2) for p in rank_keys(pattern, rank, 2)]
    assert dealt == list(enumerate(unsharded))  # b/shard.tar holds 4 samples, not a's 2
    # named explicitly, the index must list b/shard.tar where it is
    with pytest.raises(PlanError, match="does not list 1 of the 2 shards"):
        rank_keys(pattern, 0, 2, index=str(tmp_path / "a" / "shardindex.json"))


def test_an_index_copied_away_from_its_shards_is_matched_by_name(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    for i in range(2):
        keys = [f"s{i}k{j}" for j in range(i + 2)]
        (tmp_path / "data" / f"s-{i}.tar").write_bytes(tar_bytes(keys))
    written = dataio.write_webdataset_index(
        str(tmp_path / "data" / "s-{0..1}.tar"), str(tmp_path / "elsewhere" / "i.json")
    )
    moved = tmp_path / "moved"
    (tmp_path / "data").rename(moved)  # the index's absolute-or-relative URLs now miss
    pattern = str(moved / "s-{0..1}.tar")
    unsharded = [key(r) for r in webdataset(pattern)]
    dealt = [p for rank in range(2) for p in rank_keys(pattern, rank, 2, index=written)]
    assert dealt == list(enumerate(unsharded))[:4]


# -- 7: whole-object reads of the index paths fill the byte cache --------------------------


def use_cache(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(path))
    config.reset()


def shard_gets(server: Any, since: int) -> list[str]:
    return [p for m, p, _ in server.requests[since:] if m == "GET" and p.endswith(".tar")]


def test_whole_shard_reads_of_the_index_paths_are_cached(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        for i in range(2):
            http_server.objects[f"/objects/t-{i}.tar"] = tar_bytes([f"t{i}k{j}" for j in range(3)])
        pattern = http_server.url + "/objects/t-{0..1}.tar"
        shards = [http_server.url + f"/objects/t-{i}.tar" for i in range(2)]
        # writing an index streams each remote shard whole: the walk stops at the
        # end-of-archive block, the read goes on to the object's end and is saved
        use_cache(monkeypatch, tmp_path / "cache-1")
        index = dataio.write_webdataset_index(pattern, str(tmp_path / "i.json"))
        since = len(http_server.requests)
        assert [dataio.read(s) for s in shards] == [
            http_server.objects[f"/objects/t-{i}.tar"] for i in range(2)
        ]
        assert shard_gets(http_server, since) == []
        # an indexed sharded pass reads each rank's whole shard once: saved as well
        use_cache(monkeypatch, tmp_path / "cache-2")
        runs = [rank_keys(pattern, rank, 2, index=index) for rank in range(2)]
        assert runs == [[(j, f"t0k{j}") for j in range(3)], [(3 + j, f"t1k{j}") for j in range(3)]]
        since = len(http_server.requests)
        assert [dataio.read(s) for s in shards] == [
            http_server.objects[f"/objects/t-{i}.tar"] for i in range(2)
        ]
        assert shard_gets(http_server, since) == []
    finally:
        config.reset()


# -- 2: remote compressed tars -------------------------------------------------------------


@pytest.mark.parametrize(
    ("compress", "suffix"),
    [("gzip", ".tar.gz"), ("bz2", ".tar.bz2"), ("lzma", ".tar.xz"), ("gzip", ".tar")],
)
def test_remote_compressed_tars_are_read(
    http_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compress: str, suffix: str
) -> None:
    import importlib

    module = importlib.import_module(compress)
    try:
        use_cache(monkeypatch, tmp_path / "cache")
        for i in range(2):
            plain = tar_bytes([f"s{i}k{j}" for j in range(3)], labels=[3 * i + j for j in range(3)])
            http_server.objects[f"/objects/s-{i}{suffix}"] = module.compress(plain)
        pattern = http_server.url + "/objects/s-{0..1}" + suffix
        expected = [f"s{i}k{j}" for i in (0, 1) for j in range(3)]
        assert [key(r) for r in webdataset(pattern)] == expected
        assert webdataset(pattern).shard_records(0, 2, pad=False) is None  # round robin
        assert loader_labels(webdataset(pattern), 1, 2) == [1, 3, 5]
        since = len(http_server.requests)  # each whole read was saved to the byte cache
        assert [key(r) for r in webdataset(pattern)] == expected
        assert shard_gets(http_server, since) == []
    finally:
        config.reset()


def test_a_cut_remote_compressed_tar_is_a_format_error(http_server: Any) -> None:
    import gzip

    whole = gzip.compress(tar_bytes(["a", "b", "c"]))
    http_server.objects["/objects/cut.tar.gz"] = whole[: len(whole) // 2]  # gzip stream cut
    with pytest.raises(FormatError, match="corrupt or truncated"):
        list(webdataset(http_server.url + "/objects/cut.tar.gz"))
