"""Regressions of the frame's sequential passes and ``to_ray`` units against pyarrow.

* Arrow's scan of a file's row groups must deliver them in the order asked: pyarrow's
  ``make_fragment(row_groups=[7, 8, 9, 10])`` scans ``[8, 9, 10, 7]``, so passes starting
  partway into a file (shard ranks, ``limit(offset=)``) gave other rows.
* A row group over ``max_decoded_bytes`` is refused when the pass reaches it, also when
  its read is submitted ahead on dataio's pool.
* ``to_ray`` units of a float filter over NaN give the frame's rows (DataFusion orders
  NaN above every number; pyarrow's filter drops NaN rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import dataio
from dataio.engine import frame_readahead
from dataio.engine.frame_readahead import reads_in_flight
from dataio.engine.frame_rows import FrameRows
from dataio.exceptions import LimitError
from dataio.frame import scan_parquet


def write_ids(path: Path, rows: int, group: int) -> Path:
    pq.write_table(pa.table({"id": np.arange(rows, dtype=np.int64)}), path, row_group_size=group)
    return path


def ids_of(frame: Any, **run: Any) -> list[int]:
    pipe = dataio.pipeline(dataio.slot("id").passthrough(), dataio.batch(50))
    with pipe.bind(frame).run("numpy", **run) as loader:
        return [i for batch in loader for i in batch["id"].tolist()]


def no_pool_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: FrameRows, block: Any, opened: Any) -> pa.Table:
        raise AssertionError(f"row group {block.index} of file {block.file} read on the pool")

    monkeypatch.setattr(FrameRows, "_read_block", refuse)


def test_a_pass_starting_late_in_a_file_scans_its_row_groups_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_ids(tmp_path / "a.parquet", 1100, 100)  # 11 row groups of 100
    oracle = pq.read_table(path)
    no_pool_reads(monkeypatch)  # every run below is Arrow's scan, in order
    rows = scan_parquet(str(path)).by_position()
    assert isinstance(rows, FrameRows)
    for start in range(500, 1000, 50):  # from row group 5 .. 9 (a run of 2+ groups)
        for stop in (min(start + 250, 1100), 1100):
            got = pa.Table.from_batches([b for _, b in rows.stream_run(start, stop)])
            assert got.equals(oracle.slice(start, stop - start)), (start, stop)
    assert reads_in_flight() == 0


def test_limit_with_an_offset_gives_the_rows_at_that_offset(tmp_path: Path) -> None:
    path = write_ids(tmp_path / "a.parquet", 1100, 100)
    oracle = pq.read_table(path)["id"].to_pylist()
    frame = scan_parquet(str(path))
    assert ids_of(frame.limit(400, offset=700)) == oracle[700:1100]
    assert ids_of(frame.limit(330, offset=540)) == oracle[540:870]


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_shard_ranks_of_an_odd_file_are_disjoint_and_complete(tmp_path: Path, ranks: int) -> None:
    # 1037 rows in row groups of 97: the last one short (67 rows)
    path = write_ids(tmp_path / "odd.parquet", 1037, 97)
    oracle = pq.read_table(path)["id"].to_pylist()
    frame = scan_parquet(str(path))
    each = len(oracle) // ranks
    for rank in range(ranks):
        got = ids_of(frame, shard={"id": rank, "of": ranks, "pad": False})
        assert got == oracle[rank * each : (rank + 1) * each], rank
    padded = [ids_of(frame, shard={"id": r, "of": ranks, "pad": True}) for r in range(ranks)]
    every = [i for rank in padded for i in rank]
    assert sorted(set(every)) == oracle  # none missing
    assert len({len(rank) for rank in padded}) == 1  # equal counts
    assert len(every) - len(oracle) < ranks  # the only repeats are the padding


class _Reordering:
    """A Parquet format whose fragments scan row groups in reverse (what pyarrow's
    ``make_fragment(row_groups=...)`` does to some runs)."""

    def __init__(self) -> None:
        self.format = ds.ParquetFileFormat()

    def make_fragment(self, path: str, filesystem: Any = None) -> Any:
        return _ReorderedFile(self.format, path, filesystem)


class _ReorderedFile:
    def __init__(self, format: Any, path: str, filesystem: Any) -> None:
        self.format, self.path, self.filesystem = format, path, filesystem

    def subset(self, *, row_group_ids: list[int]) -> Any:
        groups = list(reversed(row_group_ids))
        return self.format.make_fragment(self.path, self.filesystem, row_groups=groups)


def test_a_scan_that_would_reorder_row_groups_is_read_on_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # equal row groups pass the row-count check: the order itself is checked
    path = write_ids(tmp_path / "a.parquet", 600, 100)
    monkeypatch.setattr(frame_readahead, "_parquet_format", _Reordering)
    scans: list[int] = []
    real = frame_readahead.ReadAhead._scan

    def counted(self: Any, file: int, blocks: Any) -> Any:
        scans.append(file)
        return real(self, file, blocks)

    monkeypatch.setattr(frame_readahead.ReadAhead, "_scan", counted)
    assert ids_of(scan_parquet(str(path))) == list(range(600))
    assert ids_of(scan_parquet(str(path)).limit(300, offset=250)) == list(range(250, 550))
    assert scans  # the scan was tried, refused, and the pool read the rows
    assert reads_in_flight() == 0


def _wide_groups(path: Path, sizes: list[int], *, first: int, wide: int) -> Path:
    """Row groups of ``sizes`` rows (ids from ``first``): row group ``wide`` has
    200-character keys, the others 8."""
    schema = pa.schema([("id", pa.int64()), ("key", pa.string())])
    with pq.ParquetWriter(path, schema) as writer:
        for number, size in enumerate(sizes):
            ids = np.arange(first, first + size, dtype=np.int64)
            width = 200 if number == wide else 8
            keys = pa.array([f"{i:0{width}d}" for i in ids])
            writer.write_table(pa.table({"id": ids, "key": keys}), row_group_size=size)
            first += size
    return path


def _rows_before_refusal(files: list[str], limit: int) -> list[int]:
    ids: list[int] = []
    pipe = dataio.pipeline(dataio.slot("id").passthrough(), dataio.batch(100))
    loader = pipe.bind(scan_parquet(files)).run("numpy")
    limited = dataio.limits.scoped(max_decoded_bytes=limit)
    with loader, limited, pytest.raises(LimitError, match="max_decoded_bytes"):
        for batch in loader:
            ids.extend(batch["id"].tolist())
    assert reads_in_flight() == 0
    return ids


def test_a_pooled_row_group_over_the_limit_is_refused_when_reached(tmp_path: Path) -> None:
    # files of one row group each are read on the pool, READ_AHEAD ahead: the refusal of
    # file 3 comes after the rows of files 0..2, not when its read would be submitted
    files = [
        str(_wide_groups(tmp_path / f"one{i}.parquet", [400], first=400 * i, wide=i - 3))
        for i in range(6)
    ]
    small = pq.read_metadata(files[0]).row_group(0).total_byte_size
    assert pq.read_metadata(files[3]).row_group(0).total_byte_size > 4 * small
    assert _rows_before_refusal(files, 2 * small) == list(range(1200))


@pytest.mark.parametrize("pooled", [False, True])
def test_a_row_group_over_the_limit_comes_after_the_groups_before_it(
    tmp_path: Path, pooled: bool
) -> None:
    # one file of 6 row groups (Arrow's scan); with a file of one row group after it the
    # whole pass is read on the pool
    many = _wide_groups(tmp_path / "a.parquet", [400] * 6, first=0, wide=3)
    files = [str(many)]
    if pooled:
        files.append(str(_wide_groups(tmp_path / "b.parquet", [400], first=2400, wide=-1)))
    sizes = [pq.read_metadata(many).row_group(g).total_byte_size for g in range(6)]
    assert sizes[3] > 4 * max(sizes[:3])
    assert _rows_before_refusal(files, 2 * max(sizes[:3])) == list(range(1200))


@pytest.mark.parametrize(
    "where",
    [
        dataio.col("f") > 0.5,
        dataio.col("f") < 0.5,
        (dataio.col("f") >= 0.2) & (dataio.col("x") % 2 == 1),
    ],
)
def test_units_of_a_float_filter_over_nan_give_the_frames_rows(tmp_path: Path, where: Any) -> None:
    from dataio.engine.frame_units import frame_units, unit_batches

    # NaN in most row groups (one of NaN only, one whose statistics, which leave NaN
    # out, exclude 'f > 0.5'): DataFusion, the frame's engine, orders NaN above every
    # number and prunes row groups by statistics
    f = np.array(
        [0.9, np.nan, 0.1, 0.7, 0.8, np.nan, 0.2, 0.6, np.nan, np.nan, 0.3, 0.0, 0.1, np.nan]
    )
    table = pa.table({"x": np.arange(len(f)), "f": f, "s": [f"s{i}" for i in range(len(f))]})
    pq.write_table(table, tmp_path / "many.parquet", row_group_size=2)  # 7 row groups
    frame = dataio.scan_parquet(str(tmp_path / "many.parquet")).filter(where)
    units = frame_units(frame.plan)
    assert all(unit.row_groups is not None for unit in units)  # row-group units
    want = frame.collect()
    got = pa.Table.from_batches([b for unit in units for b in unit_batches(unit)])
    assert got.column_names == [*want.column_names, "__position__"]
    assert got["x"].to_pylist() == want["x"].to_pylist()
    assert got["s"].to_pylist() == want["s"].to_pylist()
    np.testing.assert_array_equal(got["f"].to_numpy(), want["f"].to_numpy())  # NaN == NaN
    assert got["__position__"].to_pylist() == list(range(want.num_rows))
    assert sum(unit.rows for unit in units) == want.num_rows
    assert np.isnan(want["f"].to_numpy()).any() == ("> 0.5" in repr(where) or ">=" in repr(where))


def test_the_frame_orders_nan_above_every_number(tmp_path: Path) -> None:
    # the frame's rule the units follow (numpy oracle, NaN as +inf)
    f = np.array([0.9, np.nan, 0.1, 0.7, np.nan, 0.2])
    pq.write_table(pa.table({"x": np.arange(6), "f": f}), tmp_path / "t.parquet")
    frame = dataio.scan_parquet(str(tmp_path / "t.parquet")).filter(dataio.col("f") > 0.5)
    keys = np.where(np.isnan(f), np.inf, f)
    assert frame.collect()["x"].to_pylist() == np.flatnonzero(keys > 0.5).tolist()


def test_units_skip_row_groups_a_filter_excludes_by_statistics(tmp_path: Path) -> None:
    from dataio.engine.frame_units import frame_units, unit_batches

    # row group 0's pages are garbage: only a read that skips it by statistics works
    path = tmp_path / "sorted.parquet"
    ids = np.arange(30, dtype=np.int64)
    table = pa.table({"id": ids, "v": ids * 2.0})
    pq.write_table(table, path, row_group_size=10, compression="none")
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    for c in range(meta.num_columns):
        chunk = meta.row_group(0).column(c)
        start = (
            chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
        )
        data[start : start + chunk.total_compressed_size] = b"\xee" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
    frame = dataio.scan_parquet(str(path)).filter(dataio.col("v") >= 24.0)
    units = frame_units(frame.plan)
    got = pa.Table.from_batches([b for unit in units for b in unit_batches(unit)])
    assert got["id"].to_pylist() == list(range(12, 30))
    assert got["__position__"].to_pylist() == list(range(18))


def test_remote_units_of_a_float_filter_over_nan_give_the_frames_rows() -> None:
    # the frame reads a remote file as a pyarrow dataset, its filter run by pyarrow
    # (IEEE NaN rules): its units too
    import io

    from helpers.object_servers import RangeServer

    from dataio.engine.frame_units import frame_units, unit_batches
    from dataio.io import config

    f = np.array([0.9, np.nan, 0.1, 0.7, 0.8, np.nan, 0.1, np.nan, 0.3, 0.6])
    sink = io.BytesIO()
    pq.write_table(pa.table({"x": np.arange(len(f)), "f": f}), sink, row_group_size=2)
    server = RangeServer()
    try:
        server.objects["/t/nan.parquet"] = sink.getvalue()
        config.reset()
        frame = scan_parquet(f"{server.url}/t/nan.parquet").filter(dataio.col("f") > 0.5)
        units = frame_units(frame.plan)
        assert all(unit.row_groups is not None for unit in units)
        got = pa.Table.from_batches([b for unit in units for b in unit_batches(unit)])
        want = frame.collect()
        assert got["x"].to_pylist() == want["x"].to_pylist()
        assert got["__position__"].to_pylist() == list(range(want.num_rows))
        np.testing.assert_array_equal(got["f"].to_numpy(), want["f"].to_numpy())
    finally:
        server.kill()
        config.reset()
