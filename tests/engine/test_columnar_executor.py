"""Arrow rows through the executor: the same batches as Python records, without rows.

The oracle for every Arrow source is the same rows as a list of dicts through the
Python-record path (``table.to_pylist()``), which behaves as before columnar chunks.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
from dataio.engine.columns import value_reader
from tests.helpers.arrow_sources import (
    BlockSource,
    FrameLike,
    RowBuilt,
    StreamSource,
    TableSource,
    tripwire,
)
from tests.helpers.resume import check_resume


def make_table(n: int = 23) -> pa.Table:
    return pa.table(
        {
            "key": [f"k{i}" for i in range(n)],
            "label": pa.array(np.arange(n) % 5, pa.int64()),
            "score": pa.array(np.arange(n) / 4, pa.float32()),
            "g": pa.array([i // 3 for i in range(n)], pa.int32()),
        }
    )


def plain(column: Any) -> list[Any]:
    if isinstance(column, np.ndarray):
        return column.tolist()
    if isinstance(column, pa.Array):
        return column.to_pylist()
    return list(column)


def as_rows(loader: dataio.Loader) -> list[tuple]:
    out = []
    for batch in loader:
        columns = tuple((name, plain(batch[name])) for name in batch.slots)
        out.append((tuple(batch.indices), tuple(batch.row_keys), columns))
    return out


def passthrough(*names: str, size: int = 4, **batch: Any) -> dataio.Pipeline:
    slots = [dataio.slot(name).passthrough() for name in names]
    return dataio.pipeline(*slots, dataio.batch(size, **batch))


SOURCES = {
    "indexed": lambda t: TableSource(t),
    "stream": lambda t: StreamSource(t, chunk=3),
    "by_position": lambda t: FrameLike(t),
    "indexed-shuffled": lambda t: TableSource(t).shuffle(seed=3),
}


def python_twin(kind: str, table: pa.Table) -> Any:
    rows = table.to_pylist()
    return dataio.records(rows).shuffle(seed=3) if kind == "indexed-shuffled" else rows


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize(("size", "drop_last"), [(1, False), (4, False), (7, True), (64, False)])
def test_arrow_batches_equal_python_batches(kind: str, size: int, drop_last: bool) -> None:
    table = make_table()
    pipe = passthrough("label", "score", "key", size=size, drop_last=drop_last)
    got = as_rows(pipe.bind(SOURCES[kind](table)).run())
    want = as_rows(pipe.bind(python_twin(kind, table)).run())
    assert got == want and got


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("world", [2, 3, 5])
@pytest.mark.parametrize("pad", [True, False])
def test_round_robin_shards_equal_python_shards(kind: str, world: int, pad: bool) -> None:
    table = make_table()
    pipe = passthrough("label", "key", size=3)
    for rank in range(world):
        shard = {"id": rank, "of": world, "pad": pad}
        got = as_rows(pipe.bind(SOURCES[kind](table)).run(shard=shard))
        want = as_rows(pipe.bind(python_twin(kind, table)).run(shard=shard))
        assert got == want


def test_tiny_stream_pads_a_rank_without_rows() -> None:
    table = make_table(2)
    pipe = passthrough("label", size=2)
    got = as_rows(pipe.bind(StreamSource(table, chunk=1)).run(shard={"id": 3, "of": 4}))
    want = as_rows(pipe.bind(table.to_pylist()).run(shard={"id": 3, "of": 4}))
    assert got == want == [((1,), ("k1",), (("label", [1]),))]


def test_shard_positions_chosen_by_the_source_are_read_by_position() -> None:
    table = make_table(10)
    pipe = passthrough("label", "key", size=2)
    seen = []
    for rank in range(3):
        source = BlockSource(table)
        batches = list(pipe.bind(source).run(shard={"id": rank, "of": 3}))
        seen.append([i for b in batches for i in b.indices])
        assert [p for taken in source.taken for p in taken] == seen[-1]
        for batch in batches:
            assert batch["key"].to_pylist() == [f"k{i}" for i in batch.indices]
            assert all(type(i) is int for i in batch.indices)  # NumPy positions made ints
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 8, 8]]


def test_passes_from_the_start_stream_and_resumed_ones_take() -> None:
    table = make_table(12)
    pipe = passthrough("label", size=5)
    source = TableSource(table)
    assert [len(b) for b in pipe.bind(source).run()] == [5, 5, 2]
    assert [len(b) for b in pipe.bind(source).run(shard={"id": 1, "of": 2})] == [5, 1]
    assert source.taken == []  # a pass from the start reads the record batches
    loader = pipe.bind(source).run(shard={"id": 1, "of": 2})
    loader.load_state_dict({**loader.state_dict(), "samples_consumed": 5})
    assert [b.indices for b in loader] == [[11]]
    assert source.taken == [[11]]  # a resumed pass reads only what it still needs


@pytest.mark.parametrize(
    ("arrow_type", "dtype"),
    [
        (pa.int64(), np.int64),
        (pa.int8(), np.int8),
        (pa.uint16(), np.uint16),
        (pa.float32(), np.float32),
        (pa.float64(), np.float64),
        (pa.bool_(), np.bool_),
    ],
)
def test_numeric_passthrough_is_numpy_of_its_type(arrow_type: pa.DataType, dtype: Any) -> None:
    values = [1, 0, 1, 1, 0, 1, 0]
    table = pa.table({"v": pa.array(np.array(values, dtype), arrow_type)})
    (batch,) = passthrough("v", size=8).bind(TableSource(table)).run()
    column = batch["v"]
    assert isinstance(column, np.ndarray) and column.dtype == dtype
    np.testing.assert_array_equal(column, np.array(values, dtype))
    (tensors,) = passthrough("v", size=8).bind(TableSource(table)).run("torch")
    torch = pytest.importorskip("torch")
    assert tensors["v"].dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    assert tensors["v"].tolist() == [bool(v) if dtype is np.bool_ else v for v in values]


def test_numeric_passthrough_is_a_zero_copy_view_of_the_column() -> None:
    table = pa.table({"v": pa.array(np.arange(40), pa.int64())})
    buffer = table.column("v").chunk(0).buffers()[1]
    batches = list(passthrough("v", size=16).bind(StreamSource(table, chunk=40)).run())
    for number, batch in enumerate(batches):
        column = batch["v"]
        assert not column.flags.writeable
        assert column.__array_interface__["data"][0] == buffer.address + 16 * number * 8


def test_strings_nested_and_nulls_stay_arrow() -> None:
    table = pa.table(
        {
            "name": ["a", "bb", "ccc"],
            "tags": pa.array([[1], [], [2, 3]], pa.list_(pa.int32())),
            "maybe": pa.array([1, None, 3], pa.int64()),
            "blob": pa.array([b"x", b"", b"yz"], pa.large_binary()),
        }
    )
    (batch,) = passthrough("name", "tags", "maybe", "blob", size=3).bind(TableSource(table)).run()
    for name in ("name", "tags", "maybe", "blob"):
        assert isinstance(batch[name], pa.Array)
        assert batch[name].equals(table.column(name).chunk(0))
    exported = next(iter(passthrough("name", "tags", size=3).bind(TableSource(table)).run("arrow")))
    assert exported.column("name").equals(table.column("name").chunk(0))
    assert "__key__" not in exported.schema.names  # no key column, no keys


def test_passthrough_pipeline_builds_no_row_dicts() -> None:
    table = make_table(40).append_column("trip", tripwire(40))
    with pytest.raises(RowBuilt):
        table.to_pylist()  # the tripwire works
    pipe = passthrough("label", "score", "key", size=8)
    for source in (TableSource(table), StreamSource(table), FrameLike(table)):
        batches = list(pipe.bind(source).run())
        assert sum(len(b) for b in batches) == 40
        batches = list(pipe.bind(source).run("torch", shard={"id": 1, "of": 3}))
        assert [i for b in batches for i in b.indices] == [*range(1, 40, 3), 1]  # padded
    shuffled = list(pipe.bind(TableSource(table).shuffle(seed=1)).run("arrow"))
    assert sorted(i for b in shuffled for i in b.column("__index__").to_pylist()) == list(range(40))
    # a record map needs Python rows: the loader builds them, and the tripwire fires
    mapped = dataio.pipeline(dataio.map(dict), dataio.slot("label").passthrough(), dataio.batch(8))
    with pytest.raises(RowBuilt):
        list(mapped.bind(TableSource(table)).run())


def jpeg(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=95)
    return out.getvalue()


@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary(), pa.binary_view()])
def test_media_slots_read_binary_columns_without_rows(binary: pa.DataType) -> None:
    images = [jpeg(20 + i, 16 + 2 * i, i) for i in range(9)]
    table = pa.table(
        {
            "image": pa.array(images, binary),
            "label": pa.array(range(9), pa.int64()),
            "trip": tripwire(9),
        }
    )
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=12, w=10),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
    )
    got = list(pipe.bind(TableSource(table)).run())
    want = list(pipe.bind([{"image": im, "label": i} for i, im in enumerate(images)]).run())
    assert [b.indices for b in got] == [b.indices for b in want]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])
        assert a.sizes == b.sizes
    # Pillow is the oracle for the first image's source size
    assert got[0].sizes["image"][0] == Image.open(io.BytesIO(images[0])).size[::-1]


@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary(), pa.binary_view()])
def test_value_reader_is_zero_copy(binary: pa.DataType) -> None:
    values = [b"short", b"", b"a value longer than twelve bytes", None, b"0123456789abcdef"]
    array = pa.array(values, binary).slice(1)  # a sliced column: offsets start inside
    read = value_reader(array)
    for row, want in enumerate(values[1:]):
        got = read(row)
        if want is None:
            assert got is None
            continue
        assert isinstance(got, memoryview) and got.format == "B" and bytes(got) == want
        if want:  # the view points into one of the column's own buffers
            address = np.frombuffer(got, np.uint8).ctypes.data
            owners = [b for b in array.buffers()[1:] if b is not None]
            assert any(b.address <= address < b.address + b.size for b in owners)


def test_string_columns_are_paths(records: list[dict[str, Any]]) -> None:
    table = pa.table(
        {"image": [r["image"] for r in records[:5]], "label": [r["label"] for r in records[:5]]}
    )
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=8, w=8), dataio.batch(5))
    (got,) = pipe.bind(TableSource(table)).run()
    (want,) = pipe.bind(records[:5]).run()
    np.testing.assert_array_equal(got["image"], want["image"])


def test_bad_rows_fail_as_on_the_python_path() -> None:
    images = [jpeg(16, 16, i) for i in range(6)]
    images[2] = b"not a jpeg"
    table = pa.table({"image": pa.array(images, pa.binary()), "key": [f"r{i}" for i in range(6)]})
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=8, w=8), dataio.batch(3))
    got = list(pipe.bind(TableSource(table)).run(on_failure="skip"))
    want = list(pipe.bind(table.to_pylist()).run(on_failure="skip"))
    assert [b.indices for b in got] == [b.indices for b in want] == [[0, 1], [3, 4, 5]]
    assert [b.row_keys for b in got] == [["r0", "r1"], ["r3", "r4", "r5"]]
    (error,) = got[0].errors
    assert error.index == 2 and error.key == "r2" and error.slot == "image"
    assert str(error) == str(want[0].errors[0])
    with pytest.raises(dataio.DecodeError):
        list(pipe.bind(TableSource(table)).run())


def test_record_maps_optional_slots_and_conditions_match_python() -> None:
    images = [jpeg(16, 16, i) if i % 3 else None for i in range(8)]
    table = pa.table(
        {
            "image": pa.array(images, pa.binary()),
            "n": pa.array(range(8), pa.int64()),
        }
    )

    def tag(record: dict) -> dict:
        return {**record, "double": record["n"] * 2}

    mapped = dataio.pipeline(
        dataio.map(tag),
        dataio.slot("double").passthrough(),
        dataio.slot("image", optional=True).decode_image().resize(h=8, w=8),
        dataio.batch(3),
    )
    conditional = dataio.pipeline(
        dataio.slot("n").passthrough(),
        dataio.slot("image", optional=True)
        .active_when(dataio.cond.col("n") > 3)
        .decode_image()
        .resize(h=8, w=8),
        dataio.batch(3),
    )
    optional = dataio.pipeline(
        dataio.slot("n").passthrough(),
        dataio.slot("image", optional=True).decode_image().resize(h=8, w=8),
        dataio.slot("absent", optional=True).passthrough(),
        dataio.batch(3),
    )
    for pipe in (mapped, conditional, optional):
        got = list(pipe.bind(TableSource(table)).run())
        want = list(pipe.bind(table.to_pylist()).run())
        assert [b.indices for b in got] == [b.indices for b in want]
        for a, b in zip(got, want, strict=True):
            for name in a.slots:
                if name == "absent":  # an absent optional column: all nulls (Arrow)
                    assert plain(a[name]) == plain(b[name]) == [None] * len(a)
                    continue
                left, right = a[name], b[name]
                if isinstance(right, list):
                    assert len(left) == len(right)
                    for x, y in zip(left, right, strict=True):
                        assert (x is None and y is None) or np.array_equal(x, y)
                else:
                    np.testing.assert_array_equal(left, right)


def test_group_by_runs_across_record_batches_match_python() -> None:
    keys = [1, 1, 2, 2, 2, 2, None, None, 3, 1, 1, 1, 1, 1]
    table = pa.table({"g": pa.array(keys, pa.int64()), "v": pa.array(range(len(keys)))})
    pipe = dataio.pipeline(dataio.slot("v").passthrough(), dataio.group_by("g"))
    for chunk in (1, 2, 3, 5, 100):
        got = as_rows(pipe.bind(StreamSource(table, chunk=chunk)).run())
        want = as_rows(pipe.bind(table.to_pylist()).run())
        assert got == want
    assert [b[2][0][1] for b in got] == [[0, 1], [2, 3, 4, 5], [6, 7], [8], [9, 10, 11, 12, 13]]
    sharded = as_rows(pipe.bind(StreamSource(table, chunk=2)).run(shard={"id": 1, "of": 2}))
    assert sharded == as_rows(pipe.bind(table.to_pylist()).run(shard={"id": 1, "of": 2}))


def test_group_by_on_strings_and_a_missing_key() -> None:
    table = pa.table({"g": ["a", "a", "b", "a"], "v": [0, 1, 2, 3]})
    pipe = dataio.pipeline(dataio.slot("v").passthrough(), dataio.group_by("g"))
    got = [b["v"].tolist() for b in pipe.bind(StreamSource(table, chunk=3)).run()]
    assert got == [[0, 1], [2], [3]]
    missing = dataio.pipeline(dataio.slot("v").passthrough(), dataio.group_by("nope"))
    with pytest.raises(dataio.FieldError, match="'nope'"):
        list(missing.bind(StreamSource(table)).run())


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("shard", [None, {"id": 1, "of": 3}])
def test_resume(kind: str, shard: Any) -> None:
    table = make_table(29)
    pipe = passthrough("label", "score", "key", size=4)

    def make(**options: Any) -> dataio.Loader:
        return pipe.bind(SOURCES[kind](table)).run(shard=shard, **options)

    check_resume(make, after=3)
    check_resume(make, after=2, epoch=1)


def test_resume_of_a_sharded_block_source() -> None:
    table = make_table(17)
    pipe = passthrough("label", "key", size=2)

    def make(**options: Any) -> dataio.Loader:
        return pipe.bind(BlockSource(table)).run(shard={"id": 2, "of": 3}, **options)

    check_resume(make, after=1)


def test_python_records_keep_their_columns_and_keys() -> None:
    rows = [{"key": f"k{i}", "v": i, "f": i / 2, "s": str(i)} for i in range(10)]
    (batch, rest) = passthrough("v", "f", "s", size=8).bind(rows).run()
    assert batch["v"].dtype == np.int64 and batch["f"].dtype == np.float64
    assert batch["s"] == [str(i) for i in range(8)]
    assert batch.row_keys == [f"k{i}" for i in range(8)] and rest.indices == [8, 9]
    odd = [{"v": True}, {"v": 1}, {"v": 2**70}, {"v": None}]
    (mixed,) = passthrough("v", size=4).bind(odd).run()
    assert mixed["v"] == [True, 1, 2**70, None]


def test_numeric_keys_from_slices_of_a_large_source_batch() -> None:
    table = pa.table({"key": pa.array(range(100, 130), pa.int64()), "v": pa.array(range(30))})
    pipe = passthrough("v", size=8)
    got = list(pipe.bind(StreamSource(table, chunk=30)).run())
    assert [b.row_keys for b in got] == [
        list(range(100 + i, min(130, 108 + i))) for i in (0, 8, 16, 24)
    ]
    exported = list(pipe.bind(StreamSource(table, chunk=30)).run("arrow"))
    assert exported[1].column("__key__").to_pylist() == list(range(108, 116))
    assert exported[1].column("v").type == pa.int64()
    images = [jpeg(16, 16, i) for i in range(12)]
    images[9] = b"broken"
    media = pa.table({"key": pa.array(range(12), pa.int64()), "image": images})
    decode = dataio.pipeline(dataio.slot("image").decode_image().resize(h=4, w=4), dataio.batch(4))
    batches = list(decode.bind(StreamSource(media, chunk=12)).run(on_failure="skip"))
    assert [b.row_keys for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 10, 11]]
    assert batches[2].errors[0].key == 9 and batches[2].errors[0].index == 9


def test_round_robin_shards_of_view_columns() -> None:
    table = pa.table(
        {
            "s": pa.array([f"value number {i}" for i in range(11)], pa.string_view()),
            "b": pa.array([bytes([i]) * (i + 10) for i in range(11)], pa.binary_view()),
            "v": pa.array(range(11)),
        }
    )
    pipe = passthrough("s", "b", "v", size=2)
    for rank in range(3):
        shard = {"id": rank, "of": 3}
        got = as_rows(pipe.bind(StreamSource(table, chunk=4)).run(shard=shard))
        want = as_rows(pipe.bind(table.to_pylist()).run(shard=shard))
        assert got == want
        batch = next(iter(pipe.bind(StreamSource(table, chunk=4)).run(shard=shard)))
        assert batch["s"].type == pa.string_view() and batch["b"].type == pa.binary_view()


def test_a_frame_pass_reads_only_the_plan_columns(tmp_path, monkeypatch) -> None:
    import pyarrow.parquet as pq

    from dataio.frame import LazyFrame

    table = make_table(30)
    path = tmp_path / "rows.parquet"
    pq.write_table(table, path, row_group_size=8)
    selected: list[tuple] = []
    select = LazyFrame.select

    def spy(self, *columns):
        selected.append(columns)
        return select(self, *columns)

    monkeypatch.setattr(LazyFrame, "select", spy)
    pipe = passthrough("label", size=8)
    got = as_rows(pipe.bind(dataio.scan_parquet(str(path))).run())
    assert got == as_rows(pipe.bind(table.to_pylist()).run())
    assert selected == [("key", "label")]  # the slot's field and the row key
    mapped = dataio.pipeline(dataio.map(dict), dataio.slot("label").passthrough(), dataio.batch(8))
    selected.clear()
    assert len(list(mapped.bind(dataio.scan_parquet(str(path))).run())) == 4
    assert selected == []  # a record map sees whole records
    missing = passthrough("label", "nope", size=8)
    with pytest.raises(
        dataio.FieldError, match=r"available fields: \['g', 'key', 'label', 'score'\]"
    ):
        list(missing.bind(dataio.scan_parquet(str(path))).run())
    assert selected == []


def test_nulls_decide_per_batch_for_slices_of_one_source_batch() -> None:
    values = [None if i == 3 else i for i in range(24)]
    table = pa.table({"v": pa.array(values, pa.int64()), "s": [str(i) for i in range(24)]})
    batches = list(passthrough("v", "s", size=8).bind(StreamSource(table, chunk=24)).run())
    assert isinstance(batches[0]["v"], pa.Array) and batches[0]["v"].to_pylist() == values[:8]
    for batch, start in zip(batches[1:], (8, 16), strict=True):
        assert (
            isinstance(batch["v"], np.ndarray) and batch["v"].tolist() == values[start : start + 8]
        )
        assert batch["s"].to_pylist() == [str(i) for i in range(start, start + 8)]
