"""Lazy frames (``dataio/frame.py``): every method against pyarrow / polars on the same files,
pushdown from DataFusion's metrics, laziness, bad input, and frames as record sources."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from helpers.resume import check_resume
from polars.testing import assert_frame_equal

import dataio
from dataio import col, count, lit
from dataio.exceptions import FormatError, NotFoundError, QueryError
from dataio.frame import (
    read_feather,
    read_parquet,
    scan,
    scan_csv,
    scan_feather,
    scan_json,
    scan_parquet,
    sql,
)

ROWS_PER_GROUP = 40
FILES = 3


def make_table(part: int) -> pa.Table:
    rng = np.random.default_rng(part)
    n = 2 * ROWS_PER_GROUP
    ids = np.arange(part * n, (part + 1) * n, dtype=np.int64)
    value = rng.random(n)
    return pa.table(
        {
            "id": ids,
            "label": pa.array(ids % 7, pa.int32()),
            "value": pa.array(
                [None if i % 11 == 0 else v for i, v in zip(ids, value, strict=True)], pa.float64()
            ),
            "name": pa.array([f"item-{i:04d}" for i in ids]),
            "flag": pa.array(ids % 3 == 0),
            "blob": pa.array([bytes([i % 256]) * (i % 5) for i in ids], pa.binary()),
        }
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("frames")
    tables = [make_table(p) for p in range(FILES)]
    whole = pa.concat_tables(tables)
    (root / "pq").mkdir()
    paths = []
    for part, table in enumerate(tables):
        path = root / "pq" / f"part-{part}.parquet"
        pq.write_table(table, path, row_group_size=ROWS_PER_GROUP)
        paths.append(str(path))
    feather.write_feather(whole, root / "all.arrow", compression="uncompressed")
    plain = whole.drop_columns(["blob"])
    pacsv.write_csv(plain, root / "all.csv")
    with open(root / "all.jsonl", "w") as handle:
        for row in plain.to_pylist():
            handle.write(json.dumps(row) + "\n")
    return {"root": root, "paths": paths, "whole": whole, "plain": plain}


def frame(data: dict[str, Any]) -> dataio.frame.LazyFrame:
    return scan_parquet(data["root"] / "pq")


def lazy(data: dict[str, Any]) -> pl.LazyFrame:
    return pl.scan_parquet(data["paths"])


def same(
    got: pa.Table,
    expected: pl.DataFrame | pa.Table,
    *,
    sort: list[str] | None = None,
    exact: bool = True,
) -> None:
    """Equal as polars frames (types and values), optionally after sorting both; floats
    to a relative 1e-12 when not ``exact`` (sums depend on the order of addition)."""
    left = pl.from_arrow(got)
    right = expected if isinstance(expected, pl.DataFrame) else pl.from_arrow(expected)
    assert isinstance(left, pl.DataFrame) and isinstance(right, pl.DataFrame)
    if sort:
        left, right = left.sort(sort), right.sort(sort)
    assert left.columns == right.columns
    assert_frame_equal(left, right, check_exact=exact, rel_tol=1e-12)


# -- scans --------------------------------------------------------------------------------


def test_scans_read_what_pyarrow_reads_in_file_order(data) -> None:
    root = data["root"]
    same(frame(data).collect(), data["whole"])
    same(scan_parquet(str(root / "pq" / "*.parquet")).collect(), data["whole"])
    same(scan_feather(root / "all.arrow").collect(), feather.read_table(root / "all.arrow"))
    same(scan_csv(root / "all.csv").collect(), pacsv.read_csv(root / "all.csv"))
    expected_json = pl.read_ndjson(root / "all.jsonl")
    got_json = scan_json(root / "all.jsonl").collect()
    assert got_json.to_pylist() == expected_json.to_dicts()
    # a list is read in the order given, not sorted
    reordered = [data["paths"][2], data["paths"][0]]
    got = scan(reordered).collect()
    expected = pa.concat_tables([pq.read_table(p) for p in reordered])
    same(got, expected)
    assert scan(reordered).collect().to_pylist() == expected.to_pylist()


def test_filter_expressions_sql_strings_and_callables_match_polars(data) -> None:
    expr = (col("label") < 3) & (col("value") > 0.4) | col("name").is_in(["item-0005"])
    expected = lazy(data).filter(
        ((pl.col("label") < 3) & (pl.col("value") > 0.4)) | pl.col("name").is_in(["item-0005"])
    )
    same(frame(data).filter(expr).collect(), expected.collect())
    same(
        frame(data).filter("label < 3 AND value > 0.4 OR name IN ('item-0005')").collect(),
        expected.collect(),
    )
    same(
        frame(data).filter(~col("flag"), col("value").is_null()).collect(),
        lazy(data).filter(~pl.col("flag"), pl.col("value").is_null()).collect(),
    )
    same(
        frame(data).filter((col("id") % 4 == 1) & (col("id") * 2 - 1 >= 31)).collect(),
        lazy(data).filter((pl.col("id") % 4 == 1) & (pl.col("id") * 2 - 1 >= 31)).collect(),
    )

    def odd_names(row: dict) -> bool:
        return int(row["name"][-1]) % 2 == 1

    rows = frame(data).filter(col("label") == 2, odd_names).collect().to_pylist()
    oracle = [r for r in data["whole"].to_pylist() if r["label"] == 2 and odd_names(r)]
    assert rows == oracle
    # steps after a Python filter still run, on the rows that passed
    after = frame(data).filter(odd_names).filter(col("id") > 100).select("id").collect().to_pylist()
    assert after == [
        {"id": r["id"]} for r in data["whole"].to_pylist() if odd_names(r) and r["id"] > 100
    ]


def test_select_with_columns_limit_sort(data) -> None:
    f, p = frame(data), lazy(data)
    same(
        f.select("name", (col("value") * 2).alias("double"), col("id")).collect(),
        p.select("name", (pl.col("value") * 2).alias("double"), "id").collect(),
    )
    same(
        f.with_columns(col("id").cast(pa.float64()).alias("fid"), label=col("label") + 1).collect(),
        p.with_columns(
            pl.col("id").cast(pl.Float64).alias("fid"), label=(pl.col("label") + 1).cast(pl.Int64)
        ).collect(),
    )
    same(f.limit(7, offset=75).collect(), p.slice(75, 7).collect())
    same(
        f.filter(col("label") == 4).head(5).collect(),
        p.filter(pl.col("label") == 4).head(5).collect(),
    )
    same(
        f.sort(["label", "id"], descending=[True, False]).collect(),
        p.sort(["label", "id"], descending=[True, False]).collect(),
    )
    same(
        f.sort(["value", "id"], nulls_first=True).limit(30).collect(),
        p.sort(["value", "id"], nulls_last=False).head(30).collect(),
    )


def test_join_and_group_by_match_polars(data) -> None:
    names = pa.table(
        {"label": pa.array([0, 1, 2, 9], pa.int32()), "name": ["zero", "one", "two", "nine"]}
    )
    right = sql("SELECT * FROM t", t=names)
    f, p = frame(data).select("id", "label", "name"), lazy(data).select("id", "label", "name")
    for how in ("inner", "left", "right", "full", "semi", "anti"):
        # keys named alike appear once: polars' coalesce=True (its default but for full)
        same(
            f.join(right, on="label", how=how).collect(),
            p.join(pl.from_arrow(names).lazy(), on="label", how=how, coalesce=True).collect(),
            sort=["id", "label"],
        )
    same(
        frame(data).group_by("label").agg(
            col("value").sum(), col("value").mean(), col("id").min(), col("id").max(),
            col("value").count(), col("flag").n_unique(), n=count(),
        ).collect(),
        lazy(data).group_by("label").agg(
            pl.col("value").sum().alias("value_sum"), pl.col("value").mean().alias("value_mean"),
            pl.col("id").min().alias("id_min"), pl.col("id").max().alias("id_max"),
            pl.col("value").count().cast(pl.Int64).alias("value_count"),
            pl.col("flag").n_unique().cast(pl.Int64).alias("flag_n_unique"),
            pl.len().cast(pl.Int64).alias("n"),
        ).collect(),
        sort=["label"],
        exact=False,
    )  # fmt: skip
    total = frame(data).agg(col("id").sum()).collect().to_pylist()
    assert total == [{"id_sum": int(pc.sum(data["whole"]["id"]).as_py())}]


def test_frames_are_values(data) -> None:
    base = frame(data)
    before = repr(base)
    filtered = base.filter(col("label") == 1)
    selected = filtered.select("id")
    assert repr(base) == before and base.columns == data["whole"].column_names
    assert filtered.columns == base.columns and selected.columns == ["id"]
    assert selected.collect().num_rows == filtered.collect().num_rows
    assert "LazyFrame[id: int64]" in repr(selected) and "filter((col('label') == 1))" in repr(
        selected
    )
    html = selected._repr_html_()
    assert "<td>id</td>" in html and "scan_parquet" in html


# -- exports ------------------------------------------------------------------------------


def test_arrow_exports_reach_polars_duckdb_and_pyarrow(data) -> None:
    query = frame(data).filter(col("label") == 3).select("id", "name", "blob")
    expected = query.collect()
    assert isinstance(expected, pa.Table)
    assert query.collect_arrow() == expected  # the reference's name for collect()
    assert expected.schema.field("name").type == pa.string()
    assert expected.schema.field("blob").type == pa.binary()
    assert pa.table(query) == expected
    assert query.collect_arrow_reader().read_all() == expected
    stream = query.collect_arrow_stream()
    assert stream.schema == expected.schema
    assert pa.RecordBatchReader.from_stream(stream).read_all() == expected
    polars_frame = pl.DataFrame(query)
    assert polars_frame.to_dicts() == expected.to_pylist()
    assert query.to_polars().equals(pl.from_arrow(expected))
    con = duckdb.connect()
    relation = query.collect_arrow_reader()  # noqa: F841 - duckdb reads it by name
    got = con.execute("SELECT id, name FROM relation ORDER BY id").fetchall()
    assert [{"id": i, "name": n} for i, n in got] == expected.select(["id", "name"]).to_pylist()


def test_loader_arrow_output_reaches_polars_duckdb_and_pyarrow(data) -> None:
    plan = dataio.pipeline(
        dataio.slot("id").passthrough(), dataio.slot("name").passthrough(), dataio.batch(16)
    )
    source = frame(data).filter(col("label") < 3)
    expected = source.select("id", "name").collect().to_pylist()
    batches = list(plan.bind(source).run("arrow"))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    delivered = pa.Table.from_batches(batches)
    assert delivered.select(["id", "name"]).to_pylist() == expected
    assert pl.from_arrow(delivered).select("id", "name").to_dicts() == expected
    con = duckdb.connect()
    got = con.execute("SELECT id, name FROM delivered ORDER BY __index__").fetchall()
    assert [{"id": i, "name": n} for i, n in got] == expected
    # the loader itself is an Arrow C stream
    assert pa.table(plan.bind(source).run("arrow")).select(["id", "name"]).to_pylist() == expected
    assert pl.DataFrame(plan.bind(source).run("numpy")).select("id", "name").to_dicts() == expected
    loader = pa.RecordBatchReader.from_stream(plan.bind(source).run("arrow"))  # noqa: F841
    via_duckdb = con.execute("SELECT id FROM loader ORDER BY __index__").fetchall()
    assert [i for (i,) in via_duckdb] == [r["id"] for r in expected]


# -- pushdown -----------------------------------------------------------------------------


def metric(text: str, name: str) -> list[tuple[int, int]]:
    """(total, matched) pairs of a ``name=T total → M matched`` metric, one per scan."""
    return [(int(t), int(m)) for t, m in re.findall(rf"{name}=(\d+) total → (\d+) matched", text)]


def scanned(text: str) -> float:
    units = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
    return sum(
        float(v) * units[u] for v, u in re.findall(r"bytes_scanned=([\d.]+) ?([KMG]?)", text)
    )


def test_row_groups_are_pruned_and_columns_not_read(data) -> None:
    n = 2 * ROWS_PER_GROUP
    # ids are sorted: only the second file's first row group can hold 85..90
    text = (
        frame(data)
        .filter((col("id") >= n + 5) & (col("id") < n + 10))
        .select("id")
        .explain(analyze=True)
    )
    files = metric(text, "files_ranges_pruned_statistics")
    groups = metric(text, "row_groups_pruned_statistics")
    # two files pruned by their statistics, then one of the third file's two row groups
    assert sum(t for t, _ in files) == FILES and sum(m for _, m in files) == 1, text
    assert sum(t for t, _ in groups) == 2 and sum(m for _, m in groups) == 1, text
    assert "projection=[id]" in text
    narrow = scanned(frame(data).select("id").explain(analyze=True))
    wide = scanned(frame(data).explain(analyze=True))
    assert 0 < narrow < wide / 3
    plain = frame(data).filter(col("label") == 1).explain()
    assert "predicate=label@" in plain and "DataFusion physical plan" in plain


# -- laziness -----------------------------------------------------------------------------


def test_building_and_printing_reads_no_data(data, tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    pq.write_table(make_table(0), path, row_group_size=ROWS_PER_GROUP, compression="none")
    raw = bytearray(path.read_bytes())
    raw[4:200] = bytes(196)  # destroy the first pages; the footer stays valid
    path.write_bytes(raw)
    query = scan_parquet(path).filter(col("label") > 2).select("id", "name")
    text = repr(query) + query._repr_html_()
    assert "id: int64" in text and "filter" in text
    with pytest.raises(dataio.DataioError, match=re.escape(str(path))):
        query.collect()


def test_files_are_touched_only_by_terminals(data, tmp_path: Path) -> None:
    path = tmp_path / "data.parquet"
    pq.write_table(make_table(0), path)
    query = scan_parquet(path).filter(col("id") < 3).select("id")
    pq.write_table(make_table(1).slice(0, 2), path)  # same schema, new rows
    assert repr(query)
    assert query.collect().to_pylist() == []
    pq.write_table(pa.table({"id": pa.array([0, 1, 2, 9], pa.int64())}), path)
    assert query.collect().to_pylist() == [{"id": 0}, {"id": 1}, {"id": 2}]
    os.remove(path)
    assert "scan_parquet" in repr(query)
    with pytest.raises(NotFoundError, match=r"data\.parquet"):
        query.collect()


# -- bad input ----------------------------------------------------------------------------


def test_bad_input_is_a_clear_dataio_error(data, tmp_path: Path) -> None:
    f = frame(data)
    with pytest.raises(QueryError, match=r"column 'nope' not found; available columns: \['id'"):
        f.filter(col("nope") > 1)
    with pytest.raises(QueryError, match="'nope' not found"):
        f.select("id", "nope")
    with pytest.raises(QueryError, match="nope"):
        f.filter("nope > 1")
    with pytest.raises(QueryError, match="not a column of the right frame"):
        f.join(f, left_on="id", right_on="nope")
    with pytest.raises(QueryError, match=r"cannot compare col\('name'\) \(string\) with 3"):
        f.filter(col("name") > 3)
    with pytest.raises(QueryError, match=r"cannot compare col\('id'\) \(int64\) with 'abc'"):
        f.filter(col("id") > "abc")
    with pytest.raises(QueryError, match=r"(?s)type mismatch.*'abc'"):
        f.filter("id > 'abc'")
    with pytest.raises(QueryError, match="malformed SQL"):
        sql("SELEC id FRM t", t=f)
    with pytest.raises(QueryError, match="t2"):
        sql("SELECT id FROM t2", t=f)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1" + bytes(100) + b"garbage!PAR1")
    with pytest.raises(FormatError, match=r"bad\.parquet.*corrupt Parquet footer"):
        scan_parquet(bad)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(make_table(0), mixed / "a.parquet")
    pq.write_table(make_table(1), mixed / "b.parquet")
    later = scan_parquet(mixed)
    (mixed / "b.parquet").write_bytes(b"PAR1" + bytes(100) + b"garbage!PAR1")
    with pytest.raises(FormatError, match=r"b\.parquet"):
        later.collect()
    with pytest.raises(NotFoundError, match="matched no files"):
        scan_parquet(tmp_path / "*.nothing")
    with pytest.raises(NotFoundError, match="no such file"):
        scan_parquet(tmp_path / "missing.parquet")
    with pytest.raises(dataio.PlanError, match=re.escape("& | ~")):
        f.filter((col("id") > 1) and (col("id") < 5))
    with pytest.raises(dataio.PlanError, match="aggregates belong"):
        f.select(col("id").sum())
    with pytest.raises(dataio.DataioError, match="not supported"):
        scan_parquet("ftp://host/x.parquet")


def test_remembered_step_checks_stay_exact(data) -> None:
    """Frame methods remember the schema a step gives over an input schema; what they
    remember never hides an error or carries a type over to another input."""
    f = frame(data)
    for _ in range(2):  # the second build finds the first one's checks
        assert f.filter(col("id") > 3).select("id", "name").schema == pa.schema(
            [("id", pa.int64()), ("name", pa.string())]
        )
        with pytest.raises(QueryError, match="'nope' not found"):
            f.select("id", "nope")
        with pytest.raises(QueryError, match=r"cannot compare col\('id'\) \(int64\) with 'abc'"):
            f.filter(col("id") > "abc")
    # the same step text over other inputs: literals and column types are part of it
    assert (
        f.filter(col("id") > 3.5).collect().num_rows
        == pc.sum(pc.greater(data["whole"]["id"], 3.5)).as_py()
    )
    renamed = f.select(col("name").alias("id"))
    assert renamed.select("id").schema == pa.schema([("id", pa.string())])
    with pytest.raises(QueryError, match=r"cannot compare col\('id'\) \(string\) with 3"):
        renamed.filter(col("id") > 3)
    table = pa.table({"id": pa.array([1.5, 4.5]), "name": ["a", "b"]})
    floats = sql("SELECT * FROM t", t=table)
    assert floats.filter(col("id") > 3).select("id").schema == pa.schema([("id", pa.float64())])
    assert floats.filter(col("id") > 3).select("id").collect()["id"].to_pylist() == [4.5]
    # steps whose labels read alike are still told apart
    assert f.select(col("id").cast(pa.int32()).alias("id")).schema.field("id").type == pa.int32()
    # a dtype name is the same type (issue 17: cast takes names, as polars)
    assert f.select(col("id").cast("int32")).schema == pa.schema([("id", pa.int32())])
    assert f.filter("(1 == '1')").collect().num_rows == data["whole"].num_rows
    with pytest.raises(QueryError, match=r"cannot compare 1 \(int64\) with '1'"):
        f.filter(lit(1) == "1")
    plain = pa.struct([pa.field("a", pa.int64())])
    tagged = pa.struct([pa.field("a", pa.int64(), metadata={"unit": "px"})])
    structs = sql("SELECT named_struct('a', id) AS s FROM t", t=f)
    for kind in (plain, tagged, plain):
        got = structs.select(col("s").cast(kind).alias("s")).collect()
        assert got.schema.field("s").type.field(0).metadata == kind.field(0).metadata


# -- Feather and eager readers ------------------------------------------------------------


def test_feather_keeps_arrow_types_and_buffers_through_projection_and_slicing(
    tmp_path: Path,
) -> None:
    tensor = pa.FixedShapeTensorArray.from_numpy_ndarray(
        np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    )
    table = pa.table(
        {
            "key": pa.array([f"k{i}" for i in range(6)], pa.large_string()),
            "cat": pa.array(["a", "b", "a", "c", "b", "a"]).dictionary_encode(),
            "ts": pa.array(range(6), pa.timestamp("ms", tz="UTC")),
            "value": pa.array(np.linspace(0, 1, 6), pa.float64()),
            "tensor": tensor,
        }
    )
    path = tmp_path / "table.arrow"
    feather.write_feather(table, path, compression="uncompressed")
    before = pa.total_allocated_bytes()
    got = scan_feather(path).select("tensor", "cat", "ts", "key").limit(3, offset=2).collect()
    assert pa.total_allocated_bytes() == before  # buffers are the file's memory map
    expected = table.select(["tensor", "cat", "ts", "key"]).slice(2, 3)
    assert got.schema == expected.schema and got.equals(expected)
    assert isinstance(got.column("tensor").chunk(0), pa.FixedShapeTensorArray)
    assert np.array_equal(
        got.column("tensor").chunk(0).to_numpy_ndarray(),
        np.arange(24, dtype=np.float32).reshape(6, 2, 2)[2:5],
    )
    assert read_feather(path, columns=["value", "key"]).equals(table.select(["value", "key"]))
    stream = scan_feather(path).select("key", "value").collect_arrow_stream()
    assert (
        pa.RecordBatchReader.from_stream(stream).read_all().equals(table.select(["key", "value"]))
    )


def test_read_parquet_columns(data) -> None:
    got = read_parquet(data["paths"][1], columns=["name", "id"])
    assert got.equals(pq.read_table(data["paths"][1], columns=["name", "id"]))
    assert read_parquet(data["root"] / "pq").equals(data["whole"])


# -- a frame is a record source -----------------------------------------------------------


def source_plan(size: int = 4) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("id").passthrough(), dataio.slot("name").passthrough(), dataio.batch(size)
    )


def test_frame_as_a_record_source_resumes_and_shards(data) -> None:
    source = frame(data).filter(col("label").is_in([1, 2]) & (col("id") > 20)).select("id", "name")
    expected = [r["id"] for r in source.collect().to_pylist()]
    assert [r["id"] for r in source] == expected  # iteration order is the collect order
    loader = source_plan().bind(source).run()
    assert [i for b in loader for i in b["id"]] == expected

    def make_loader(**options: Any) -> dataio.Loader:
        return source_plan(5).bind(source).run(seed=3, **options)

    check_resume(make_loader, 3)
    check_resume(make_loader, 2, epoch=1)
    world = 3
    ranks = [
        [
            i
            for b in source_plan(3).bind(source).run(shard={"id": r, "of": world, "pad": False})
            for i in b["id"]
        ]
        for r in range(world)
    ]
    assert sorted(i for r in ranks for i in r) == expected[: len(expected) // world * world]
    for rank, ids in enumerate(ranks):
        assert ids == expected[rank : len(expected) // world * world : world]


def test_non_row_local_frames_stream_in_a_stable_order(data) -> None:
    source = frame(data).group_by("label", "flag").agg(col("id").sum(), n=count())
    first = [tuple(r.values()) for r in source]
    assert first == [tuple(r.values()) for r in source]
    assert sorted(first) == sorted(tuple(r.values()) for r in source.collect().to_pylist())

    def make_loader(**options: Any) -> dataio.Loader:
        plan = dataio.pipeline(
            dataio.slot("label").passthrough(), dataio.slot("id_sum").passthrough(), dataio.batch(3)
        )
        return plan.bind(source).run(**options)

    check_resume(make_loader, 2)


def test_source_signature_describes_the_plan(data) -> None:
    f = frame(data)
    a = f.filter(col("label") == 1).select("id")
    assert a.signature() == frame(data).filter(col("label") == 1).select("id").signature()
    assert a.signature() != f.filter(col("label") == 2).select("id").signature()
    assert a.configured and not f.configured
    assert f.length() == FILES * 2 * ROWS_PER_GROUP
    assert a.length() is None
    plan = source_plan()
    state = plan.bind(a).run().state_dict()
    other = plan.bind(f.filter(col("label") == 2).select("id", "name")).run()
    with pytest.raises(dataio.CheckpointError):
        other.load_state_dict(state)


def test_limit_before_sort_takes_rows_in_file_order(data) -> None:
    got = frame(data).limit(10, offset=75).sort("id", descending=True).collect()
    same(got, lazy(data).slice(75, 10).sort("id", descending=True).collect())
    rows = list(frame(data).limit(10, offset=75).sort("id", descending=True))
    assert rows == got.to_pylist()
    assert lit(3).describe() == "3"
