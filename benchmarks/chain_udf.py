"""A slot chain as a frame expression / SQL function vs the same chain in a pipeline.

JPEGs (photo-like, 320-640 x 280-520, quality 90) stored as a binary column in one
Parquet file (row groups of 128), the ImageNet-style chain ``decode -> resize_short(256)
-> center_crop(224) -> normalize("imagenet")``; median images/s over interleaved rounds::

    .venv/bin/python benchmarks/chain_udf.py [--images N] [--rounds R]

* ``frame.with_columns(x=chain).collect_arrow()``: a ``fixed_shape_tensor`` column;
* ``sql("SELECT label, prep(jpeg) ...", functions={"prep": chain}).collect()``;
* ``pipeline(slot(chain), passthrough(label), batch(64)).run("numpy")`` over the same
  images as a list of dicts (bytes) and over ``scan_parquet`` of the same file.

Nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

import dataio
from dataio import Expr, decoders, transforms
from dataio.engine.pool import cpu_workers
from dataio.testing import photo_like

OPS = (
    decoders.image(),
    transforms.resize_short(256),
    transforms.center_crop(h=224, w=224),
    transforms.normalize("imagenet"),
)


def write_parquet(path: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    jpegs = []
    for _ in range(count):
        width, height = int(rng.integers(320, 640)), int(rng.integers(280, 520))
        buffer = io.BytesIO()
        Image.fromarray(photo_like(width, height, rng)).save(buffer, "JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    table = pa.table(
        {
            "key": range(count),
            "label": rng.integers(0, 1000, count),
            "jpeg": pa.array(jpegs, pa.binary()),
        }
    )
    pq.write_table(table, path, row_group_size=128)


def contenders(path: Path, count: int) -> dict[str, Callable[[], None]]:
    chain = Expr("chain", dataio.col("jpeg"), OPS)
    records = [{"jpeg": r["jpeg"], "label": r["label"]} for r in pq.read_table(path).to_pylist()]
    pipe = dataio.pipeline(
        dataio.slot("x", field="jpeg").then(*OPS),
        dataio.slot("label").passthrough(),
        dataio.batch(64),
    )

    def frame() -> None:
        table = dataio.scan_parquet(path).with_columns(x=chain).collect_arrow()
        assert table.num_rows == count
        assert isinstance(table.schema.field("x").type, pa.FixedShapeTensorType)

    def sql() -> None:
        query = "SELECT label, prep(jpeg) AS x FROM t"
        frame = dataio.scan_parquet(path)
        assert dataio.sql(query, t=frame, functions={"prep": chain}).collect().num_rows == count

    def loader(source: object) -> Callable[[], None]:
        def run() -> None:
            seen = 0
            with pipe.bind(source).run("numpy") as batches:
                for batch in batches:
                    seen += len(batch["label"])
            assert seen == count

        return run

    return {
        "frame.with_columns(chain).collect_arrow()": frame,
        "sql(prep(jpeg)).collect()": sql,
        "pipeline over a list of dicts (bytes)": loader(records),
        "pipeline over scan_parquet": loader(dataio.scan_parquet(path)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "images.parquet"
        write_parquet(path, args.images)
        runs = contenders(path, args.images)
        for run in runs.values():  # warm: imports, the pool, the page cache
            run()
        rates: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                rates[name].append(args.images / (time.perf_counter() - start))
    print(f"{args.images} JPEGs, ImageNet chain, {cpu_workers()} workers")
    print(f"| {'contender':44s} | median img/s | rounds |")
    print(f"|{'-' * 46}|-------------:|--------|")
    for name, values in rates.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"| {name:44s} | {statistics.median(values):12.0f} | {shown} |")


if __name__ == "__main__":
    main()
