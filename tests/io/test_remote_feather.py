"""Remote Feather / Arrow IPC files are read by ranges: the schema from the footer, a
slice from the record batches it needs, a projection from its columns' buffers, on
s3 (moto), gs (emulator), az (azurite) and http (RangeServer). Damaged files are a
FormatError before pyarrow reads a batch. Oracle: pyarrow reading the same bytes.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as pf
import pytest
from helpers.object_servers import RangeServer

import dataio
from dataio.exceptions import DataioError, FormatError
from dataio.io import verbs

REMOTE = ("s3", "gs", "az", "http")
BATCH = 20_000
CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "feather"


@pytest.fixture(params=REMOTE)
def remote(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(request.param))


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    """The sizes of the downloads made from now on (None: a whole object)."""
    sizes: list[int | None] = []
    real = verbs._download

    def counting(loc: Any, uri: Any, **kwargs: Any) -> Any:
        data = real(loc, uri, **kwargs)
        ranged = kwargs.get("size") is not None or kwargs.get("offset")
        sizes.append(len(data) if ranged else None)
        return data

    monkeypatch.setattr(verbs, "_download", counting)
    return sizes


def _table(n: int = 5 * BATCH) -> pa.Table:
    return pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "score": np.arange(n, dtype=np.float32) / 7,
            "name": pa.array([f"row-{i:08d}" for i in range(n)]),
        }
    )


def _feather(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pf.write_feather(table, sink, compression="uncompressed", chunksize=BATCH)
    return sink.getvalue()


def test_a_projection_fetches_its_columns_only(remote: str, fetched: list[int | None]) -> None:
    data = _feather(_table())
    uri = f"{remote}/t.feather"
    dataio.write(uri, data)
    fetched.clear()
    got = dataio.read_feather(uri, columns=["score"])
    assert got.equals(pf.read_table(io.BytesIO(data), columns=["score"]))
    assert None not in fetched, "nothing is downloaded whole"
    # score: 4 of the 28 bytes a row holds, plus the footer and each batch's metadata
    assert sum(s or 0 for s in fetched) < 0.25 * len(data), (fetched, len(data))


def test_a_slice_fetches_the_batches_it_needs(remote: str, fetched: list[int | None]) -> None:
    data = _feather(_table())
    uri = f"{remote}/t.feather"
    dataio.write(uri, data)
    fetched.clear()
    frame = dataio.scan_feather(uri)  # the schema from the footer
    assert frame.schema.names == ["id", "score", "name"]
    assert sum(s or 0 for s in fetched) <= 256 << 10
    got = frame.select("name", "id").head(10).collect()
    assert got.equals(pf.read_table(io.BytesIO(data), columns=["name", "id"]).slice(0, 10))
    assert None not in fetched
    assert sum(s or 0 for s in fetched) < 0.35 * len(data)  # one batch of five, and less


def test_remote_feather_reads_equal_pyarrow(remote: str) -> None:
    table = _table(3 * BATCH + 17)
    data = _feather(table)
    uri = f"{remote}/all.feather"
    dataio.write(uri, data)
    assert dataio.read_feather(uri).equals(table)
    got = dataio.scan_feather(uri).limit(10, offset=BATCH - 5).collect()
    assert got.equals(table.slice(BATCH - 5, 10))
    # a filter goes through DataFusion (the object downloaded whole and validated)
    got = dataio.scan_feather(uri).filter(dataio.col("id") % 1000 == 3).collect()
    assert got.column("id").to_pylist() == list(range(3, 3 * BATCH + 17, 1000))
    # several files: a slice reads on into the next one
    dataio.write(f"{remote}/more.feather", data)
    both = dataio.scan_feather([uri, f"{remote}/more.feather"])
    got = both.select("id").limit(20, offset=3 * BATCH + 10).collect()
    expected = pa.concat_tables([table, table]).select(["id"]).slice(3 * BATCH + 10, 20)
    assert got.equals(expected)


# -- damaged files ------------------------------------------------------------------------


def _small() -> tuple[bytes, int]:
    """An IPC file of two batches and where its second batch's block lies in its
    footer (the writer writes the schema with the first batch: the second one's
    position is the one known here)."""
    table = pa.table({"n": np.arange(40, dtype=np.int32), "s": [f"v{i}" for i in range(40)]})
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        starts = []
        for batch in table.to_batches(max_chunksize=20):
            starts.append(sink.tell())
            writer.write_batch(batch)
        starts.append(sink.tell())
    data = sink.getvalue()
    length = struct.unpack_from("<i", data, len(data) - 10)[0]
    footer_start = len(data) - 10 - length
    # the Block {offset: int64, metaDataLength: int32, pad, bodyLength: int64} whose
    # offset is the second batch's and whose lengths add up to its size
    for at in range(footer_start, len(data) - 34):
        offset, meta, body = struct.unpack_from("<qi4xq", data, at)
        if offset == starts[1] and meta + body == starts[2] - starts[1]:
            return data, at
    raise AssertionError("no block of the second batch in the footer")


def _patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def _hostile() -> dict[str, bytes]:
    data, block = _small()
    # the string column's offsets of the first batch: 0, 2, 4 ... ("v0", "v1", ...)
    offsets = data.index(struct.pack("<4i", 0, 2, 4, 6))
    return {
        "remote-block-body-2-pow-40": _patched(data, block + 16, "<q", 1 << 40),
        "remote-block-offset-past-end": _patched(data, block, "<q", len(data) + 4096),
        "remote-block-offset-negative": _patched(data, block, "<q", -8),
        "remote-block-meta-huge": _patched(data, block + 8, "<i", 0x7FFFFFF8),
        "remote-footer-length-past-start": _patched(data, len(data) - 10, "<i", len(data)),
        "remote-footer-length-negative": _patched(data, len(data) - 10, "<i", -100),
        "remote-truncated-half": data[: len(data) // 2],
        "remote-string-offset-out-of-bounds": _patched(data, offsets + 4, "<i", 0x7FFFFF00),
        "remote-tail-only": data[-10:],
        "remote-footer-schema-damaged": _patched(data, block - 8, "<q", 1 << 40),
    }


@pytest.mark.parametrize("name", sorted(_hostile()))
def test_damaged_remote_files_are_format_errors(name: str, http: str) -> None:
    data = _hostile()[name]
    assert (CORPUS / name).read_bytes() == data  # kept as a fuzz regression input
    uri = f"{http}/{name}.feather"
    dataio.write(uri, data)
    for read in (
        lambda: dataio.read_feather(uri).to_pylist(),
        lambda: dataio.read_feather(uri, columns=["s"]).to_pylist(),
        lambda: dataio.scan_feather(uri).head(5).collect().to_pylist(),
        lambda: dataio.scan_feather(uri).filter(dataio.col("n") > 1).collect().to_pylist(),
    ):
        with pytest.raises(DataioError) as caught:
            read()
        assert isinstance(caught.value, FormatError), caught.value
        assert name in str(caught.value)


def test_the_ranged_reader_takes_local_paths_too(tmp_path: Path) -> None:
    # the fuzz target replays the corpus through it on local files
    from dataio.formats._arrow import read_remote_ipc

    data, _ = _small()
    path = tmp_path / "ok.arrow"
    path.write_bytes(data)
    assert read_remote_ipc(str(path), "t").equals(pa.ipc.open_file(io.BytesIO(data)).read_all())
    for name, hostile in _hostile().items():
        (tmp_path / name).write_bytes(hostile)
        with pytest.raises(FormatError):
            read_remote_ipc(str(tmp_path / name), "t").to_pylist()


def test_a_projection_reads_batches_side_by_side(http_server: RangeServer, http: str) -> None:
    table = _table(16 * 1000)
    sink = io.BytesIO()
    pf.write_feather(table, sink, compression="uncompressed", chunksize=1000)
    uri = f"{http}/many.feather"
    dataio.write(uri, sink.getvalue())
    http_server.stall_secs = 0.05  # a request's round trip
    got = dataio.read_feather(uri, columns=["id"])
    assert got.equals(table.select(["id"]))
    assert http_server.most_ranged_at_once(margin=0.01) >= 4
