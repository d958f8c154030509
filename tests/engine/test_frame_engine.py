"""The frame engine (``dataio/engine/frame.py``): view types out, safe exit with a stream
open, order through Python filters."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataio.engine.frame import plain_schema
from dataio.expr import col
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
    got = sql("SELECT s, n FROM t", t=table).collect_arrow()
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
        from dataio.expr import col
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
    assert frame.collect() == expected
    assert list(frame) == expected
    assert "python filters (after DataFusion)" in frame.explain()
