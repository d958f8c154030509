"""Random ops in frame expressions and SQL functions, seeded like the slot path.

A seeded chain (``ChainExpr.seed(s)``) seeds row ``i`` of a frame (or the row whose SQL
position argument is ``i``) from ``record_rng(s, 0, i, 0)``: the generator a single-slot
pipeline ``run(seed=s)`` uses for record ``i``. Every random op of the registry is run
three ways over a multi-file Parquet frame and must give equal arrays; the ops are
enumerated from the registry, so a new random op fails here until it has arguments.
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import dataio
from dataio import col, transforms
from dataio.exceptions import PlanError, QueryError
from dataio.plan import registry
from dataio.plan.expr import ChainExpr
from dataio.plan.ops import Op
from dataio.testing import photo_like

ROWS = 10
FILES = 3  # rows split 4 + 4 + 2

#: Arguments making each random op draw, and a static output shape.
RANDOM_ARGS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "random_crop": ((24,), {}),
    "random_resized_crop": ((20,), {"scale": (0.2, 1.0)}),
    "random_flip": ((), {"p": 0.5}),
    "color_jitter": ((), {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}),
    "fix_length": ((800,), {"random_crop": True}),
}


def random_specs() -> list[registry.OpSpec[Any]]:
    return [spec for spec in registry.specs() if spec.random]


def jpeg(i: int) -> bytes:
    buffer = io.BytesIO()
    pixels = photo_like(40 + 3 * i, 36 + 2 * i, np.random.default_rng(i))
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def wav(i: int) -> bytes:
    samples = np.random.default_rng(100 + i).integers(-20000, 20000, 1000 + 97 * i, np.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(8000)
        out.writeframes(samples.tobytes())
    return buffer.getvalue()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ROWS images and sounds in FILES Parquet files; ``pos`` is the row's position."""
    root = tmp_path_factory.mktemp("random")
    bounds = [0, 4, 8, ROWS]
    for k in range(FILES):
        rows = range(bounds[k], bounds[k + 1])
        table = pa.table(
            {
                "pos": pa.array(rows, pa.int64()),
                "jpeg": pa.array([jpeg(i) for i in rows], pa.binary()),
                "wav": pa.array([wav(i) for i in rows], pa.binary()),
            }
        )
        pq.write_table(table, root / f"part-{k}.parquet")
    return root


def chain_for(spec: registry.OpSpec[Any]) -> ChainExpr:
    """``spec``'s op after its decoder, ending in a static shape."""
    assert spec.name in RANDOM_ARGS, f"new random op {spec.name!r}: add it to RANDOM_ARGS"
    args, kwargs = RANDOM_ARGS[spec.name]
    op = spec.op(*args, **kwargs)
    assert op.random, f"{spec.name}{args}{kwargs} does not draw"
    if "decode_audio" in spec.applies_to:
        return col("wav").audio.decode(mono=True).then(op)
    return col("jpeg").image.decode().then(op, transforms.center_crop(16))


def arrays(column: Any) -> np.ndarray:
    """A fixed_shape_tensor column as one array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    assert isinstance(array.type, pa.FixedShapeTensorType), array.type
    values = array.storage.values.to_numpy(zero_copy_only=False)
    return values.reshape(len(array), *array.type.shape)


def slot_values(frame: dataio.LazyFrame, ops: tuple[Op, ...], field: str, seed: int) -> np.ndarray:
    """The slot path: a single-slot pipeline over the frame."""
    pipe = dataio.pipeline(dataio.slot("x", field=field).then(*ops), dataio.batch(ROWS))
    with pipe.bind(frame).run("numpy", seed=seed) as loader:
        (batch,) = list(loader)
    return np.asarray(batch["x"])


def field_of(chain: ChainExpr) -> str:
    return chain.base.output_name()


@pytest.mark.parametrize("spec", random_specs(), ids=lambda spec: spec.name)
def test_slot_expression_and_sql_agree(folder: Path, spec: registry.OpSpec[Any]) -> None:
    chain = chain_for(spec)
    frame = dataio.scan_parquet(folder)
    assert len(frame.collect()) == ROWS
    for seed in (0, 7):
        seeded = chain.seed(seed)
        expected = slot_values(frame, chain.ops, field_of(chain), seed)
        assert expected.shape[0] == ROWS
        expression = arrays(frame.with_columns(x=seeded).collect().column("x"))
        np.testing.assert_array_equal(expression, expected)
        query = f"SELECT prep({field_of(chain)}, pos) AS x FROM t ORDER BY pos"
        sql = dataio.sql(query, t=frame, functions={"prep": seeded}).collect()
        np.testing.assert_array_equal(arrays(sql.column("x")), expected)
    other = arrays(frame.with_columns(x=chain.seed(1)).collect().column("x"))
    assert not np.array_equal(other, expression), "another seed draws other values"


@pytest.mark.parametrize("spec", random_specs(), ids=lambda spec: spec.name)
def test_order_and_partitions_do_not_change_values(
    folder: Path, tmp_path: Path, spec: registry.OpSpec[Any]
) -> None:
    seeded = chain_for(spec).seed(3)
    frame = dataio.scan_parquet(folder)
    collected = arrays(frame.with_columns(x=seeded).collect().column("x"))
    streamed = [b.column(b.schema.get_field_index("x")) for b in frame.with_columns(x=seeded)
                .iterate_batches()]  # fmt: skip
    np.testing.assert_array_equal(np.concatenate([arrays(c) for c in streamed]), collected)
    whole = tmp_path / "one.parquet"  # the same rows as one file, small row groups
    pq.write_table(frame.collect(), whole, row_group_size=3)
    single = dataio.scan_parquet(whole).with_columns(x=seeded).collect()
    np.testing.assert_array_equal(arrays(single.column("x")), collected)
    # SQL: a position argument, not the batch a row arrives in, seeds it
    query = f"SELECT pos, prep({field_of(seeded)}, pos) AS x FROM t ORDER BY pos DESC"
    backwards = dataio.sql(query, t=frame, functions={"prep": seeded}).collect()
    assert backwards.column("pos").to_pylist() == list(range(ROWS))[::-1]
    np.testing.assert_array_equal(arrays(backwards.column("x"))[::-1], collected)


def test_positions_follow_the_frame_a_pipeline_would_read(folder: Path) -> None:
    """After a filter, row i of the filtered frame is record i of a pipeline over it."""
    chain = col("jpeg").image.decode().random_crop(24)
    frame = dataio.scan_parquet(folder).filter(col("pos") % 2 == 1)
    got = frame.with_columns(x=chain.seed(5)).collect()
    assert got.column("pos").to_pylist() == [1, 3, 5, 7, 9]
    expected = slot_values(frame, chain.ops, "jpeg", 5)[: len(got)]
    np.testing.assert_array_equal(arrays(got.column("x")), expected)
    # and the column computed after a sort numbers the sorted rows
    ordered = frame.sort("pos", descending=True)
    got = ordered.with_columns(x=chain.seed(5)).collect()
    np.testing.assert_array_equal(
        arrays(got.column("x")), slot_values(ordered, chain.ops, "jpeg", 5)[:5]
    )


def test_seed_is_kept_through_the_chain_and_shown() -> None:
    chain = col("jpeg").image.decode().seed(4).random_crop(8).random_flip()
    assert chain.chain_seed == 4
    assert chain.describe().endswith(".seed(4)")
    assert chain.alias("x").output_name() == "x"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0", None])
def test_seed_must_be_a_non_negative_integer(bad: Any) -> None:
    with pytest.raises(PlanError, match="integer >= 0"):
        col("jpeg").image.decode().random_crop(8).seed(bad)


def test_unseeded_random_chains_say_how_to_seed(folder: Path) -> None:
    frame = dataio.scan_parquet(folder)
    chain = col("jpeg").image.decode().random_crop(8)
    with pytest.raises(PlanError, match=r"no seed.*\.seed\(0\).*prep\(jpeg, pos\)"):
        frame.with_columns(x=chain)
    with pytest.raises(PlanError, match=r"\.seed\(0\)"):
        dataio.sql("SELECT f(jpeg) FROM t", t=frame, functions={"f": chain})


def test_sql_positions_are_checked(folder: Path) -> None:
    frame = dataio.scan_parquet(folder)
    prep = {"prep": col("jpeg").image.decode().random_crop(8).seed(0)}
    with pytest.raises(QueryError, match="null position"):
        dataio.sql(
            "SELECT prep(jpeg, CAST(NULL AS BIGINT)) FROM t", t=frame, functions=prep
        ).collect()
    with pytest.raises(QueryError, match="position -1"):
        dataio.sql("SELECT prep(jpeg, pos - 1) FROM t", t=frame, functions=prep).collect()


def test_frames_read_by_position_seed_rows_by_their_frame_position(folder: Path) -> None:
    """Addressable frames compute columns on the rows read (shuffles, shards, bound
    pipelines): each row keeps the seed of its position in the frame, limits included."""
    chain = col("jpeg").image.decode().random_crop(24)
    frame = dataio.scan_parquet(folder)
    expected = arrays(frame.with_columns(x=chain.seed(2)).collect().column("x"))
    rows = frame.with_columns(x=chain.seed(2)).by_position()
    assert rows is not None
    taken = rows.take_batch([7, 2, 9, 2])
    np.testing.assert_array_equal(arrays(taken.column("x")), expected[[7, 2, 9, 2]])
    streamed = [(first, arrays(b.column("x"))) for first, b in rows.stream_run(3, ROWS)]
    np.testing.assert_array_equal(np.concatenate([a for _, a in streamed]), expected[3:])
    # a limit below the seeded step renumbers its input; one above does not
    below = frame.limit(6, offset=2).with_columns(x=chain.seed(2))
    above = frame.with_columns(x=chain.seed(2)).limit(6, offset=2)
    for lazy, want in ((below, slot_values(frame.limit(6, offset=2), chain.ops, "jpeg", 2)[:6]),
                       (above, expected[2:8])):  # fmt: skip
        indexed = lazy.by_position()
        assert indexed is not None
        np.testing.assert_array_equal(arrays(indexed.take_batch(range(6)).column("x")), want)
        np.testing.assert_array_equal(arrays(lazy.collect().column("x")), want)


@pytest.mark.parametrize("shuffle", [False, True])
def test_to_torch_keeps_each_rows_values(folder: Path, shuffle: bool) -> None:
    """A shuffled or sharded loader reads rows by position: each keeps its own draw."""
    lazy = dataio.scan_parquet(folder).with_columns(
        x=col("jpeg").image.decode().random_crop(24).seed(6)
    )
    expected = arrays(lazy.collect().column("x"))
    got: dict[int, np.ndarray] = {}
    for rank in range(2):
        shard = {"id": rank, "of": 2, "pad": False}
        with lazy.to_torch(
            batch_size=3, columns=["pos", "x"], shuffle=shuffle, shard=shard
        ) as loader:
            for batch in loader:
                for pos, x in zip(batch["pos"].tolist(), batch["x"].numpy(), strict=True):
                    got[pos] = x
    assert sorted(got) == list(range(ROWS))
    for pos, x in got.items():
        np.testing.assert_array_equal(x, expected[pos])
