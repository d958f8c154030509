"""The rejects table: every row a pass skipped or failed on, queryable, capped, summarised.

Oracles: the files this test corrupted itself (and Pillow failing on exactly those,
while it decodes the others), the records' own positions and keys, and the exception
types the same inputs raise under ``on_failure="strict"``.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
from dataio.exceptions import BatchFailedError, DecodeError, NotFoundError, ShapeMismatchError
from dataio.testing import make_jpegs

COLUMNS = [
    "epoch",
    "batch",
    "position",
    "key",
    "slot",
    "stage",
    "op",
    "error_type",
    "message",
    "source",
    "outcome",
]


def corrupt(path: Path, how: str) -> None:
    """Damage a JPEG in a way no decoder can recover from."""
    data = path.read_bytes()
    if how == "header cut":  # SOI and part of the header only: no frame, no scan
        path.write_bytes(data[:150])
    elif how == "garbage":  # same length, random bytes: no image signature
        path.write_bytes(np.random.default_rng(7).bytes(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    else:  # pragma: no cover - the test's own table
        raise AssertionError(how)


def pillow_decodes(path: Path) -> bool:
    try:
        with Image.open(path) as image:
            image.load()
    except (OSError, SyntaxError, ValueError):
        return False
    return True


@pytest.fixture
def photos(tmp_path: Path) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """24 JPEG records, four of them broken (three corrupt files and one missing file);
    returns the records and position -> what is wrong."""
    paths = make_jpegs(tmp_path, 24, min_side=40, max_side=90, seed=3)
    broken = {2: "header cut", 9: "garbage", 10: "empty"}
    for position, how in broken.items():
        corrupt(paths[position], how)
    missing = tmp_path / "missing.jpg"
    records = [{"image": str(p), "key": f"k{i:02d}"} for i, p in enumerate(paths)]
    records[17]["image"] = str(missing)
    return records, {**broken, 17: "missing"}


def image_pipe(size: int = 8) -> dataio.Pipeline:
    chain = dataio.slot("image").decode_image().resize(h=16, w=16)
    return dataio.pipeline(chain, dataio.slot("key").passthrough(), dataio.batch(size))


def test_skip_lists_exactly_the_broken_rows(photos: Any) -> None:
    records, broken = photos
    # the independent oracle agrees on which files are bad
    for i, record in enumerate(records):
        assert pillow_decodes(Path(record["image"])) == (i not in broken)
    with image_pipe().bind(records).run("numpy", on_failure="skip") as loader:
        delivered = [key for batch in loader for key in batch.row_keys]
        table = loader.rejects()
    assert table.column_names == COLUMNS
    assert table.schema.field("position").type == pa.int64()
    rows = table.to_pylist()
    assert [r["position"] for r in rows] == sorted(broken)
    assert [r["key"] for r in rows] == [f"k{i:02d}" for i in sorted(broken)]
    assert delivered == [f"k{i:02d}" for i in range(24) if i not in broken]
    by_position = {r["position"]: r for r in rows}
    for position in (2, 9, 10):
        row = by_position[position]
        assert (row["error_type"], row["stage"], row["op"]) == (
            "DecodeError",
            "decode",
            "decode_image",
        )
        assert row["slot"] == "image" and row["source"] == records[position]["image"]
    missing = by_position[17]
    assert (missing["error_type"], missing["stage"]) == ("NotFoundError", "read")
    assert missing["source"].endswith("missing.jpg") and missing["op"] is None
    assert {r["epoch"] for r in rows} == {0} and {r["outcome"] for r in rows} == {"skipped"}
    # batch numbers: position p is in batch p // 8 (no row was dropped before batching)
    assert [r["batch"] for r in rows] == [p // 8 for p in sorted(broken)]
    # the message is the error's own text, as strict mode raises it
    with pytest.raises(DecodeError) as raised:
        list(image_pipe().bind(records[2:3]).run("numpy"))
    assert by_position[2]["message"] in str(raised.value)
    with pytest.raises(NotFoundError):
        list(image_pipe().bind(records[17:18]).run("numpy"))


def test_arrow_rows_are_recorded_too(photos: Any) -> None:
    records, broken = photos
    del broken[17]
    records = [r for i, r in enumerate(records) if i != 17]
    table = pa.table(
        {
            "key": [r["key"] for r in records],
            "image": [Path(r["image"]).read_bytes() for r in records],
        }
    )
    with image_pipe(5).bind(table).run("numpy", on_failure="skip") as loader:
        kept = sum(len(batch) for batch in loader)
        rows = loader.rejects().to_pylist()
    assert kept == len(records) - len(broken)
    # positions shift past the removed record 17; all broken ones come before it
    assert [(r["position"], r["key"]) for r in rows] == [(p, f"k{p:02d}") for p in sorted(broken)]
    assert {r["source"] for r in rows} == {None}  # bytes in the table: no URI to name
    assert {r["error_type"] for r in rows} == {"DecodeError"}


def test_every_epoch_is_recorded(photos: Any) -> None:
    records, broken = photos
    with image_pipe().bind(records).run("numpy", on_failure="skip") as loader:
        for _ in range(2):
            for _batch in loader:
                pass
        table = loader.rejects()
    epochs = table.column("epoch").to_pylist()
    assert epochs == [0] * len(broken) + [1] * len(broken)
    assert table.column("position").to_pylist() == sorted(broken) * 2


def test_sql_queries_the_table(photos: Any) -> None:
    records, _ = photos
    with image_pipe().bind(records).run("numpy", on_failure="skip") as loader:
        list(loader)
        rejects = loader.rejects()
    counts = dataio.sql(
        "SELECT error_type, count(*) AS n FROM rejects GROUP BY error_type ORDER BY error_type",
        rejects=rejects,
    ).collect()
    assert counts.to_pylist() == [
        {"error_type": "DecodeError", "n": 3},
        {"error_type": "NotFoundError", "n": 1},
    ]
    keys = dataio.sql(
        "SELECT key FROM rejects WHERE stage = 'decode' ORDER BY position", rejects=rejects
    ).collect()
    assert keys.column("key").to_pylist() == ["k02", "k09", "k10"]


def test_an_empty_table_keeps_its_schema() -> None:
    records = [{"x": i} for i in range(10)]
    pipe = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(4))
    with pipe.bind(records).run("numpy", on_failure="skip") as loader:
        list(loader)
        table = loader.rejects()
    assert table.num_rows == 0 and table.column_names == COLUMNS
    assert table.schema.metadata[b"dropped"] == b"0"
    found = dataio.sql("SELECT count(*) AS n FROM rejects", rejects=table).collect()
    assert found.column("n").to_pylist() == [0]


def test_the_table_is_capped_and_counts_what_it_dropped(
    photos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    records, broken = photos
    with (
        dataio.limits.scoped(max_rejects=3),
        caplog.at_level(logging.INFO, logger="dataio.rows"),
        image_pipe().bind(records).run("numpy", on_failure="skip") as loader,
    ):
        for _ in range(2):  # 8 rejects over two epochs
            list(loader)
        table = loader.rejects()
    assert table.num_rows == 3
    assert table.schema.metadata[b"dropped"] == str(2 * len(broken) - 3).encode()
    # the newest are kept: the last three of epoch 1
    epochs, positions = table.column("epoch").to_pylist(), table.column("position").to_pylist()
    kept = list(zip(epochs, positions, strict=True))
    assert kept == [(1, p) for p in sorted(broken)[-3:]]
    last = [r.getMessage() for r in caplog.records if r.name == "dataio.rows"][-1]
    assert "5 older entries dropped" in last and "max_rejects=3" in last
    # the per-epoch summary still counts every reject
    assert "epoch 1: 4 of 24 rows rejected" in last


def test_per_epoch_summary_goes_to_the_rows_logger(
    photos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    records, _ = photos
    with caplog.at_level(logging.INFO, logger="dataio.rows"):
        with image_pipe().bind(records).run("numpy", on_failure="skip") as loader:
            list(loader)
        good = [r for i, r in enumerate(records) if i in (0, 1, 3)]
        with image_pipe().bind(good).run("numpy", on_failure="skip") as loader:
            list(loader)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "dataio.rows"]
    assert lines == [
        (
            logging.WARNING,
            "epoch 0: 4 of 24 rows rejected (4 skipped): DecodeError x3, NotFoundError x1; "
            "see loader.rejects()",
        ),
        (logging.INFO, "epoch 0: no rows rejected of 3"),
    ]


def test_an_abandoned_pass_is_summarised_once(
    photos: Any, caplog: pytest.LogCaptureFixture
) -> None:
    records, _ = photos
    with (
        caplog.at_level(logging.INFO, logger="dataio.rows"),
        image_pipe().bind(records).run("numpy", on_failure="skip") as loader,
    ):
        for _batch in loader:
            break
        for _batch in loader:  # the next pass closes the first one's books
            pass
    lines = [r.getMessage() for r in caplog.records if r.name == "dataio.rows"]
    assert lines[0].startswith("epoch 0 (abandoned after 1 batch): 1 of 8 rows rejected")
    assert lines[1].startswith("epoch 1: 4 of 24 rows rejected")
    assert len(lines) == 2


def test_a_failed_batch_records_its_rows_as_failed(photos: Any) -> None:
    records, _ = photos
    with image_pipe().bind(records).run("numpy") as loader:
        with pytest.raises(DecodeError):
            list(loader)
        rows = loader.rejects().to_pylist()
    # strict: the first batch (rows 0..7) raised on its one bad row
    assert [(r["position"], r["batch"], r["outcome"]) for r in rows] == [(2, 0, "failed")]
    # three survivors needed per batch of four: batch 2 (rows 8..11) loses rows 9 and 10
    with image_pipe(4).bind(records).run("numpy", on_failure=3) as loader:
        it = iter(loader)
        sizes = []
        while True:
            try:
                sizes.append(len(next(it)))
            except BatchFailedError:
                sizes.append(0)
            except StopIteration:
                break
        rows = loader.rejects().to_pylist()
    assert sizes == [3, 4, 0, 4, 3, 4]
    assert [(r["position"], r["batch"], r["outcome"]) for r in rows] == [
        (2, 0, "skipped"),
        (9, 2, "failed"),
        (10, 2, "failed"),
        (17, 4, "skipped"),
    ]


def test_shape_and_record_map_failures_name_their_stage() -> None:
    def npy(array: np.ndarray) -> bytes:
        out = io.BytesIO()
        np.save(out, array)
        return out.getvalue()

    records = [{"key": f"r{i}", "x": npy(np.zeros(3 if i == 5 else 4))} for i in range(8)]
    pipe = dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(8))
    with pipe.bind(records).run("numpy", on_failure="skip") as loader:
        list(loader)
        (row,) = loader.rejects().to_pylist()
    assert (row["position"], row["key"], row["stage"]) == (5, "r5", "assemble")
    assert row["error_type"] == ShapeMismatchError.__name__

    def explode(record: dict[str, Any]) -> dict[str, Any]:
        if record["key"] == "r3":
            raise KeyError("no label for r3")
        return record

    mapped = dataio.pipeline(dataio.map(explode), dataio.slot("x").decode_numpy(), dataio.batch(4))
    with mapped.bind(records[:4]).run("numpy", on_failure="skip") as loader:
        with pytest.raises(KeyError):
            list(loader)
        (row,) = loader.rejects().to_pylist()
    assert (row["position"], row["key"], row["stage"]) == (3, "r3", "record map")
    assert (row["error_type"], row["outcome"]) == ("KeyError", "failed")
    assert "no label for r3" in row["message"]
