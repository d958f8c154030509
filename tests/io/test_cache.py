"""``DATAIO_CACHE_DIR``: whole remote objects served from a local cache, partitioned by
credential and endpoint identity, bypassed for dynamic credentials, self-repairing."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers.object_servers import RangeServer
from helpers.stream_server import Script, StreamServer

import dataio.io as dio
from dataio.exceptions import DataioError, NotFoundError


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(root))
    return root


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def gets(server: RangeServer) -> int:
    return sum(1 for method, *_ in server.requests if method == "GET")


def test_a_hit_makes_no_request_for_any_whole_object_read(
    cache_dir: Path, http: str, http_server: RangeServer
) -> None:
    record = {"label": 3, "tags": ["a", "b"]}
    data = json.dumps(record).encode()
    http_server.objects["/objects/r.json"] = data
    uri = f"{http}/r.json"
    assert dio.read(uri) == data
    assert gets(http_server) == 1 and len(entries(cache_dir)) == 1
    assert dio.read_bytes(uri) == data
    assert dio.reader(uri).read_all() == data
    assert bytes(dio.reader(uri).read_buffer()) == data
    buffer = bytearray(100)
    assert dio.fetch_into(uri, buffer) == len(data) and buffer[: len(data)] == data
    assert dio.read(uri, format="json") == record
    assert gets(http_server) == 1
    http_server.kill()
    assert dio.read(uri) == data  # the server is gone: only the cache can answer


def test_fetch_into_fills_the_cache_too(
    cache_dir: Path, http: str, http_server: RangeServer
) -> None:
    values = np.arange(10_000, dtype=np.int64)
    http_server.objects["/objects/v.bin"] = values.tobytes()
    buffer = np.zeros(20_000, dtype=np.int64)
    assert dio.fetch_into(f"{http}/v.bin", buffer) == values.nbytes
    np.testing.assert_array_equal(buffer[:10_000], values)
    assert dio.read(f"{http}/v.bin") == values.tobytes()
    assert gets(http_server) == 1


@pytest.fixture
def second_server() -> Iterator[StreamServer]:
    server = StreamServer()
    try:
        yield server
    finally:
        server.stop()


def test_entries_are_partitioned_by_endpoint_and_credentials(
    cache_dir: Path, scripted_s3: StreamServer, second_server: StreamServer
) -> None:
    first, second = scripted_s3, second_server
    first.routes["/bucket/obj"] = Script([b"from the first server"], chunked=False)
    second.routes["/bucket/obj"] = Script([b"from the second server"], chunked=False)
    uri = "s3://bucket/obj"
    assert dio.read(uri) == b"from the first server"
    dio.configure_endpoint("s3", second.url, region="us-east-1")
    assert dio.read(uri) == b"from the second server"  # same URI, other endpoint: no hit
    dio.configure_endpoint("s3", first.url, region="us-east-1")
    assert dio.read(uri) == b"from the first server"
    assert first.gets("/bucket/obj") == 1 and second.gets("/bucket/obj") == 1
    for key in ("AKIAFIRSTKEY", "AKIASECONDKEY", "AKIAFIRSTKEY"):
        dio.configure_credentials("s3", access_key_id=key, secret_access_key="s3cr3t-" + key)
        assert dio.read(uri) == b"from the first server"
    assert first.gets("/bucket/obj") == 3  # one more per key pair, none for the repeat
    assert len(entries(cache_dir)) == 4
    assert len({p.parent.parent for p in entries(cache_dir)}) == 4  # four partitions


def test_nothing_secret_or_identifying_is_written_in_clear(
    cache_dir: Path, scripted_s3: StreamServer
) -> None:
    scripted_s3.routes["/bucket/private/report.csv"] = Script([b"a,b\n1,2\n"], chunked=False)
    dio.configure_credentials(
        "s3", access_key_id="AKIAVISIBLEKEYID", secret_access_key="never-on-disk-secret"
    )
    assert dio.read("s3://bucket/private/report.csv") == b"a,b\n1,2\n"
    (entry,) = entries(cache_dir)
    written = str(entry).encode() + entry.read_bytes()
    for text in ("AKIAVISIBLEKEYID", "never-on-disk-secret", "private", "report"):
        assert text.encode() not in written


def test_dynamic_credentials_bypass_the_cache(
    cache_dir: Path, scripted_s3: StreamServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFROMTHEENVIRONMENT")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret-value")
    scripted_s3.routes["/bucket/obj"] = Script([b"payload"], chunked=False)
    dio.configure_credentials("s3", method="default")
    for _ in range(2):
        assert dio.read("s3://bucket/obj") == b"payload"
        assert dio.reader("s3://bucket/obj").read_all() == b"payload"
    assert scripted_s3.gets("/bucket/obj") == 4
    assert entries(cache_dir) == []


@pytest.mark.parametrize("damage", ["flip a byte", "truncate", "empty"])
def test_a_damaged_entry_is_fetched_again(
    cache_dir: Path, http: str, http_server: RangeServer, damage: str
) -> None:
    data = os.urandom(50_000)
    http_server.objects["/objects/d.bin"] = data
    uri = f"{http}/d.bin"
    assert dio.read(uri) == data
    (entry,) = entries(cache_dir)
    raw = bytearray(entry.read_bytes())
    if damage == "flip a byte":
        raw[1234] ^= 0xFF
    elif damage == "truncate":
        del raw[len(raw) // 2 :]
    else:
        raw.clear()
    entry.write_bytes(bytes(raw))
    assert dio.read(uri) == data
    assert gets(http_server) == 2
    buffer = bytearray(len(data))
    assert dio.fetch_into(uri, buffer) == len(data) and buffer == data  # repaired: a hit
    assert gets(http_server) == 2


def test_writes_and_deletes_through_dataio_drop_the_entry(
    cache_dir: Path, http: str, http_server: RangeServer
) -> None:
    uri = f"{http}/w.bin"
    dio.write(uri, b"version 1")
    assert dio.read(uri) == b"version 1"
    dio.write(uri, b"version 2")
    assert dio.read(uri) == b"version 2"
    with dio.writer(uri) as w:
        w.write(b"version 3")
    assert dio.read(uri) == b"version 3"
    assert dio.read(uri) == b"version 3"
    assert gets(http_server) == 3
    dio.delete(uri)
    assert entries(cache_dir) == []
    with pytest.raises(NotFoundError):
        dio.read(uri)


def test_local_files_are_never_cached(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "local.bin"
    path.write_bytes(b"local")
    assert dio.read(path) == b"local"
    assert dio.read_bytes(path.as_uri()) == b"local"
    assert dio.reader(path).read_all() == b"local"
    assert entries(cache_dir) == []


def test_concurrent_readers_of_one_object_agree(
    cache_dir: Path, http: str, http_server: RangeServer
) -> None:
    data = os.urandom(300_000)
    http_server.objects["/objects/c.bin"] = data
    start = threading.Barrier(8)

    def read(_: int) -> bytes:
        start.wait(5)
        return dio.read(f"{http}/c.bin")

    with ThreadPoolExecutor(8) as pool:
        assert all(got == data for got in pool.map(read, range(8)))
    assert len(entries(cache_dir)) == 1  # writers renamed over one name: no leftovers
    before = gets(http_server)
    assert dio.read(f"{http}/c.bin") == data
    assert gets(http_server) == before


def test_without_the_variable_nothing_is_cached(
    tmp_path: Path, http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DATAIO_CACHE_DIR", raising=False)
    http_server.objects["/objects/n.bin"] = b"uncached"
    assert dio.read(f"{http}/n.bin") == dio.read(f"{http}/n.bin") == b"uncached"
    assert gets(http_server) == 2


def test_a_bound_keeps_the_most_recently_used_entries(
    cache_dir: Path, http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 10_000
    for name in "abcde":
        http_server.objects[f"/objects/{name}.bin"] = name.encode() * size
    # room for three entries (each object plus a 20-byte footer), not four
    monkeypatch.setenv("DATAIO_CACHE_MAX_GIB", str(3.5 * (size + 20) / 2**30))
    for name in "abc":
        dio.read(f"{http}/{name}.bin")
    assert len(entries(cache_dir)) == 3 and gets(http_server) == 3
    assert dio.read(f"{http}/a.bin") == b"a" * size  # a hit: a is now the most recent
    assert gets(http_server) == 3
    dio.read(f"{http}/d.bin")  # over the bound: trimmed to 90% of it, oldest first
    sizes = [p.stat().st_size for p in entries(cache_dir)]
    assert sum(sizes) <= 3.5 * (size + 20) * 0.9
    before = gets(http_server)
    for name in "ad":  # the two most recent survived
        assert dio.read(f"{http}/{name}.bin") == name.encode() * size
    assert gets(http_server) == before
    assert dio.read(f"{http}/b.bin") == b"b" * size  # b was least recently used
    assert gets(http_server) == before + 1


def test_an_object_larger_than_the_bound_is_not_cached(
    cache_dir: Path, http: str, http_server: RangeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    http_server.objects["/objects/big.bin"] = bytes(50_000)
    http_server.objects["/objects/small.bin"] = bytes(100)
    monkeypatch.setenv("DATAIO_CACHE_MAX_GIB", str(10_000 / 2**30))
    assert dio.read(f"{http}/big.bin") == bytes(50_000)
    assert dio.read(f"{http}/small.bin") == bytes(100)
    assert len(entries(cache_dir)) == 1
    buffer = bytearray(60_000)
    assert dio.fetch_into(f"{http}/big.bin", buffer) == 50_000
    assert len(entries(cache_dir)) == 1 and gets(http_server) == 3


@pytest.mark.parametrize("value", ["lots", "0", "-1", "inf"])
def test_a_malformed_bound_is_a_clear_error(
    cache_dir: Path, http: str, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("DATAIO_CACHE_MAX_GIB", value)
    with pytest.raises(DataioError, match="DATAIO_CACHE_MAX_GIB must be a positive number"):
        dio.read(f"{http}/anything.bin")


def test_trim_leaves_partial_writes_and_fitting_caches_alone(tmp_path: Path) -> None:
    from dataio.io.cache import trim

    root = tmp_path / "objects-v1" / "p" / "ab"
    root.mkdir(parents=True)
    (root / ".partial-x").write_bytes(bytes(1000))
    (root / "old").write_bytes(bytes(400))
    os.utime(root / "old", (1, 1))
    (root / "new").write_bytes(bytes(400))
    assert trim(tmp_path / "objects-v1", 1000) == 0
    assert trim(tmp_path / "objects-v1", 700) == 400
    assert sorted(p.name for p in root.iterdir()) == [".partial-x", "new"]
