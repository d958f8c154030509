"""The executor: exact order, bounded work, cancellation, failure policies, determinism."""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

import dataio
from dataio.engine.pool import cpu_pool


def passthrough_pipe(*stages, size: int = 4, prefetch: int = 2) -> dataio.Pipeline:
    return dataio.pipeline(
        *stages, dataio.slot("v").passthrough(), dataio.batch(size, prefetch=prefetch)
    )


def jittery(seed: int):
    """A record map that sleeps a random, per-record time so tasks finish out of order."""

    def delay(record: dict) -> dict:
        time.sleep(random.Random(seed * 1_000_003 + record["v"]).uniform(0, 0.004))
        return record

    return delay


@pytest.mark.parametrize("concurrency", [1, 3, "auto"])
def test_submit_order_is_exact_under_random_delays(concurrency) -> None:
    records = [{"v": i} for i in range(57)]
    pipe = passthrough_pipe(dataio.map(jittery(concurrency == 1)), size=5, prefetch=3)
    with pipe.bind(records).run(concurrency=concurrency) as loader:
        batches = list(loader)
    expected = [list(range(i, min(i + 5, 57))) for i in range(0, 57, 5)]
    assert [b["v"].tolist() for b in batches] == expected
    assert [b.indices for b in batches] == [b["v"].tolist() for b in batches]


def test_completion_order_yields_ready_batches_first() -> None:
    def slow_first(record: dict) -> dict:
        if record["v"] == 0:  # blocks one pool thread; the others finish later batches
            time.sleep(0.3)
        return record

    records = [{"v": i} for i in range(8)]
    pipe = passthrough_pipe(dataio.map(slow_first), size=2, prefetch=4)
    with pipe.bind(records).run(order="completion") as loader:
        batches = [b["v"].tolist() for b in loader]
    assert sorted(v for b in batches for v in b) == list(range(8))
    assert batches[0] != [0, 1]


def test_drop_last_and_len() -> None:
    records = [{"v": i} for i in range(10)]
    keep = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(4))
    drop = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(4, drop_last=True))
    assert len(keep.bind(records).run()) == 3
    assert [len(b) for b in keep.bind(records).run()] == [4, 4, 2]
    assert len(drop.bind(records).run()) == 2
    assert [len(b) for b in drop.bind(records).run()] == [4, 4]


def test_prefetch_bounds_work_ahead() -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def count(record: dict) -> dict:
        with lock:
            seen.append(record["v"])
        return record

    records = [{"v": i} for i in range(100)]
    pipe = passthrough_pipe(dataio.map(count), size=4, prefetch=2)
    with pipe.bind(records).run() as loader:
        next(loader)
        time.sleep(0.2)
        # one batch delivered and `prefetch` more in flight, nothing further
        assert len(seen) == 4 * 3


def test_concurrency_bounds_records_in_flight() -> None:
    active = peak = 0
    lock = threading.Lock()

    def track(record: dict) -> dict:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.002)
        with lock:
            active -= 1
        return record

    records = [{"v": i} for i in range(40)]
    pipe = passthrough_pipe(dataio.map(track), size=8, prefetch=4)
    with pipe.bind(records).run(concurrency=1) as loader:
        assert sum(len(b) for b in loader) == 40
    assert peak == 1


def test_break_cancels_work_and_releases_buffers(records) -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=32, w=32), dataio.batch(2, prefetch=4)
    )
    threads_before = threading.active_count()
    loader = pipe.bind(records * 5).run()
    for batch in loader:
        executor = loader._executor
        buffers = [weakref.ref(job.buffers["image"]) for job in executor._jobs]
        assert buffers, "jobs should be in flight after the first batch"
        del batch
        break
    assert loader._executor is None and executor._closed
    assert executor.running_tasks == 0
    gc.collect()
    assert all(ref() is None for ref in buffers)
    # the shared pool is reused; breaking out leaves no extra thread behind
    assert threading.active_count() <= max(threads_before, cpu_pool()._max_workers + 1)
    # the checkpoint stands after the delivered batch; the next pass is the next epoch
    assert loader.state_dict()["samples_consumed"] == 2 and loader.epoch == 0
    assert next(iter(loader)).indices == [0, 1] and loader.epoch == 1


def test_context_exit_closes(records) -> None:
    pipe = dataio.pipeline(dataio.slot("image").decode_image().resize(h=16, w=16), dataio.batch(2))
    with pipe.bind(records).run() as loader:
        next(loader)
        executor = loader._executor
    assert loader.closed and executor._closed and executor.running_tasks == 0
    with pytest.raises(dataio.DataioError, match="closed"):
        next(loader)


def test_garbage_collection_closes_an_abandoned_loader() -> None:
    started = threading.Event()

    def slow(record: dict) -> dict:
        started.set()
        time.sleep(0.01)
        return record

    pipe = passthrough_pipe(dataio.map(slow), size=2, prefetch=4)
    loader = pipe.bind([{"v": i} for i in range(1000)]).run()
    next(loader)
    executor = loader._executor
    del loader
    gc.collect()
    deadline = time.monotonic() + 5
    while executor.running_tasks and time.monotonic() < deadline:
        time.sleep(0.01)
    assert executor.running_tasks == 0
    assert executor._closed


class Boom(Exception):
    pass


def test_record_map_errors_propagate_unchanged() -> None:
    def explode(record: dict) -> dict:
        if record["v"] == 5:
            raise Boom("bad record 5")
        return record

    loader = passthrough_pipe(dataio.map(explode)).bind([{"v": i} for i in range(12)]).run()
    got = []
    with pytest.raises(Boom, match="bad record 5"):
        for batch in loader:
            got.extend(batch["v"])
    assert got == [0, 1, 2, 3]
    assert loader._executor is None


def test_batch_map_errors_propagate_and_any_value_is_allowed() -> None:
    pipe = dataio.pipeline(
        dataio.slot("v").passthrough(),
        dataio.batch(3),
        dataio.map(lambda b: {"sum": sum(b["v"]), "keys": b.row_keys}),
    )
    assert list(pipe.bind([{"v": i} for i in range(6)]).run()) == [
        {"sum": 3, "keys": [None] * 3},
        {"sum": 12, "keys": [None] * 3},
    ]

    def fail(batch):
        raise Boom("batch map")

    bad = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(3), dataio.map(fail))
    with pytest.raises(Boom):
        list(bad.bind([{"v": 1}]).run())


@pytest.fixture()
def mixed_records(records, tmp_path: Path) -> list[dict]:
    corrupt = tmp_path / "corrupt.jpg"
    corrupt.write_bytes(Path(records[0]["image"]).read_bytes()[:300])
    rows = [dict(r) for r in records[:8]]
    rows[1] = {"image": str(corrupt), "key": "truncated"}
    rows[3] = {"image": str(tmp_path / "missing.jpg"), "key": "missing"}
    rows[4] = {"label": 3, "key": "no-image"}
    rows[6] = {"image": b"", "key": "empty"}
    return rows


def image_pipe(size: int = 8) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image").decode_image().resize_short(40).center_crop(h=32, w=32),
        dataio.batch(size),
    )


def test_strict_raises_the_first_row_error_with_its_position(mixed_records) -> None:
    with pytest.raises(dataio.DecodeError) as info:
        list(image_pipe().bind(mixed_records).run())
    error = info.value
    assert (error.index, error.key, error.slot) == (1, "truncated", "image")
    assert "key='truncated'" in str(error) and "slot='image'" in str(error)
    assert isinstance(error, ValueError)


def test_skip_drops_failed_rows_and_keeps_the_rest(mixed_records, records) -> None:
    clean = next(iter(image_pipe().bind(records[:8]).run()))
    batch = next(iter(image_pipe().bind(mixed_records).run(on_failure="skip")))
    assert batch.indices == [0, 2, 5, 7]
    np.testing.assert_array_equal(batch["image"], clean["image"][[0, 2, 5, 7]])
    kinds = {e.key: type(e) for e in batch.errors}
    assert kinds == {
        "truncated": dataio.DecodeError,
        "missing": dataio.NotFoundError,
        "no-image": dataio.FieldError,
        "empty": dataio.DecodeError,
    }
    missing = next(e for e in batch.errors if e.key == "missing")
    assert isinstance(missing, FileNotFoundError) and "missing.jpg" in str(missing)
    no_image = next(e for e in batch.errors if e.key == "no-image")
    assert "available fields: ['key', 'label']" in str(no_image)
    assert batch.sizes["image"] == [clean.sizes["image"][i] for i in (0, 2, 5, 7)]


def test_survivor_threshold(mixed_records) -> None:
    batch = next(iter(image_pipe().bind(mixed_records).run(on_failure=4)))
    assert len(batch) == 4
    with pytest.raises(
        dataio.BatchFailedError, match="only 4 of 8 rows survived, 5 required"
    ) as info:
        list(image_pipe().bind(mixed_records).run(on_failure=5))
    assert len(info.value.errors) == 4


def test_skip_raises_when_no_row_survives(tmp_path: Path) -> None:
    rows = [{"image": b"not an image", "key": i} for i in range(3)]
    with pytest.raises(dataio.BatchFailedError, match="only 0 of 3"):
        list(image_pipe(3).bind(rows).run(on_failure="skip"))


def test_log_errors_to_logger_and_callable(mixed_records, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="dataio.rows"):
        list(image_pipe().bind(mixed_records).run(on_failure="skip", log_errors=True))
    assert sum("dropped record" in r.getMessage() for r in caplog.records) == 4
    received: list[Exception] = []
    list(image_pipe().bind(mixed_records).run(on_failure="skip", log_errors=received.append))
    assert sorted(e.index for e in received) == [1, 3, 4, 6]


def test_mixed_shapes_that_cannot_stack(records) -> None:
    pipe = dataio.pipeline(dataio.slot("image").decode_image(), dataio.batch(4))
    with pytest.raises(dataio.ShapeMismatchError, match="different shapes"):
        list(pipe.bind(records[:4]).run())


def test_non_mapping_record_is_a_row_error() -> None:
    pipe = passthrough_pipe(size=2)
    batch = next(iter(pipe.bind([{"v": 1}, 5]).run(on_failure="skip")))
    assert batch["v"].tolist() == [1]
    assert isinstance(batch.errors[0], dataio.FieldError)


def random_pipe() -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image")
        .decode_image()
        .random_resized_crop(h=24, w=24)
        .random_flip()
        .output(layout="CHW"),
        dataio.batch(5, prefetch=3),
    )


def collect(loader) -> np.ndarray:
    with loader:
        return np.concatenate([b["image"] for b in loader])


def test_random_ops_do_not_depend_on_concurrency(records) -> None:
    serial = collect(random_pipe().bind(records).run(seed=3, concurrency=1))
    parallel = collect(random_pipe().bind(records).run(seed=3, concurrency=16))
    completion = random_pipe().bind(records).run(seed=3, order="completion")
    by_index = {i: img for b in completion for i, img in zip(b.indices, b["image"], strict=True)}
    np.testing.assert_array_equal(serial, parallel)
    np.testing.assert_array_equal(serial, np.stack([by_index[i] for i in range(len(records))]))
    other_seed = collect(random_pipe().bind(records).run(seed=4))
    other_epoch = collect(random_pipe().bind(records).run(seed=3, epoch=1))
    assert not np.array_equal(serial, other_seed)
    assert not np.array_equal(serial, other_epoch)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output": "pandas"}, "output must be one of"),
        ({"concurrency": 0}, "concurrency"),
        ({"order": "random"}, "order"),
        ({"on_failure": "ignore"}, "on_failure"),
        ({"on_failure": -1}, "on_failure"),
        ({"log_errors": "yes"}, "log_errors"),
        ({"seed": -1}, "seed"),
        ({"device": "cuda:0"}, "needs run"),
    ],
)
def test_run_option_errors(options: dict, message: str) -> None:
    pipe = passthrough_pipe()
    options = {"output": "numpy", **options}
    output = options.pop("output")
    with pytest.raises(dataio.PlanError, match=message):
        pipe.bind([]).run(output, **options)


def test_max_prefetch_bytes(records) -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=8, w=8), dataio.batch(2, prefetch=8)
    )
    per_batch = 2 * 8 * 8 * 3
    loader = pipe.bind(records).run(max_prefetch_bytes=per_batch * 2)
    assert loader._prefetch == 2
    assert sum(len(b) for b in loader) == len(records)
    with pytest.raises(dataio.PlanError, match="one batch needs 384 bytes"):
        pipe.bind(records).run(max_prefetch_bytes=100)
    variable = dataio.pipeline(dataio.slot("image").decode_image(), dataio.batch(2))
    with pytest.raises(dataio.PlanError, match="fixed-size outputs"):
        variable.bind(records).run(max_prefetch_bytes=1 << 20)
