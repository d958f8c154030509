"""Arrow record sources: every kind in order, through resume, shuffles and shards.

The oracle is the same records as a list of dicts (``table.to_pylist()``) through the
Python path: an indexed Arrow source must give what ``records(list)`` gives, a stream
what a reusable non-indexed iterable of the same dicts gives.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume, stream

import dataio
from dataio.exceptions import DataioError, FieldError, FormatError, PlanError
from dataio.sources import IndexedSource

N = 23  # not a multiple of the batch or world sizes below


def make_table(n: int = N) -> pa.Table:
    """``v`` = position, an int64 label, a float32 score and a string key, in 3 chunks."""
    table = pa.table(
        {
            "v": pa.array(np.arange(n), pa.int64()),
            "label": pa.array(np.arange(n) % 7, pa.int64()),
            "score": pa.array(np.arange(n) / 8, pa.float32()),
            "key": pa.array([f"k{i:03d}" for i in range(n)], pa.string()),
        }
    )
    cuts = [0, n // 3, n // 3 + 2, n]  # uneven chunks: runs must cross chunk borders
    return pa.Table.from_batches(
        [
            table.slice(a, b - a).combine_chunks().to_batches()[0]
            for a, b in itertools.pairwise(cuts)
        ]
    )


class CStream:
    """A foreign object that only speaks the Arrow PyCapsule stream protocol."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table
        self.exports = 0

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        self.exports += 1
        return self.table.__arrow_c_stream__(requested_schema)


def _duckdb(table: pa.Table) -> Any:
    con = duckdb.connect()
    con.register("t", table)
    return con.sql("SELECT * FROM t ORDER BY v")


def _parquet_dataset(table: pa.Table, folder: Path) -> ds.Dataset:
    folder.mkdir(exist_ok=True)
    for number, start in enumerate(range(0, table.num_rows, 5)):
        pq.write_table(table.slice(start, 5), folder / f"part-{number:02d}.parquet")
    return ds.dataset(str(folder), format="parquet")


def kinds(folder: Path) -> dict[str, Callable[[], Any]]:
    """Every Arrow source kind, as a factory of the object ``bind()`` takes."""
    table = make_table()
    dataset = _parquet_dataset(table, folder / "dataset")
    pq.write_table(table, folder / "frame.parquet", row_group_size=6)
    return {
        "table": lambda: table,
        "record_batch": lambda: table.combine_chunks().to_batches()[0],
        "reader": lambda: pa.RecordBatchReader.from_batches(table.schema, table.to_batches()),
        "c_stream": lambda: CStream(table),
        "polars": lambda: pl.from_arrow(table),
        "polars_lazy": lambda: pl.from_arrow(table).lazy(),  # type: ignore[union-attr]
        "duckdb": lambda: _duckdb(table),
        "dataset_memory": lambda: ds.dataset(table),
        "dataset_files": lambda: dataset,
        "frame": lambda: dataio.scan_parquet(str(folder / "frame.parquet")),
        "concat": lambda: dataio.records(table.slice(0, 9)).concat(table.slice(9)),
    }


KINDS = [
    "table", "record_batch", "reader", "c_stream", "polars", "polars_lazy", "duckdb",
    "dataset_memory", "dataset_files", "frame", "concat",
]  # fmt: skip
INDEXED = ["table", "record_batch", "polars", "dataset_memory"]
STREAMS = ["c_stream", "polars_lazy", "duckdb", "dataset_files", "concat"]


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Callable[[], Any]]:
    return kinds(tmp_path_factory.mktemp("arrow"))


def pipe(size: int = 4) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(size))


def values(loader: dataio.Loader) -> list[list[int]]:
    """``v`` batch by batch."""
    return [np.asarray(batch["v"]).tolist() for batch in loader]


def flat(batches: list[list[int]]) -> list[int]:
    return [v for batch in batches for v in batch]


def rows() -> list[dict[str, Any]]:
    return make_table().to_pylist()


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_gives_the_records_in_order(objects, kind) -> None:
    assert flat(values(pipe().bind(objects[kind]()).run())) == list(range(N))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_an_arrow_source_of_the_table_schema(objects, kind) -> None:
    source = dataio.records(objects[kind]())
    schema = source.arrow_schema()
    assert schema is not None
    assert schema.names == ["v", "label", "score", "key"]
    batches = list(source.iterate_batches())
    assert pa.Table.from_batches(batches).column("v").to_pylist() == list(range(N))
    assert (kind in INDEXED) == isinstance(source, IndexedSource)
    assert source.single_pass == (kind == "reader")


@pytest.mark.parametrize("kind", KINDS)
def test_python_rows_equal_the_list_of_dicts(objects, kind) -> None:
    got = list(dataio.records(objects[kind]()).iterate())
    want = rows()
    if kind in ("polars", "polars_lazy", "duckdb"):
        assert [r["v"] for r in got] == [r["v"] for r in want]
        assert [r["key"] for r in got] == [r["key"] for r in want]
    else:
        assert got == want


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("size", "after", "epoch"), [(4, 2, 0), (5, 3, 1), (3, 7, 0)])
def test_resume_equals_the_uninterrupted_stream(objects, kind, size, after, epoch) -> None:
    make = objects[kind]
    shared = make()  # reusable kinds: one object for every loader, as users bind them

    def make_loader(**options: Any) -> dataio.Loader:
        x = make() if kind == "reader" else shared  # a reader is read once: a fresh one
        return pipe(size).bind(x).run(seed=9, **options)

    check_resume(make_loader, after, epoch=epoch)


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("reader", "frame")])
@pytest.mark.parametrize("epoch", [0, 1])
def test_full_shuffle_equals_the_list_of_dicts_shuffle(objects, kind, epoch) -> None:
    source = dataio.records(objects[kind]()).shuffle(seed=3)
    # oracle: the same dicts indexed (Feistel over positions) or as a reusable stream
    oracle = rows() if kind in INDEXED else dataio.from_callable(rows)
    want = values(pipe().bind(dataio.records(oracle).shuffle(seed=3)).run(epoch=epoch))
    got = values(pipe().bind(source).run(epoch=epoch))
    assert got == want
    assert sorted(flat(got)) == list(range(N))


@pytest.mark.parametrize("kind", ["table", "reader", "duckdb"])
def test_buffered_shuffle_equals_the_list_of_dicts_shuffle(objects, kind) -> None:
    source = dataio.records(objects[kind]()).shuffle(seed=4, buffer_size=5)
    oracle = dataio.from_callable(rows).shuffle(seed=4, buffer_size=5)
    assert values(pipe().bind(source).run()) == values(pipe().bind(oracle).run())


@pytest.mark.parametrize("kind", ["table", "polars", "c_stream", "dataset_files"])
@pytest.mark.parametrize("shuffled", [False, True])
@pytest.mark.parametrize(("world", "pad"), [(3, True), (3, False), (5, True)])
def test_shards_equal_the_list_of_dicts_shards(objects, kind, shuffled, world, pad) -> None:
    oracle: Any = rows() if kind in INDEXED else dataio.from_callable(rows)
    source = dataio.records(objects[kind]())
    oracle = dataio.records(oracle)
    if shuffled:
        source, oracle = source.shuffle(seed=2), oracle.shuffle(seed=2)
    for rank in range(world):
        shard = {"id": rank, "of": world, "pad": pad}
        got = [(b.indices, b["v"].tolist()) for b in pipe(3).bind(source).run(shard=shard)]
        want = [(b.indices, b["v"].tolist()) for b in pipe(3).bind(oracle).run(shard=shard)]
        assert got == want


def test_map_filter_and_flat_map_get_dict_rows(objects) -> None:
    source = (
        dataio.records(objects["table"]())
        .map_records(lambda r: {**r, "v": r["v"] * 10, "is_dict": type(r) is dict})
        .filter(lambda r: r["label"] != 0)
        .flat_map_records(lambda r: [r, r])
    )
    plan = dataio.pipeline(
        dataio.slot("v").passthrough(), dataio.slot("is_dict").passthrough(), dataio.batch(4)
    )
    batches = list(plan.bind(source).run())
    got = [v for b in batches for v in b["v"].tolist()]
    want = [r["v"] * 10 for r in rows() if r["label"] != 0 for _ in range(2)]
    assert got == want
    assert all(flag for b in batches for flag in b["is_dict"].tolist())


def test_concat_of_equal_schemas_stays_arrow_and_unequal_falls_back_to_rows() -> None:
    table = make_table()
    tail = table.slice(5).combine_chunks().to_batches()[0]
    same = dataio.records(table.slice(0, 5)).concat(tail)
    assert same.arrow_schema() is not None and same.length() == N
    assert pa.Table.from_batches(list(same.iterate_batches())).equals(table.combine_chunks())
    other = dataio.records(table).concat(table.rename_columns(["v", "b", "c", "d"]))
    assert other.arrow_schema() is None
    assert [r["v"] for r in other.iterate()] == list(range(N)) * 2


# -- passthrough dtypes ----------------------------------------------------------------------------


def typed_plan() -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("label").passthrough(),
        dataio.slot("score").passthrough(),
        dataio.slot("key").passthrough(),
        dataio.batch(5),
    )


def as_list(column: Any) -> list[Any]:
    return column.to_pylist() if hasattr(column, "to_pylist") else list(column)


@pytest.mark.parametrize("kind", ["table", "reader", "polars", "duckdb"])
def test_passthrough_int64_labels_and_string_keys(objects, kind) -> None:
    batches = list(typed_plan().bind(objects[kind]()).run())
    want = rows()
    labels = [b["label"] for b in batches]
    assert all(isinstance(a, np.ndarray) and a.dtype == np.int64 for a in labels)
    assert np.concatenate(labels).tolist() == [r["label"] for r in want]
    assert [k for b in batches for k in as_list(b["key"])] == [r["key"] for r in want]


@pytest.mark.parametrize("kind", ["table", "reader", "polars", "duckdb"])
def test_passthrough_float32_scores_stay_float32(objects, kind) -> None:
    batches = list(typed_plan().bind(objects[kind]()).run())
    scores = [b["score"] for b in batches]
    assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in scores)
    want = make_table().column("score").to_numpy()
    assert np.concatenate(scores).tobytes() == want.tobytes()


# -- take_batch ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "positions",
    [
        [],
        [0],
        [3, 4, 5, 6, 7, 8, 9, 10, 11],
        [22, 0, 5, 5],
        list(range(N)),
        [7, 8, 9, 10, 1, 2, 3, 4],
    ],
)
@pytest.mark.parametrize("kind", ["table", "polars"])
def test_take_batch_equals_the_rows_at_the_positions(objects, kind, positions) -> None:
    source = dataio.records(objects[kind]())
    batch = source.take_batch(positions)
    assert isinstance(batch, pa.RecordBatch)
    assert batch.schema.equals(source.arrow_schema())
    assert batch.column("v").to_pylist() == positions
    assert batch.column("key").to_pylist() == [f"k{i:03d}" for i in positions]


def test_take_batch_of_a_run_inside_one_chunk_is_a_zero_copy_slice() -> None:
    table = make_table()
    source = dataio.records(table)
    first = table.to_batches()[0]
    batch = source.take_batch([1, 2, 3, 4, 5])
    column, original = batch.column("v"), first.column("v")
    assert column.buffers()[1].address == original.buffers()[1].address  # same memory
    assert batch.column("v").to_pylist() == [1, 2, 3, 4, 5]


def test_take_batch_out_of_range_raises_index_error() -> None:
    source = dataio.records(make_table())
    with pytest.raises(IndexError, match="23"):
        source.take_batch([0, N])
    with pytest.raises(IndexError, match="-1"):
        source.take_batch([-1])


# -- hostile and edge cases ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "empty",
    [
        lambda: make_table().slice(0, 0),
        lambda: make_table().schema.empty_table(),
        lambda: pa.RecordBatchReader.from_batches(make_table().schema, []),
        lambda: pl.from_arrow(make_table().slice(0, 0)),
    ],
)
def test_an_empty_table_gives_no_batches(empty) -> None:
    source = dataio.records(empty())
    assert list(pipe().bind(source).run()) == []
    if not source.single_pass:
        assert list(pipe().bind(source.shuffle(seed=1)).run()) == []
        assert list(source.iterate()) == []


def test_zero_columns_fail_like_empty_dicts() -> None:
    bare = make_table().select([])
    source = dataio.records(bare)
    assert len(source) == N and source.take_batch([3, 1]).num_rows == 2
    assert list(source.iterate()) == [{}] * N
    with pytest.raises(FieldError) as arrow_error:
        list(pipe().bind(bare).run())
    with pytest.raises(FieldError) as dict_error:
        list(pipe().bind([{}] * N).run())
    assert str(arrow_error.value) == str(dict_error.value)


class Exploding:
    """An object that claims the Arrow stream protocol but cannot export."""

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        raise RuntimeError("the stream is gone")


class NotACapsule:
    """An export that returns something other than a stream capsule."""

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return "not a capsule"


class NotATable:
    """A stream of plain integers: not record batches (no struct type)."""

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return pa.chunked_array([[1, 2, 3]]).__arrow_c_stream__(requested_schema)


@pytest.mark.parametrize("bad", [Exploding, NotACapsule, NotATable])
def test_a_failing_c_stream_export_is_a_dataio_error_naming_the_object(bad) -> None:
    source = dataio.records(bad())  # lazy: nothing exported yet
    with pytest.raises(DataioError, match=bad.__name__) as info:
        list(pipe().bind(source).run())
    assert not isinstance(info.value, PlanError)
    with pytest.raises(DataioError, match=bad.__name__):
        source.describe()


def test_a_stream_broken_mid_way_is_a_dataio_error() -> None:
    table = make_table()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches():
            writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    truncated = data[: len(data) - 40]  # the last batch's body is cut short
    reader = pa.ipc.open_stream(truncated)
    with pytest.raises(
        FormatError, match=re.escape("Arrow stream of pyarrow.ipc.RecordBatchStreamReader")
    ):
        list(pipe().bind(reader).run())


def test_a_reader_is_single_pass() -> None:
    table = make_table()
    source = dataio.records(pa.RecordBatchReader.from_batches(table.schema, table.to_batches()))
    assert flat(values(pipe().bind(source).run())) == list(range(N))
    with pytest.raises(DataioError, match="single-pass"):
        list(pipe().bind(source).run())
    with pytest.raises(PlanError, match="buffer_size"):
        source.shuffle(seed=1)


def test_c_stream_objects_are_exported_again_every_pass_and_schema_costs_no_export() -> None:
    obj = CStream(make_table())
    source = dataio.records(obj)
    assert obj.exports == 0  # records() is lazy
    source.describe()
    first = values(pipe().bind(source).run())
    assert obj.exports == 1  # the reader opened for the schema served the first pass
    assert values(pipe().bind(source).run()) == first
    assert obj.exports == 2


def test_a_one_shot_c_stream_is_refused_on_its_second_pass() -> None:
    table = make_table()
    one_shot = dataio.sql("SELECT * FROM t ORDER BY v", t=table).collect_arrow_stream()
    source = dataio.records(one_shot)
    assert flat(values(pipe().bind(source).run())) == list(range(N))
    with pytest.raises(DataioError, match="exported only once"):
        list(pipe().bind(source).run())


def test_a_schema_that_changes_between_passes_is_an_error() -> None:
    obj = CStream(make_table())
    source = dataio.records(obj)
    list(pipe().bind(source).run())
    obj.table = make_table().rename_columns(["v", "b", "c", "d"])
    with pytest.raises(DataioError, match="different schema"):
        list(pipe().bind(source).run())


def test_indexed_true_refuses_a_stream() -> None:
    with pytest.raises(PlanError, match="by position"):
        dataio.records(CStream(make_table()), indexed=True)
    assert isinstance(dataio.records(make_table(), indexed=True), IndexedSource)


def test_a_dataio_frame_is_returned_as_is(objects) -> None:
    frame = objects["frame"]()
    assert dataio.records(frame) is frame


@pytest.mark.parametrize("kind", [k for k in KINDS if k not in ("frame", "concat")])
def test_describe_names_the_mode_and_schema_not_the_data(objects, kind) -> None:
    description = dataio.records(objects[kind]()).describe()
    assert description["source"] == "records" and description["mode"]
    assert [name for name, _ in description["schema"]] == ["v", "label", "score", "key"]
    assert "k007" not in repr(description)
    again = dataio.records(objects[kind]())
    assert again.signature() == dataio.records(objects[kind]()).signature()


def test_signatures_differ_by_schema() -> None:
    table = make_table()
    renamed = table.rename_columns(["w", "label", "score", "key"])
    assert dataio.records(table).signature() != dataio.records(renamed).signature()
    assert dataio.records(table).signature() == dataio.records(table.slice(3)).signature()


def test_stream_results_equal_the_list_of_dicts_stream(objects) -> None:
    # the whole batch stream, not only the values: indices and columns
    got = stream(pipe(5).bind(objects["table"]()).run(seed=1))
    assert got == stream(pipe(5).bind(rows()).run(seed=1))


# -- no Python rows on the loader path -------------------------------------------------------------

NO_ROWS_SCRIPT = """
import sys

import duckdb, numpy as np, polars as pl, pyarrow as pa, pyarrow.dataset as ds
from helpers.no_rows import RowConversionError, forbid_row_conversion

import dataio

table = pa.table({
    "label": pa.array(np.arange(1000) % 10, pa.int64()),
    "score": pa.array(np.arange(1000) / 4, pa.float32()),
    "key": pa.array([f"k{i}" for i in range(1000)]),
})
frame = pl.from_arrow(table)
relation = duckdb.connect().from_arrow(table)
forbid_row_conversion()
for trap in (table.to_pylist, table.to_batches()[0].to_pylist, table.column(0)[0].as_py):
    try:
        trap()
    except RowConversionError:
        pass
    else:
        raise SystemExit(f"the trap on {trap} does not fire")


def reader():
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))


if sys.argv[1] == "sources":  # the sources' own Arrow methods
    sources = [table, reader(), frame, frame.lazy(), relation, ds.dataset(table),
               dataio.records(table).concat(table)]
    for x in sources:
        source = dataio.records(x)
        source.describe()
        rows = sum(b.num_rows for b in source.iterate_batches())
        shuffled = dataio.records(x) if source.single_pass else source.shuffle(seed=2)
        if not source.single_pass:
            assert sum(b.num_rows for b in shuffled.at_epoch(1).iterate_batches()) == rows
        if hasattr(source, "take_batch"):
            assert source.take_batch([5, 6, 7, 1, 999]).num_rows == 5
    print("no rows")
    raise SystemExit

plan = dataio.pipeline(
    dataio.slot("label").passthrough(),
    dataio.slot("score").passthrough(),
    dataio.slot("key").passthrough(),
    dataio.batch(64),
)
sources = {
    "table": table,
    "shuffled table": dataio.records(table).shuffle(seed=1),
    "reader": reader(),
    "polars": frame,
    "duckdb": relation,
    "sharded": table,
}
for name, source in sources.items():
    shard = {"id": 1, "of": 3} if name == "sharded" else None
    labels = [np.asarray(b["label"]) for b in plan.bind(source).run(shard=shard)]
    count = sum(len(a) for a in labels)
    assert count == (334 if shard else 1000), (name, count)
print("no rows")
"""


def run_without_rows(mode: str) -> None:
    """Run :data:`NO_ROWS_SCRIPT` in a subprocess (the trap replaces pyarrow methods for
    good) and fail with its traceback."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", NO_ROWS_SCRIPT, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "no rows" in done.stdout, done.stderr[-3000:]


def test_arrow_sources_read_batches_without_python_rows() -> None:
    """``iterate_batches``, shuffles, concats and ``take_batch`` never make rows."""
    run_without_rows("sources")


def test_the_loader_path_creates_no_python_rows() -> None:
    """Arrow sources reach the loader's batches without ``to_pylist`` / ``as_py``."""
    run_without_rows("loader")


@pytest.mark.parametrize("kind", ["table", "polars", "polars_lazy", "dataset_memory", "c_stream"])
def test_sources_pickle_after_their_schema_was_read(objects, kind) -> None:
    """Worker processes receive sources pickled; an open reader or a dataset stays behind."""
    import pickle

    source = dataio.records(objects[kind]())
    source.describe()  # opens a reader (streams) or exports the table (indexed)
    copy = pickle.loads(pickle.dumps(source))
    assert [r["v"] for r in copy.iterate()] == list(range(N))
    assert copy.signature() == source.signature()


@pytest.mark.parametrize("n", [1, 2, 23, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_a_tabulated_permutation_equals_the_per_call_one(monkeypatch, n, seed) -> None:
    """Small shuffles compute the epoch's order once; it is the same order."""
    from dataio.sources import permutation

    indices = np.random.default_rng(seed % 1000).integers(0, n, size=300)
    tabulated = permutation.FeistelPermutation(n, seed).many(indices.tolist())
    monkeypatch.setattr(permutation, "TABULATE_ROWS", 0)
    per_call = permutation.FeistelPermutation(n, seed)
    assert tabulated == per_call.many(indices.tolist()) == [per_call[i] for i in indices.tolist()]
    assert sorted(per_call.many(list(range(n)))) == list(range(n))
    with pytest.raises(IndexError):
        per_call.many([n])
