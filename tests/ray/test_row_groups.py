"""``to_ray`` cuts Parquet files into runs of row groups: one big file, several read tasks.

Oracles: the frame's own ``collect()`` (values, order) and the file's footer (which row
groups hold which rows). Started only inside a namespace with nothing but ``lo``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
import dataio.ray
from dataio.engine.frame_units import frame_units
from dataio.ray.datasets import POSITION, _datasource

ROWS, GROUP = 80, 10  # one file of 8 row groups


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "big.parquet"
    ids = np.arange(ROWS, dtype=np.int64)
    table = pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "blob": [bytes([i]) * (i + 1) for i in ids]}
    )
    pq.write_table(table, path, row_group_size=GROUP)
    assert pq.ParquetFile(path).metadata.num_row_groups == ROWS // GROUP
    return path


def _table(ds) -> pa.Table:
    return pa.concat_tables(
        [pa.table(b) for b in ds.iter_batches(batch_format="pyarrow", batch_size=None)]
    )


def _tasks_run(ds) -> int:
    """How many read tasks Ray ran for the dataset (from its execution stats)."""
    found = re.search(r"Read\w*: (\d+) tasks executed", ds.stats())
    assert found, ds.stats()
    return int(found.group(1))


def test_one_file_is_read_by_one_task_per_run_of_row_groups(ray_session, big_file) -> None:
    frame = dataio.scan_parquet(str(big_file))
    units = frame_units(frame.plan)
    assert [u.row_groups for u in units] == [(g,) for g in range(ROWS // GROUP)]
    assert [(u.start, u.rows) for u in units] == [(g * GROUP, GROUP) for g in range(8)]
    tasks = _datasource(units, None).get_read_tasks(4)
    assert [t.metadata.num_rows for t in tasks] == [20, 20, 20, 20]
    want = frame.collect()
    for k, task in enumerate(tasks):  # each task reads its two row groups only
        got = pa.concat_tables(list(task()))
        assert got[POSITION].to_pylist() == list(range(20 * k, 20 * (k + 1)))
        assert got.drop_columns([POSITION]).equals(want.slice(20 * k, 20))

    ds = frame.to_ray(parallelism=4).materialize()
    assert _tasks_run(ds) == 4
    got = _table(ds)
    assert got.drop_columns([POSITION]).equals(want)
    assert got[POSITION].to_pylist() == list(range(ROWS))


def test_a_filtered_big_file_keeps_frame_positions_and_drops_pruned_groups(
    ray_session, big_file
) -> None:
    frame = (
        dataio.scan_parquet(str(big_file))
        .filter((dataio.col("id") >= 25) & (dataio.col("id") % 4 != 0))
        .with_columns(twice=dataio.col("id") * 2)
        .select("id", "twice", "blob")
    )
    units = frame_units(frame.plan)
    # row groups 0 and 1 hold ids < 20: their statistics exclude them, no unit reads them
    assert [u.row_groups for u in units] == [(g,) for g in range(2, 8)]
    want = frame.collect()
    kept = [
        sum(1 for i in range(g * GROUP, (g + 1) * GROUP) if i >= 25 and i % 4) for g in range(8)
    ]
    assert [u.rows for u in units] == kept[2:]
    assert [u.start for u in units] == [sum(kept[2:g]) for g in range(2, 8)]
    ds = frame.to_ray(parallelism=3).materialize()
    assert _tasks_run(ds) == 3
    got = _table(ds)
    assert got.drop_columns([POSITION]).equals(want)
    assert got[POSITION].to_pylist() == list(range(want.num_rows))
    assert got["id"].to_pylist() == [i for i in range(25, ROWS) if i % 4]
