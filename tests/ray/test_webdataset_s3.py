"""``from_source`` of WebDataset shards in an S3 bucket (moto on 127.0.0.1).

The workers reach the bucket through ``AWS_*`` variables set before Ray starts (as a
cluster's ``runtime_env`` passes them). Oracles: ``tarfile`` over the bytes uploaded,
and the local source over the same URIs. Started only inside a namespace with nothing
but ``lo``.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator

import pyarrow as pa
import pytest
from helpers.object_servers import MotoServer

import dataio
import dataio.ray

COUNTS = (4, 6, 3)


@pytest.fixture(scope="module")
def bucket() -> Iterator[str]:
    """A moto bucket, with the AWS_* variables the Ray workers will inherit (set before
    the module's Ray starts: this fixture comes first in the tests' arguments)."""
    server = MotoServer()
    saved = dict(os.environ)
    try:
        server.create_bucket("wds-ray")
        os.environ.update(
            AWS_ENDPOINT_URL=server.url,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_REGION="us-east-1",
        )
        # this process: configured settings win over the environment (another module
        # may have configured its own server)
        dataio.configure_endpoint("s3", server.url, region="us-east-1")
        dataio.configure_credentials("s3", access_key_id="testing", secret_access_key="testing")
        yield "s3://wds-ray"
    finally:
        os.environ.clear()
        os.environ.update(saved)
        server.stop()


@pytest.fixture(scope="module")
def shards(bucket: str) -> tuple[str, list[bytes]]:
    n, uploaded = 0, []
    for s, count in enumerate(COUNTS):
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(count):
                for field, data in (("bin", os.urandom(100 + n)), ("txt", f"t{n}".encode())):
                    info = tarfile.TarInfo(f"k{n:03d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
        dataio.write(f"{bucket}/wds/part-{s}.tar", out.getvalue())
        uploaded.append(out.getvalue())
    return f"{bucket}/wds/part-{{0..2}}.tar", uploaded


def _table(ds) -> pa.Table:
    return pa.concat_tables(
        [pa.table(b) for b in ds.iter_batches(batch_format="pyarrow", batch_size=None)]
    )


def _oracle(uploaded: list[bytes]) -> list[tuple[str, bytes, bytes]]:
    rows: dict[str, dict[str, bytes]] = {}
    for data in uploaded:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                key, field = member.name.split(".")
                handle = tar.extractfile(member)
                assert handle is not None
                rows.setdefault(key, {})[field] = handle.read()
    return [(k, v["bin"], v["txt"]) for k, v in rows.items()]


@pytest.mark.parametrize("indexed", [False, True])
def test_remote_shards_read_in_tasks_equal_the_uploads(bucket, ray_session, shards, indexed):
    pattern, uploaded = shards
    if indexed:
        assert dataio.write_webdataset_index(pattern) == f"{bucket}/wds/shardindex.json"
    ds = dataio.ray.from_source(dataio.webdataset(pattern))
    got = _table(ds)
    want = _oracle(uploaded)
    assert got["__position__"].to_pylist() == list(range(sum(COUNTS)))
    assert (
        list(
            zip(
                got["__key__"].to_pylist(),
                got["bin"].to_pylist(),
                got["txt"].to_pylist(),
                strict=True,
            )
        )
        == want
    )
    local = list(dataio.webdataset(pattern))  # the local source over the same URIs
    assert [s["__url__"] for s in local] == got["__url__"].to_pylist()
