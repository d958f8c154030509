"""Media rows of Arrow batches run on the pool several per task, each still on its own.

The oracle is the same rows as a list of dicts through the Python-record path (one pool
task per row): values, source sizes, skipped rows, keys and error messages must match.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
from dataio.engine import executor
from tests.helpers.arrow_sources import TableSource

ROWS = 40
BAD = (3, 8, 17, 31)  # spread over different tasks of 8 rows


def jpeg(width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Two pool workers (a batch of 32 runs in 4 tasks of 8) and a count of the tasks."""
    seen = {"tasks": 0}
    pool = executor.cpu_pool()

    class Counting:
        def submit(self, fn: Any, *args: Any) -> Any:
            if getattr(fn, "__name__", "") == "_run_rows":
                seen["tasks"] += 1
            return pool.submit(fn, *args)

    monkeypatch.setattr(executor, "cpu_workers", lambda: 2)
    monkeypatch.setattr(executor, "cpu_pool", lambda: Counting())
    return seen


def test_grouped_rows_equal_one_task_per_row(submitted: dict[str, int]) -> None:
    images = [jpeg(24 + i % 7, 20 + i % 5, i) for i in range(ROWS)]
    for row in BAD:
        images[row] = b"not a jpeg " + bytes([row])
    keys = [f"r{i}" for i in range(ROWS)]
    table = pa.table({"key": keys, "image": pa.array(images, pa.binary())})
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=8, w=6), dataio.batch(32))
    got = list(pipe.bind(TableSource(table)).run(on_failure="skip"))
    tasks = submitted["tasks"]
    want = list(pipe.bind(table.to_pylist()).run(on_failure="skip"))
    # batches of 32 and 8 rows: tasks of 8 rows, then of 2 (two tasks per worker)
    assert tasks == 4 + 4
    assert submitted["tasks"] - tasks == ROWS  # the records path: a task per row
    assert [b.indices for b in got] == [b.indices for b in want]
    assert [b.row_keys for b in got] == [b.row_keys for b in want]
    assert sorted(i for b in got for i in b.indices) == [i for i in range(ROWS) if i not in BAD]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
        assert a.sizes == b.sizes
        assert [(e.index, e.key, str(e)) for e in a.errors] == [
            (e.index, e.key, str(e)) for e in b.errors
        ]
    assert [e.index for b in got for e in b.errors] == list(BAD)


def test_a_small_batch_runs_a_task_per_row(submitted: dict[str, int]) -> None:
    images = [jpeg(16, 16, i) for i in range(6)]
    table = pa.table({"image": pa.array(images, pa.binary())})
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=4, w=4), dataio.batch(3))
    got = list(pipe.bind(TableSource(table)).run())
    assert submitted["tasks"] == 6  # 3 rows // (2 tasks x 2 workers): one row a task
    assert [b.indices for b in got] == [[0, 1, 2], [3, 4, 5]]


def test_tasks_hold_no_more_rows_than_the_concurrency(submitted: dict[str, int]) -> None:
    images = [jpeg(16, 16, i) for i in range(32)]
    table = pa.table({"image": pa.array(images, pa.binary())})
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=4, w=4), dataio.batch(32))
    (got,) = pipe.bind(TableSource(table)).run(concurrency=2)
    assert submitted["tasks"] == 16  # tasks of 2 rows, not 8
    (want,) = pipe.bind([{"image": im} for im in images]).run()
    np.testing.assert_array_equal(got["image"], want["image"])
