"""A storage server failing under a DataFusion scan is a transport error, never a
format error, whatever the reader was parsing when the bytes stopped."""

from __future__ import annotations

import io

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.object_servers import MotoServer

import dataio
from dataio.engine.errors import translate
from dataio.frame import scan_parquet
from dataio.io import config


@pytest.mark.parametrize(
    "message",
    [
        # what DataFusion says when a column chunk's ranged GET dies after the footer read
        "Parquet error: External: Object Store error: Generic S3 error: Error performing "
        "GET http://127.0.0.1:9/b/p.parquet in 3.1s, after 10 retries - HTTP error: "
        "error sending request",
        "External error: Object Store error: Generic S3 error: Error performing HEAD "
        "http://127.0.0.1:9/b/p.parquet - HTTP error: error sending request",
    ],
)
def test_object_store_failures_are_transport_errors(message: str) -> None:
    error = translate(RuntimeError(message), "scan_parquet", "s3://b/p.parquet")
    assert isinstance(error, dataio.TransportError), error
    assert not isinstance(error, dataio.FormatError)
    assert "s3://b/p.parquet" in str(error)


def test_real_parquet_errors_stay_format_errors() -> None:
    message = "Parquet error: Invalid Parquet file. Corrupt footer"
    error = translate(RuntimeError(message), "scan_parquet", "s3://b/p.parquet")
    assert isinstance(error, dataio.FormatError)


def test_storage_server_killed_before_the_scan_runs() -> None:
    server = MotoServer()
    try:
        server.create_bucket("killed")
        client = boto3.client(
            "s3",
            endpoint_url=server.url,
            aws_access_key_id="AKIAKILLEDSERVER01",
            aws_secret_access_key="secret",
            region_name="us-east-1",
        )
        sink = io.BytesIO()
        pq.write_table(pa.table({"a": list(range(100))}), sink)
        client.put_object(Bucket="killed", Key="d/p.parquet", Body=sink.getvalue())
        config.reset()
        dataio.configure_endpoint("s3", server.url, region="us-east-1")
        dataio.configure_credentials(
            "s3", access_key_id="AKIAKILLEDSERVER01", secret_access_key="secret"
        )
        frame = scan_parquet("s3://killed/d/")  # listed while the server was up
    finally:
        server.stop()
    try:
        with pytest.raises(dataio.TransportError, match="killed"):
            frame.collect()
    finally:
        config.reset()
