"""A notebook session with lazy frames: scan, filter, select, SQL, collect, polars.

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


if __name__ == "__main__":
    main()
