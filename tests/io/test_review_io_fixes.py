"""Remote reads that must name what really went wrong: an object replaced between the
``head`` that sized a read and its first GET (a change, not a damaged file or a silent
short read), a network failure under zipfile (a transport error, not a corrupt
archive), an ``hf://`` file too large for a limit or a buffer (refused from the Hub's
size before it is downloaded, naming the URI), and a local cache entry of another
version (a miss, replaced, not a permanent error).

The servers are tests/helpers' (moto, RangeServer, Azurite, HubServer); pyarrow,
zipfile, numpy and huggingface_hub are the oracles for the bytes.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import huggingface_hub.constants  # noqa: F401  (hf_fixtures reads it; tests hide the package)
import numpy as np
import obstore
import pyarrow as pa
import pyarrow.ipc
import pytest
from helpers import hf_fixtures
from helpers.cloud_servers import HubServer
from helpers.object_servers import RangeServer

import dataio
import dataio.io as dio
from dataio import limits
from dataio.exceptions import FormatError, LimitError, TransportError
from dataio.formats._arrow import read_remote_ipc
from dataio.io import verbs
from dataio.io.config import store_for
from dataio.io.ranged import RangedFile
from dataio.io.uri import parse

mode = hf_fixtures.mode
no_telemetry = hf_fixtures.no_telemetry
loopback_only = hf_fixtures.loopback_only

CHANGED = "changed while it was being read"


def _feather(rows: int) -> bytes:
    table = pa.table({"a": np.arange(rows)})
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=1000)
    return sink.getvalue()


def _zip(members: int, tag: str) -> bytes:
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED) as z:
        for i in range(members):
            z.writestr(f"{i:04d}.cls", f"{tag}{i}")
            z.writestr(f"{i:04d}.bin", bytes([i % 256]) * 3000)
    return sink.getvalue()


def _replace_after_head(monkeypatch: pytest.MonkeyPatch, uri: str, data: bytes) -> None:
    """Another writer replaces ``uri`` by ``data`` right after its first ``head``."""
    real, done = verbs.head, []

    def head(target: str, *args: object, **kwargs: object) -> dict[str, object]:
        out = real(target, *args, **kwargs)  # type: ignore[arg-type]
        if not done and str(target) == uri:
            done.append(1)
            loc = parse(uri)  # past dataio, as another tool would (no cache drop)
            obstore.put(store_for(loc), loc.key, data)
        return out

    monkeypatch.setattr(verbs, "head", head)


# --- an object replaced between the head and the first GET ---------------------------


def test_a_ranged_file_refuses_an_object_replaced_after_its_head(s3: str) -> None:
    """Before: the first GET pinned the new version but kept the head's size, and
    ``read()`` returned 1000 bytes of the 5000-byte new version without error."""
    uri = s3 + "/obj.bin"
    dio.write(uri, b"A" * 1000)
    with RangedFile(uri) as f:  # the head: 1000 bytes
        dio.write(uri, b"B" * 5000)
        with pytest.raises(TransportError, match=CHANGED) as info:
            f.read()
    assert "1000 bytes" in str(info.value) and "5000 bytes" in str(info.value)
    assert "ETag" not in str(info.value)  # the size changed: no ETag named twice


def test_remote_feather_replaced_after_its_head_is_a_change_not_bad_magic(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: FormatError "no ARROW1 magic" (the new version's bytes at the old end)."""
    uri = s3 + "/t.arrow"
    dio.write(uri, _feather(20_000))
    _replace_after_head(monkeypatch, uri, _feather(50_000))
    with pytest.raises(TransportError, match=CHANGED):
        read_remote_ipc(uri, "read_feather", columns=["a"])
    # read again, it is the new version, whole
    assert read_remote_ipc(uri, "read_feather", columns=["a"]).num_rows == 50_000


def test_a_remote_zip_replaced_after_its_head_names_the_sizes(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = s3 + "/a.zip"
    old, new = _zip(10, "old"), _zip(30, "new")
    dio.write(uri, old)
    _replace_after_head(monkeypatch, uri, new)
    with pytest.raises(TransportError, match=CHANGED) as info:
        list(dataio.archive(uri))
    text = str(info.value)
    assert f"{len(old)} bytes" in text and f"{len(new)} bytes" in text, text
    assert "ETag" not in text, text  # before: the same ETag, named twice
    assert [s["cls"] for s in dataio.archive(uri)][:2] == [b"new0", b"new1"]


def test_a_parquet_tail_on_azure_refuses_an_object_replaced_after_its_head(
    az: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azure has no suffix GET: the tail is a HEAD, then a range of the object. Before,
    the range was checked against an empty pin, so a rewrite between the two gave
    the new version's bytes cut at the old size."""
    from dataio.engine import remote_files

    uri = f"{az}/t.bin"
    dio.write(uri, b"A" * 1000)
    real, done = obstore.head, []

    def head(store: object, key: str, *args: object, **kwargs: object) -> object:
        out = real(store, key, *args, **kwargs)  # type: ignore[arg-type]
        if not done:
            done.append(1)
            dio.write(uri, b"B" * 3000)
        return out

    monkeypatch.setattr(obstore, "head", head)
    with pytest.raises(TransportError, match=CHANGED):
        remote_files._tail(uri)


# --- a network failure under zipfile -----------------------------------------------


def _store_down_after_head(monkeypatch: pytest.MonkeyPatch, server: RangeServer) -> None:
    real = verbs.head

    def head(target: str, *args: object, **kwargs: object) -> dict[str, object]:
        out = real(target, *args, **kwargs)  # type: ignore[arg-type]
        server.fail_next = 1000  # 503 past obstore's retries from here on
        return out

    monkeypatch.setattr(verbs, "head", head)


def test_a_network_failure_reading_a_remote_zip_is_not_a_corrupt_archive(
    http_server: RangeServer, http: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """zipfile turns the fetch's TransportError (an OSError) into BadZipFile; before,
    that became FormatError "corrupt or truncated"."""
    http_server.objects["/objects/a.zip"] = _zip(5, "x")
    _store_down_after_head(monkeypatch, http_server)
    with pytest.raises(TransportError, match="503") as info:
        list(dataio.archive(f"{http}/a.zip"))
    assert not isinstance(info.value, FormatError)


def test_a_network_failure_reading_a_remote_npz_is_not_a_corrupt_archive(
    http_server: RangeServer, http: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = io.BytesIO()
    np.savez(sink, a=np.arange(10), b=np.ones(3))
    http_server.objects["/objects/a.npz"] = sink.getvalue()
    _store_down_after_head(monkeypatch, http_server)
    with pytest.raises(TransportError, match="503") as info:
        dataio.read_npz(f"{http}/a.npz", keys=["a"])
    assert not isinstance(info.value, FormatError)


# --- hf:// whole reads: limits before the download ----------------------------------

BIG = bytes(range(256)) * 400  # 100 KiB, over HubServer's LFS threshold: the CDN serves it


def _cached_sizes(tmp_path: Path) -> list[int]:
    return [p.stat().st_size for p in (tmp_path / "hf-home").rglob("big.bin")]


def test_an_hf_read_over_the_limit_is_refused_before_the_download(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    """Before (with huggingface_hub): the file was downloaded into the shared cache,
    then refused, the LimitError naming the cache path."""
    hub.repo("models", "org/m").put("big.bin", BIG)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with limits.scoped(max_decoded_bytes=10_000), pytest.raises(LimitError) as info:
        dio.read("hf://org/m/big.bin")
    assert "hf://org/m/big.bin" in str(info.value)
    assert _cached_sizes(tmp_path) == []
    assert dio.read("hf://org/m/big.bin") == BIG  # under the default limit: read


def test_an_hf_fetch_into_a_small_buffer_names_the_uri(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    hub.repo("models", "org/m").put("big.bin", BIG)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    with pytest.raises(dataio.DataioError, match="102400 bytes") as info:
        dio.fetch_into("hf://org/m/big.bin", bytearray(1000))
    assert "hf://org/m/big.bin" in str(info.value)
    assert _cached_sizes(tmp_path) == []
    buffer = bytearray(len(BIG))
    assert dio.fetch_into("hf://org/m/big.bin", buffer) == len(BIG)
    assert bytes(buffer) == BIG


@pytest.mark.parametrize("mode", ["huggingface_hub"], indirect=True)
def test_an_hf_file_in_the_shared_cache_is_checked_and_served_from_there(
    hub: HubServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    """A cached file over the limit names the URI too, not the cache path."""
    hub.repo("models", "org/m").put("big.bin", BIG)
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    assert dio.read("hf://org/m/big.bin") == BIG
    assert _cached_sizes(tmp_path) == [len(BIG)]
    gets = len([r for r in hub.cdn.requests if r[0] == "GET"])
    assert dio.read("hf://org/m/big.bin") == BIG
    assert len([r for r in hub.cdn.requests if r[0] == "GET"]) == gets  # the cache's
    with limits.scoped(max_decoded_bytes=10_000), pytest.raises(LimitError) as info:
        dio.read("hf://org/m/big.bin")
    assert "hf://org/m/big.bin" in str(info.value) and "hf-home" not in str(info.value)


# --- a local cache entry of another version ----------------------------------------


def test_a_cache_entry_of_another_size_is_a_miss_and_is_replaced(
    s3: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: read_whole took the head's size (v2) and the cache's body (v1), and failed
    with "ended at byte" on every later read, never clearing."""
    monkeypatch.setenv("DATAIO_CACHE_DIR", str(tmp_path / "cache"))
    uri = s3 + "/t.arrow"
    dio.write(uri, _feather(1000))
    assert read_remote_ipc(uri, "read_feather").num_rows == 1000  # cached whole
    loc = parse(uri)
    new = _feather(3000)
    obstore.put(store_for(loc), loc.key, new)  # another writer: dataio's cache not told
    for _ in range(2):
        assert read_remote_ipc(uri, "read_feather").num_rows == 3000
    assert dio.read(uri) == new  # the entry now holds the new version
    with RangedFile(uri) as f:
        assert f._cached is not None  # and serves ranges
        assert f.read_whole() == new
