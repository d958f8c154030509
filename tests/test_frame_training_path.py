"""Frames feed training without rows (issue #14, item 4), through the loader:

* the frame-to-loader path makes no Python row dicts (plain, shuffled, sharded, an op
  chain through ``to_torch``), proven in a subprocess whose pyarrow row conversions raise
  (``tests/helpers/no_rows.py``);
* a sharded ``pipe.bind(scan_parquet(...))`` decodes only its rank's row groups (counted
  at ``pyarrow.parquet.ParquetFile``), with equal batch counts, all rows once across
  ranks, and exact resume;
* passthrough columns of a Parquet frame against pyarrow's own conversions, including
  ``fixed_shape_tensor`` columns as ``[n, *shape]`` arrays / tensors;
* ``LazyFrame.to_torch`` / ``to_numpy``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume, stream

import dataio
from dataio import col
from dataio.engine import frame_readahead
from dataio.engine.columns import arrow_column
from dataio.exceptions import PlanError

torch = pytest.importorskip("torch")

FILES, GROUPS, GROUP_ROWS = 2, 4, 30  # 240 rows: divisible by worlds 2, 3 and 4
ROWS = FILES * GROUPS * GROUP_ROWS


def plain_table(first: int, n: int) -> pa.Table:
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "label": pa.array(ids % 10, pa.int32()),
            "key": pa.array([f"k{i:04d}" for i in ids]),
        }
    )


@pytest.fixture(scope="module")
def even(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two Parquet files of four 30-row groups each; ``id`` is the row's position."""
    root = tmp_path_factory.mktemp("even")
    for f in range(FILES):
        table = plain_table(f * GROUPS * GROUP_ROWS, GROUPS * GROUP_ROWS)
        pq.write_table(table, root / f"{f}.parquet", row_group_size=GROUP_ROWS)
    return root


def group_of(position: int) -> tuple[str, int]:
    return f"{position // (GROUPS * GROUP_ROWS)}.parquet", position % (GROUPS * GROUP_ROWS) // 30


@pytest.fixture
def row_group_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every (file name, row group) that ``ParquetFile`` decodes, by any of its readers,
    or that a sequential pass gives Arrow's scan to decode."""
    reads: list[tuple[str, int]] = []
    init = pq.ParquetFile.__init__
    many = pq.ParquetFile.read_row_groups
    one = pq.ParquetFile.read_row_group
    batches = pq.ParquetFile.iter_batches

    def record_init(self: pq.ParquetFile, source: Any, *args: Any, **kwargs: Any) -> None:
        self._counted_name = Path(str(source)).name  # type: ignore[attr-defined]
        init(self, source, *args, **kwargs)

    def record_many(self: pq.ParquetFile, row_groups: Any, *args: Any, **kwargs: Any) -> Any:
        reads.extend((self._counted_name, int(i)) for i in row_groups)  # type: ignore[attr-defined]
        return many(self, row_groups, *args, **kwargs)

    def record_one(self: pq.ParquetFile, i: int, *args: Any, **kwargs: Any) -> Any:
        reads.append((self._counted_name, int(i)))  # type: ignore[attr-defined]
        return one(self, i, *args, **kwargs)

    def record_batches(self: pq.ParquetFile, *args: Any, **kwargs: Any) -> Any:
        groups = kwargs.get("row_groups")
        if groups is None:
            groups = range(self.metadata.num_row_groups)
        reads.extend((self._counted_name, int(i)) for i in groups)  # type: ignore[attr-defined]
        return batches(self, *args, **kwargs)

    class RecordedFormat:  # Arrow's scans of a sequential pass (frame_readahead)
        def make_fragment(self, path: str, *args: Any, row_groups: Any, **kwargs: Any) -> Any:
            reads.extend((Path(path).name, int(i)) for i in row_groups)
            scans = ds.ParquetFileFormat()
            return scans.make_fragment(path, *args, row_groups=row_groups, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "__init__", record_init)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", record_many)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", record_one)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", record_batches)
    monkeypatch.setattr(frame_readahead, "_parquet_format", RecordedFormat)
    return reads


def id_plan(size: int = 16) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("id").passthrough(), dataio.slot("label").passthrough(), dataio.batch(size)
    )


# -- a sharded frame through the loader ------------------------------------------------------------


@pytest.mark.parametrize("via", ["bind", "to_numpy"])
@pytest.mark.parametrize("world", [2, 4])
def test_a_sharded_frame_reads_only_its_rank_row_groups(
    even: Path, row_group_reads: list[tuple[str, int]], world: int, via: str
) -> None:
    batch_counts: list[int] = []
    every: list[int] = []
    for rank in range(world):
        row_group_reads.clear()
        shard = {"id": rank, "of": world, "pad": False}
        frame = dataio.scan_parquet(even)  # a fresh frame: no row groups cached
        if via == "bind":
            loader = id_plan().bind(frame).run(shard=shard)
        else:
            loader = frame.to_numpy(batch_size=16, shard=shard, columns=["id", "label"])
        with loader:
            batches = list(loader)
        ids = np.concatenate([b["id"] for b in batches]).tolist()
        assert row_group_reads, "the pass decoded no row groups through ParquetFile"
        holding = {group_of(i) for i in ids}
        # it decodes exactly the row groups holding its own rows: 1/world of them
        assert set(row_group_reads) == holding
        assert len(holding) == FILES * GROUPS // world
        assert len(ids) == ROWS // world
        batch_counts.append(len(batches))
        every += ids
    assert len(set(batch_counts)) == 1, batch_counts  # equal batch counts across ranks
    assert sorted(every) == list(range(ROWS))  # together: every row, once


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_sharded_frame_resumes_exactly(even: Path, shuffled: bool) -> None:
    def make(**options: Any) -> dataio.Loader:
        frame = dataio.scan_parquet(even)
        source = frame.shuffle(seed=3) if shuffled else frame
        return id_plan(7).bind(source).run(shard={"id": 1, "of": 3}, **options)

    check_resume(make, after=4)
    check_resume(make, after=2, epoch=2)


def test_to_numpy_resumes_exactly_under_a_shard(even: Path) -> None:
    def make(**options: Any) -> dataio.Loader:
        frame = dataio.scan_parquet(even)
        return frame.to_numpy(batch_size=9, shard={"id": 2, "of": 3}, shuffle=True, **options)

    check_resume(make, after=3)


# -- no Python rows on the frame-to-loader path ----------------------------------------------------

NO_ROWS_SCRIPT = """
import io, sys
from pathlib import Path

import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image
from helpers.no_rows import RowConversionError, forbid_row_conversion

import dataio
from dataio import col

mode, root = sys.argv[1], Path(sys.argv[2])
n = 90
rng = np.random.default_rng(0)
jpegs = []
for i in range(n if mode == "chain" else 0):
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (40, 36, 3), dtype=np.uint8)).save(out, "JPEG")
    jpegs.append(out.getvalue())
columns = {
    "id": pa.array(np.arange(n), pa.int64()),
    "score": pa.array(np.arange(n) / 4, pa.float32()),
    "key": pa.array([f"k{i}" for i in range(n)]),
}
if jpegs:
    columns["jpeg"] = pa.array(jpegs, pa.binary())
table = pa.table(columns)
pq.write_table(table.slice(0, 50), root / "a.parquet", row_group_size=20)
pq.write_table(table.slice(50), root / "b.parquet", row_group_size=20)

forbid_row_conversion()
for trap in (table.to_pylist, table.to_batches()[0].to_pylist, table.column(0)[0].as_py):
    try:
        trap()
    except RowConversionError:
        pass
    else:
        raise SystemExit(f"the trap on {trap} does not fire")

frame = dataio.scan_parquet(root)
plan = dataio.pipeline(
    dataio.slot("id").passthrough(),
    dataio.slot("score").passthrough(),
    dataio.slot("key").passthrough(),
    dataio.batch(16),
)
if mode == "plain":
    batches = list(plan.bind(frame).run())
    expected = np.arange(n)
elif mode == "shuffled":
    batches = list(plan.bind(frame.shuffle(seed=1)).run())
    expected = np.arange(n)
elif mode == "sharded":
    batches = list(plan.bind(frame).run(shard={"id": 1, "of": 3}))
    expected = np.arange(30, 60)  # a contiguous third of the positions
else:
    prep = col("jpeg").image.decode().resize(32).center_crop(24).normalize("imagenet")
    with frame.with_columns(x=prep).to_torch(batch_size=16, columns=["x", "id", "key"]) as loader:
        batches = list(loader)
    assert all(tuple(b["x"].shape[1:]) == (3, 24, 24) for b in batches)
    assert all(str(b["x"].dtype) == "torch.float32" for b in batches)
    expected = np.arange(n)
ids = np.sort(np.concatenate([np.asarray(b["id"]) for b in batches]))
assert np.array_equal(ids, expected), (mode, ids)
assert all(isinstance(b["key"], pa.Array) for b in batches)
print("no rows")
"""


@pytest.mark.parametrize("mode", ["plain", "shuffled", "sharded", "chain"])
def test_the_frame_to_loader_path_creates_no_python_rows(tmp_path: Path, mode: str) -> None:
    """``to_pylist`` / ``as_py`` raise in the subprocess (the trap replaces pyarrow's
    methods for good), and a ``scan_parquet`` frame still reaches its batches."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])}
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", NO_ROWS_SCRIPT, mode, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and "no rows" in done.stdout, done.stderr[-3000:]


# -- passthrough dtypes of a Parquet frame ---------------------------------------------------------

NUMERIC = {"i64": np.int64, "i32": np.int32, "f32": np.float32, "f64": np.float64, "flag": np.bool_}
TORCH = {
    "i64": torch.int64,
    "i32": torch.int32,
    "f32": torch.float32,
    "f64": torch.float64,
    "flag": torch.bool,
    "t": torch.float32,
    "t16": torch.int16,
}


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 rows in row groups of 6 (batches of 7 cross them) of every passthrough kind."""
    n = 20
    rng = np.random.default_rng(4)
    table = pa.table(
        {
            "i64": pa.array(rng.integers(-(2**40), 2**40, n), pa.int64()),
            "i32": pa.array(rng.integers(-1000, 1000, n), pa.int32()),
            "f32": pa.array(rng.standard_normal(n), pa.float32()),
            "f64": pa.array(rng.standard_normal(n), pa.float64()),
            "flag": pa.array(rng.integers(0, 2, n).astype(bool)),
            "key": pa.array([f"row-{i}" for i in range(n)]),
            "t": pa.FixedShapeTensorArray.from_numpy_ndarray(
                rng.standard_normal((n, 2, 3)).astype(np.float32)
            ),
            "t16": pa.FixedShapeTensorArray.from_numpy_ndarray(
                rng.integers(-500, 500, (n, 4)).astype(np.int16)
            ),
        }
    )
    path = tmp_path_factory.mktemp("typed") / "typed.parquet"
    pq.write_table(table, path, row_group_size=6)
    return path


def typed_plan() -> dataio.Pipeline:
    names = ["i64", "i32", "f32", "f64", "flag", "key", "t", "t16"]
    return dataio.pipeline(*(dataio.slot(n).passthrough() for n in names), dataio.batch(7))


def test_a_parquet_frame_keeps_its_tensor_extension_types(typed: Path) -> None:
    """The scan's schema is the file's Arrow schema: ``fixed_shape_tensor`` stays one."""
    stored = pq.read_schema(typed)
    frame = dataio.scan_parquet(typed)
    assert frame.schema.field("t").type == stored.field("t").type
    assert frame.schema.field("t16").type == stored.field("t16").type
    assert isinstance(frame.collect().column("t").type, pa.FixedShapeTensorType)


@pytest.mark.parametrize("shuffled", [False, True])
def test_parquet_frame_passthrough_dtypes_against_pyarrow(typed: Path, shuffled: bool) -> None:
    oracle = pq.read_table(typed)
    frame = dataio.scan_parquet(typed)
    source = frame.shuffle(seed=2) if shuffled else frame
    batches = list(typed_plan().bind(source).run("numpy"))
    for b in batches:
        for name, dtype in NUMERIC.items():
            assert isinstance(b[name], np.ndarray) and b[name].dtype == dtype, name
        assert isinstance(b["key"], pa.Array) and b["key"].type == pa.string()
        assert b["t"].shape == (len(b), 2, 3) and b["t"].dtype == np.float32
        assert b["t16"].shape == (len(b), 4) and b["t16"].dtype == np.int16
    order = np.concatenate([np.asarray(b.indices) for b in batches])
    rows = order if not shuffled else None
    got = {name: np.concatenate([b[name] for b in batches]) for name in [*NUMERIC, "t", "t16"]}
    keys = [k for b in batches for k in b["key"].to_pylist()]
    want = {name: oracle.column(name).to_numpy() for name in NUMERIC}
    for name in ("t", "t16"):
        want[name] = oracle.column(name).combine_chunks().to_numpy_ndarray()
    if shuffled:  # the rows in the permuted order: each row's i64 is unique, so locate it
        where = {v: i for i, v in enumerate(want["i64"].tolist())}
        rows = np.array([where[v] for v in got["i64"].tolist()])
        assert sorted(rows.tolist()) == list(range(oracle.num_rows))
    for name in want:
        np.testing.assert_array_equal(got[name], want[name][rows])
    assert keys == [oracle.column("key").to_pylist()[r] for r in rows]


def test_parquet_frame_passthrough_under_torch(typed: Path) -> None:
    oracle = pq.read_table(typed)
    batches = list(typed_plan().bind(dataio.scan_parquet(typed)).run("torch"))
    for name, dtype in TORCH.items():
        got = torch.cat([b[name] for b in batches])
        column = oracle.column(name)
        if isinstance(column.type, pa.FixedShapeTensorType):
            want = column.combine_chunks().to_numpy_ndarray()
        else:
            want = column.to_numpy()
        assert got.dtype == dtype, name
        assert torch.equal(got, torch.from_numpy(np.array(want))), name


def test_tensor_columns_with_nulls_stay_arrow(tmp_path: Path) -> None:
    values = np.arange(4 * 6, dtype=np.float32).reshape(4, 6)
    storage = pa.FixedSizeListArray.from_arrays(
        pa.array(values.ravel()), 6, mask=pa.array([False, True, False, False])
    )
    nulls = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [2, 3]), storage)
    holes = pa.ExtensionArray.from_storage(
        pa.fixed_shape_tensor(pa.float32(), [6]),
        pa.FixedSizeListArray.from_arrays(pa.array([1.0, None] * 12, pa.float32()), 6),
    )
    pq.write_table(pa.table({"nulls": nulls, "holes": holes}), tmp_path / "n.parquet")
    plan = dataio.pipeline(
        dataio.slot("nulls").passthrough(), dataio.slot("holes").passthrough(), dataio.batch(4)
    )
    (batch,) = plan.bind(dataio.scan_parquet(tmp_path / "n.parquet")).run()
    assert isinstance(batch["nulls"], pa.Array) and batch["nulls"].null_count == 1
    assert isinstance(batch["holes"], pa.Array)  # null values inside the tensors
    assert batch["nulls"].to_pylist()[1] is None


def test_tensor_column_slices_are_zero_copy_views() -> None:
    values = np.arange(6 * 24, dtype=np.float32).reshape(6, 2, 3, 4)
    array = pa.FixedShapeTensorArray.from_numpy_ndarray(values)
    out = arrow_column(array.slice(2, 3))
    np.testing.assert_array_equal(out, values[2:5])
    assert out.dtype == np.float32 and not out.flags.owndata
    assert np.shares_memory(out, array.storage.values.to_numpy())


def test_bool_tensor_columns_unpack_to_bool_arrays() -> None:
    flags = np.random.default_rng(1).integers(0, 2, (5, 2, 2)).astype(bool)
    storage = pa.FixedSizeListArray.from_arrays(pa.array(flags.ravel()), 4)
    array = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.bool_(), [2, 2]), storage)
    out = arrow_column(array.slice(1, 3))
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, flags[1:4])


# -- LazyFrame.to_torch / to_numpy -----------------------------------------------------------------


def test_to_torch_delivers_every_column_in_batches_of_the_default_size(tmp_path: Path) -> None:
    pq.write_table(plain_table(0, 600), tmp_path / "t.parquet", row_group_size=128)
    with dataio.scan_parquet(tmp_path / "t.parquet").to_torch() as loader:
        batches = list(loader)
    assert [len(b) for b in batches] == [256, 256, 88]
    assert list(batches[0].keys()) == ["id", "label", "key"]
    assert batches[0]["id"].dtype == torch.int64 and batches[0]["label"].dtype == torch.int32
    assert torch.equal(torch.cat([b["id"] for b in batches]), torch.arange(600))
    assert batches[0]["key"].to_pylist()[:2] == ["k0000", "k0001"]
    assert batches[0].row_keys[:2] == ["k0000", "k0001"]


def test_to_torch_options(tmp_path: Path) -> None:
    pq.write_table(plain_table(0, 100), tmp_path / "t.parquet", row_group_size=16)
    frame = dataio.scan_parquet(tmp_path / "t.parquet")
    batches = list(frame.to_torch(batch_size=30, drop_last=True, columns=["label", "id"]))
    assert [len(b) for b in batches] == [30, 30, 30]
    assert list(batches[0].keys()) == ["label", "id"]
    shuffled = [b["id"] for b in frame.to_torch(batch_size=50, shuffle=True, seed=4)]
    ids = torch.cat(shuffled).tolist()
    assert sorted(ids) == list(range(100)) and ids != list(range(100))
    again = torch.cat([b["id"] for b in frame.to_torch(batch_size=50, shuffle=True, seed=4)])
    assert again.tolist() == ids  # the seed fixes the permutation of epoch 0
    with pytest.raises(PlanError, match="not in the frame"):
        frame.to_torch(columns=["id", "nope"])
    with pytest.raises(PlanError, match="buffer_size"):
        frame.filter(col("id") > 3).to_torch(shuffle=True)


def test_to_torch_of_an_op_chain_equals_the_slot_chain(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(5)
    jpegs = []
    for i in range(12):
        out = pa.BufferOutputStream()
        image = Image.fromarray(rng.integers(0, 255, (50 + i, 60, 3), dtype=np.uint8))
        with pa.output_stream(out) as sink:
            image.save(sink, "JPEG")
        jpegs.append(out.getvalue().to_pybytes())
    table = pa.table({"jpeg": pa.array(jpegs, pa.binary()), "label": np.arange(12)})
    pq.write_table(table, tmp_path / "j.parquet", row_group_size=5)
    frame = dataio.scan_parquet(tmp_path / "j.parquet")
    prep = col("jpeg").image.decode().resize(40).center_crop(32).normalize("imagenet")
    with frame.with_columns(x=prep).to_torch(batch_size=5, columns=["x", "label"]) as loader:
        got = list(loader)
    slot = dataio.slot("jpeg").decode_image().resize(40).center_crop(32).normalize("imagenet")
    want = list(dataio.pipeline(slot, dataio.batch(5)).bind(table).run("torch"))
    assert [tuple(b["x"].shape) for b in got] == [(5, 3, 32, 32), (5, 3, 32, 32), (2, 3, 32, 32)]
    for mine, theirs in zip(got, want, strict=True):
        assert torch.equal(mine["x"], theirs["jpeg"])
    assert torch.cat([b["label"] for b in got]).tolist() == list(range(12))


def test_to_numpy_streams_a_frame_that_is_not_addressable(even: Path) -> None:
    frame = dataio.scan_parquet(even).filter(col("label") == 3)
    got = stream(frame.to_numpy(batch_size=8, columns=["id"]))
    ids = [i for _, columns in got for i in np.frombuffer(columns[0][1], np.int64).tolist()]
    assert ids == [i for i in range(ROWS) if i % 10 == 3]
