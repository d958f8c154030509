"""Sequential frame passes (``FrameRows.stream_run``, ``stream._streamed_chunks``): whole
row groups read ahead (with Arrow's threads or on dataio's pool) and cut into batches.
Values, order, shards and resume against pyarrow's own read of the files; for reads on
the pool (Feather blocks here), the read-ahead bound, nothing left on the pool after a
pass is abandoned and an error in a later block raised when reached (Arrow's scans of
Parquet row groups: tests/engine/test_frame_scan.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume

import dataio
from dataio.engine import frame_readahead
from dataio.engine.frame_readahead import READ_AHEAD, reads_in_flight
from dataio.engine.frame_rows import FrameRows
from dataio.exceptions import FormatError
from dataio.frame import LazyFrame, scan_feather, scan_parquet

# Uneven row groups across files: batches straddle row groups and files.
GROUPS = {"a": [30, 30, 30, 7], "b": [50, 13], "c": [40, 40, 40]}
TOTAL = sum(sum(sizes) for sizes in GROUPS.values())


def part(first: int, n: int) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "key": pa.array([f"k{i:05d}" for i in ids]),
            "blob": pa.array([bytes([i % 251]) * (1 + i % 9) for i in ids], pa.binary()),
        }
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("readahead")
    first, parquet, arrow = 0, [], []
    for name, sizes in GROUPS.items():
        table = part(first, sum(sizes))
        path = root / f"{name}.parquet"
        with pq.ParquetWriter(path, table.schema) as writer:
            offset = 0
            for size in sizes:
                writer.write_table(table.slice(offset, size), row_group_size=size)
                offset += size
        parquet.append(str(path))
        feather_path = root / f"{name}.feather"
        feather.write_feather(table, feather_path, chunksize=sizes[0], compression="uncompressed")
        arrow.append(str(feather_path))
        first += sum(sizes)
    expected = pa.concat_tables(pq.read_table(p) for p in parquet)
    return {"parquet": parquet, "feather": arrow, "table": expected}


def frame_of(files: dict[str, Any], kind: str) -> LazyFrame:
    return scan_parquet(files["parquet"]) if kind == "parquet" else scan_feather(files["feather"])


def rows_of(frame: LazyFrame) -> FrameRows:
    rows = frame.by_position()
    assert isinstance(rows, FrameRows)
    return rows


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize(("start", "stop"), [(0, TOTAL), (0, 1), (29, 31), (95, 180), (96, 97)])
def test_stream_run_equals_pyarrow(files: dict[str, Any], kind: str, start: int, stop: int):
    rows = rows_of(frame_of(files, kind))
    pieces = list(rows.stream_run(start, stop))
    firsts = [first for first, _ in pieces]
    assert firsts == sorted(firsts) and firsts[0] == start
    got = pa.Table.from_batches([batch for _, batch in pieces])
    assert got.equals(files["table"].slice(start, stop - start))
    for (first, batch), after in zip(pieces, [*firsts[1:], stop], strict=True):
        assert first + batch.num_rows == after  # consecutive, no gap or overlap


def test_stream_run_of_a_limited_projection(files: dict[str, Any]) -> None:
    frame = scan_parquet(files["parquet"]).select("key", "id").limit(100, offset=5)
    rows = rows_of(frame)
    got = pa.Table.from_batches([b for _, b in rows.stream_run(0, rows.length())])
    assert got.equals(files["table"].select(["key", "id"]).slice(5, 100))


def test_stream_run_refuses_positions_outside(files: dict[str, Any]) -> None:
    rows = rows_of(frame_of(files, "parquet"))
    with pytest.raises(dataio.exceptions.OutOfRangeError):
        list(rows.stream_run(0, TOTAL + 1))
    assert list(rows.stream_run(5, 5)) == []


def plan(size: int, *, drop_last: bool = False) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("id").passthrough(),
        dataio.slot("key").passthrough(),
        dataio.batch(size, drop_last=drop_last),
    )


def delivered(frame: LazyFrame, size: int, **options: Any) -> list[tuple[list[int], list[int]]]:
    drop_last = options.pop("drop_last", False)
    with plan(size, drop_last=drop_last).bind(frame).run("numpy", **options) as loader:
        return [(list(b.indices), b["id"].tolist()) for b in loader]


@pytest.mark.parametrize("kind", ["parquet", "feather"])
@pytest.mark.parametrize("size", [1, 7, 16, 64, 400])
@pytest.mark.parametrize("drop_last", [False, True])
def test_loader_batches_equal_the_files_in_order(
    files: dict[str, Any], kind: str, size: int, drop_last: bool
) -> None:
    ids = files["table"].column("id").to_pylist()
    count = TOTAL - TOTAL % size if drop_last else TOTAL
    want = [ids[i : min(i + size, count)] for i in range(0, count, size)]
    got = delivered(frame_of(files, kind), size, drop_last=drop_last)
    assert [b[1] for b in got] == want
    assert [b[0] for b in got] == [
        list(range(i, min(i + size, count))) for i in range(0, count, size)
    ]


@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("pad", [True, False])
def test_shards_deliver_their_positions(files: dict[str, Any], world: int, pad: bool) -> None:
    ids = files["table"].column("id").to_pylist()
    rows = rows_of(frame_of(files, "parquet"))
    for rank in range(world):
        positions = list(rows.shard_positions(rank, world, pad=pad))
        got = delivered(frame_of(files, "parquet"), 16, shard={"id": rank, "of": world, "pad": pad})
        assert [i for b in got for i in b[1]] == [ids[p] for p in positions]
        assert [i for b in got for i in b[0]] == positions


@pytest.mark.parametrize("after", [1, 5, 9])
def test_resume(files: dict[str, Any], after: int) -> None:
    frame = frame_of(files, "parquet")
    check_resume(lambda **o: plan(16).bind(frame).run("numpy", **o), after)
    check_resume(
        lambda **o: plan(16).bind(frame).run("numpy", **o), after, shard={"id": 1, "of": 3}
    )


def test_a_resumed_pass_delivers_the_rest(files: dict[str, Any]) -> None:
    ids = files["table"].column("id").to_pylist()
    loader = plan(16).bind(frame_of(files, "parquet")).run("numpy")
    state = dict(loader.state_dict(), samples_consumed=100)
    loader.close()
    resumed = plan(16).bind(frame_of(files, "parquet")).run("numpy")
    resumed.load_state_dict(state)
    with resumed:
        assert [i for b in resumed for i in b["id"].tolist()] == ids[96:]  # chunk of 100 replayed


@pytest.fixture
def gated_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Block reads counted as they start; all but the first wait for ``gate`` to open."""
    seen: dict[str, Any] = {"started": 0, "running": 0, "lock": threading.Lock()}
    gate = seen["gate"] = threading.Event()
    read = FrameRows._read_block

    def gated(self: FrameRows, block: Any, *opened: Any) -> pa.Table:
        with seen["lock"]:
            seen["started"] += 1
            seen["running"] += 1
        try:
            if block.start:
                assert gate.wait(10), "the test never opened the gate"
            return read(self, block, *opened)
        finally:
            with seen["lock"]:
                seen["running"] -= 1

    monkeypatch.setattr(FrameRows, "_read_block", gated)
    yield seen
    gate.set()


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_reads_ahead_are_bounded(files: dict[str, Any], gated_reads: dict[str, Any]) -> None:
    rows = rows_of(frame_of(files, "feather"))
    stream = rows.stream_run(0, TOTAL)
    next(stream)
    wait_for(lambda: gated_reads["started"] == 1 + READ_AHEAD)
    time.sleep(0.05)
    assert gated_reads["started"] == 1 + READ_AHEAD  # no more until the pass moves on
    assert reads_in_flight() == READ_AHEAD
    gated_reads["gate"].set()
    stream.close()
    assert reads_in_flight() == 0


def test_closing_a_loader_mid_pass_leaves_no_reads(
    files: dict[str, Any], gated_reads: dict[str, Any]
) -> None:
    # batches of 10: the first two (the loader reads one ahead) lie in row group 0
    loader = plan(10).bind(frame_of(files, "feather")).run("numpy")
    batches = iter(loader)  # held: its pass is not collected, the loader must end it
    next(batches)
    assert reads_in_flight() > 0  # the next row groups are being read
    opener = threading.Timer(0.1, gated_reads["gate"].set)
    opener.start()
    loader.close()  # ends the pass's chunk stream: the reads ahead were waited for
    assert reads_in_flight() == 0
    opener.join()
    assert gated_reads["running"] == 0
    groups = sum(len(sizes) for sizes in GROUPS.values())
    assert gated_reads["started"] <= 1 + READ_AHEAD < groups  # the rest never read


def test_closing_a_stream_cancels_queued_reads(
    files: dict[str, Any], gated_reads: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataio.engine import pool

    one = ThreadPoolExecutor(1, thread_name_prefix="dataio-cpu")
    monkeypatch.setattr(pool, "_pool", one)
    monkeypatch.setattr(frame_readahead, "READ_AHEAD", 4)
    try:
        rows = rows_of(frame_of(files, "feather"))
        stream = rows.stream_run(0, TOTAL)
        next(stream)  # block 0 read; block 1 waits at the gate, blocks 2..4 are queued
        wait_for(lambda: gated_reads["started"] == 2)
        opener = threading.Timer(0.1, gated_reads["gate"].set)
        opener.start()
        stream.close()  # cancels the queued reads, waits for the running one
        opener.join()
        assert reads_in_flight() == 0 and gated_reads["running"] == 0
        time.sleep(0.05)
        assert gated_reads["started"] == 2  # the queued reads never ran
    finally:
        one.shutdown()


def test_an_error_ahead_is_raised_when_reached(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    read = FrameRows._read_block

    def failing(self: FrameRows, block: Any, *opened: Any) -> pa.Table:
        if block.start >= 90:
            raise FormatError(f"row group {block.index} is damaged")
        return read(self, block, *opened)

    monkeypatch.setattr(FrameRows, "_read_block", failing)
    ids: list[int] = []
    loader = plan(10).bind(frame_of(files, "feather")).run("numpy")
    with loader, pytest.raises(FormatError, match="damaged"):
        for batch in loader:
            ids.extend(batch["id"].tolist())
    assert ids == list(range(90))  # every row before the damaged group, in order
    assert reads_in_flight() == 0


def test_a_frame_pass_streams_whole_row_groups(
    files: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: FrameRows, positions: Any) -> pa.RecordBatch:
        raise AssertionError("a sequential pass must not read by position")

    monkeypatch.setattr(FrameRows, "take_batch", refuse)
    got = delivered(frame_of(files, "parquet"), 32)
    assert [i for b in got for i in b[1]] == list(range(TOTAL))


def test_padding_of_a_shard_is_read_by_position(files: dict[str, Any]) -> None:
    world = 3  # 280 rows: ranks 1 and 2 repeat their first row
    rows = rows_of(frame_of(files, "parquet"))
    positions = rows.shard_positions(2, world, pad=True)
    assert len(positions.padding) == 1
    got = delivered(frame_of(files, "parquet"), 7, shard={"id": 2, "of": world})
    assert [i for b in got for i in b[1]] == list(positions)


def test_batches_of_a_pass_share_their_row_group_buffers(files: dict[str, Any]) -> None:
    from dataio.engine.frame_blocks import one_batch
    from dataio.engine.stream import ShardSpec, plan_chunks

    table = pq.ParquetFile(files["parquet"][0]).read_row_groups([0])
    batch = one_batch(table, table.schema)  # a single chunk is taken as is, not copied
    for column, chunks in zip(batch.columns, table.columns, strict=True):
        assert column.buffers()[-1].address == chunks.chunk(0).buffers()[-1].address

    frame = scan_parquet(files["parquet"])
    chunks = list(plan_chunks(frame, dataio.batch(8), ShardSpec()))
    within = [c for c in chunks if c.parent is not None]
    groups = sum(len(sizes) for sizes in GROUPS.values())
    assert len(within) >= len(chunks) - groups  # chunks across two row groups aside
    for chunk in within:
        blob = chunk.batch.column("blob")
        assert blob.buffers()[2].address == chunk.parent.column("blob").buffers()[2].address
        assert (
            blob.to_pylist()
            == files["table"]
            .column("blob")
            .to_pylist()[chunk.positions[0] : chunk.positions[-1] + 1]
        )


def test_computed_columns_run_on_whole_row_groups(files: dict[str, Any]) -> None:
    frame = scan_parquet(files["parquet"]).with_columns(twice=dataio.col("id") * 2)
    pipe = dataio.pipeline(dataio.slot("twice").passthrough(), dataio.batch(16))
    with pipe.bind(frame).run("numpy") as loader:
        got = [i for batch in loader for i in batch["twice"].tolist()]
    assert got == [2 * i for i in files["table"].column("id").to_pylist()]
