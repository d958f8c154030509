"""A remote zip archive as a record source: read by ranged requests (its central
directory at the end, then the members read), never downloaded whole, of one version of
the object, under every refusal and limit of a local zip.

Oracles: the same zip read from a local file (the samples and their order), zipfile's
own directory (where each member lies), the range server's log of ranged GETs (the
bytes fetched), and zips made hostile here (the patched fields say what is hostile).
"""

from __future__ import annotations

import io
import itertools
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.object_servers import RangeServer

import dataio
from dataio.exceptions import FormatError, LimitError, TransportError
from dataio.sources import archives

CHANGED = "changed while it was being read"
FUZZ = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "zip"


def zip_bytes(samples: int = 24, body: int = 60_000, *, version: int = 0) -> bytes:
    """``samples`` samples: an incompressible ``bin`` of about ``body`` bytes (stored)
    and a ``cls``, stored or deflated by turns; another ``version``: the same sizes."""
    rng = np.random.default_rng(7 + version)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for n in range(samples):
            method = zipfile.ZIP_STORED if n % 2 else zipfile.ZIP_DEFLATED
            data = rng.integers(0, 256, body + 37 * n, dtype=np.uint8).tobytes()
            for name, value, kind in (
                ("bin", data, zipfile.ZIP_STORED),
                ("cls", b"%06d" % n, method),
            ):
                info = zipfile.ZipInfo(f"k{n:04d}.{name}", date_time=(2020, 1, 1, 0, 0, 0))
                info.compress_type = kind  # a fixed date: the same bytes every time
                z.writestr(info, value)
    return buf.getvalue()


def plain(samples: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "__url__"} for s in samples]


def fetched(server: RangeServer, path: str, since: int = 0) -> list[int]:
    """The bytes each GET of ``path`` asked for (a whole object when not ranged)."""
    size = len(server.objects[path])
    sizes = []
    for method, at, headers in server.requests[since:]:
        if method != "GET" or at != path:
            continue
        spec = {k.lower(): v for k, v in headers.items()}.get("range")
        if spec is None:
            sizes.append(size)
            continue
        first, _, last = spec.removeprefix("bytes=").partition("-")
        end = min(int(last) + 1, size) if last else size
        sizes.append(end - int(first))
    return sizes


@pytest.mark.parametrize("backend", ["s3", "gs", "az", "http"])
def test_a_remote_zip_reads_as_the_local_one(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    data = zip_bytes()
    local = tmp_path / "all.zip"
    local.write_bytes(data)
    uri = f"{request.getfixturevalue(backend)}/all.zip"
    dataio.write(uri, data)
    expected = plain(dataio.archive(local))
    assert len(expected) == 24 and expected[3]["cls"] == b"000003"
    with zipfile.ZipFile(local) as z:  # zipfile, the oracle
        assert expected[5]["bin"] == z.read("k0005.bin")
    assert plain(dataio.archive(uri)) == expected
    # a webdataset of zips reads them the same way
    assert plain(dataio.webdataset(uri)) == expected


def test_a_subset_fetches_a_part_of_the_zip(http_server: RangeServer, tmp_path: Path) -> None:
    """The first samples: the directory (at the end) and the first members' read-ahead
    only; a whole pass fetches each byte about once, in a few requests of growing size."""
    data = zip_bytes(samples=40, body=200_000)  # ~8 MB
    path = "/objects/big.zip"
    http_server.objects[path] = data
    uri = http_server.url + path
    (tmp_path / "big.zip").write_bytes(data)
    expected = plain(dataio.archive(tmp_path / "big.zip"))
    since = len(http_server.requests)
    source = iter(dataio.archive(uri))
    assert plain(itertools.islice(source, 3)) == expected[:3]
    del source  # closed: no more requests
    subset = fetched(http_server, path, since)
    assert 0 < sum(subset) < len(data) // 4
    since = len(http_server.requests)
    assert plain(dataio.archive(uri)) == expected
    whole = fetched(http_server, path, since)
    assert len(data) * 0.95 < sum(whole) < len(data) * 1.2
    assert max(whole) <= archives._ZIP_READ_AHEAD_MAX
    # the read-ahead grows along a pass in file order: a few requests, not one a member
    assert len(whole) <= 8


def test_a_sharded_rank_reads_its_samples(http_server: RangeServer, tmp_path: Path) -> None:
    data = zip_bytes(samples=12)
    http_server.objects["/objects/r.zip"] = data
    (tmp_path / "r.zip").write_bytes(data)
    plan = dataio.pipeline(dataio.slot("cls").passthrough(), dataio.batch(4))
    for rank in range(2):
        remote = plan.bind(dataio.archive(http_server.url + "/objects/r.zip"))
        local = plan.bind(dataio.archive(tmp_path / "r.zip"))
        shard = {"id": rank, "of": 2}
        got = [bytes(v) for b in remote.run(shard=shard) for v in b["cls"]]
        assert got == [bytes(v) for b in local.run(shard=shard) for v in b["cls"]]
        assert got == [b"%06d" % n for n in range(rank, 12, 2)]


# -- one version -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["s3", "http", "http-no-if-match"])
def test_a_zip_overwritten_mid_read_is_a_transport_error(
    request: pytest.FixtureRequest, backend: str
) -> None:
    if backend == "http-no-if-match":
        request.getfixturevalue("http_server").if_match = False
    base = request.getfixturevalue(backend.removesuffix("-no-if-match"))
    uri = f"{base}/moving.zip"
    first, second = zip_bytes(body=100_000), zip_bytes(body=100_000, version=1)
    assert len(first) == len(second) and first != second
    dataio.write(uri, first)
    source = iter(dataio.archive(uri))
    got = [next(source)]  # the directory and the first read-ahead block are read
    dataio.write(uri, second)
    with pytest.raises(TransportError, match=CHANGED) as caught:
        got.extend(source)
    assert repr(uri) in str(caught.value)
    with zipfile.ZipFile(io.BytesIO(first)) as z:  # what came is the first version's
        assert all(s["bin"] == z.read(f"{s['__key__']}.bin") for s in got)
    assert len(plain(dataio.archive(uri))) == 24  # read again: the new version, whole


def test_the_byte_cache_serves_a_second_pass(
    http_server: RangeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    data = zip_bytes(samples=6)
    http_server.objects["/objects/c.zip"] = data
    uri = http_server.url + "/objects/c.zip"
    (tmp_path / "c.zip").write_bytes(data)
    expected = plain(dataio.archive(tmp_path / "c.zip"))
    assert plain(dataio.archive(uri)) == expected
    since = len(http_server.requests)
    assert plain(dataio.archive(uri)) == expected
    assert http_server.requests[since:] == []  # no head, no range


# -- hostile zips, remote as local --------------------------------------------------------------


def _eocd(data: bytes) -> int:
    return data.rindex(b"PK\x05\x06")


def directory_offset_past_the_end() -> bytes:
    """The end record's central-directory offset (bytes 16-19) points past the file."""
    data = bytearray(zip_bytes(samples=2, body=1000))
    at = _eocd(data)
    struct.pack_into("<I", data, at + 16, len(data) + 4096)
    return bytes(data)


def directory_larger_than_the_file() -> bytes:
    """The end record's central-directory size (bytes 12-15) exceeds the whole file."""
    data = bytearray(zip_bytes(samples=2, body=1000))
    struct.pack_into("<I", data, _eocd(data) + 12, len(data) * 4)
    return bytes(data)


def member_header_past_the_end() -> bytes:
    """The first directory entry's local-header offset (bytes 42-45) points past the file."""
    data = bytearray(zip_bytes(samples=2, body=1000))
    entry = data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, entry + 42, len(data) + 100)
    return bytes(data)


HOSTILE = {
    "directory-offset-past-end": directory_offset_past_the_end,
    "directory-size-past-end": directory_larger_than_the_file,
    "member-header-past-end": member_header_past_the_end,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_offsets_are_format_errors(
    http_server: RangeServer, tmp_path: Path, name: str
) -> None:
    data = HOSTILE[name]()
    # the oracle: zipfile refuses it too (a negative seek, for an offset made negative)
    with pytest.raises((zipfile.BadZipFile, ValueError)), zipfile.ZipFile(io.BytesIO(data)) as z:
        [z.read(i) for i in z.infolist()]
    assert (FUZZ / name).read_bytes() == data  # kept as a fuzz regression input
    http_server.objects[f"/objects/{name}.zip"] = data
    local = tmp_path / f"{name}.zip"
    local.write_bytes(data)
    for uri in (str(local), f"{http_server.url}/objects/{name}.zip"):
        with pytest.raises(FormatError) as caught:
            list(dataio.archive(uri))
        assert repr(uri) in str(caught.value) or uri in str(caught.value)


def test_zip_limits_hold_remotely(http_server: RangeServer) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("z.bin", bytes(1 << 22))  # ~1000:1
    http_server.objects["/objects/bomb.zip"] = buf.getvalue()
    uri = http_server.url + "/objects/bomb.zip"
    lowered = dataio.limits.scoped(inflation_floor_bytes=1 << 20, max_inflation_ratio=100)
    with lowered, pytest.raises(LimitError, match="max_inflation_ratio"):
        list(dataio.archive(uri))
    with dataio.limits.scoped(max_member_bytes=1 << 15), pytest.raises(LimitError) as info:
        list(dataio.archive(uri))
    assert "z.bin" in str(info.value) and uri in str(info.value)
    (sample,) = dataio.archive(uri)  # honest under the defaults
    assert sample["bin"] == bytes(1 << 22)
