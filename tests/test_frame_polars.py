"""Frames as polars users expect them (issue 17, item 1): each method against polars.

Every test builds the same data as a Parquet file scanned by dataio and as a polars
frame, runs the method on both and compares values, names and (where polars fixes them)
types. polars is the oracle; nothing here hard-codes a result polars does not also give.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import dataio
from dataio import col, lit
from dataio.exceptions import DataioError, PlanError, QueryError
from dataio.frame import LazyFrame

pl = pytest.importorskip("polars")

INTERNAL = re.compile(r"c[0-9a-f]{32}|\?table\?|__dataio")

TABLE = pa.table(
    {
        "width": pa.array([4, -7, 3, None, 10, 0, -9, 4], pa.int64()),
        "height": pa.array([3, 2, 0, 1, -4, 5, 2, 3], pa.int64()),
        "small": pa.array([1, 2, 3, 4, 5, 6, 7, None], pa.int32()),
        "ratio": pa.array([1.5, -2.5, None, 4.0, 0.25, -0.5, 8.0, 1.5], pa.float64()),
        "f32": pa.array([0.5, 1.5, 2.0, -3.0, None, 6.0, 7.5, 0.5], pa.float32()),
        "key": pa.array(["Abc", "xyZ ", None, " q", "Ünïcødé", "", "a.b.c", "Abc"], pa.string()),
        "flag": pa.array([True, False, None, True, True, False, True, True], pa.bool_()),
    }
)


@pytest.fixture
def frames(tmp_path: Path) -> tuple[LazyFrame, Any]:
    path = tmp_path / "t.parquet"
    pq.write_table(TABLE, path, row_group_size=3)
    return dataio.scan_parquet(path), pl.from_arrow(TABLE)


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def assert_same(got: pa.Table, want: Any, *, types: bool = True) -> None:
    """dataio's table equals polars' frame: names, values (floats to 1e-9, NaN = NaN) and,
    with ``types``, Arrow types."""
    expected = want.to_arrow()
    assert got.column_names == expected.column_names
    if types:
        for name in got.column_names:
            a, b = got.schema.field(name).type, expected.schema.field(name).type
            plain = {pa.large_string(): pa.string(), pa.string_view(): pa.string()}
            assert plain.get(a, a) == plain.get(b, b), (name, a, b)
    for name in got.column_names:
        for x, y in zip(got[name].to_pylist(), expected[name].to_pylist(), strict=True):
            if isinstance(x, float) and isinstance(y, float):
                assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, rel=1e-9), (
                    name,
                    x,
                    y,
                )
            else:
                assert x == y, (name, x, y)


# -- arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda c: c("width") / c("height"), lambda c: c("width") / c("height")),
        (lambda c: c("width") // c("height"), lambda c: c("width") // c("height")),
        (lambda c: c("width") % c("height"), lambda c: c("width") % c("height")),
        (lambda c: c("small") / c("width"), lambda c: c("small") / c("width")),
        (lambda c: c("ratio") // c("height"), lambda c: c("ratio") // c("height")),
        (lambda c: c("ratio") % c("height"), lambda c: c("ratio") % c("height")),
        (lambda c: c("f32") / c("f32"), lambda c: c("f32") / c("f32")),
        (lambda c: c("f32") / c("width"), lambda c: c("f32") / c("width")),
        (lambda c: c("width") // 3, lambda c: c("width") // 3),
        (lambda c: 7 // c("height"), lambda c: 7 // c("height")),
        (lambda c: 10 / c("width"), lambda c: 10 / c("width")),
        (lambda c: -7 % c("height"), lambda c: -7 % c("height")),
        (lambda c: c("width") * 2 + c("height"), lambda c: c("width") * 2 + c("height")),
        (lambda c: -c("width"), lambda c: -c("width")),
    ],
)
def test_arithmetic_matches_polars(frames: tuple[LazyFrame, Any], ours: Any, theirs: Any) -> None:
    frame, df = frames
    got = frame.select(ours(col)).collect()
    assert_same(got, df.select(theirs(pl.col)))


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda c: c("width").fill_null(0), lambda c: c("width").fill_null(0)),
        (lambda c: c("ratio").fill_null(c("height")), lambda c: c("ratio").fill_null(c("height"))),
        (lambda c: c("key").fill_null("?"), lambda c: c("key").fill_null("?")),
        (lambda c: c("width").abs(), lambda c: c("width").abs()),
        (lambda c: c("ratio").abs(), lambda c: c("ratio").abs()),
        (lambda c: c("ratio").round(), lambda c: c("ratio").round()),
        (lambda c: (c("ratio") / 3).round(2), lambda c: (c("ratio") / 3).round(2)),
        (lambda c: (c("width") / 4).round(1), lambda c: (c("width") / 4).round(1)),
        (lambda c: c("width").round(), lambda c: c("width").round()),
        (lambda c: c("f32").round(), lambda c: c("f32").round()),
        (
            lambda c: c("ratio").round(mode="half_away_from_zero"),
            lambda c: c("ratio").round(mode="half_away_from_zero"),
        ),
    ],
)
def test_value_methods_match_polars(frames: tuple[LazyFrame, Any], ours: Any, theirs: Any) -> None:
    frame, df = frames
    assert_same(frame.select(ours(col)).collect(), df.select(theirs(pl.col)))


def test_true_division_of_integer_columns_is_a_float(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = frame.with_columns(aspect=col("width") / col("height")).collect()
    want = df.with_columns(aspect=pl.col("width") / pl.col("height"))
    assert got.schema.field("aspect").type == pa.float64()
    assert got["aspect"][0].as_py() == pytest.approx(4 / 3)
    assert_same(got, want)


# -- cast ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "polars_dtype"),
    [
        ("float32", "Float32"),
        ("Float32", "Float32"),
        ("float64", "Float64"),
        ("int32", "Int32"),
        ("int8", "Int8"),
        ("string", "String"),
        ("str", "String"),
        ("utf8", "String"),
        (pa.float32(), "Float32"),
        (np.float32, "Float32"),
        (np.dtype("int16"), "Int16"),
        ("pl.Float32", "Float32"),
        (float, "Float64"),
        (str, "String"),
    ],
)
def test_cast_takes_names_and_types_and_keeps_the_name(
    frames: tuple[LazyFrame, Any], dtype: Any, polars_dtype: str
) -> None:
    frame, df = frames
    if dtype == "pl.Float32":
        dtype = pl.Float32
    got = frame.select(col("small").cast(dtype), col("height").cast(dtype)).collect()
    want = df.select(
        pl.col("small").cast(getattr(pl, polars_dtype)),
        pl.col("height").cast(getattr(pl, polars_dtype)),
    )
    assert got.column_names == ["small", "height"]
    assert_same(got, want)


def test_cast_float_to_int_and_bool_to_int(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = frame.select(col("ratio").cast("int64"), col("flag").cast(int)).collect()
    assert_same(got, df.select(pl.col("ratio").cast(pl.Int64), pl.col("flag").cast(pl.Int64)))


def test_cast_strict_and_not(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = frame.select(col("key").cast("int64", strict=False)).collect()
    assert_same(got, df.select(pl.col("key").cast(pl.Int64, strict=False)))
    with pytest.raises(QueryError, match=r"col\('key'\)\.cast"):
        frame.select(col("key").cast("int64")).collect()
    with pytest.raises(pl.exceptions.InvalidOperationError):
        df.select(pl.col("key").cast(pl.Int64))


def test_cast_refuses_unknown_dtypes() -> None:
    with pytest.raises(PlanError, match="'floaty'"):
        col("width").cast("floaty")
    with pytest.raises(PlanError, match="dtype"):
        col("width").cast(object())


# -- drop / rename / unique --------------------------------------------------------------


def test_drop_matches_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    assert_same(frame.drop("key", "flag").collect(), df.drop("key", "flag"))
    assert_same(frame.drop(["width", "f32"]).collect(), df.drop(["width", "f32"]))
    assert_same(frame.drop("nope", "key", strict=False).collect(), df.drop("key"))
    with pytest.raises(PlanError, match=r"\['nope'\] not found"):
        frame.drop("nope")
    with pytest.raises(pl.exceptions.ColumnNotFoundError):
        df.drop("nope")


def test_rename_matches_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    mapping = {"width": "w", "key": "name"}
    assert_same(frame.rename(mapping).collect(), df.rename(mapping))
    assert_same(frame.rename(str.upper).collect(), df.rename(str.upper))
    assert_same(
        frame.rename({"width": "height", "height": "width"}).collect(),
        df.rename({"width": "height", "height": "width"}),
    )
    with pytest.raises(PlanError, match=r"\['nope'\] not found"):
        frame.rename({"nope": "x"})
    assert frame.rename({"nope": "x"}, strict=False).columns == frame.columns
    with pytest.raises(PlanError, match="duplicate"):
        frame.rename({"width": "height"})


@pytest.mark.parametrize("keep", ["first", "last", "none", "any"])
@pytest.mark.parametrize("subset", [None, "key", ["flag", "height"]])
def test_unique_matches_polars(frames: tuple[LazyFrame, Any], keep: str, subset: Any) -> None:
    frame, df = frames
    got = frame.unique(subset=subset, keep=keep, maintain_order=True).collect()  # type: ignore[arg-type]
    want = df.unique(subset=subset, keep="first" if keep == "any" else keep, maintain_order=True)
    assert_same(got, want)


def test_unique_without_maintain_order_keeps_the_same_rows(
    frames: tuple[LazyFrame, Any],
) -> None:
    frame, df = frames
    got = frame.select("key", "flag").unique().collect()
    want = df.select("key", "flag").unique(maintain_order=True)
    assert_same(got, want)
    with pytest.raises(PlanError, match="keep"):
        frame.unique(keep="middle")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match=r"\['nope'\]"):
        frame.unique(subset=["nope"])


# -- predicates ------------------------------------------------------------------------


@pytest.mark.parametrize("closed", ["both", "left", "right", "none"])
def test_is_between_matches_polars(frames: tuple[LazyFrame, Any], closed: str) -> None:
    frame, df = frames
    got = frame.select(col("width").is_between(-7, 4, closed=closed)).collect()  # type: ignore[arg-type]
    assert_same(got, df.select(pl.col("width").is_between(-7, 4, closed=closed)))
    got = frame.filter(col("ratio").is_between(col("height"), 5.0, closed=closed)).collect()  # type: ignore[arg-type]
    assert_same(got, df.filter(pl.col("ratio").is_between(pl.col("height"), 5.0, closed=closed)))


def test_is_in_matches_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    assert_same(
        frame.select(col("width").is_in([4, 0, 99])).collect(),
        df.select(pl.col("width").is_in([4, 0, 99])),
    )
    assert_same(
        frame.filter(col("key").is_in(["Abc", "", "zz"])).collect(),
        df.filter(pl.col("key").is_in(["Abc", "", "zz"])),
    )
    assert frame.filter(col("width").is_in([])).collect().num_rows == 0
    with pytest.raises(QueryError, match=r"col\('key'\) \(string\) cannot hold 1"):
        frame.filter(col("key").is_in(["a", 1]))
    with pytest.raises(pl.exceptions.InvalidOperationError):
        df.filter(pl.col("key").is_in([1]))
    with pytest.raises(PlanError):
        col("width").is_in("abc")
    with pytest.raises(PlanError, match="closed"):
        col("width").is_between(1, 2, closed="sideways")  # type: ignore[arg-type]


# -- strings ---------------------------------------------------------------------------

STRING_METHODS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("contains", ("b",), {}),
    ("contains", (r"^[A-Z]\w+$",), {}),
    ("contains", (".",), {"literal": True}),
    ("contains", ("",), {}),
    ("starts_with", ("A",), {}),
    ("ends_with", ("Z ",), {}),
    ("len_chars", (), {}),
    ("len_bytes", (), {}),
    ("to_lowercase", (), {}),
    ("to_uppercase", (), {}),
    ("replace", (r"[a-z]", "_"), {}),
    ("replace", (r"(\w)(\w)", "$2$1"), {}),
    ("replace", (".", "$"), {"literal": True}),
    ("replace_all", (r"[a-z]", "_"), {}),
    ("replace_all", (".", "-"), {"literal": True}),
    ("slice", (1,), {}),
    ("slice", (1, 2), {}),
    ("slice", (-2,), {}),
    ("slice", (-3, 2), {}),
    ("slice", (-10, 3), {}),
    ("slice", (10, 2), {}),
    ("slice", (0, 0), {}),
    ("head", (2,), {}),
    ("head", (-1,), {}),
    ("tail", (2,), {}),
    ("tail", (-1,), {}),
    ("strip_chars", (), {}),
    ("strip_chars", ("A ",), {}),
    ("strip_chars_start", (), {}),
    ("strip_chars_end", (), {}),
    ("strip_chars_end", ("cZ ",), {}),
]


@pytest.mark.parametrize(("method", "args", "kwargs"), STRING_METHODS)
def test_str_namespace_matches_polars(
    frames: tuple[LazyFrame, Any], method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    frame, df = frames
    got = frame.select(getattr(col("key").str, method)(*args, **kwargs)).collect()
    want = df.select(getattr(pl.col("key").str, method)(*args, **kwargs))
    assert_same(got, want)


def test_str_lengths_is_polars_old_byte_length(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = frame.select(col("key").str.lengths()).collect()
    assert_same(got, df.select(pl.col("key").str.len_bytes()))


def test_str_filters_push_down(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = frame.filter(col("key").str.starts_with("A") | col("key").str.contains("c$")).collect()
    want = df.filter(pl.col("key").str.starts_with("A") | pl.col("key").str.contains("c$"))
    assert_same(got, want)


def test_str_on_a_number_names_the_column(frames: tuple[LazyFrame, Any]) -> None:
    frame, _ = frames
    with pytest.raises(
        QueryError, match=r"str\.contains\(\) needs a string column.*col\('width'\)"
    ):
        frame.filter(col("width").str.contains("1"))
    with pytest.raises(PlanError, match="replace_all"):
        col("key").str.replace("a", "b", n=2)


# -- len / count / describe --------------------------------------------------------------


def test_len_of_any_frame_is_a_count(frames: tuple[LazyFrame, Any], tmp_path: Path) -> None:
    frame, df = frames
    assert len(frame) == df.height
    filtered = frame.filter(col("width") > 0)
    assert len(filtered) == df.filter(pl.col("width") > 0).height
    assert len(frame.filter("height >= 2 AND key IS NOT NULL")) == (
        df.filter((pl.col("height") >= 2) & pl.col("key").is_not_null()).height
    )
    python = frame.filter(lambda r: r["flag"] is True)
    assert len(python) == df.filter(pl.col("flag")).height
    grouped = frame.group_by("flag").agg(dataio.count())
    assert len(grouped) == df.group_by("flag").len().height
    glob = str(tmp_path / "*.parquet")
    assert len(dataio.sql(f"SELECT * FROM '{glob}' WHERE width < 4")) == (
        df.filter(pl.col("width") < 4).height
    )


def test_count_is_non_null_counts_per_column(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    assert_same(frame.count().collect(), df.count(), types=False)
    filtered = frame.filter(col("flag"))
    assert_same(filtered.count().collect(), df.filter(pl.col("flag")).count(), types=False)


def test_null_count_matches_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    assert_same(frame.null_count().collect(), df.null_count(), types=False)
    assert bool(frame.filter(col("width") > 100))  # a plan's truth never runs it


def test_describe_matches_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    assert_same(frame.describe(), df.describe())
    subset = frame.filter(col("height") > 0).select("width", "ratio", "f32")
    assert_same(
        subset.describe(),
        df.filter(pl.col("height") > 0).select("width", "ratio", "f32").describe(),
    )
    percentiles = (0.1, 0.5, 0.9)
    assert_same(
        frame.select("height", "small").describe(percentiles=percentiles),
        df.select("height", "small").describe(percentiles=percentiles),
    )


def test_describe_of_even_and_odd_counts(tmp_path: Path) -> None:
    for n in (1, 2, 5, 10, 11):
        values = np.random.default_rng(n).normal(size=n)
        table = pa.table({"v": values, "i": np.arange(n, dtype=np.int64)[::-1].copy()})
        pq.write_table(table, tmp_path / f"{n}.parquet")
        got = dataio.scan_parquet(tmp_path / f"{n}.parquet").describe()
        assert_same(got, pl.from_arrow(table).describe())


def test_explain_is_the_plan_and_description_the_signature(
    frames: tuple[LazyFrame, Any],
) -> None:
    frame, _ = frames
    filtered = frame.filter(col("width") > 0)
    assert "dataio plan:" in filtered.explain()
    assert "filter((col('width') > 0))" in filtered.explain()
    assert filtered.description()["plan"]["filter"] == "(col('width') > 0)"
    assert filtered.signature() == dataio.sources.base.source_signature(filtered.description())
    assert filtered.shuffle(seed=1, buffer_size=4).describe()["of"] == filtered.description()


def test_aggregates_match_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    got = (
        frame.group_by("flag")
        .agg(
            col("width").std().alias("std"),
            col("width").var().alias("var"),
            col("ratio").median().alias("median"),
            col("key").null_count().alias("nulls"),
        )
        .sort("flag")
        .collect()
    )
    want = (
        df.group_by("flag")
        .agg(
            pl.col("width").std().alias("std"),
            pl.col("width").var().alias("var"),
            pl.col("ratio").median().alias("median"),
            pl.col("key").null_count().alias("nulls"),
        )
        .sort("flag", nulls_last=True)
    )
    assert_same(got, want, types=False)


# -- SQL over paths --------------------------------------------------------------------


def test_sql_over_paths_and_globs(frames: tuple[LazyFrame, Any], tmp_path: Path) -> None:
    _, df = frames
    pq.write_table(TABLE.slice(0, 4), tmp_path / "part-0.parquet")
    pq.write_table(TABLE.slice(4), tmp_path / "part-1.parquet")
    glob = str(tmp_path / "part-*.parquet")
    got = dataio.sql(f"SELECT key, width FROM '{glob}' WHERE height > 1 ORDER BY width").collect()
    want = (
        pl.scan_parquet(glob).filter(pl.col("height") > 1).select("key", "width").sort("width")
    ).collect()
    assert_same(got, want)
    one = str(tmp_path / "part-1.parquet")
    joined = dataio.sql(
        f"SELECT a.key, b.ratio FROM '{one}' a JOIN t b ON a.key = b.key ORDER BY b.ratio",
        t=dataio.scan_parquet(tmp_path / "t.parquet"),
    ).collect()
    want_join = (
        pl.read_parquet(one)
        .join(df, on="key")
        .select("key", pl.col("ratio_right").alias("ratio"))
        .sort("ratio")
    )
    assert_same(joined, want_join)
    # a quoted string elsewhere stays a string
    assert dataio.sql(f"SELECT 'from' AS w FROM '{one}' LIMIT 1").collect()["w"].to_pylist() == [
        "from"
    ]


def test_sql_over_a_missing_path_names_it(tmp_path: Path) -> None:
    with pytest.raises(DataioError, match="nothing-here"):
        dataio.sql(f"SELECT * FROM '{tmp_path}/nothing-here/*.parquet'")


# -- errors name the user's names -------------------------------------------------------


def test_errors_name_user_columns_and_tables(frames: tuple[LazyFrame, Any]) -> None:
    frame, _ = frames
    memory = dataio.sql("SELECT * FROM t", t=TABLE)
    for bad in (
        lambda: frame.filter("widht > 3"),
        lambda: memory.filter("widht > 3"),
        lambda: memory.filter("width > 'x'").collect(),
        lambda: dataio.sql("SELECT widht FROM t", t=memory),
        lambda: frame.select(col("widht") / 2),
        lambda: frame.join(memory, on="widht"),
        lambda: frame.unique(subset="widht"),
    ):
        with pytest.raises(DataioError) as info:
            bad()
        message = str(info.value)
        assert not INTERNAL.search(message), message
        assert "widht" in message or "width" in message, message
    with pytest.raises(QueryError, match="Did you mean 'width'"):
        frame.filter("widht > 3")


def test_duplicate_output_names_are_refused_as_polars(frames: tuple[LazyFrame, Any]) -> None:
    frame, df = frames
    with pytest.raises(PlanError, match="'width'"):
        frame.select(col("width"), col("width") * 2)
    with pytest.raises(pl.exceptions.DuplicateError):
        df.select(pl.col("width"), pl.col("width") * 2)
    assert frame.select(col("width"), (col("width") * 2).alias("w2")).columns == ["width", "w2"]
    assert frame.select(lit(1)).columns == df.select(pl.lit(1)).columns


@pytest.mark.parametrize(
    ("query", "paths"),
    [
        ("SELECT * FROM 'a.parquet' WHERE k = 'x'", ["a.parquet"]),
        ("SELECT * FROM 'a.parquet' x, 'b.csv' y WHERE x.k IN ('a', 'b')", ["a.parquet", "b.csv"]),
        ("SELECT * FROM t JOIN 'b.csv' ON t.a = 'x'", ["b.csv"]),
        ("SELECT 'a', 'b' FROM (SELECT 1)", []),
        ("SELECT * FROM (SELECT 'q' FROM 'p.csv') s, 'z.csv'", ["p.csv", "z.csv"]),
        ("WITH a AS (SELECT * FROM 'x.json') SELECT * FROM a WHERE b IN ('1')", ["x.json"]),
        ("SELECT * FROM 'it''s.csv' -- FROM 'no.csv'", ["it's.csv"]),
        ("SELECT '/* FROM ''no'' */' FROM t /* FROM 'no' */", []),
    ],
)
def test_sql_path_tables_are_found_only_where_tables_go(query: str, paths: list[str]) -> None:
    from dataio.plan.sql_paths import path_tables

    rewritten, found = path_tables(query)
    assert found == paths
    for path in paths:
        assert '"' + path.replace('"', '""') + '"' in rewritten


def test_sql_over_a_list_of_paths_matches_a_polars_cross_join(tmp_path: Path) -> None:
    pq.write_table(TABLE.slice(0, 3), tmp_path / "x.parquet")
    pq.write_table(TABLE.slice(3), tmp_path / "y.parquet")
    query = f"SELECT count(*) AS n FROM '{tmp_path}/x.parquet' a, '{tmp_path}/y.parquet' b"
    want = pl.read_parquet(tmp_path / "x.parquet").join(
        pl.read_parquet(tmp_path / "y.parquet"), how="cross"
    )
    assert dataio.sql(query).collect()["n"].to_pylist() == [want.height]
