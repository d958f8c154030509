"""A file read by several ranged requests is read from one version of its object: an
overwrite between two ranges is a TransportError naming the URI, never bytes of two
versions mixed. On s3 (moto), gs (emulator), az (azurite) and http (RangeServer, with
and without If-Match support), for RangedFile, safetensors subsets, HDF5 and remote
Parquet scans. Oracles: the bytes written, safetensors, h5py and pyarrow.
"""

from __future__ import annotations

import io
import re

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import safetensors.numpy
from helpers.object_servers import RangeServer

import dataio
from dataio.exceptions import TransportError
from dataio.io.ranged import Pin, RangedFile

REMOTE = ("s3", "gs", "az", "http", "http-no-if-match")
CHANGED = "changed while it was being read"
SIZE = 3 << 20


@pytest.fixture(params=REMOTE)
def remote(request: pytest.FixtureRequest) -> str:
    """A base URI on each backend; ``http-no-if-match``: a web server that ignores
    If-Match, where only the ETag each answer carries tells a new version."""
    if request.param == "http-no-if-match":
        server: RangeServer = request.getfixturevalue("http_server")
        server.if_match = False
        return str(request.getfixturevalue("http"))
    return str(request.getfixturevalue(request.param))


def _versions(size: int = SIZE) -> tuple[bytes, bytes]:
    rng = np.random.default_rng(16)
    first = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    return first, bytes(255 - b for b in first[:1024]) + first[1024:]  # same size


def test_ranged_file_reads_one_version(remote: str) -> None:
    first, second = _versions()
    uri = f"{remote}/blob.bin"
    dataio.write(uri, first)
    with RangedFile(uri) as f:  # pinned by its head
        assert f.read(100) == first[:100]
        f.seek(SIZE // 2)
        assert f.read(1 << 20) == first[SIZE // 2 : SIZE // 2 + (1 << 20)]
        dataio.write(uri, second)  # overwritten mid-read
        with pytest.raises(TransportError, match=CHANGED) as caught:
            f.pread(SIZE - 4096, 4096)
        assert uri in str(caught.value)
    with RangedFile(uri) as f:  # opened again: the new version, whole
        assert f.read() == second


def test_a_file_opened_with_its_size_pins_its_first_answer(remote: str) -> None:
    first, second = _versions()
    uri = f"{remote}/sized.bin"
    dataio.write(uri, first)
    f = RangedFile(uri, size=SIZE)  # no head: the first range pins the version
    assert f.pread(10, 10) == first[10:20]
    assert f.pin.etag or f.pin.last_modified
    dataio.write(uri, second)
    with pytest.raises(TransportError, match=re.escape(uri) + ".*" + CHANGED):
        f.pread(1 << 20, 10)
    # a second file given the first one's pin reads that version too (or fails)
    with pytest.raises(TransportError, match=CHANGED):
        RangedFile(uri, size=SIZE, pin=f.pin).pread(0, 10)


def test_a_shorter_or_longer_rewrite_is_a_change(remote: str) -> None:
    first, _ = _versions()
    uri = f"{remote}/resized.bin"
    dataio.write(uri, first)
    f = RangedFile(uri)
    assert f.pread(0, 8) == first[:8]
    dataio.write(uri, first + b"tail")
    with pytest.raises(TransportError, match=CHANGED):
        f.pread(8, 8)


def test_unchanged_objects_read_as_before(remote: str) -> None:
    first, _ = _versions()
    uri = f"{remote}/same.bin"
    dataio.write(uri, first)
    dataio.write(uri, first)  # rewritten with the same bytes: S3-style ETags agree
    f = RangedFile(uri)
    parts = [f.pread(at, 1 << 19) for at in range(0, SIZE, 1 << 19)]
    assert b"".join(parts) == first


def _state(scale: float) -> dict[str, np.ndarray]:
    return {
        "a": np.full((256, 1024), scale, np.float32),  # 1 MiB, then a gap
        "b": np.arange(256 * 1024, dtype=np.float32) * scale,
        "c": np.full(8, scale, np.float32),
    }


def test_safetensors_subsets_come_from_the_headers_version(remote: str) -> None:
    uri = f"{remote}/model.safetensors"
    dataio.write(uri, safetensors.numpy.save(_state(1.0)))
    with dataio.open_safetensors(uri) as st:
        got = st.read(keys=["b"])
        np.testing.assert_array_equal(got["b"], _state(1.0)["b"])
        # the same shapes, new values: the header still parses, the tensors differ
        dataio.write(uri, safetensors.numpy.save(_state(2.0)))
        with pytest.raises(TransportError, match=CHANGED):
            st.read(keys=["a", "c"])
    got = dataio.read_safetensors(uri, keys=["a", "c"])
    expected = safetensors.numpy.load(dataio.read(uri))
    np.testing.assert_array_equal(got["a"], expected["a"])
    np.testing.assert_array_equal(got["c"], expected["c"])


def test_safetensors_read_whole_is_the_headers_version(remote: str) -> None:
    uri = f"{remote}/whole.safetensors"
    dataio.write(uri, safetensors.numpy.save(_state(1.0)))
    with dataio.open_safetensors(uri) as st:
        dataio.write(uri, safetensors.numpy.save(_state(3.0)))
        with pytest.raises(TransportError, match=CHANGED):
            st.read()  # every tensor: one whole download, of the header's version


def _h5(scale: float) -> bytes:
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f.create_dataset("x", data=np.arange(1 << 19, dtype=np.float32) * scale)
        f.create_dataset("y", data=np.full(1 << 18, scale, np.float32))
    return buffer.getvalue()


def test_hdf5_reads_one_version(remote: str) -> None:
    uri = f"{remote}/arrays.h5"
    dataio.write(uri, _h5(1.0))
    with dataio.open_hdf5(uri) as f:
        np.testing.assert_array_equal(f.read("x", selection=(slice(0, 4),)), [0, 1, 2, 3])
        dataio.write(uri, _h5(5.0))
        with pytest.raises(TransportError, match=CHANGED):
            f.read("y")


def _parquet(scale: int) -> bytes:
    n = 200_000
    table = pa.table(
        {
            "id": np.arange(n),
            "value": np.arange(n) * scale,
            "noise": np.random.default_rng(1).random(n),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=20_000)
    return sink.getvalue()


def test_a_parquet_scan_reads_one_version(remote: str) -> None:
    from dataio.engine import remote_files

    uri = f"{remote}/t.parquet"
    first = _parquet(1)
    dataio.write(uri, first)
    assert len(first) > 4 * remote_files.TAIL_BYTES  # chunks lie before the footer's read
    found = remote_files.dataset(uri)  # the footer: the version is pinned here
    changed = _parquet(7)  # the same columns and row groups, other values
    dataio.write(uri, changed)
    with pytest.raises(TransportError, match=CHANGED):
        found.to_table(columns=["value"])
    # a scan begun afterwards reads the new version (pyarrow reads it whole: the oracle)
    got = dataio.scan_parquet(uri).select("value").collect()
    assert (
        got.column("value").to_pylist() == pq.read_table(io.BytesIO(changed))["value"].to_pylist()
    )


def test_pin_options_and_checks() -> None:
    pin = Pin("s3://b/k")
    assert pin.options() == {}
    pin.check({"e_tag": '"v1"', "size": 10, "last_modified": 1})  # the first answer pins
    assert pin.options() == {"if_match": '"v1"'}
    pin.check({"e_tag": '"v1"', "size": 10, "last_modified": 2})
    with pytest.raises(TransportError, match=r"s3://b/k.*ETag \"v1\".*ETag \"v2\""):
        pin.check({"e_tag": '"v2"', "size": 10, "last_modified": 1})
    weak = Pin("http://h/k", etag='W/"x"', size=3)
    assert weak.options() == {}  # If-Match compares strongly: a weak tag never matches
    with pytest.raises(TransportError, match=r"3 bytes.*4 bytes"):
        weak.check({"e_tag": 'W/"x"', "size": 4})
    # no ETags at all: the modification time tells
    bare = Pin("http://h/k")
    bare.check({"e_tag": None, "size": 3, "last_modified": 1})
    bare.check({"e_tag": None, "size": 3, "last_modified": 1})
    with pytest.raises(TransportError, match=r"modified 1.*modified 2"):
        bare.check({"e_tag": None, "size": 3, "last_modified": 2})
