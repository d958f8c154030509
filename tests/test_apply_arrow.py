"""``Pipeline.apply_arrow``: slices of a stream, with their positions, give a loader's rows.

The oracle is the local loader over the same records (``run("arrow")``): the same values
(random ops included), the same order and the same surviving rows, for any slicing of
the stream into tables, at any seed and epoch.
"""

from __future__ import annotations

import io
import itertools

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
from dataio.exceptions import DecodeError, PlanError


def _jpeg(rng: np.random.Generator, h: int, w: int) -> bytes:
    pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


@pytest.fixture(scope="module")
def table() -> pa.Table:
    rng = np.random.default_rng(3)
    images = [_jpeg(rng, int(rng.integers(40, 70)), int(rng.integers(40, 70))) for _ in range(23)]
    images[9] = b"\xff\xd8\xff\xe0 not a jpeg"  # a truncated header: a row error
    return pa.table(
        {
            "image": pa.array(images, pa.binary()),
            "label": pa.array(np.arange(23) * 3, pa.int64()),
            "key": [f"k{i:02d}" for i in range(23)],
        }
    )


def _pipe(size: int = 5) -> dataio.Pipeline:
    image = (
        dataio.slot("image")
        .decode_image()
        .random_resized_crop(h=24, w=24, scale=(0.3, 1.0))
        .random_flip()
        .normalize(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    )
    return dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(size))


def _local(table: pa.Table, *, seed: int, epoch: int, shard=None) -> pa.Table:
    with (
        _pipe()
        .bind(table)
        .run("arrow", on_failure="skip", seed=seed, epoch=epoch, shard=shard) as loader
    ):
        return pa.Table.from_batches(list(loader))


def _assert_same(got: pa.Table, want: pa.Table) -> None:
    assert got.column_names == want.column_names
    for name in want.column_names:
        g, w = got[name].combine_chunks(), want[name].combine_chunks()
        if isinstance(w.type, pa.FixedShapeTensorType):
            assert g.type == w.type
            np.testing.assert_array_equal(g.to_numpy_ndarray(), w.to_numpy_ndarray())
        else:
            assert g.to_pylist() == w.to_pylist(), name


@pytest.mark.parametrize(("seed", "epoch"), [(0, 0), (7, 3)])
@pytest.mark.parametrize("cuts", [(0, 23), (0, 4, 11, 12, 23), (0, 7, 8, 9, 10, 17, 23)])
def test_slices_with_positions_equal_the_local_loader(table, seed, epoch, cuts) -> None:
    want = _local(table, seed=seed, epoch=epoch)
    pipe = _pipe()
    parts, rejects = [], []
    for lo, hi in itertools.pairwise(cuts):
        out = pipe.apply_arrow(
            table.slice(lo, hi - lo),
            positions=range(lo, hi),
            seed=seed,
            epoch=epoch,
            on_failure="skip",
        )
        parts.append(out.table)
        rejects.append(out.rejects)
    _assert_same(pa.concat_tables(parts), want)
    bad = pa.concat_tables(rejects)
    assert bad["position"].to_pylist() == [9]
    assert bad["key"].to_pylist() == ["k09"]
    assert bad["slot"].to_pylist() == ["image"]
    assert bad["epoch"].to_pylist() == [epoch]
    assert bad["error_type"].to_pylist() == ["DecodeError"]
    assert "record" not in bad["message"][0].as_py()  # the message, not the row prefix


def test_positions_not_row_offsets_seed_the_random_ops(table) -> None:
    """Without the positions every table would restart the generators at record 0."""
    pipe = _pipe()
    rows = table.slice(10, 6)
    placed = pipe.apply_arrow(rows, positions=np.arange(10, 16), seed=1).table
    offsets = pipe.apply_arrow(rows, positions=range(6), seed=1).table
    want = _local(table, seed=1, epoch=0).slice(9, 6)  # row 9 failed: 10.. follow at 9
    _assert_same(placed, want)
    assert not np.array_equal(
        offsets["image"].combine_chunks().to_numpy_ndarray(),
        placed["image"].combine_chunks().to_numpy_ndarray(),
    )


def test_a_position_column_and_a_sharded_loader(table) -> None:
    """A rank's rows are the ones at its stream positions, whichever slice holds them."""
    want = _local(table, seed=5, epoch=1, shard={"id": 1, "of": 2, "pad": False})
    mine = table.append_column("pos", pa.array(np.arange(23), pa.int64())).take(np.arange(1, 22, 2))
    out = _pipe().apply_arrow(mine, positions="pos", seed=5, epoch=1, on_failure="skip")
    _assert_same(out.table, want)
    assert out.rejects["position"].to_pylist() == [9]


def test_strict_raises_the_row_error_and_counts_are_checked(table) -> None:
    pipe = _pipe()
    with pytest.raises(DecodeError, match=r"key='k09' index=9 slot='image'"):
        pipe.apply_arrow(table.slice(8, 3), positions=range(8, 11))
    with pytest.raises(dataio.BatchFailedError, match="only 2 of 3 rows survived, 3 required"):
        pipe.apply_arrow(table.slice(8, 3), positions=range(8, 11), on_failure=3)
    clean = pipe.apply_arrow(table.slice(0, 3), positions=range(3))
    assert clean.rejects.num_rows == 0
    assert clean.rejects.column_names == [
        "epoch",
        "position",
        "key",
        "slot",
        "error_type",
        "message",
    ]
    assert repr(clean) == "ArrowResult(rows=3, rejects=0)"


def test_record_maps_run_and_see_python_records(table) -> None:
    pipe = dataio.pipeline(
        dataio.map(lambda r: {**r, "label": r["label"] + 1}),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
    )
    out = pipe.apply_arrow(table.slice(2, 3), positions=[2, 3, 4])
    assert out.table["label"].to_pylist() == [7, 10, 13]
    assert out.table["__index__"].to_pylist() == [2, 3, 4]


@pytest.mark.parametrize(
    ("positions", "message"),
    [
        (range(2), "2 positions for 3 rows"),
        ([0, -1, 2], "must be >= 0, got -1"),
        (["a", "b", "c"], "must be integers"),
        (pa.array([0, None, 2]), "1 positions are null"),
        (pa.array([0.0, 1.0, 2.0]), "must be integers, got double"),
        ("nope", "no column 'nope'"),
        # rows and their rejects are told apart by position (a review found a failed row
        # given another row's values when two rows shared one)
        ([4, 7, 4], "must be unique within a table: 4 appears 2 times"),
    ],
)
def test_bad_positions_are_plan_errors(table, positions, message) -> None:
    with pytest.raises(PlanError, match=message):
        _pipe().apply_arrow(table.slice(0, 3), positions=positions)


def test_batch_transforms_and_bad_options_are_refused(table) -> None:
    mixed = dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=8, w=8),
        dataio.slot("label").passthrough(),
        dataio.batch(4),
        dataio.map(lambda b: b),
    )
    with pytest.raises(PlanError, match="batch boundaries"):
        mixed.apply_arrow(table.slice(0, 2), positions=range(2))
    with pytest.raises(PlanError, match="on_failure"):
        _pipe().apply_arrow(table, positions=range(23), on_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="seed"):
        _pipe().apply_arrow(table, positions=range(23), seed=-1)
    with pytest.raises(PlanError, match="pyarrow Table"):
        _pipe().apply_arrow([1, 2], positions=range(2))


def test_an_empty_table_gives_an_empty_result_typed_like_others(table) -> None:
    out = _pipe().apply_arrow(table.slice(0, 0), positions=[])
    assert out.table.num_rows == 0
    assert out.rejects.num_rows == 0
    full = _pipe().apply_arrow(table.slice(0, 2), positions=[0, 1]).table
    assert out.table.schema == full.schema  # Ray concatenates blocks of one schema
    failed = _pipe().apply_arrow(table.slice(9, 1), positions=[9], on_failure="skip")
    assert failed.table.schema == full.schema
    assert failed.rejects["position"].to_pylist() == [9]


def test_errors_column_keeps_failed_rows_in_order(table) -> None:
    rows = table.slice(7, 5)  # positions 7..11; 9 is the bad JPEG
    out = _pipe().apply_arrow(
        rows, positions=range(7, 12), seed=2, on_failure="skip", errors="column"
    )
    dropped = _pipe().apply_arrow(rows, positions=range(7, 12), seed=2, on_failure="skip")
    got = out.table
    assert got.column_names == ["image", "label", "__index__", "__key__", "__error__"]
    assert got["__index__"].to_pylist() == [7, 8, 9, 10, 11]
    assert got["__key__"].to_pylist() == ["k07", "k08", "k09", "k10", "k11"]
    errors = got["__error__"].to_pylist()
    assert errors[:2] == [None, None] and errors[3:] == [None, None]
    assert errors[2].startswith("DecodeError: the JPEG header is corrupt")
    assert got["image"].null_count == 1 and not got["image"][2].is_valid
    assert got["label"].to_pylist() == [21, 24, None, 30, 33]
    good = got.filter(pa.compute.is_null(got["__error__"]))
    _assert_same(good.drop_columns(["__error__"]), dropped.table)
    assert out.rejects.equals(dropped.rejects)
    clean = _pipe().apply_arrow(table.slice(0, 2), positions=[0, 1], errors="column")
    assert clean.table["__error__"].null_count == 2
    with pytest.raises(PlanError, match="errors must be"):
        _pipe().apply_arrow(rows, positions=range(7, 12), errors="rows")  # type: ignore[arg-type]
