"""An offline preprocessing job on Ray: JPEGs in Parquet on S3 -> resized shards on S3 -> training.

1. ``raw/``: JPEG bytes, labels and keys in Parquet files (several row groups each) in an
   S3 bucket (a moto server on 127.0.0.1 unless ``--endpoint`` names one).
2. On Ray: ``scan_parquet("s3://.../raw/*.parquet").to_ray()`` reads the row groups in
   read tasks, :func:`dataio.ray.map_pipeline` decodes and resizes them in an actor pool
   (one dataio pool per actor), and a write task per shard puts each run of rows back to
   the bucket twice: as a Parquet file (``parquet/``, the pixels as a ``fixed_shape_tensor``
   column) and as a WebDataset tar (``wds/``, ``KEY.png`` + ``KEY.cls``). Shards are named
   by their first row's position, so their order is the frame's whatever order the tasks
   finish in; the driver then writes ``wds/shardindex.json`` from the counts the tasks
   returned (no shard is read again).
3. Locally, no Ray: a dataio loader reads the WebDataset shards back from S3 and trains a
   tiny torch model for a few steps; ``scan_parquet`` reads the Parquet shards.

Ray is started here (``ray.init(address="local")``) only inside a network namespace with
nothing but ``lo`` (as the tests do)::

    unshare -n -- sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 \\
        .venv/bin/python examples/offline_ray_job.py'

``--address auto`` (or a ``ray://`` address) joins a running cluster instead; its nodes need
the bucket's endpoint and credentials, which this script passes as ``AWS_*`` variables in
the job's ``runtime_env``. ``tests/ray/test_offline_example.py`` runs it and checks the
shards against a local run of the same pipeline.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import socket
import statistics
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

import dataio
from dataio.sources import shardindex
from dataio.testing import photo_like

ROOT = Path(__file__).resolve().parents[1]
SIZE = 64  # the shards' images: resize_short(SIZE), center_crop(SIZE)
CLASSES = 4


def preprocess() -> dataio.Pipeline:
    """The job's pipeline: decode, resize, crop; uint8 HWC pixels out, labels passed on."""
    image = (
        dataio.slot("image", field="jpeg")
        .decode_image()
        .resize_short(SIZE)
        .center_crop(h=SIZE, w=SIZE)
    )
    return dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(32))


def make_raw(prefix: str, *, images: int, files: int, row_group: int) -> float:
    """Write ``images`` JPEGs (photo-like, 96-256 px) to ``prefix/raw/part-K.parquet``;
    return the seconds it took."""
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    cuts = np.linspace(0, images, files + 1).astype(int)
    for part, (lo, hi) in enumerate(itertools.pairwise(int(c) for c in cuts)):
        jpegs = []
        for _ in range(lo, hi):
            w, h = (int(v) for v in rng.integers(96, 256, 2))
            buffer = io.BytesIO()
            Image.fromarray(photo_like(w, h, rng)).save(buffer, format="JPEG", quality=90)
            jpegs.append(buffer.getvalue())
        table = pa.table(
            {
                "key": [f"img{i:06d}" for i in range(lo, hi)],
                "jpeg": pa.array(jpegs, pa.binary()),
                "label": pa.array(rng.integers(0, CLASSES, hi - lo), pa.int64()),
            }
        )
        out = io.BytesIO()
        pq.write_table(table, out, row_group_size=row_group)
        dataio.write(f"{prefix}/raw/part-{part}.parquet", out.getvalue())
    return time.perf_counter() - start


def pixels(column: Any) -> np.ndarray:
    """``[n, SIZE, SIZE, 3]`` uint8 of a tensor column (Arrow's ``fixed_shape_tensor``, or
    Ray's own tensor type where Ray rebuilt the block)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(column.type, pa.FixedShapeTensorType):
        return np.asarray(column.to_numpy_ndarray())
    return np.asarray(column.to_numpy())


def write_shard(batch: pa.Table, prefix: str) -> pa.Table:
    """A Ray write task: one run of preprocessed rows to ``parquet/`` and ``wds/``.

    Returns one row saying what it wrote (the driver's shard index is made of these).
    """
    first = int(batch["__index__"][0].as_py())
    name = f"shard-{first:08d}"
    images = pixels(batch["image"])
    keys = batch["__key__"].to_pylist()
    labels = batch["label"].to_pylist()
    table = pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "label": pa.array(labels, pa.int64()),
            "position": batch["__index__"].cast(pa.int64()),
            "image": pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(images)),
        }
    )
    parquet = io.BytesIO()
    pq.write_table(table, parquet)
    dataio.write(f"{prefix}/parquet/{name}.parquet", parquet.getvalue())

    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for key, label, image in zip(keys, labels, images, strict=True):
            png = io.BytesIO()
            Image.fromarray(image).save(png, format="PNG", compress_level=1)
            for field, data in (("png", png.getvalue()), ("cls", str(label).encode())):
                info = tarfile.TarInfo(f"{key}.{field}")
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    dataio.write(f"{prefix}/wds/{name}.tar", tar.getvalue())
    return pa.table(
        {
            "name": [name],
            "first": [first],
            "rows": [batch.num_rows],
            "tar_bytes": [tar.tell()],
            "parquet_bytes": [parquet.tell()],
        }
    )


def only_loopback() -> None:
    names = [name for _, name in socket.if_nameindex()]
    if names != ["lo"] or os.environ.get("RAY_USAGE_STATS_ENABLED") != "0":
        sys.exit(
            "offline_ray_job.py starts a local Ray only in a network namespace with nothing "
            f"but lo and RAY_USAGE_STATS_ENABLED=0 (here: {names}); run it as unshare -n -- "
            "sh -c 'ip link set lo up && RAY_USAGE_STATS_ENABLED=0 python "
            "examples/offline_ray_job.py', or pass --address of a running cluster"
        )


@contextmanager
def bucket(endpoint: str | None, name: str) -> Iterator[dict[str, str]]:
    """The ``AWS_*`` settings of an S3 endpoint with bucket ``name``: ``endpoint`` (the
    bucket exists), or a moto server started here for the run."""
    server = None
    if endpoint is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from helpers.object_servers import MotoServer

        server = MotoServer()
        server.create_bucket(name)
        endpoint = server.url
    try:
        yield {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
            "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        }
    finally:
        if server is not None:
            server.stop()


def run_on_ray(
    prefix: str, env: dict[str, str], args: argparse.Namespace
) -> tuple[float, float, Any]:
    """Preprocess ``prefix/raw`` on Ray and write the shards; (seconds in all, seconds to
    the first shard written, the shards' rows)."""
    import ray
    import ray.data

    import dataio.ray

    # workers import the dataio the driver runs and reach the bucket as it does
    package_root = str(Path(dataio.__file__).resolve().parents[1])
    env_vars = {**env, "PYTHONPATH": package_root, "RAY_USAGE_STATS_ENABLED": "0"}
    if args.address == "local":
        ray.init(
            address="local",
            num_cpus=args.cpus,
            include_dashboard=False,
            object_store_memory=200 * 2**20,
            log_to_driver=False,
            runtime_env={"env_vars": env_vars},
        )
    else:
        ray.init(address=args.address, runtime_env={"env_vars": env_vars})
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True
    try:
        start = time.perf_counter()
        ds = dataio.scan_parquet(f"{prefix}/raw/*.parquet").to_ray()
        out = dataio.ray.map_pipeline(
            ds,
            preprocess(),
            actors=args.actors,
            cpus_per_actor=args.cpus_per_actor,
            # a small job: batches of a shard so every actor gets some (at scale, the
            # default: batch_rows(pipe), ~32 MiB of output a batch)
            batch_size=args.shard,
        )
        written = out.map_batches(
            write_shard,
            fn_kwargs={"prefix": prefix},
            batch_size=args.shard,
            batch_format="pyarrow",
            num_cpus=0.25,  # writes wait on the store, not the CPU
        )
        parts, first = [], 0.0
        for part in written.iter_batches(batch_format="pyarrow", batch_size=None):
            parts.append(pa.table(part))
            first = first or time.perf_counter() - start
        elapsed = time.perf_counter() - start
    finally:
        ray.shutdown()
    return elapsed, first, pa.concat_tables(parts).sort_by("first")


def write_index(prefix: str, shards: pa.Table) -> str:
    """``wds/shardindex.json`` from the write tasks' counts (no shard is read again)."""
    uri = f"{prefix}/wds/shardindex.json"
    rows = [
        {"url": f"{row['name']}.tar", "nsamples": row["rows"], "filesize": row["tar_bytes"]}
        for row in shards.to_pylist()
    ]
    shardindex.write(uri, rows)
    return uri


def label_of(record: Any) -> dict[str, Any]:
    """A WebDataset sample's ``.cls`` member as an integer label."""
    return {**record, "label": int(record["cls"])}


def train(index: str, *, steps: int) -> tuple[list[float], float, int]:
    """A few steps of a tiny CNN fed by a local dataio loader over the WebDataset shards
    (read from S3); (losses, images/s of the loader + steps, images seen)."""
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    pipe = dataio.pipeline(
        dataio.map(label_of),
        dataio.slot("image", field="png").decode_image().random_flip().normalize("imagenet"),
        dataio.slot("label").passthrough(),
        dataio.batch(16),
    )
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, CLASSES),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses: list[float] = []
    seen = 0
    start = time.perf_counter()
    source = dataio.webdataset(index)
    with pipe.bind(source).run("torch", seed=0) as loader:
        for batch in loader:
            loss = torch.nn.functional.cross_entropy(model(batch["image"]), batch["label"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            seen += len(batch)
            if len(losses) == steps:
                break
    return losses, seen / (time.perf_counter() - start), seen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--files", type=int, default=2, help="raw Parquet files")
    parser.add_argument("--row-group", type=int, default=16, help="rows per raw row group")
    parser.add_argument("--shard", type=int, default=32, help="rows per output shard")
    parser.add_argument("--steps", type=int, default=4, help="training steps")
    parser.add_argument("--endpoint", help="an S3 endpoint (default: a moto server here)")
    parser.add_argument("--bucket", default="dataio-offline")
    parser.add_argument("--prefix", default="job", help="the job's folder in the bucket")
    parser.add_argument("--address", default="local", help="ray.init's address")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--cpus-per-actor", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.address == "local":
        only_loopback()

    with bucket(args.endpoint, args.bucket) as env:
        os.environ.update(env)  # the driver reaches the bucket as the workers do
        prefix = f"s3://{args.bucket}/{args.prefix}"
        made = make_raw(prefix, images=args.images, files=args.files, row_group=args.row_group)
        print(
            f"raw: {args.images} JPEGs in {args.files} Parquet files (row groups of "
            f"{args.row_group}) at {prefix}/raw/ in {made:.2f} s"
        )
        elapsed, first, shards = run_on_ray(prefix, env, args)
        rows = sum(shards["rows"].to_pylist())
        later = rows - shards["rows"][0].as_py()
        print(
            f"ray: decoded, resized to {SIZE}x{SIZE} and wrote {rows} images in "
            f"{shards.num_rows} shards ({prefix}/parquet/*.parquet, {prefix}/wds/*.tar) in "
            f"{elapsed:.2f} s ({rows / elapsed:.1f} img/s): {first:.2f} s to the first shard "
            f"(Ray starts {args.actors} actors, which import dataio), then "
            f"{later / max(elapsed - first, 1e-9):.1f} img/s"
        )
        index = write_index(prefix, shards)
        mib = sum(shards["tar_bytes"].to_pylist()) / 2**20
        print(f"index: {index} lists {shards.num_rows} shards, {rows} samples, {mib:.1f} MiB")

        losses, rate, seen = train(index, steps=args.steps)
        print(
            f"train: {len(losses)} steps on {seen} images from the WebDataset shards, "
            f"{rate:.1f} img/s; loss {losses[0]:.3f} -> {losses[-1]:.3f} "
            f"(median {statistics.median(losses):.3f})"
        )
        start = time.perf_counter()
        table = dataio.scan_parquet(f"{prefix}/parquet/*.parquet").collect()
        took = time.perf_counter() - start
        print(
            f"parquet: scan_parquet read back {table.num_rows} rows "
            f"({table['image'].type}) in {took:.2f} s"
        )


if __name__ == "__main__":
    main()
