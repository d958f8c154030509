"""Stage stats, the bottleneck line and lineage of a loader's passes.

Oracles: the wall time measured around each pass here, sleeps the test puts in a
known stage (the consumer, a record map, the source), and the keys and indices of
the batches the loop actually received.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import dataio
from dataio.exceptions import PlanError
from dataio.testing import make_jpegs

STAGES = {
    "source",
    "read",
    "decode",
    "transform",
    "assemble",
    "export",
    "consumer wait",
    "consumer",
}
CONSUMER_SIDE = {"source", "assemble", "export", "consumer wait", "consumer"}
LINE = re.compile(r"^(source|read|decode|transform|assemble|export|consumer|scheduling)-bound: ")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    paths = make_jpegs(tmp_path_factory.mktemp("photos"), 48, min_side=200, max_side=400, seed=5)
    return [{"image": str(p), "key": p.stem} for p in paths]


def image_pipe(size: int = 8, *extra: Any) -> dataio.Pipeline:
    chain = dataio.slot("image").decode_image().resize_short(64).center_crop(h=64, w=64)
    return dataio.pipeline(chain, dataio.slot("key").passthrough(), dataio.batch(size), *extra)


def one_pass(loader: dataio.Loader, pause: float = 0.0) -> tuple[float, list[Any]]:
    """Run a pass; returns its wall time and the batches' (indices, keys)."""
    seen = []
    start = time.perf_counter()
    for batch in loader:
        seen.append((batch.indices, batch.row_keys) if isinstance(batch, dataio.Batch) else batch)
        if pause:
            time.sleep(pause)
    return time.perf_counter() - start, seen


def rows_of(table: pa.Table, pass_number: int = 0) -> list[dict[str, Any]]:
    return [row for row in table.to_pylist() if row["pass"] == pass_number]


def test_every_stage_is_timed_consistently_with_wall_time(photos: list[dict[str, Any]]) -> None:
    pause = 0.01
    with image_pipe().bind(photos).run("arrow") as loader:
        wall, batches = one_pass(loader, pause)
        table = loader.stats()
    rows = rows_of(table)
    assert {r["stage"] for r in rows} == STAGES
    first = rows[0]
    assert (first["epoch"], first["batches"], first["rows"]) == (0, 6, 48)
    assert len(batches) == 6
    assert first["wall_seconds"] <= wall
    assert all(r["seconds"] >= 0 and 0 <= r["share"] <= 1 for r in rows)
    consumer = [r for r in rows if r["thread"] == "consumer"]
    workers = [r for r in rows if r["thread"] == "workers"]
    assert {r["stage"] for r in consumer} == CONSUMER_SIDE | {"transform"}
    # the consumer thread's stages are disjoint intervals of the pass
    assert sum(r["seconds"] for r in consumer) <= first["wall_seconds"] + 1e-6
    # worker stages are parts of the worker tasks, which ran on at most `workers` threads
    assert sum(r["seconds"] for r in workers) <= first["worker_seconds"] + 1e-6
    assert first["worker_seconds"] <= first["workers"] * first["wall_seconds"] * 1.01 + 0.01
    by_stage = {(r["stage"], r["slot"]): r["seconds"] for r in rows}
    assert by_stage[("decode", "image")] > 0 and by_stage[("read", None)] > 0
    assert by_stage[("export", None)] > 0 and by_stage[("assemble", None)] > 0
    # the consumer slept after every batch but the last (the pass ended with that one)
    assert by_stage[("consumer", None)] >= 5 * pause
    decode = next(r for r in rows if r["stage"] == "decode")
    assert decode["op"] == "decode_image"


def test_each_pass_gets_its_rows(photos: list[dict[str, Any]]) -> None:
    with image_pipe(16).bind(photos[:32]).run("numpy") as loader:
        iter(loader)  # a probe that delivers nothing is not a pass worth reporting
        one_pass(loader)
        one_pass(loader)
        table = loader.stats()
    assert sorted(set(table.column("pass").to_pylist())) == [0, 1]
    assert sorted(set(table.column("epoch").to_pylist())) == [0, 1]
    assert set(table.column("batches").to_pylist()) == {2}
    assert table.schema.metadata[b"summary"].decode() == loader.bottleneck()


def test_a_slow_consumer_is_named(photos: list[dict[str, Any]]) -> None:
    with image_pipe(8).bind(photos[:32]).run("numpy") as loader:
        one_pass(loader, pause=0.3)
        line = loader.bottleneck()
    assert LINE.match(line), line
    assert line.startswith("consumer-bound: "), line
    assert "the loader kept up" in line


def test_decoding_is_named_when_the_consumer_waits(tmp_path: Path) -> None:
    # large photos: each decode takes milliseconds, far above a task handoff even on a
    # loaded machine, so the workers are busy decoding
    paths = make_jpegs(tmp_path, 16, min_side=900, max_side=1200, seed=6)
    photos = [{"image": str(p), "key": p.stem} for p in paths]
    with image_pipe(4).bind(photos).run("numpy") as loader:
        one_pass(loader)
        line = loader.bottleneck()
    assert LINE.match(line), line
    assert line.startswith("decode-bound: ") and "of worker time in decode_image" in line, line
    assert re.search(r"; the consumer waited [\d.]+ m?s of [\d.]+ m?s$", line), line


def test_a_slow_record_map_is_named(photos: list[dict[str, Any]]) -> None:
    def slow(record: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.03)  # holds its worker far longer than decoding a small JPEG
        return record

    chain = dataio.slot("image").decode_image().resize(h=32, w=32)
    pipe = dataio.pipeline(dataio.map(slow), chain, dataio.batch(8))
    with pipe.bind(photos[:16]).run("numpy") as loader:
        one_pass(loader)
        line = loader.bottleneck()
        rows = rows_of(loader.stats())
    assert line.startswith("transform-bound: ") and "worker time in record maps" in line, line
    maps = next(r for r in rows if r["stage"] == "transform" and r["thread"] == "workers")
    assert maps["seconds"] >= 16 * 0.03 * 0.9


def test_a_slow_batch_map_is_named(photos: list[dict[str, Any]]) -> None:
    def slow(batch: dataio.Batch) -> dataio.Batch:
        time.sleep(0.05)  # on the consumer thread, after the batch was built
        return batch

    with image_pipe(8, dataio.map(slow)).bind(photos[:16]).run("numpy") as loader:
        one_pass(loader)
        line = loader.bottleneck()
        rows = rows_of(loader.stats())
    assert line.startswith("transform-bound: ") and "on the consumer thread" in line, line
    maps = next(r for r in rows if r["stage"] == "transform" and r["thread"] == "consumer")
    assert maps["seconds"] >= 2 * 0.05 * 0.9


def test_a_slow_source_is_named() -> None:
    def records() -> Iterator[dict[str, Any]]:
        for i in range(40):
            time.sleep(0.005)
            yield {"x": i, "key": f"r{i}"}

    pipe = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(8))
    with pipe.bind(records).run("numpy", stats=True) as loader:
        wall, _ = one_pass(loader)
        line = loader.bottleneck()
        rows = rows_of(loader.stats())
    assert line.startswith("source-bound: ") and "on the consumer thread" in line, line
    source = next(r for r in rows if r["stage"] == "source")
    assert 40 * 0.005 * 0.9 <= source["seconds"] <= wall


def test_time_in_no_stage_is_named_scheduling() -> None:
    # a kernel of about a microsecond per record: the pool's per-record task handoffs,
    # timed in no stage, take nearly all of the pass
    records = [{"x": b"tiny", "key": f"r{i}"} for i in range(3000)]
    pipe = dataio.pipeline(dataio.slot("x").decode_bytes(), dataio.batch(64))
    with pipe.bind(records).run("numpy") as loader:
        one_pass(loader)
        line = loader.bottleneck()
    assert LINE.match(line) and line.startswith("scheduling-bound: workers busy "), line


def test_lineage_maps_batches_to_the_samples_delivered(
    photos: list[dict[str, Any]], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    records = list(photos[:20])
    records[6] = {"image": str(broken), "key": "broken"}
    shuffled = image_pipe(8, dataio.batch_transforms.shuffle())
    with shuffled.bind(records).run("numpy", on_failure="skip", seed=3) as loader:
        _, first = one_pass(loader)
        _, second = one_pass(loader)
        table = loader.lineage()
    assert table.column_names == ["epoch", "batch", "row", "position", "key"]
    for epoch, seen in ((0, first), (1, second)):
        for number, (indices, keys) in enumerate(seen):
            mine = table.filter((pc.field("epoch") == epoch) & (pc.field("batch") == number))
            assert mine.column("row").to_pylist() == list(range(len(indices)))
            assert mine.column("position").to_pylist() == list(indices)
            assert mine.column("key").to_pylist() == keys
    assert "broken" not in table.column("key").to_pylist()
    # the batch shuffle really reordered rows, so the lineage followed the delivered order
    assert any(list(indices) != sorted(indices) for indices, _ in first)


def test_lineage_numbers_batches_from_a_checkpoint(photos: list[dict[str, Any]]) -> None:
    pipe = image_pipe(4)
    records = photos[:16]
    with pipe.bind(records).run("numpy") as loader:
        it = iter(loader)
        next(it), next(it), next(it)
        state = loader.state_dict()
    with pipe.bind(records).run("numpy") as resumed:
        resumed.load_state_dict(state)
        _, seen = one_pass(resumed)
        table = resumed.lineage()
    assert sorted(set(table.column("batch").to_pylist())) == [3]
    assert table.column("key").to_pylist() == seen[0][1] == [r["key"] for r in records[12:]]


def test_lineage_keeps_the_newest_batches(photos: list[dict[str, Any]]) -> None:
    with (
        dataio.limits.scoped(max_lineage_batches=2),
        image_pipe(4).bind(photos[:24]).run("numpy") as loader,
    ):
        _, seen = one_pass(loader)
        table = loader.lineage()
    assert sorted(set(table.column("batch").to_pylist())) == [4, 5]
    assert table.column("key").to_pylist() == seen[4][1] + seen[5][1]
    assert table.schema.metadata[b"dropped"] == b"4"


def test_lineage_of_arrow_rows_reads_the_key_column() -> None:
    table = pa.table({"x": list(range(10)), "key": [f"a{i}" for i in range(10)]})
    pipe = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(4))
    with pipe.bind(table).run("numpy", stats=True) as loader:
        _, seen = one_pass(loader)
        lineage = loader.lineage()
    assert lineage.column("key").to_pylist() == [k for _, keys in seen for k in keys]
    assert lineage.column("batch").to_pylist() == [0] * 4 + [1] * 4 + [2] * 2


def test_lineage_of_python_records_without_media_slots() -> None:
    keyed = [{"x": i, "key": f"r{i}"} for i in range(10)]
    unkeyed = [{"x": i} for i in range(10)]
    pipe = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(4))
    for records, keys in ((keyed, [f"r{i}" for i in range(10)]), (unkeyed, [None] * 10)):
        with pipe.bind(records).run("numpy", stats=True) as loader:
            _, seen = one_pass(loader)
            lineage = loader.lineage()
        assert lineage.column("key").to_pylist() == keys == [k for _, ks in seen for k in ks]
        assert lineage.column("position").to_pylist() == list(range(10))


def test_stats_default_to_off_only_for_passthrough_plans(photos: list[dict[str, Any]]) -> None:
    columns = dataio.pipeline(dataio.slot("key").passthrough(), dataio.batch(8))
    with columns.bind(photos[:16]).run("numpy") as loader:
        one_pass(loader)
        assert loader.stats().num_rows == 0 and loader.lineage().num_rows == 0
        assert "run(..., stats=True)" in loader.bottleneck()
    mapped = dataio.pipeline(dataio.map(dict), dataio.slot("key").passthrough(), dataio.batch(8))
    for pipe in (image_pipe(), mapped):
        with pipe.bind(photos[:16]).run("numpy") as loader:
            one_pass(loader)
            assert loader.stats().num_rows > 0 and loader.lineage().num_rows == 16


def test_stats_off_keeps_rejects_only(photos: list[dict[str, Any]], tmp_path: Path) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"")
    records = [*photos[:7], {"image": str(broken), "key": "broken"}]
    with image_pipe().bind(records).run("numpy", stats=False, on_failure="skip") as loader:
        one_pass(loader)
        assert loader.stats().num_rows == 0 and loader.lineage().num_rows == 0
        assert "stats=False" in loader.bottleneck()
        assert loader.rejects().column("key").to_pylist() == ["broken"]
    with pytest.raises(PlanError, match="stats must be True, False or None"):
        image_pipe().bind(records).run("numpy", stats=1)  # type: ignore[arg-type]
