"""Sequential passes over Parquet frames decoded by Arrow's threads (``ReadAhead._scanned``).

Files holding several of a pass's row groups are scanned by pyarrow's dataset scanner
(no dataio pool thread, so no GIL handoff per row group); other blocks stay on dataio's
pool. Values against pyarrow's own read; a damaged row group and one over the decode
limit are raised when the pass reaches them, after every row before them (Arrow's scan
may report a read-ahead error early: the rest is then read on the pool).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
from dataio.engine import frame_readahead
from dataio.engine.frame_readahead import ReadAhead, reads_in_flight
from dataio.engine.frame_rows import FrameRows
from dataio.exceptions import FormatError, LimitError
from dataio.frame import scan_parquet


def table_of(first: int, n: int, *, width: int = 8) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table({"id": ids, "key": pa.array([f"{i:0{width}d}" for i in ids])})


def write_groups(path: Path, sizes: list[int], *, first: int = 0, wide: int = -1) -> Path:
    """A Parquet file of row groups of ``sizes`` rows (ids from ``first``); row group
    ``wide`` has 200-character keys."""
    with pq.ParquetWriter(path, table_of(0, 1).schema) as writer:
        for number, size in enumerate(sizes):
            width = 200 if number == wide else 8
            writer.write_table(table_of(first, size, width=width), row_group_size=size)
            first += size
    return path


def ids_of(frame: Any, size: int = 100) -> list[int]:
    pipe = dataio.pipeline(dataio.slot("id").passthrough(), dataio.batch(size))
    with pipe.bind(frame).run("numpy") as loader:
        return [i for batch in loader for i in batch["id"].tolist()]


def no_pool_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: FrameRows, block: Any, opened: Any) -> pa.Table:
        raise AssertionError(f"row group {block.index} of file {block.file} read on the pool")

    monkeypatch.setattr(FrameRows, "_read_block", refuse)


def test_parquet_row_groups_are_scanned_by_arrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # three files of several row groups: each file is one scan, the next starting early
    paths = [
        write_groups(tmp_path / "a.parquet", [300, 300, 300, 70]),
        write_groups(tmp_path / "b.parquet", [500, 130], first=970),
        write_groups(tmp_path / "c.parquet", [400, 400, 400], first=1600),
    ]
    no_pool_reads(monkeypatch)
    frame = scan_parquet([str(p) for p in paths])
    assert ids_of(frame, 64) == list(range(2800))
    rows = frame.by_position()
    assert isinstance(rows, FrameRows)
    got = pa.Table.from_batches([b for _, b in rows.stream_run(250, 2700)])
    want = pa.concat_tables(pq.read_table(p) for p in paths).slice(250, 2450)
    assert got.equals(want)
    assert reads_in_flight() == 0


def test_files_of_one_row_group_are_read_on_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(write_groups(tmp_path / f"{n}.parquet", [50], first=50 * n)) for n in range(4)]

    def refuse(self: ReadAhead, file: int, blocks: Any) -> Any:
        raise AssertionError("a file of one row group is not worth a scan")

    monkeypatch.setattr(ReadAhead, "_scan", refuse)
    assert ids_of(scan_parquet(paths), 16) == list(range(200))


def damaged_file(path: Path, sizes: list[int], bad: int) -> Path:
    """A file whose row group ``bad`` has a garbled data page header in its key column."""
    write_groups(path, sizes)
    column = pq.read_metadata(path).row_group(bad).column(1)
    data = bytearray(path.read_bytes())
    start = column.data_page_offset
    data[start : start + 64] = b"\xab" * 64
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("ahead", [2, 6])
def test_a_damaged_row_group_is_raised_after_the_rows_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: int
) -> None:
    # with 6 read ahead, Arrow reports the damage before delivering the row groups
    # before it: those are read again on the pool, and the error comes at its place
    monkeypatch.setattr(frame_readahead, "SCAN_AHEAD", ahead)
    # (saved for the fuzz replay as fuzz/corpus/parquet/damaged-page-header-in-row-group-5)
    path = damaged_file(tmp_path / "damaged.parquet", [500] * 8, bad=5)
    ids: list[int] = []
    pipe = dataio.pipeline(
        dataio.slot("id").passthrough(), dataio.slot("key").passthrough(), dataio.batch(100)
    )
    loader = pipe.bind(scan_parquet(str(path))).run("numpy")
    with loader, pytest.raises(FormatError, match=r"damaged\.parquet"):
        for batch in loader:
            ids.extend(batch["id"].tolist())
    assert ids == list(range(2500))  # every row of row groups 0..4, in order
    assert reads_in_flight() == 0


def test_a_row_group_over_the_decode_limit_is_refused_when_reached(tmp_path: Path) -> None:
    path = write_groups(tmp_path / "wide.parquet", [400] * 6, wide=3)
    metadata = pq.read_metadata(path)
    sizes = [metadata.row_group(g).total_byte_size for g in range(6)]
    assert max(sizes) == sizes[3] > 4 * max(sizes[:3])
    ids: list[int] = []
    pipe = dataio.pipeline(dataio.slot("id").passthrough(), dataio.batch(100))
    loader = pipe.bind(scan_parquet(str(path))).run("numpy")
    limited = dataio.limits.scoped(max_decoded_bytes=2 * max(sizes[:3]))
    with loader, limited, pytest.raises(LimitError, match="row group 3"):
        for batch in loader:
            ids.extend(batch["id"].tolist())
    assert ids == list(range(1200))  # row groups 0..2, then the refusal


def test_a_scanned_pass_left_early_ends_and_the_next_one_reads_everything(
    tmp_path: Path,
) -> None:
    path = write_groups(tmp_path / "t.parquet", [1000] * 6)
    frame = scan_parquet(str(path))
    pipe = dataio.pipeline(dataio.slot("id").passthrough(), dataio.batch(10))
    with pipe.bind(frame).run("numpy") as loader:
        first = next(iter(loader))
        assert first["id"].tolist() == list(range(10))
    rows = frame.by_position()
    assert isinstance(rows, FrameRows)
    stream = rows.stream_run(0, rows.length())
    assert next(stream)[0] == 0
    stream.close()  # drops the scan reading ahead
    assert ids_of(frame) == list(range(6000))


def test_a_forked_child_scans_after_the_parent_scanned(tmp_path: Path) -> None:
    """A torch DataLoader worker forked after a scanned pass: Arrow's thread pool starts
    afresh in the child, whose pass gives the parent's values (no hang)."""
    path = write_groups(tmp_path / "t.parquet", [700] * 5)
    frame = scan_parquet(str(path))
    assert ids_of(frame) == list(range(3500))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = 0 if ids_of(scan_parquet(str(path))) == list(range(3500)) else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
