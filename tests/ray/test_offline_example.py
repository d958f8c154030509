"""examples/offline_ray_job.py, run inside the loopback-only namespace, against oracles.

The job preprocesses JPEGs from Parquet on S3 (moto) on Ray and writes Parquet and
WebDataset shards back; here its shards are read back and compared with a local dataio
run of the same pipeline over the same raw files: the PNGs decoded by Pillow and the
Parquet pixels equal it, every image is there once, in the frame's order.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from helpers.object_servers import MotoServer
from PIL import Image

import dataio
from dataio.sources import shardindex

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "offline_ray_job.py"
# 2 files of 45 rows in row groups of 8: Ray's blocks (8, 5 rows) do not add up to
# whole shards, so some shards are short: their names and the index keep the order
IMAGES, FILES, ROW_GROUP, SHARD = 90, 2, 8, 32


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("offline_ray_job", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def job(ray_ready: Any) -> Iterator[tuple[str, str]]:
    """The example run once on a fresh bucket: (its S3 prefix, its stdout)."""
    server = MotoServer()
    try:
        server.create_bucket("offline-test")
        result = subprocess.run(
            [
                sys.executable,
                str(SCRIPT),
                *("--endpoint", server.url, "--bucket", "offline-test", "--prefix", "run"),
                *("--images", str(IMAGES), "--files", str(FILES)),
                *("--row-group", str(ROW_GROUP), "--shard", str(SHARD), "--steps", "3"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=os.environ,  # PYTHONPATH (the checkout) set by ray_ready
        )
        assert result.returncode == 0, result.stderr[-4000:]
        dataio.configure_endpoint("s3", server.url, region="us-east-1")
        dataio.configure_credentials("s3", access_key_id="testing", secret_access_key="testing")
        yield "s3://offline-test/run", result.stdout
    finally:
        server.stop()


@pytest.fixture(scope="module")
def local(job: tuple[str, str]) -> dict[str, Any]:
    """The oracle: the example's pipeline run by a local loader over the raw Parquet."""
    prefix, _ = job
    pipe = _example().preprocess()
    images, keys, labels, indices = [], [], [], []
    with pipe.bind(dataio.scan_parquet(f"{prefix}/raw/*.parquet")).run("numpy") as loader:
        for batch in loader:
            images.append(batch["image"])
            keys += batch.row_keys
            labels += batch["label"].tolist()
            indices += list(batch.indices)
    return {
        "images": np.concatenate(images),
        "keys": keys,
        "labels": labels,
        "indices": indices,
    }


def test_the_job_says_what_it_did_and_how_fast(job: tuple[str, str]) -> None:
    _, out = job
    assert f"raw: {IMAGES} JPEGs in {FILES} Parquet files" in out
    assert f"wrote {IMAGES} images in " in out
    assert "img/s" in out
    assert f" shards, {IMAGES} samples" in out
    assert "train: 3 steps on 48 images from the WebDataset shards" in out
    assert f"parquet: scan_parquet read back {IMAGES} rows" in out


def test_webdataset_shards_hold_the_local_pixels_in_order(job, local) -> None:
    prefix, _ = job
    assert local["images"].shape == (IMAGES, 64, 64, 3)
    assert local["keys"] == [f"img{i:06d}" for i in range(IMAGES)]
    index = shardindex.load(f"{prefix}/wds/shardindex.json")
    got_keys, got_labels, got_images = [], [], []
    counts = []
    for shard in index.shards:  # the index's order
        data = dataio.read(shard)
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:  # tarfile: the oracle reader
            names = archive.getnames()
            counts.append(len(names) // 2)
            for name in names:
                member = archive.extractfile(name)
                assert member is not None
                body = member.read()
                key, field = name.rsplit(".", 1)
                if field == "png":
                    got_keys.append(key)
                    got_images.append(np.asarray(Image.open(io.BytesIO(body)).convert("RGB")))
                else:
                    got_labels.append(int(body))
        assert index.lookup(shard) == (counts[-1], len(data))
    assert sum(counts) == IMAGES and max(counts) <= SHARD
    # each shard is named by its first row's position, and the index lists them so
    firsts = [int(Path(s).stem.removeprefix("shard-")) for s in index.shards]
    assert firsts == [sum(counts[:i]) for i in range(len(counts))]
    assert got_keys == local["keys"]  # complete, once each, in order
    assert got_labels == local["labels"]
    np.testing.assert_array_equal(np.stack(got_images), local["images"])
    # and dataio's own WebDataset reader gives the same samples through the index
    samples = list(dataio.webdataset(f"{prefix}/wds/shardindex.json"))
    assert [s["__key__"] for s in samples] == local["keys"]


def test_parquet_shards_hold_the_local_pixels_in_order(job, local) -> None:
    prefix, _ = job
    table = dataio.scan_parquet(f"{prefix}/parquet/*.parquet").collect()
    assert table.column_names == ["key", "label", "position", "image"]
    assert table["position"].to_pylist() == local["indices"] == list(range(IMAGES))
    assert table["key"].to_pylist() == local["keys"]
    assert table["label"].to_pylist() == local["labels"]
    column = table["image"].combine_chunks()
    assert isinstance(column.type, pa.FixedShapeTensorType)
    np.testing.assert_array_equal(column.to_numpy_ndarray(), local["images"])
