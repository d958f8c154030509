"""Call the image kernels from SQL: decode a binary column inside DataFusion."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

import dataio
from dataio.testing import make_jpegs


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_jpegs(tmp, 4, min_side=64, max_side=200)
        table = pa.table(
            {
                "name": [p.name for p in paths],
                "bytes": pa.array([Path(p).read_bytes() for p in paths], pa.binary()),
            }
        )
    ctx = dataio.sql_context()
    ctx.from_arrow(table, name="images")
    result = ctx.sql(
        "SELECT name, image_size(bytes)['width'] AS width, decode_image(bytes, 'rgb') AS image "
        "FROM images WHERE image_size(bytes)['width'] > 100"
    ).to_pylist()
    for row in result:
        image = row["image"]
        pixels = np.frombuffer(image["pixels"], np.uint8).reshape(
            image["height"], image["width"], image["channels"]
        )
        print(row["name"], row["width"], pixels.shape, pixels.mean().round(1))


if __name__ == "__main__":
    main()
