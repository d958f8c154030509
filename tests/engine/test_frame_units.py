"""Frames cut into units (what ``to_ray`` read tasks run: files, runs of row groups),
without Ray.

The oracle is the frame's own ``collect()``: units in file order give its rows, and each
unit's positions continue where the previous file's rows ended.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
from dataio.engine.frame_units import frame_units, unit_batches
from dataio.exceptions import PlanError


@pytest.fixture
def parts(tmp_path):
    for i in range(3):
        ids = np.arange(i * 10, i * 10 + 10 - i)  # 10, 9 and 8 rows
        table = pa.table({"x": ids, "s": [f"s{j}" for j in ids]})
        pq.write_table(table, tmp_path / f"f{i}.parquet", row_group_size=4)
    return tmp_path


def test_units_in_file_order_give_the_frame_with_positions(parts) -> None:
    frame = (
        dataio.scan_parquet(str(parts / "*.parquet"))
        .filter(dataio.col("x") % 3 == 0)
        .with_columns(y=dataio.col("x") * 2)
    )
    units = frame_units(frame.plan)
    # one unit per row group (of 4 rows), counted with the filter, positions running on
    want_units, start = [], 0
    for i in range(3):
        path = str(parts / f"f{i}.parquet")
        groups = pq.ParquetFile(path).read().column("x").to_numpy()
        for g in range(0, len(groups), 4):
            kept = int((groups[g : g + 4] % 3 == 0).sum())
            want_units.append((path, (g // 4,), start, kept))
            start += kept
    assert [(u.path, u.row_groups, u.start, u.rows) for u in units] == want_units
    got = pa.Table.from_batches([b for u in units for b in unit_batches(u)])
    want = frame.collect()
    assert got.drop_columns(["__position__"]).equals(want)
    assert got["__position__"].to_pylist() == list(range(want.num_rows))
    plain = pa.Table.from_batches([b for b in unit_batches(units[1], position=None)])
    assert plain.column_names == want.column_names


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda f: f.sort("x"), "sort"),
        (lambda f: f.join(f, on="x"), "join"),
        (lambda f: f.group_by("s").agg(dataio.col("x").sum()), "needs all rows at once"),
        (lambda f: f.head(3), "limit"),
        (lambda f: f.unique(), "needs all rows at once"),
        (lambda f: f.filter(lambda row: row["x"] > 3), "Python code"),
    ],
)
def test_plans_that_need_all_rows_are_plan_errors(parts, build, message) -> None:
    frame = build(dataio.scan_parquet(str(parts / "*.parquet")))
    with pytest.raises(PlanError, match=message):
        frame_units(frame.plan)


def test_seeded_chains_are_refused(parts, tiny_images) -> None:
    table = pa.table({"jpeg": pa.array(tiny_images, pa.binary())})
    path = parts / "images.parquet"
    pq.write_table(table, path)
    flip = dataio.transforms.random_flip()
    chain = dataio.col("jpeg").image.decode().then(flip, dataio.transforms.center_crop(8)).seed(1)
    frame = dataio.scan_parquet(str(path)).with_columns(flipped=chain)
    with pytest.raises(PlanError, match="numbers the frame's rows"):
        frame_units(frame.plan)


def test_import_dataio_and_frames_never_import_ray(parts) -> None:
    code = (
        "import sys, dataio;"
        f"f = dataio.scan_parquet({str(parts / '*.parquet')!r}).filter(dataio.col('x') > 1);"
        "f.collect(); import dataio.plan.pipeline;"
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_many_row_groups_are_cut_into_at_most_max_units_runs(tmp_path, monkeypatch) -> None:
    from dataio.engine import frame_units as module

    monkeypatch.setattr(module, "MAX_UNITS_PER_FILE", 3)
    path = tmp_path / "eight.parquet"
    pq.write_table(pa.table({"x": np.arange(40)}), path, row_group_size=5)
    frame = dataio.scan_parquet(str(path)).with_columns(y=dataio.col("x") + 1)
    units = frame_units(frame.plan)
    assert [(u.row_groups, u.start, u.rows) for u in units] == [
        ((0, 1, 2), 0, 15),
        ((3, 4), 15, 10),
        ((5, 6, 7), 25, 15),
    ]
    got = pa.Table.from_batches([b for u in units for b in unit_batches(u)])
    assert got.drop_columns(["__position__"]).equals(frame.collect())


def test_feather_files_stay_whole_units(tmp_path) -> None:
    import pyarrow.feather as feather

    for i in range(2):
        feather.write_feather(
            pa.table({"x": np.arange(i * 6, i * 6 + 6)}), tmp_path / f"{i}.feather", chunksize=2
        )
    frame = dataio.scan_feather(str(tmp_path / "*.feather"))
    units = frame_units(frame.plan)
    assert [(u.row_groups, u.start, u.rows) for u in units] == [(None, 0, 6), (None, 6, 6)]
