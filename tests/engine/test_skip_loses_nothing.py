"""``on_failure="skip"`` drops the bad rows, records them, and loses nothing else.

Oracles: each good row's array as ``np.load`` reads it back; the failing rows named
by key in ``batch.errors``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dataio
from dataio.exceptions import BatchFailedError, FormatError, ShapeMismatchError


def npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def loaded(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data))


def shaped_records(shapes: list[tuple[int, ...]]) -> list[dict[str, Any]]:
    return [
        {"key": f"r{i}", "x": npy(np.full(shape, i, dtype=np.float32))}
        for i, shape in enumerate(shapes)
    ]


def numpy_pipe(size: int) -> dataio.Pipeline:
    return dataio.pipeline(dataio.slot("x").decode_numpy(), dataio.batch(size))


# -- a row of another shape -------------------------------------------------------------


def test_one_odd_shape_drops_only_that_row() -> None:
    shapes = [(4,)] * 32
    shapes[5] = (3,)
    records = shaped_records(shapes)
    with numpy_pipe(32).bind(records).run(on_failure="skip") as loader:
        (batch,) = list(loader)
    good = [r for r in records if r["key"] != "r5"]
    assert len(batch) == 31 and batch.row_keys == [r["key"] for r in good]
    np.testing.assert_array_equal(batch["x"], np.stack([loaded(r["x"]) for r in good]))
    (error,) = batch.errors
    assert isinstance(error, ShapeMismatchError)
    assert (error.key, error.index, error.slot) == ("r5", 5, "x")
    assert "(3,)" in str(error) and "(4,)" in str(error)


def test_strict_still_raises_naming_the_record() -> None:
    shapes = [(4,)] * 32
    shapes[5] = (3,)
    with (
        numpy_pipe(32).bind(shaped_records(shapes)).run() as loader,
        pytest.raises(ShapeMismatchError, match=r"key='r5' index=5 slot='x'"),
    ):
        list(loader)


@pytest.mark.parametrize(
    ("shapes", "dropped"),
    [
        # the most common shape wins even when the first row is the odd one
        ([(3,), (4,), (4,), (4,)], ["r0"]),
        # a tie goes to the shape of the earliest row
        ([(2, 2), (4,), (2, 2), (4,)], ["r1", "r3"]),
        # three shapes: the one seen twice wins
        ([(1,), (2,), (2,), (3,)], ["r0", "r3"]),
    ],
)
def test_the_most_common_shape_is_kept(shapes: list[tuple[int, ...]], dropped: list[str]) -> None:
    records = shaped_records(shapes)
    with numpy_pipe(4).bind(records).run(on_failure="skip") as loader:
        (batch,) = list(loader)
    assert sorted(e.key for e in batch.errors) == dropped
    good = [r for r in records if r["key"] not in dropped]
    assert batch.row_keys == [r["key"] for r in good]
    np.testing.assert_array_equal(batch["x"], np.stack([loaded(r["x"]) for r in good]))


def test_odd_shapes_and_decode_errors_together() -> None:
    records = shaped_records([(4,), (4,), (3,), (4,), (4,), (4,)])
    records[0]["x"] = b"\x93NUMPY garbage"  # a decode error, not a shape
    with numpy_pipe(6).bind(records).run(on_failure="skip") as loader:
        (batch,) = list(loader)
    assert batch.row_keys == ["r1", "r3", "r4", "r5"]
    kinds = {e.key: type(e) for e in batch.errors}
    assert kinds["r2"] is ShapeMismatchError and issubclass(kinds["r0"], FormatError)


def test_a_survivor_count_counts_shape_errors() -> None:
    shapes = [(4,)] * 8
    shapes[3] = (5,)
    records = shaped_records(shapes)
    with numpy_pipe(8).bind(records).run(on_failure=7) as loader:
        assert len(next(iter(loader))) == 7
    with (
        numpy_pipe(8).bind(records).run(on_failure=8) as loader,
        pytest.raises(BatchFailedError, match="only 7 of 8"),
    ):
        next(iter(loader))


# -- a damaged file in a glob -----------------------------------------------------------


@pytest.fixture
def npy_dir(tmp_path: Path) -> Path:
    for i in range(6):
        np.save(tmp_path / f"f{i}.npy", np.arange(5, dtype=np.int64) * i)
    good = (tmp_path / "f2.npy").read_bytes()
    (tmp_path / "f2.npy").write_bytes(good[:-12])  # truncated: the header promises more
    return tmp_path


def test_damaged_file_in_a_glob_is_one_row_error(npy_dir: Path) -> None:
    pipe = dataio.pipeline(dataio.slot("array").passthrough(), dataio.batch(3))
    scan = dataio.scan_numpy(str(npy_dir / "*.npy"))
    with pipe.bind(scan).run(on_failure="skip") as loader:
        batches = list(loader)
    assert [b.row_keys for b in batches] == [["f0", "f1"], ["f3", "f4", "f5"]]
    for batch in batches:
        for key, array in zip(batch.row_keys, batch["array"], strict=True):
            np.testing.assert_array_equal(array, np.load(npy_dir / f"{key}.npy"))
    (error,) = batches[0].errors
    assert isinstance(error, FormatError) and error.key == "f2" and "f2.npy" in str(error)


def test_damaged_file_in_a_glob_under_strict(npy_dir: Path) -> None:
    pipe = dataio.pipeline(dataio.slot("array").passthrough(), dataio.batch(3))
    scan = dataio.scan_numpy(str(npy_dir / "*.npy"))
    with pipe.bind(scan).run() as loader, pytest.raises(FormatError, match=r"f2\.npy"):
        list(loader)


# -- a whole batch fails ----------------------------------------------------------------


def corrupt_middle_batch() -> list[dict[str, Any]]:
    records = shaped_records([(4,)] * 12)
    for record in records[4:8]:
        record["x"] = b"not numpy at all"
    return records


@pytest.mark.parametrize("order", ["submit", "completion"])
def test_next_batch_after_batch_failed(order: str) -> None:
    records = corrupt_middle_batch()
    with numpy_pipe(4).bind(records).run(on_failure="skip", order=order) as loader:
        it = iter(loader)
        assert next(it).row_keys == ["r0", "r1", "r2", "r3"]
        assert loader.state_dict()["samples_consumed"] == 4
        with pytest.raises(BatchFailedError, match="only 0 of 4") as info:
            next(it)
        assert sorted(e.key for e in info.value.errors) == ["r4", "r5", "r6", "r7"]
        assert loader.state_dict()["samples_consumed"] == 8  # the failed batch is consumed
        batch = next(it)
        # seen once under the whole suite's load: r8 rejected with a DecodeError; the
        # rejects' messages say what raised, should it come back
        late = [r for r in loader.rejects().to_pylist() if r["key"] not in ("r4", "r5", "r6", "r7")]
        assert batch.row_keys == ["r8", "r9", "r10", "r11"], [
            (r["key"], r["stage"], r["error_type"], r["message"]) for r in late
        ]
        np.testing.assert_array_equal(batch["x"], np.stack([loaded(r["x"]) for r in records[8:]]))
        # the last batch ends the pass: the loader stands at the next epoch's start
        assert loader.state_dict() == {**loader.state_dict(), "samples_consumed": 0, "epoch": 1}
        with pytest.raises(StopIteration):
            next(it)


def test_for_loop_can_catch_and_go_on() -> None:
    keys: list[list[str]] = []
    failures = 0
    with numpy_pipe(4).bind(corrupt_middle_batch()).run(on_failure="skip") as loader:
        it = iter(loader)
        while True:
            try:
                keys.append(next(it).row_keys)
            except BatchFailedError:
                failures += 1
            except StopIteration:
                break
    assert failures == 1 and keys == [["r0", "r1", "r2", "r3"], ["r8", "r9", "r10", "r11"]]


def test_resume_after_a_failed_batch_starts_at_the_next() -> None:
    records = corrupt_middle_batch()
    with numpy_pipe(4).bind(records).run(on_failure="skip") as loader:
        it = iter(loader)
        next(it)
        with pytest.raises(BatchFailedError):
            next(it)
        state = loader.state_dict()
    with numpy_pipe(4).bind(records).run(on_failure="skip") as resumed:
        resumed.load_state_dict(state)
        assert [b.row_keys for b in resumed] == [["r8", "r9", "r10", "r11"]]


def test_single_pass_source_goes_on_after_a_failed_batch() -> None:
    # An iterator cannot be re-read: going on must not restart the pass.
    records = corrupt_middle_batch()
    source = dataio.from_iterator(iter(records))
    with numpy_pipe(4).bind(source).run(on_failure="skip") as loader:
        it = iter(loader)
        next(it)
        with pytest.raises(BatchFailedError):
            next(it)
        assert next(it).row_keys == ["r8", "r9", "r10", "r11"]
