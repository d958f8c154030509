"""``dataio.sql`` (``dataio/frame.py``): SQL over frames, files and in-memory Arrow data,
checked against duckdb and polars running the same query on the same files."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

from dataio import col
from dataio.exceptions import PlanError, QueryError
from dataio.frame import scan_csv, scan_parquet, sql


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from test_frame import FILES, ROWS_PER_GROUP, make_table

    root = tmp_path_factory.mktemp("sql")
    (root / "pq").mkdir()
    paths = []
    for part in range(FILES):
        path = root / "pq" / f"part-{part}.parquet"
        pq.write_table(make_table(part), path, row_group_size=ROWS_PER_GROUP)
        paths.append(str(path))
    whole = pa.concat_tables([make_table(p) for p in range(FILES)])
    return {"root": root, "paths": paths, "whole": whole}


def frame(data: dict[str, Any]) -> Any:
    return scan_parquet(data["root"] / "pq")


def lazy(data: dict[str, Any]) -> pl.LazyFrame:
    return pl.scan_parquet(data["paths"])


def same(got: pa.Table, expected: pl.DataFrame, *, exact: bool = True) -> None:
    left = pl.from_arrow(got)
    assert isinstance(left, pl.DataFrame)
    assert_frame_equal(left, expected, check_exact=exact, rel_tol=1e-12)


QUERIES = [
    "SELECT id, name FROM t WHERE label = 3 AND value > 0.2 ORDER BY id",
    "SELECT label, count(*) AS n, sum(id) AS s, avg(value) AS m FROM t GROUP BY label "
    "ORDER BY label",
    "SELECT a.id, b.id AS other FROM t a JOIN t b ON a.id = b.id + 1 WHERE a.id % 17 = 0 "
    "ORDER BY a.id",
    "SELECT name, length(name) AS n, id * 2 + 1 AS k FROM t WHERE flag ORDER BY k DESC LIMIT 7",
    "SELECT label, max(value) AS top FROM t WHERE value IS NOT NULL GROUP BY label "
    "HAVING count(*) > 30 ORDER BY label",
]  # fmt: skip


@pytest.mark.parametrize("query", QUERIES)
def test_queries_match_duckdb(data, query: str) -> None:
    got = sql(query, t=frame(data)).collect()
    con = duckdb.connect()
    t = con.read_parquet(data["paths"])  # noqa: F841 - duckdb finds it by name
    cursor = con.execute(query)
    names = [d[0] for d in cursor.description]
    expected = pl.DataFrame(cursor.fetchall(), schema=names, orient="row")
    left = pl.from_arrow(got)
    assert isinstance(left, pl.DataFrame) and left.columns == names
    assert left.height == expected.height
    for name in names:
        a, b = left[name].to_list(), expected[name].to_list()
        if left[name].dtype.is_float():
            assert a == pytest.approx(b, rel=1e-12)
        else:
            assert a == b, name


def test_sql_over_files_and_csv(data, tmp_path: Path) -> None:
    csv = tmp_path / "labels.csv"
    csv.write_text("label,word\n" + "".join(f"{i},w{i}\n" for i in range(7)))
    got = (
        sql(
            "SELECT f.id, l.word FROM f JOIN l ON f.label = l.label WHERE f.id < 12 ORDER BY f.id",
            f=str(data["root"] / "pq"),
            l=str(csv),
        )
        .collect()
        .to_pylist()
    )
    assert got == [{"id": i, "word": f"w{i % 7}"} for i in range(12)]
    assert scan_csv(csv).collect().to_pylist()[2] == {"label": 2, "word": "w2"}


def test_sql_over_frames_files_and_memory_arrow(data) -> None:
    labels = pa.table(
        {"label": pa.array(range(7), pa.int32()), "word": [f"w{i}" for i in range(7)]}
    )
    polars_labels = pl.from_arrow(labels)
    batch = labels.to_batches()[0]
    query = (
        "SELECT f.id, l.word FROM f JOIN l ON f.label = l.label WHERE f.id % 10 = 0 ORDER BY f.id"
    )
    expected = (
        lazy(data).join(polars_labels.lazy(), on="label").filter(pl.col("id") % 10 == 0)
        .select("id", "word").sort("id").collect()
    )  # fmt: skip
    for left in (frame(data), str(data["root"] / "pq"), data["paths"][:1] and frame(data)):
        for right in (labels, batch, polars_labels, sql("SELECT * FROM x", x=labels)):
            same(sql(query, f=left, l=right).collect(), expected)
    nested = sql(
        "SELECT word, count(*) AS n FROM t GROUP BY word", t=sql(query, f=frame(data), l=labels)
    )
    assert sorted(r["n"] for r in nested.collect().to_pylist()) == sorted(
        expected.group_by("word").len()["len"].to_list()
    )
    # a SQL frame is a frame: methods chain on it
    chained = (
        sql("SELECT id, label FROM t", t=frame(data))
        .filter(col("label") == 0)
        .sort("id", descending=True)
    )
    assert chained.collect().to_pylist() == sorted(
        ({"id": r["id"], "label": 0} for r in data["whole"].to_pylist() if r["label"] == 0),
        key=lambda r: -r["id"],
    )


def test_image_kernels_as_sql_and_column_expressions(tiny_images, tmp_path: Path) -> None:

    from PIL import Image

    table = pa.table(
        {"key": [f"k{i}" for i in range(4)], "image": pa.array(tiny_images[:4], pa.binary())}
    )
    path = tmp_path / "images.parquet"
    pq.write_table(table, path)
    sizes = [Image.open(io.BytesIO(b)).size for b in tiny_images[:4]]
    f = scan_parquet(path)
    got = f.select("key", col("image").image_size().field("width").alias("w")).collect().to_pylist()
    assert [r["w"] for r in got] == [w for w, _ in sizes]
    decoded = f.with_columns(pixels=col("image").decode_image("gray")).collect().to_pylist()
    assert [
        (r["pixels"]["height"], r["pixels"]["width"], r["pixels"]["channels"]) for r in decoded
    ] == [(h, w, 1) for w, h in sizes]
    for typ in (pa.binary(), pa.large_binary(), pa.binary_view()):
        memory = pa.table({"image": pa.array(tiny_images[:4], typ)})
        rows = sql("SELECT image_size(image)['height'] AS h FROM t", t=memory).collect().to_pylist()
        assert [r["h"] for r in rows] == [h for _, h in sizes]
    wide = (
        f.filter(col("image").image_size().field("width") > 30).select("key").collect().to_pylist()
    )
    assert [r["key"] for r in wide] == [f"k{i}" for i, (w, _) in enumerate(sizes) if w > 30]


def test_malformed_queries_and_inputs(data) -> None:
    with pytest.raises(QueryError, match="malformed SQL"):
        sql("SELEC id FRM t", t=frame(data))
    with pytest.raises(QueryError, match="t2"):
        sql("SELECT id FROM t2", t=frame(data))
    with pytest.raises(QueryError, match="nope"):
        sql("SELECT nope FROM t", t=frame(data))
    with pytest.raises(PlanError, match="identifiers"):
        sql("SELECT 1", **{"not a name": frame(data)})
    with pytest.raises(PlanError, match="must be a LazyFrame"):
        sql("SELECT * FROM t", t=42)
    with pytest.raises(PlanError, match="query string"):
        sql("  ", t=frame(data))
