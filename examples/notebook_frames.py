"""A notebook session with lazy frames: scan, filter, select, SQL, collect, polars; then
a loader seen from the notebook: reprs, a batch drawn as a picture, a skip epoch and its
rejects queried with SQL.

Writes a small three-file Parquet dataset of image metadata, then queries it. Building a
frame reads only the schema; the ``collect*`` / ``to_polars`` calls run DataFusion.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dataio import col, count
from dataio.frame import scan_parquet, sql


def write_dataset(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for part in range(3):
        n = 200
        ids = np.arange(part * n, (part + 1) * n)
        pq.write_table(
            pa.table(
                {
                    "key": [f"img-{i:05d}" for i in ids],
                    "height": rng.integers(128, 1024, n),
                    "width": rng.integers(128, 1024, n),
                    "label": pa.array(rng.integers(0, 5, n), pa.int32()),
                    "split": np.where(ids % 10 == 0, "val", "train"),
                }
            ),
            root / f"part-{part}.parquet",
            row_group_size=50,
        )
    return root


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = write_dataset(Path(tmp))
        images = scan_parquet(root)
        large = (
            images.filter((col("height") > 512) & (col("split") == "train"))
            .with_columns(area=col("height") * col("width"))
            .select("key", "label", "area")
        )
        print(large)  # the schema and the plan; nothing has run yet
        print("first rows:", large.limit(3).collect().to_pylist())

        # a Python predicate runs on the rows that pass the pushed-down part
        square = images.filter("label = 2", lambda r: abs(r["height"] - r["width"]) < 64)
        print("near-square label-2 images:", square.collect().num_rows)

        per_label = sql(
            "SELECT label, count(*) AS n, avg(height) AS mean_height "
            "FROM images WHERE split = 'train' GROUP BY label ORDER BY label",
            images=images,
        )
        print(per_label.to_polars())

        same = images.filter(col("split") == "train").group_by("label").agg(n=count())
        counts = sorted(same.collect().column("n").to_pylist())
        print("agrees with the method API:", counts == per_label.to_polars()["n"].sort().to_list())

        table = large.collect()
        print(f"arrow: {table.num_rows} rows, schema {table.schema.types}")
        print(large.explain().splitlines()[0], "...")

        training_view(Path(tmp))


def training_view(root: Path) -> None:
    """Reprs, a picture of a batch, a skip epoch and its rejects queried with SQL."""
    import dataio
    from dataio.testing import make_jpegs

    paths = make_jpegs(root / "jpegs", 11, min_side=96, max_side=160, seed=3)
    broken = root / "jpegs" / "broken.jpg"
    broken.write_bytes(paths[0].read_bytes()[:200])  # a header, then nothing
    records = [{"jpeg": str(p), "label": i % 3} for i, p in enumerate([*paths, broken])]
    image = dataio.slot("jpeg").decode_image(mode="rgb").resize_short(64).center_crop(64)
    pipe = dataio.pipeline(
        image.normalize("imagenet"), dataio.slot("label").passthrough(), dataio.batch(6)
    )
    bound = pipe.bind(records)
    print(bound)  # one line: the plan's signature, slots, the source
    with bound.run("numpy", on_failure="skip") as loader:
        print(loader)
        batches = list(loader)
        print(f"{len(batches)} batches, {sum(len(b) for b in batches)} images kept")
        grid = dataio.show(batches[0], slot="jpeg")  # normalize and CHW undone, keys as captions
        grid.save(root / "first-batch.png")
        print(f"grid {grid.size[0]}x{grid.size[1]} saved as first-batch.png")
        rejects = loader.rejects()
        print(loader.bottleneck())
    failed = dataio.sql(
        "SELECT position, error_type, stage FROM rejects ORDER BY position", rejects=rejects
    ).collect()
    print("rejected rows:", failed.to_pylist())


if __name__ == "__main__":
    main()
