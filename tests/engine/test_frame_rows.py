"""Frames read by position (``dataio/engine/frame_rows.py``, ``LazyFrame.by_position``):
rows (computed columns included) against pyarrow's own ``take``, the row groups a rank
reads counted at ``ParquetFile.read_row_groups``, shard counts, shuffles as permutations
with exact resume, and ``PlanError`` for frames whose rows have no fixed positions."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dataio
from dataio import col
from dataio.engine.frame_rows import FrameRows
from dataio.engine.frame_shards import ShardPositions
from dataio.exceptions import FormatError, LimitError, OutOfRangeError, PlanError
from dataio.frame import LazyFrame, scan_feather, scan_parquet
from dataio.plan.frame import Scan
from dataio.sources.permutation import PermutedIndexed

# Row groups of uneven sizes across files, so blocks and shard boundaries rarely align.
GROUPS = {"a": [30, 30, 30, 7], "b": [50, 13], "c": [40, 40, 40]}
HYPOTHESIS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def part(first: int, n: int) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "label": pa.array(ids % 7, pa.int32()),
            "score": pa.array(ids / 3, pa.float32()),
            "key": pa.array([f"k{i:05d}" for i in ids]),
            "blob": pa.array([bytes([i % 251]) * (1 + i % 9) for i in ids], pa.binary()),
        }
    )


def write_groups(path: Path, table: pa.Table, sizes: list[int]) -> None:
    """A Parquet file whose row groups hold exactly ``sizes`` rows."""
    with pq.ParquetWriter(path, table.schema) as writer:
        first = 0
        for size in sizes:
            writer.write_table(table.slice(first, size), row_group_size=size)
            first += size


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("frame_rows")
    (root / "pq").mkdir()
    (root / "even").mkdir()
    tables, first = [], 0
    for name, sizes in GROUPS.items():
        table = part(first, sum(sizes))
        write_groups(root / "pq" / f"{name}.parquet", table, sizes)
        tables.append(table)
        first += table.num_rows
    whole = pa.concat_tables(tables)
    # 2 files x 4 row groups of 25 rows: rank runs fall on row-group boundaries for 2 and 4
    even = part(0, 200)
    for i in range(2):
        write_groups(root / "even" / f"{i}.parquet", even.slice(100 * i, 100), [25] * 4)
    feather.write_feather(whole, root / "plain.arrow", compression="uncompressed", chunksize=33)
    feather.write_feather(whole, root / "lz4.arrow", compression="lz4", chunksize=50)
    return {"root": root, "whole": whole, "even": even}


def parquet(data: dict[str, Any]) -> LazyFrame:
    return scan_parquet(data["root"] / "pq")


def rows_of(frame: LazyFrame) -> FrameRows:
    rows = frame.by_position()
    assert isinstance(rows, FrameRows)
    return rows


# -- take_batch against pyarrow's take ---------------------------------------------------------


def framings(data: dict[str, Any]) -> list[tuple[LazyFrame, pa.Table]]:
    """(frame, the same rows as a pyarrow table read by pyarrow alone)."""
    whole = data["whole"]
    root = data["root"]
    renamed = whole.select(["key", "id"]).rename_columns(["name", "id"])
    twice = pc.multiply(whole["id"], 2)
    return [
        (parquet(data), whole),
        (parquet(data).select("blob", "id"), whole.select(["blob", "id"])),
        (
            parquet(data).select(col("key").alias("name"), "id").limit(150, offset=21),
            renamed.slice(21, 150),
        ),
        (parquet(data).limit(500, offset=90).select("label"), whole.select(["label"]).slice(90)),
        (scan_feather(root / "plain.arrow"), whole),
        (scan_feather(root / "lz4.arrow").select("key", "score"), whole.select(["key", "score"])),
        # computed columns: DataFusion runs them on the rows read by position
        (parquet(data).with_columns(twice=col("id") * 2), whole.append_column("twice", twice)),
        (
            parquet(data).select((col("id") + 1).alias("next"), "key").limit(50, offset=7),
            pa.table({"next": pc.add(whole["id"], 1), "key": whole["key"]}).slice(7, 50),
        ),
        (
            scan_feather(root / "lz4.arrow")
            .select("id", "label")
            .with_columns(big=col("label") > 3)
            .select("big", col("id").alias("i")),
            pa.table({"big": pc.greater(whole["label"], 3), "i": whole["id"]}),
        ),
    ]


@HYPOTHESIS
@given(st.data())
def test_take_batch_equals_pyarrow_take(data: dict[str, Any], draw: st.DataObject) -> None:
    for frame, oracle in framings(data):
        n = oracle.num_rows
        positions = draw.draw(st.lists(st.integers(0, n - 1), max_size=60), label="positions")
        if positions and draw.draw(st.booleans(), label="duplicate"):
            positions += positions[: len(positions) // 2]  # duplicates, out of order
        rows = rows_of(frame)
        batch = rows.take_batch(positions)
        assert batch.schema.equals(frame.schema)
        expected = oracle.take(pa.array(positions, pa.int64())).cast(frame.schema)
        assert pa.Table.from_batches([batch]).equals(expected)
        assert rows.get_many(positions) == expected.to_pylist()


def test_contiguous_runs_and_whole_frames(data: dict[str, Any]) -> None:
    for frame, oracle in framings(data):
        rows = rows_of(frame)
        n = oracle.num_rows
        assert rows.length() == frame.length() == n == frame.collect_arrow().num_rows
        assert pa.Table.from_batches([rows.take_batch(range(n))]).equals(oracle.cast(frame.schema))
        k = min(45, n - n // 3)
        run = rows.take_batch(range(n // 3, n // 3 + k))  # crosses row-group boundaries
        assert run.to_pylist() == oracle.slice(n // 3, k).to_pylist()
        assert rows.take_batch(list(range(n // 3, n // 3 + k))).equals(run)
        assert rows.take_batch(range(n - 7, n)).to_pylist() == oracle.slice(n - 7).to_pylist()
        stepped = rows.take_batch(range(n - 1, 0, -3))
        assert stepped.to_pylist() == oracle.take(list(range(n - 1, 0, -3))).to_pylist()
        assert rows.take_batch([]).num_rows == 0
        assert rows.take_batch([]).schema.equals(frame.schema)
        # the indexed view streams the same rows as DataFusion, in the same order
        assert list(rows) == list(frame) == oracle.to_pylist()
        streamed = pa.Table.from_batches(list(rows.iterate_batches()), schema=frame.schema)
        assert streamed.equals(oracle.cast(frame.schema))
        assert rows.get(n - 1) == oracle.slice(n - 1).to_pylist()[0]


def test_positions_outside_the_frame_are_refused(data: dict[str, Any]) -> None:
    rows = rows_of(parquet(data).limit(10))
    for bad in ([10], [-1], [0, 3, 11]):
        with pytest.raises(OutOfRangeError, match="outside the frame's 10 rows"):
            rows.take_batch(bad)


def test_files_with_other_types_or_missing_columns_match_the_stream(tmp_path: Path) -> None:
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]})
    pq.write_table(first, tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.int32())}), tmp_path / "b.parquet")
    frame = scan_parquet(tmp_path)
    assert rows_of(frame).take_batch([2, 0, 1]).to_pylist() == [
        {"id": 3, "name": None},
        {"id": 1, "name": "a"},
        {"id": 2, "name": "b"},
    ]
    assert list(rows_of(frame)) == list(frame)


# -- the row groups a rank reads -----------------------------------------------------------------


@pytest.fixture
def row_group_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every (file name, row group) ``ParquetFile.read_row_groups`` / ``read_row_group`` decodes."""
    reads: list[tuple[str, int]] = []
    init = pq.ParquetFile.__init__
    many = pq.ParquetFile.read_row_groups
    one = pq.ParquetFile.read_row_group

    def record_init(self: pq.ParquetFile, source: Any, *args: Any, **kwargs: Any) -> None:
        self._counted_name = Path(str(source)).name  # type: ignore[attr-defined]
        init(self, source, *args, **kwargs)

    def record_many(self: pq.ParquetFile, row_groups: Any, *args: Any, **kwargs: Any) -> Any:
        reads.extend((self._counted_name, int(i)) for i in row_groups)  # type: ignore[attr-defined]
        return many(self, row_groups, *args, **kwargs)

    def record_one(self: pq.ParquetFile, i: int, *args: Any, **kwargs: Any) -> Any:
        reads.append((self._counted_name, int(i)))  # type: ignore[attr-defined]
        return one(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", record_init)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", record_many)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", record_one)
    return reads


def read_rank(rows: FrameRows, rank: int, world: int, *, pad: bool, batch: int = 16) -> list[int]:
    """Read rank ``rank``'s shard in batches, as a loader would; its ids."""
    positions = rows.shard_positions(rank, world, pad=pad)
    ids: list[int] = []
    for start in range(0, len(positions), batch):
        ids += rows.take_batch(positions[start : start + batch]).column("id").to_pylist()
    return ids


@pytest.mark.parametrize("world", [2, 4])
def test_a_rank_reads_only_its_row_groups(data, row_group_reads, world: int) -> None:
    groups = [(f"{f}.parquet", g) for f in range(2) for g in range(4)]  # 8 groups of 25 rows
    read_by: list[list[tuple[str, int]]] = []
    for rank in range(world):
        rows = rows_of(scan_parquet(data["root"] / "even").select("id", "key"))  # a fresh cache
        row_group_reads.clear()
        ids = read_rank(rows, rank, world, pad=False)
        share = len(groups) // world
        mine = groups[rank * share : (rank + 1) * share]
        assert sorted(set(row_group_reads)) == mine  # its own contiguous row groups only
        assert len(row_group_reads) == len(mine)  # each decoded once, not once per batch
        assert ids == list(range(rank * 200 // world, (rank + 1) * 200 // world))
        read_by.append(row_group_reads[:])
    assert sorted(g for reads in read_by for g in reads) == groups  # together: everything, once


@pytest.mark.parametrize("world", [2, 3, 4])
def test_uneven_row_groups_read_about_one_world_th(data, row_group_reads, world: int) -> None:
    sizes = {(f"{name}.parquet", g): n for name, ns in GROUPS.items() for g, n in enumerate(ns)}
    total = sum(sizes.values())
    largest = max(sizes.values())
    for rank in range(world):
        rows = rows_of(parquet(data))
        row_group_reads.clear()
        read_rank(rows, rank, world, pad=True)
        decoded = sum(sizes[g] for g in set(row_group_reads))
        # its share, plus at most one row group shared with each neighbour
        assert decoded <= -(-total // world) + 2 * largest
        assert len(row_group_reads) == len(set(row_group_reads))


def test_a_shuffled_batch_reads_only_the_row_groups_of_its_rows(data, row_group_reads) -> None:
    shuffled = parquet(data).shuffle(seed=5)
    assert isinstance(shuffled, PermutedIndexed)
    wanted = shuffled._permutation().many(range(4))
    batch = shuffled.take_batch(range(4))
    assert batch.column("id").to_pylist() == wanted  # ids are positions here
    starts = np.cumsum([0] + [n for ns in GROUPS.values() for n in ns])
    names = [(f"{name}.parquet", g) for name, ns in GROUPS.items() for g in range(len(ns))]
    holding = {names[int(np.searchsorted(starts, p, side="right")) - 1] for p in wanted}
    assert set(row_group_reads) == holding


# -- shard counts --------------------------------------------------------------------------------


@given(n=st.integers(0, 300), world=st.integers(1, 9), pad=st.booleans())
@HYPOTHESIS
def test_shards_have_equal_counts_and_cover_the_rows(n: int, world: int, pad: bool) -> None:
    rows = FrameRows.__new__(FrameRows)
    rows.length = lambda: n  # type: ignore[method-assign]  # counts depend on n only
    shards = [list(rows.shard_positions(r, world, pad=pad)) for r in range(world)]
    rounds, rest = divmod(n, world)
    count = rounds + (1 if rest and pad else 0)  # the round-robin count the loader reports
    assert all(len(s) == count for s in shards)
    flat = [p for s in shards for p in s]
    if pad:
        assert set(flat) == set(range(n))
    else:
        assert flat == list(range(rounds * world))  # disjoint, contiguous, in order
    for rank, shard in enumerate(shards):
        run = shard[: rounds + (1 if pad and rank < rest else 0)]
        assert run == list(range(run[0], run[0] + len(run)) if run else [])
        padding = shard[len(run) :]
        if padding and run:
            assert set(padding) <= set(run)  # a rank repeats its own rows


def test_shards_of_a_real_frame(data: dict[str, Any]) -> None:
    rows = rows_of(scan_parquet(data["root"] / "even"))
    for world in (2, 4):
        shards = [read_rank(rows, r, world, pad=False) for r in range(world)]
        assert {len(s) for s in shards} == {200 // world}
        assert sorted(i for s in shards for i in s) == list(range(200))
    rows = rows_of(parquet(data))
    n = data["whole"].num_rows  # 280: 3 and 6 do not divide it
    for world in (3, 6):
        for pad in (True, False):
            shards = [read_rank(rows, r, world, pad=pad) for r in range(world)]
            assert len({len(s) for s in shards}) == 1
            flat = [i for s in shards for i in s]
            assert (set(flat) == set(range(n))) if pad else flat == list(range(n // world * world))


def test_shard_positions_slices() -> None:
    positions = ShardPositions(range(10, 14), (10,))
    assert list(positions) == [10, 11, 12, 13, 10]
    assert positions[1:3] == range(11, 13)
    assert list(positions[3:]) == [13, 10]
    assert positions[-1] == 10
    assert np.asarray(positions).tolist() == list(positions)
    assert np.asarray(ShardPositions(range(3, 3))).dtype == np.int64
    with pytest.raises(IndexError):
        positions[5]


# -- shuffles ------------------------------------------------------------------------------------


@HYPOTHESIS
@given(seed=st.integers(0, 2**40), epoch=st.integers(0, 5))
def test_a_shuffle_is_a_permutation(data: dict[str, Any], seed: int, epoch: int) -> None:
    shuffled = parquet(data).select("id").shuffle(seed=seed).at_epoch(epoch)
    n = data["whole"].num_rows
    ids = shuffled.take_batch(range(n)).column("id").to_pylist()  # type: ignore[attr-defined]
    assert sorted(ids) == list(range(n))
    assert [r["id"] for r in shuffled.iterate()] == ids


def test_shuffles_differ_per_epoch_unless_fixed(data: dict[str, Any]) -> None:
    n = data["whole"].num_rows

    def order(shuffled: Any, epoch: int) -> list[int]:
        return shuffled.at_epoch(epoch).take_batch(range(n)).column("id").to_pylist()

    shuffled = parquet(data).shuffle(seed=11)
    assert order(shuffled, 0) != order(shuffled, 1) != order(shuffled, 2)
    assert order(shuffled, 1) == order(parquet(data).shuffle(seed=11), 1)
    assert order(shuffled, 0) != order(parquet(data).shuffle(seed=12), 0)
    fixed = parquet(data).shuffle(seed=11, reshuffle_each_epoch=False)
    assert order(fixed, 0) == order(fixed, 3) == order(shuffled, 0)
    assert shuffled.signature() == parquet(data).shuffle(seed=11).signature()
    assert shuffled.describe()["of"] == parquet(data).description()


def plan(size: int = 7) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("id").passthrough(), dataio.slot("key").passthrough(), dataio.batch(size)
    )


@pytest.mark.parametrize("make", ["parquet", "feather"])
def test_shuffled_frames_resume_through_the_loader(data: dict[str, Any], make: str) -> None:
    def source() -> Any:
        if make == "parquet":
            return parquet(data).select("id", "key").shuffle(seed=3)
        return scan_feather(data["root"] / "lz4.arrow").shuffle(seed=3)

    def make_loader(**options: Any) -> dataio.Loader:
        return plan().bind(source()).run(seed=1, **options)

    delivered = [i for b in make_loader() for i in b["id"]]
    assert sorted(delivered) == list(range(data["whole"].num_rows))
    assert delivered == source().take_batch(range(len(delivered))).column("id").to_pylist()
    check_resume(make_loader, 4)
    check_resume(make_loader, 3, epoch=2)
    check_resume(make_loader, 2, shard={"id": 1, "of": 3})


def test_the_indexed_view_through_the_loader(data: dict[str, Any]) -> None:
    frame = parquet(data).select("id", "key")
    by_stream = [i for b in plan().bind(frame).run() for i in b["id"]]
    by_position = [i for b in plan().bind(frame.by_position()).run() for i in b["id"]]
    assert by_stream == by_position == list(range(data["whole"].num_rows))
    check_resume(lambda **o: plan(9).bind(frame.by_position()).run(**o), 5)


def test_frame_rows_pickle_without_their_cache(data: dict[str, Any]) -> None:
    rows = rows_of(parquet(data).select("id"))
    rows.take_batch([1, 2])
    copy = pickle.loads(pickle.dumps(rows))
    assert copy.take_batch([5, 270, 5]).to_pylist() == [{"id": 5}, {"id": 270}, {"id": 5}]


# -- frames without positions --------------------------------------------------------------------


def unaddressable(data: dict[str, Any], tmp_path: Path) -> list[tuple[LazyFrame, str]]:
    csv = tmp_path / "t.csv"
    csv.write_text("id,key\n1,a\n2,b\n")
    frame = parquet(data)
    return [
        (frame.filter(col("label") == 1), "filter"),
        (frame.filter(lambda r: r["id"] % 2 == 0), "filter"),
        (frame.sort("id"), "sort"),
        (frame.filter(col("id") > 3).with_columns(twice=col("id") * 2), "filter"),
        (frame.join(frame.select("id"), on="id"), "join"),
        (frame.group_by("label").agg(col("id").sum()), r"group_by\(col"),
        (dataio.sql("SELECT id FROM t", t=frame), "sql"),
        (frame.filter(col("id") > 3).limit(5), "filter"),
        (dataio.scan_csv(csv), "csv files"),
    ]


def test_frames_without_positions_need_a_buffer_to_shuffle(data, tmp_path: Path) -> None:
    for frame, why in unaddressable(data, tmp_path):
        assert frame.by_position() is None
        assert frame.length() is None
        with pytest.raises(PlanError, match=rf"(?s){why}.*buffer_size="):
            frame.shuffle(seed=0)
        buffered = frame.shuffle(seed=0, buffer_size=8)
        assert sorted(map(repr, buffered.iterate())) == sorted(
            map(repr, frame.collect().to_pylist())
        )
    with pytest.raises(PlanError, match="seed"):
        parquet(data).filter(col("id") > 1).shuffle(seed=-1)  # arguments are checked first


def test_remote_frames_stream(data: dict[str, Any]) -> None:
    schema = data["whole"].schema
    node = Scan("parquet", ("s3://bucket/a.parquet",), ("s3://bucket/a.parquet",), (), schema)
    frame = LazyFrame(node, schema)
    assert frame.by_position() is None and frame.length() is None
    with pytest.raises(PlanError, match=r"remote files.*buffer_size="):
        frame.shuffle(seed=1)


# -- the frame as an Arrow source ----------------------------------------------------------------


def test_arrow_schema_and_batches_without_rows(data, monkeypatch: pytest.MonkeyPatch) -> None:
    frame = parquet(data).filter(col("label") < 3).select("id", "blob")
    expected = frame.collect_arrow()

    def no_rows(*_: Any, **__: Any) -> Any:
        raise AssertionError("a Python row was built")

    # pyarrow's to_pylist cannot be patched (immutable types): the row paths are instead
    for owner, name in [(LazyFrame, "iterate"), (FrameRows, "iterate"), (FrameRows, "get")]:
        monkeypatch.setattr(owner, name, no_rows)
    monkeypatch.setattr(FrameRows, "get_many", no_rows)
    assert frame.arrow_schema() == frame.schema
    batches = list(frame.iterate_batches())
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert pa.Table.from_batches(batches, schema=frame.schema).equals(expected)
    rows = rows_of(parquet(data).select("id", "blob"))
    batches = list(rows.iterate_batches())
    assert pa.Table.from_batches(batches).equals(data["whole"].select(["id", "blob"]))
    shuffled = parquet(data).select("id", "blob").shuffle(seed=2)
    assert shuffled.arrow_schema() == rows.arrow_schema()
    assert shuffled.take_batch([3, 1]).num_rows == 2  # type: ignore[attr-defined]


# -- damaged and oversized files -----------------------------------------------------------------


def test_a_damaged_row_group_is_a_format_error(tmp_path: Path) -> None:
    table = part(0, 64)
    path = tmp_path / "damaged.parquet"
    write_groups(path, table, [32, 32])
    frame = scan_parquet(path)  # planned over the good file, damaged below
    group = pq.read_metadata(path).row_group(1).column(3)  # "key" of the second group
    raw = bytearray(path.read_bytes())
    start = group.data_page_offset
    raw[start : start + group.total_compressed_size] = b"\xff" * group.total_compressed_size
    path.write_bytes(bytes(raw))
    with pytest.raises((pa.ArrowException, OSError)):
        pq.read_table(path)  # the oracle refuses it too
    rows = rows_of(frame)
    assert rows.take_batch([0, 31]).column("id").to_pylist() == [0, 31]  # group 0 is whole
    with pytest.raises(FormatError, match=r"damaged\.parquet"):
        rows.take_batch([40])


def test_a_row_group_over_the_decode_limit_is_refused(data: dict[str, Any]) -> None:
    rows = rows_of(parquet(data).select("id"))
    with (
        dataio.limits.scoped(max_decoded_bytes=64),
        pytest.raises(LimitError, match=r"row group 0 of .*a\.parquet"),
    ):
        rows.take_batch([0])
    assert rows.take_batch([0]).to_pylist() == [{"id": 0}]


def test_a_damaged_feather_file_is_a_format_error(tmp_path: Path) -> None:
    table = part(0, 40)
    path = tmp_path / "damaged.arrow"
    feather.write_feather(table, path, compression="uncompressed", chunksize=20)
    frame = scan_feather(path)
    raw = bytearray(path.read_bytes())
    offsets = raw.find(np.array([0, 6, 12, 18], np.int32).tobytes())
    assert offsets > 0  # the key column's offsets: 0, 6, 12, ...
    raw[offsets + 4 : offsets + 8] = (1 << 30).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=r"damaged\.arrow"):
        rows_of(frame).take_batch([1])


def test_threads_share_one_view(data: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import dataio.engine.frame_blocks as frame_blocks
    import dataio.engine.frame_readers as frame_readers

    monkeypatch.setattr(frame_blocks, "CACHE_BYTES", 4096)  # evictions while others read
    monkeypatch.setattr(frame_readers, "OPEN_FILES", 1)
    n = data["whole"].num_rows
    rng = np.random.default_rng(4)
    asks = [rng.integers(0, n, 40).tolist() for _ in range(48)]
    for frame in (parquet(data), scan_feather(data["root"] / "lz4.arrow")):
        rows = rows_of(frame)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(rows.take_batch, asks))
        for ask, batch in zip(asks, got, strict=True):
            assert batch.column("id").to_pylist() == ask


def varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def test_a_negative_row_count_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "negative.parquet"
    write_groups(path, part(0, 64).select(["id"]), [32, 32])
    raw = bytearray(path.read_bytes())
    size = pq.read_metadata(path).row_group(1).total_byte_size
    # RowGroup's total_byte_size and num_rows (thrift compact i64 fields: zigzag varints)
    found = b"\x16" + varint(2 * size) + b"\x16" + varint(2 * 32)
    at = raw.rfind(found) + len(found) - 1
    raw[at] = 0x01  # num_rows of the second row group: -1
    path.write_bytes(bytes(raw))
    assert pq.read_metadata(path).row_group(1).num_rows == -1  # the footer still parses
    with pytest.raises(FormatError, match=r"negative\.parquet.*declares -1 rows"):
        scan_parquet(path).length()


def test_a_computing_projection_decodes_only_its_columns(
    data, row_group_reads, monkeypatch
) -> None:
    columns: list[Any] = []
    many = pq.ParquetFile.read_row_groups

    def record(self: pq.ParquetFile, row_groups: Any, *args: Any, **kwargs: Any) -> Any:
        columns.append(kwargs.get("columns"))
        return many(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", record)
    frame = parquet(data).select((col("label") * 10).alias("l10"), "id")
    batch = rows_of(frame).take_batch([3, 200, 3])
    expected = [{"l10": i % 7 * 10, "id": i} for i in (3, 200, 3)]  # label: id % 7
    assert batch.to_pylist() == expected
    assert columns and all(c == ["id", "label"] for c in columns)
    constant = rows_of(parquet(data).select(dataio.lit(1).alias("one")))
    assert constant.take_batch([0, 5]).to_pylist() == [{"one": 1}, {"one": 1}]


def test_tensor_scans_keep_their_python_record_shuffle(tmp_path: Path) -> None:
    for i in range(5):
        np.save(tmp_path / f"{i}.npy", np.full((2,), i, np.int16))
    frame = dataio.scan_numpy(str(tmp_path / "*.npy"))
    assert frame.arrow_schema() is None and frame.by_position() is None
    shuffled = [int(r["array"][0]) for r in frame.shuffle(seed=4).iterate()]
    assert sorted(shuffled) == list(range(5))
    with pytest.raises(PlanError, match=r"filter\(python.*buffer_size="):
        frame.filter(lambda r: True).shuffle(seed=4)
    with pytest.raises(PlanError, match=r"reads scan_numpy.*no index.*buffer_size="):
        frame.select("key").shuffle(seed=4)
