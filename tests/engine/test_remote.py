"""Frames over remote objects: scans of s3:// (moto) and http:// files read by DataFusion."""

from __future__ import annotations

import io
from collections.abc import Iterator

import boto3
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from helpers.object_servers import MotoServer, RangeServer

import dataio
from dataio import col
from dataio.frame import scan, scan_csv, scan_parquet
from dataio.io import config

KEY, SECRET = "AKIAREMOTESCANS0001", "remote-scan-secret"
BUCKET = "frames"


def part(index: int, rows: int = 50) -> pa.Table:
    start = index * 1000
    return pa.table(
        {
            "id": pa.array(range(start, start + rows), pa.int64()),
            "label": pa.array([(start + i) % 7 for i in range(rows)], pa.int32()),
            "name": pa.array([f"item-{start + i}" for i in range(rows)]),
        }
    )


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, row_group_size=10)
    return sink.getvalue()


def feather_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    feather.write_feather(table, sink, compression="uncompressed")
    return sink.getvalue()


def offsets_past_data(data: bytes) -> bytes:
    """The file with the last offset of column ``name`` pointing 8 MB past its data."""
    offsets = b"".join(n.to_bytes(4, "little") for n in (0, 6, 12, 18, 24))  # "item-0"...
    at = data.index(offsets) + 16
    return data[:at] + (8_192_000).to_bytes(4, "little") + data[at + 4 :]


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    server = MotoServer()
    try:
        server.create_bucket(BUCKET)
        client = boto3.client(
            "s3",
            endpoint_url=server.url,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )
        for i in range(3):
            client.put_object(
                Bucket=BUCKET, Key=f"data/part-{i}.parquet", Body=parquet_bytes(part(i))
            )
        client.put_object(Bucket=BUCKET, Key="data/_SUCCESS", Body=b"")
        client.put_object(Bucket=BUCKET, Key="data/notes.txt", Body=b"not parquet")
        client.put_object(Bucket=BUCKET, Key="broken/bad.parquet", Body=b"PAR1 garbage PAR1")
        good = feather_bytes(part(0, rows=4))
        client.put_object(Bucket=BUCKET, Key="feather/good.arrow", Body=good)
        client.put_object(Bucket=BUCKET, Key="feather/bad.arrow", Body=offsets_past_data(good))
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3(moto: MotoServer) -> Iterator[str]:
    config.reset()
    dataio.configure_endpoint("s3", moto.url, region="us-east-1")
    dataio.configure_credentials("s3", access_key_id=KEY, secret_access_key=SECRET)
    yield f"s3://{BUCKET}"
    config.reset()


def expected() -> pa.Table:
    return pa.concat_tables([part(i) for i in range(3)])


def test_a_prefix_a_glob_and_a_list_of_s3_objects_read_like_pyarrow(s3: str) -> None:
    whole = expected()
    assert scan_parquet(f"{s3}/data/").collect().equals(whole)
    assert scan_parquet(f"{s3}/data/part-*.parquet").collect().equals(whole)
    assert scan(f"{s3}/data").collect().equals(whole)  # format from the listing
    reordered = [f"{s3}/data/part-2.parquet", f"{s3}/data/part-0.parquet"]
    got = scan_parquet(reordered).collect()
    assert got.equals(pa.concat_tables([part(2), part(0)]))


def test_filters_and_projections_run_over_s3_objects(s3: str) -> None:
    frame = scan_parquet(f"{s3}/data/").filter(col("label") == 3).select("id", "name")
    whole = expected()
    mask = pc.equal(whole.column("label"), 3)
    assert frame.collect().equals(whole.filter(mask).select(["id", "name"]))
    assert frame.collect().to_pylist() == whole.filter(mask).select(["id", "name"]).to_pylist()
    # streamed one object after another, in order
    streamed = pa.Table.from_batches(list(frame.collect_arrow_reader()))
    assert streamed.equals(whole.filter(mask).select(["id", "name"]))


def test_remote_scan_errors_name_the_object(s3: str) -> None:
    with pytest.raises(dataio.NotFoundError, match="no-such-prefix"):
        scan_parquet(f"{s3}/no-such-prefix/")
    with pytest.raises(dataio.NotFoundError, match="matched no objects"):
        scan_parquet(f"{s3}/data/*.nothing")
    with pytest.raises(dataio.FormatError, match=r"bad\.parquet"):
        scan_parquet(f"{s3}/broken/bad.parquet").collect()
    with pytest.raises(dataio.DataioError, match="ftp://"):
        scan_parquet("ftp://host/x.parquet")


def test_remote_feather_is_validated_before_use(s3: str) -> None:
    good = scan(f"{s3}/feather/good.arrow", format="feather").collect()
    assert good.equals(part(0, rows=4))
    bad = offsets_past_data(feather_bytes(part(0, rows=4)))
    with pytest.raises(pa.ArrowInvalid):  # the oracle: pyarrow's full validation
        pa.ipc.open_file(pa.py_buffer(bad)).read_all().validate(full=True)
    with pytest.raises(dataio.FormatError, match=r"bad\.arrow"):
        scan(f"{s3}/feather/bad.arrow", format="feather").collect()


def test_csv_over_http_reads_what_pyarrow_reads() -> None:
    import pyarrow.csv as pacsv

    server = RangeServer()
    try:
        sink = io.BytesIO()
        pacsv.write_csv(part(4).select(["id", "label"]), sink)
        server.objects["/t/a.csv"] = sink.getvalue()
        server.objects["/t/p.parquet"] = parquet_bytes(part(5))
        config.reset()
        frame = scan_parquet([f"{server.url}/t/p.parquet"] * 2).filter(col("label") == 1)
        twice = pa.concat_tables([part(5), part(5)])
        assert frame.collect().equals(twice.filter(pa.compute.equal(twice["label"], 1)))
        got = scan_csv(f"{server.url}/t/a.csv").filter(col("label") > 2).collect()
        table = pacsv.read_csv(io.BytesIO(server.objects["/t/a.csv"]))
        assert got.equals(table.filter(pa.compute.greater(table.column("label"), 2)))
    finally:
        server.kill()
        config.reset()


def test_a_prefix_is_listed_once_per_scan(s3: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataio.io.verbs as verbs

    calls: list[str] = []
    real = verbs.glob

    def counting(pattern: str) -> list[str]:
        calls.append(pattern)
        return real(pattern)

    monkeypatch.setattr(verbs, "glob", counting)
    assert scan(f"{s3}/data").collect().equals(expected())  # format from the listing
    assert calls == [f"{s3}/data/**"]
