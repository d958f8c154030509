"""The frame engine (``dataio/engine/``: compile, run, scan, plain): view types out, safe
exit with a stream open, order through Python filters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataio import col
from dataio.engine.plain import plain_schema
from dataio.frame import sql


def test_view_types_leave_as_plain_types_also_nested() -> None:
    schema = pa.schema(
        [
            ("s", pa.string_view()),
            ("b", pa.binary_view()),
            ("l", pa.list_(pa.string_view())),
            ("t", pa.struct([("x", pa.binary_view()), ("y", pa.int32())])),
            ("keep", pa.large_string()),
        ]
    )
    plain = plain_schema(schema)
    assert plain.types == [
        pa.string(),
        pa.binary(),
        pa.list_(pa.string()),
        pa.struct([("x", pa.binary()), ("y", pa.int32())]),
        pa.large_string(),
    ]
    table = pa.table({"s": pa.array(["a", "b"], pa.string_view()), "n": [1, 2]})
    got = sql("SELECT s, n FROM t", t=table).collect()
    assert got.schema.field("s").type == pa.string() and got.column("s").to_pylist() == ["a", "b"]


@pytest.mark.parametrize("plan", ["row-local", "aggregate"])
def test_python_exits_cleanly_with_a_frame_stream_open(tmp_path: Path, tiny_images, plan) -> None:
    for part in range(3):
        images = pa.array(tiny_images * 4, pa.binary())
        table = pa.table(
            {"id": range(part * len(images), (part + 1) * len(images)), "image": images}
        )
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=4)
    script = textwrap.dedent(
        f"""
        from dataio import col
        from dataio.frame import scan_parquet
        frame = scan_parquet({str(tmp_path)!r}).with_columns(size=col("image").image_size())
        if {plan!r} == "aggregate":
            frame = frame.group_by(col("size").field("width")).agg(col("id").count())
        rows = iter(frame)
        print(next(rows))
        held = rows  # still open at exit
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "Fatal" not in result.stderr and result.stdout.startswith("{")


def test_order_survives_python_filters_between_pushed_down_steps(tmp_path: Path) -> None:
    for part in range(3):
        pq.write_table(pa.table({"v": range(part * 50, (part + 1) * 50)}), tmp_path / f"{part}.pq")
    from dataio.frame import scan_parquet

    frame = (
        scan_parquet([str(tmp_path / "2.pq"), str(tmp_path / "0.pq"), str(tmp_path / "1.pq")])
        .filter(lambda r: r["v"] % 3 == 0)
        .with_columns(w=col("v") * 10)
        .filter(col("w") % 20 == 0)
        .limit(12, offset=3)
    )
    expected = [
        {"v": v, "w": v * 10}
        for v in [*range(100, 150), *range(0, 50), *range(50, 100)]
        if v % 3 == 0 and v * 10 % 20 == 0
    ][3:15]
    assert frame.collect().to_pylist() == expected
    assert list(frame) == expected
    assert "python filters (after DataFusion)" in frame.explain()


def _write_parts(root: Path, sizes: list[int]) -> list[pa.Table]:
    tables = []
    start = 0
    for part, n in enumerate(sizes):
        table = pa.table({"id": pa.array(range(start, start + n), pa.int64())})
        pq.write_table(table, root / f"part-{part:03d}.parquet", row_group_size=7)
        tables.append(table)
        start += n
    return tables


@pytest.mark.parametrize("workers", ["1", "2", "3"])
def test_a_whole_directory_runs_as_one_listing_in_file_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    from dataio.engine.scan import listing
    from dataio.frame import scan_parquet

    monkeypatch.setenv("DATAIO_CPU_WORKERS", workers)
    tables = _write_parts(tmp_path, [5, 40, 1, 33, 17, 2, 29, 11, 8])
    frame = scan_parquet(tmp_path).filter(col("id") % 3 != 0)
    assert listing(frame.plan.input) is not None
    ids = pa.concat_tables(tables).column("id").to_pylist()
    assert frame.collect().column("id").to_pylist() == [i for i in ids if i % 3 != 0]


def test_listing_applies_only_when_it_reads_exactly_the_scanned_files(tmp_path: Path) -> None:
    from dataio.engine.scan import listing
    from dataio.frame import scan_parquet

    tables = _write_parts(tmp_path, [4, 6, 3])
    paths = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    assert listing(scan_parquet(paths).plan) is not None
    # a list out of path order, a subset, and a directory holding another file of the
    # format all keep one plan per file, in the order asked
    assert listing(scan_parquet(paths[::-1]).plan) is None
    assert listing(scan_parquet(paths[:2]).plan) is None
    (tmp_path / "nested").mkdir()
    pq.write_table(pa.table({"id": pa.array([999], pa.int64())}), tmp_path / "nested" / "x.parquet")
    assert listing(scan_parquet(paths).plan) is None
    got = scan_parquet(paths[::-1]).collect().column("id").to_pylist()
    assert got == pa.concat_tables(tables[::-1]).column("id").to_pylist()


def test_the_reused_scan_session_sees_added_and_rewritten_files(tmp_path: Path) -> None:
    from dataio.frame import scan_parquet

    def ids() -> list[int]:
        return scan_parquet(tmp_path).collect().column("id").to_pylist()

    _write_parts(tmp_path, [3, 4])
    assert ids() == list(range(7))
    pq.write_table(pa.table({"id": pa.array([50, 51], pa.int64())}), tmp_path / "part-002.parquet")
    assert ids() == [*range(7), 50, 51]
    pq.write_table(pa.table({"id": pa.array([90], pa.int64())}), tmp_path / "part-000.parquet")
    assert ids() == [90, 3, 4, 5, 6, 50, 51]


def _setting(ctx: object, name: str) -> str:
    ctx.sql("SET datafusion.catalog.information_schema = true").collect()
    query = f"SELECT value FROM information_schema.df_settings WHERE name = '{name}'"
    return str(ctx.sql(query).to_pylist()[0]["value"])


@pytest.mark.parametrize("workers", ["1", "3"])
def test_local_plans_fetch_one_footer_per_worker_remote_plans_many(
    monkeypatch: pytest.MonkeyPatch, workers: str
) -> None:
    # DataFusion's 32 concurrent local footer fetches each start a tokio blocking thread
    # whose allocator pages then hold row-group reads: the process grew by about the bytes
    # of one scan per collect. Object stores keep the default, which hides latency.
    from datafusion import SessionContext

    from dataio.engine.session import session

    monkeypatch.setenv("DATAIO_CPU_WORKERS", workers)
    name = "datafusion.execution.meta_fetch_concurrency"
    default = _setting(SessionContext(), name)
    assert _setting(session(2), name) == workers
    assert _setting(session(2, ordered=True), name) == workers
    assert _setting(session(2, remote=True), name) == default != workers


def test_parallel_collects_cast_views_inside_the_plan(tmp_path: Path) -> None:
    from datafusion import SessionContext

    from dataio.engine.run import plain_frame
    from dataio.frame import scan_parquet

    table = pa.table(
        {
            "s": pa.array(["a", "bb", None, "dddd"] * 3, pa.string_view()),
            "b": pa.array([b"x", None, b"yy", b"z"] * 3, pa.binary_view()),
            "n": list(range(12)),
        }
    )
    df = plain_frame(SessionContext().from_arrow(table))
    assert df.schema().types == [pa.string(), pa.binary(), pa.int64()]
    assert df.to_arrow_table().equals(table.cast(plain_schema(table.schema)))
    plain = table.cast(plain_schema(table.schema))
    for part in range(3):
        pq.write_table(plain.slice(part * 4, 4), tmp_path / f"part-{part}.parquet")
    paths = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    for files in (paths, paths[::-1]):  # one listing, and a UNION of per-file plans
        got = scan_parquet(files).filter(col("n") % 2 == 0).collect()
        rows = [r for p in files for r in pq.read_table(p).to_pylist() if r["n"] % 2 == 0]
        assert got.schema.types == [pa.string(), pa.binary(), pa.int64()]
        assert got.to_pylist() == rows


def test_a_rewritten_file_gives_its_new_schema(tmp_path: Path) -> None:
    from dataio.frame import scan_parquet

    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"a": pa.array([1, 2], pa.int64())}), path)
    assert scan_parquet(str(path)).schema.names == ["a"]
    assert scan_parquet(str(path)).schema.names == ["a"]  # kept
    pq.write_table(pa.table({"b": ["x"], "c": [1.5]}), path)
    frame = scan_parquet(str(path))
    assert frame.schema.names == ["b", "c"]
    assert frame.collect().to_pylist() == [{"b": "x", "c": 1.5}]
    path.write_bytes(b"not parquet")
    with pytest.raises(Exception, match="not a valid parquet file"):
        scan_parquet(str(path))
