"""``dataio.ray.batch_rows``: Ray batch sizes from a pipeline's output bytes (no Ray).

The oracle is NumPy: the bytes of one row of each slot's output, run by a local loader.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import dataio
from dataio.ray.pipeline import BATCH_BYTES, UNKNOWN_ROW_BYTES, batch_rows


def _row_bytes(pipe: dataio.Pipeline, jpeg: bytes) -> int:
    """One row's output bytes, measured on a local run."""
    table = pa.table({"image": pa.array([jpeg], pa.binary()), "label": [1]})
    with pipe.bind(table).run("numpy") as loader:
        batch = next(iter(loader))
    return sum(np.asarray(batch[s.name])[0].nbytes for s in pipe.slots)


@pytest.mark.parametrize(
    ("chain", "batch"),
    [
        (lambda s: s.resize_short(256).center_crop(h=224, w=224).normalize("imagenet"), 55),
        (lambda s: s.resize_short(256).center_crop(h=224, w=224), 222),
        (lambda s: s.resize_short(64).center_crop(h=32, w=32).to_dtype("float16"), 1024),
    ],
)
def test_batches_weigh_about_the_target(chain, batch, tiny_images) -> None:
    pipe = dataio.pipeline(
        chain(dataio.slot("image").decode_image()),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
    )
    rows = batch_rows(pipe)
    assert rows == batch
    row = _row_bytes(pipe, tiny_images[0]) + 8  # + the passthrough label
    assert rows == min(1024, BATCH_BYTES // row)


def test_shapes_the_data_decides_count_a_megabyte() -> None:
    pipe = dataio.pipeline(dataio.slot("image").decode_image(), dataio.batch(4))
    assert batch_rows(pipe) == BATCH_BYTES // UNKNOWN_ROW_BYTES
    assert batch_rows(pipe, target=10) == 1  # one row at least
