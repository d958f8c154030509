"""Slot chains as batched DataFusion functions (``dataio/engine/udf.py``).

The same chain runs three ways: in a pipeline slot, as a frame expression
(``Expr("chain", col, ops)``) and as a SQL function (``dataio.sql(..., functions=)``).
The last two must give exactly the pipeline's values, and all of them the Pillow/NumPy
references of ``tests/udfs/test_image.py``.
"""

from __future__ import annotations

import dataclasses
import io
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

import dataio
from dataio import Expr, decoders, transforms
from dataio.engine import pool as pool_module
from dataio.engine.udf_kernel import chain_kernel
from dataio.engine.udf_run import run_batch
from dataio.exceptions import DecodeError, LimitError, NotFoundError, PlanError
from dataio.plan.ops import IMAGENET_MEAN, IMAGENET_STD, Op
from dataio.testing import photo_like

IMAGENET = (
    decoders.image(),
    transforms.resize_short(256),
    transforms.center_crop(h=224, w=224),
    transforms.normalize("imagenet"),
)
SIZES = [(300, 260), (480, 320), (257, 700), (640, 480), (333, 333), (500, 260)]


def encode(pixels: np.ndarray, fmt: str = "JPEG") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def jpegs() -> list[bytes]:
    return [encode(photo_like(w, h, np.random.default_rng(i))) for i, (w, h) in enumerate(SIZES)]


@pytest.fixture(scope="module")
def parquet(jpegs: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chain") / "images.parquet"
    pq.write_table(pa.table({"key": range(len(jpegs)), "jpeg": pa.array(jpegs, pa.binary())}), path)
    return path


def chain(base: str, ops: tuple[Op, ...]) -> Expr:
    return Expr("chain", dataio.col(base), ops)


def tensors(column: Any) -> np.ndarray:
    """A fixed_shape_tensor column as one array (null rows included, as zeros)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    shape = array.type.shape
    return array.storage.values.to_numpy(zero_copy_only=False).reshape(len(array), *shape)


def variable_rows(column: Any) -> list[np.ndarray]:
    """The rows of a variable-shape struct column as arrays of its value type."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    data, shapes = array.field("data"), array.field("shape")
    return [
        data[i].values.to_numpy(zero_copy_only=False).reshape(shapes[i].as_py())
        for i in range(len(array))
    ]


def pipeline_values(jpegs: list[bytes], ops: tuple[Op, ...]) -> np.ndarray:
    """The reference path: a pipeline slot holding the same chain."""
    pipe = dataio.pipeline(dataio.slot("x", field="jpeg").then(*ops), dataio.batch(len(jpegs)))
    with pipe.bind([{"jpeg": data} for data in jpegs]).run("numpy") as loader:
        (batch,) = list(loader)
    return np.asarray(batch["x"])


def short_side_size(width: int, height: int, size: int) -> tuple[int, int]:
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def imagenet_reference(data: bytes) -> np.ndarray:
    """torchvision's Resize(256) + CenterCrop(224) with Pillow, uint8 HWC."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    new_w, new_h = short_side_size(*image.size, 256)
    resized = image.resize((new_w, new_h), Image.Resampling.BILINEAR)
    left, top = round((new_w - 224) / 2.0), round((new_h - 224) / 2.0)
    return np.asarray(resized.crop((left, top, left + 224, top + 224)))


def psnr(actual: np.ndarray, expected: np.ndarray) -> float:
    mse = np.mean((actual.astype(np.float64) - expected.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


# -- equal to the slot path and to the references -----------------------------------------------


def test_frame_chain_is_the_pipeline_slot(parquet: Path, jpegs: list[bytes]) -> None:
    frame = dataio.scan_parquet(parquet).with_columns(x=chain("jpeg", IMAGENET))
    table = frame.collect_arrow()
    assert table.column("key").to_pylist() == list(range(len(jpegs)))
    np.testing.assert_array_equal(tensors(table.column("x")), pipeline_values(jpegs, IMAGENET))


def test_sql_function_is_the_same_chain(parquet: Path, jpegs: list[bytes]) -> None:
    frame = dataio.scan_parquet(parquet)
    query = "SELECT key, prep(jpeg) AS x FROM t ORDER BY key"
    table = dataio.sql(query, t=frame, functions={"prep": chain("jpeg", IMAGENET)}).collect()
    np.testing.assert_array_equal(tensors(table.column("x")), pipeline_values(jpegs, IMAGENET))
    slot = dataio.slot("image").then(*IMAGENET)  # a slot names the same chain
    again = dataio.sql(query, t=frame, functions={"prep": slot}).collect()
    assert again.column("x").equals(table.column("x"))


def test_sql_functions_do_not_outlive_their_query(parquet: Path) -> None:
    functions = {"prep": IMAGENET}
    dataio.sql("SELECT prep(jpeg) AS x FROM t", t=parquet, functions=functions).collect()
    with pytest.raises(dataio.QueryError, match="prep"):
        dataio.sql("SELECT prep(jpeg) AS x FROM t", t=parquet).collect()


def test_imagenet_chain_matches_pillow_and_numpy(jpegs: list[bytes]) -> None:
    table = pa.table({"jpeg": jpegs})
    frame = dataio.sql("SELECT * FROM t", t=table)
    pixels = tensors(frame.with_columns(x=chain("jpeg", IMAGENET[:3])).collect().column("x"))
    normalized = tensors(frame.with_columns(x=chain("jpeg", IMAGENET)).collect().column("x"))
    for data, got, got_normalized in zip(jpegs, pixels, normalized, strict=True):
        # DCT-scaled decodes and the fast IDCT keep >= 40 dB (decision 002)
        assert psnr(got, imagenet_reference(data)) >= 40
        expected = (got.astype(np.float32) / 255 - np.float32(IMAGENET_MEAN)) / np.float32(
            IMAGENET_STD
        )
        # normalize reads the resample's unrounded output: within half a level of the pixels
        half_level = 0.51 / (255 * min(IMAGENET_STD))
        np.testing.assert_allclose(got_normalized, expected.transpose(2, 0, 1), atol=half_level)


def test_lossless_chain_matches_numpy_exactly() -> None:
    rng = np.random.default_rng(5)
    images = [photo_like(w, h, rng) for w, h in [(90, 70), (64, 64), (120, 81)]]
    ops = (decoders.image(), transforms.center_crop(h=60, w=50))
    table = pa.table({"png": pa.array([encode(p, "PNG") for p in images], pa.large_binary())})
    frame = dataio.sql("SELECT * FROM t", t=table).with_columns(x=chain("png", ops))
    got = tensors(frame.collect().column("x"))
    for pixels, crop in zip(images, got, strict=True):
        top, left = round((pixels.shape[0] - 60) / 2), round((pixels.shape[1] - 50) / 2)
        np.testing.assert_array_equal(crop, pixels[top : top + 60, left : left + 50])


def test_static_shapes_give_fixed_shape_tensor_columns(parquet: Path) -> None:
    frame = dataio.scan_parquet(parquet)
    cases = [
        (IMAGENET, pa.float32(), [3, 224, 224]),
        (IMAGENET[:3], pa.uint8(), [224, 224, 3]),
        ((decoders.image(mode="gray"), transforms.resize(h=32, w=48)), pa.uint8(), [32, 48, 1]),
    ]
    for ops, value_type, shape in cases:
        lazy = frame.with_columns(x=chain("jpeg", ops))
        planned = lazy.schema.field("x").type  # known before anything runs
        column = lazy.collect_arrow().column("x")
        for dtype in (planned, column.type):
            assert isinstance(dtype, pa.FixedShapeTensorType)
            assert dtype.value_type == value_type and dtype.shape == shape
        assert tensors(column).shape == (len(SIZES), *shape)


def test_variable_shapes_give_data_and_shape(jpegs: list[bytes]) -> None:
    ops = (decoders.image(mode="gray"), transforms.resize_short(64))
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"jpeg": jpegs}))
    column = frame.with_columns(x=chain("jpeg", ops)).collect().column("x")
    assert column.type == pa.struct(
        [("data", pa.large_list(pa.uint8())), ("shape", pa.list_(pa.int32()))]
    )
    expected = [np.asarray(v) for v in _pipeline_rows(jpegs, ops)]
    for got, want in zip(variable_rows(column), expected, strict=True):
        assert min(got.shape[:2]) == 64
        np.testing.assert_array_equal(got, want)


def _pipeline_rows(jpegs: list[bytes], ops: tuple[Op, ...]) -> list[Any]:
    pipe = dataio.pipeline(dataio.slot("x", field="jpeg").then(*ops), dataio.batch(1))
    with pipe.bind([{"jpeg": data} for data in jpegs]).run("numpy") as loader:
        return [np.asarray(batch["x"])[0] for batch in loader]


def test_paths_are_read(tmp_path: Path, jpegs: list[bytes]) -> None:
    paths = []
    for i, data in enumerate(jpegs):
        paths.append(str(tmp_path / f"{i}.jpg"))
        Path(paths[-1]).write_bytes(data)
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"path": paths}))
    got = tensors(frame.with_columns(x=chain("path", IMAGENET)).collect().column("x"))
    np.testing.assert_array_equal(got, pipeline_values(jpegs, IMAGENET))
    missing = pa.table({"path": [paths[0], str(tmp_path / "gone.jpg")]})
    lazy = dataio.sql("SELECT * FROM t", t=missing).with_columns(x=chain("path", IMAGENET))
    with pytest.raises(NotFoundError, match=r"row 1 of the batch \(path '.*gone\.jpg'\)"):
        lazy.collect()


def test_null_values_give_null_rows(jpegs: list[bytes]) -> None:
    table = pa.table({"jpeg": pa.array([jpegs[0], None, jpegs[1]], pa.binary())})
    frame = dataio.sql("SELECT * FROM t", t=table).with_columns(x=chain("jpeg", IMAGENET))
    column = frame.collect().column("x")
    assert column.is_null().to_pylist() == [False, True, False]
    np.testing.assert_array_equal(
        tensors(column)[[0, 2]], pipeline_values([jpegs[0], jpegs[1]], IMAGENET)
    )


# -- zero-copy, the pool, laziness -------------------------------------------------------------


@pytest.mark.parametrize("view", ["binary", "large_binary", "binary_view", "sliced"])
def test_values_are_read_in_place(
    monkeypatch: pytest.MonkeyPatch, parquet: Path, view: str
) -> None:
    """The kernel gets each value as a view into the Arrow data buffers, on pool threads."""
    column = pq.read_table(parquet).column("jpeg").combine_chunks()
    if view == "sliced":
        column = column.cast(pa.binary_view()).slice(2, 3)
    else:
        column = column.cast(getattr(pa, view)())
    monkeypatch.setattr(pool_module, "cpu_workers", lambda: 2)
    chain_ = chain_kernel(IMAGENET)
    seen: list[tuple[int, int, str]] = []
    run = chain_.kernel.run
    assert run is not None

    def spy(data: Any, rng: Any, out: Any) -> Any:
        assert isinstance(data, memoryview)
        seen.append(
            (np.frombuffer(data, np.uint8).ctypes.data, len(data), threading.current_thread().name)
        )
        return run(data, rng, out)

    spied = dataclasses.replace(chain_, kernel=dataclasses.replace(chain_.kernel, run=spy))
    result = run_batch(spied, column)
    buffers = [b for b in column.buffers()[1:] if b is not None]
    for address, size, thread in sorted(seen):
        assert any(b.address <= address and address + size <= b.address + b.size for b in buffers)
        assert thread.startswith("dataio-cpu")
    assert [s for _, s, _ in seen] != [] and sorted(s for _, s, _ in seen) == sorted(
        len(v.as_py()) for v in column
    )
    expected = run_batch(chain_, column.cast(pa.binary()))
    assert result.equals(expected)


def test_with_columns_is_lazy(tmp_path: Path, jpegs: list[bytes]) -> None:
    path = tmp_path / "images.parquet"
    pq.write_table(pa.table({"jpeg": pa.array([jpegs[0], b"not an image"], pa.binary())}), path)
    frame = dataio.scan_parquet(path)
    bad = frame.with_columns(x=chain("jpeg", IMAGENET))  # the bad row is not decoded yet
    path.unlink()  # the source now fails when read
    lazy = frame.with_columns(x=chain("jpeg", IMAGENET))  # plans only: nothing is read
    assert lazy.schema.field("x").type == pa.fixed_shape_tensor(pa.float32(), [3, 224, 224])
    assert bad.columns == lazy.columns == ["jpeg", "x"]
    with pytest.raises(dataio.DataioError, match=r"images\.parquet"):
        lazy.collect()


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["frame", "sql"])
def test_bad_bytes_raise_a_decode_error_naming_the_row(jpegs: list[bytes], how: str) -> None:
    table = pa.table({"jpeg": pa.array([jpegs[0], b"garbage!" * 10, jpegs[1]], pa.binary())})
    if how == "frame":
        lazy = dataio.sql("SELECT * FROM t", t=table).with_columns(x=chain("jpeg", IMAGENET))
    else:
        lazy = dataio.sql("SELECT prep(jpeg) FROM t", t=table, functions={"prep": IMAGENET})
    with pytest.raises(DecodeError, match=r"row 1 of the batch \(80 bytes\): not a recognised"):
        lazy.collect()


def test_limit_errors_keep_their_class(jpegs: list[bytes]) -> None:
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"jpeg": jpegs[:2]}))
    lazy = frame.with_columns(x=chain("jpeg", IMAGENET))
    with dataio.limits.scoped(max_image_pixels=1000), pytest.raises(LimitError, match="row 0"):
        lazy.collect()


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ((decoders.image(), transforms.random_flip()), "random ops"),
        ((decoders.image(), transforms.random_crop(h=8, w=8)), "random ops"),
        ((decoders.text(),), "Python objects"),
        ((transforms.resize(h=2, w=2),), "start with a decoder"),
    ],
)
def test_chains_frames_cannot_run_are_refused_when_planned(
    parquet: Path, ops: tuple[Op, ...], message: str
) -> None:
    frame = dataio.scan_parquet(parquet)
    with pytest.raises(PlanError, match=message):
        frame.with_columns(x=chain("jpeg", ops))
    with pytest.raises(PlanError, match=message):
        dataio.sql("SELECT f(jpeg) FROM t", t=frame, functions={"f": ops})


@pytest.mark.parametrize(
    ("functions", "message"), [({"f": 3}, "needs a chain"), ({"no t": IMAGENET}, "identifiers")]
)
def test_sql_functions_are_checked(parquet: Path, functions: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        dataio.sql("SELECT 1 FROM t", t=parquet, functions=functions)


# -- every deterministic op: frame expression == SQL function == pipeline slot -----------------

OP_CHAINS = {
    "decode": (decoders.image(),),
    "decode-gray": (decoders.image(mode="gray"),),
    "decode-rgba-exact": (decoders.image(mode="rgba", exact=True),),
    "resize": (decoders.image(), transforms.resize(h=40, w=56)),
    "resize_short": (decoders.image(), transforms.resize_short(48)),
    "center_crop": (decoders.image(), transforms.center_crop(h=100, w=90)),
    "normalize-hwc": (
        decoders.image(),
        transforms.resize(h=32, w=32),
        transforms.normalize(mean=0.5, std=0.25, layout="HWC"),
    ),
    "output-chw": (
        decoders.image(),
        transforms.resize(h=24, w=20),
        transforms.output(layout="CHW"),
    ),
    "output-float": (
        decoders.image(),
        transforms.center_crop(h=64, w=64),
        transforms.output(dtype="float32"),
    ),
    "pad": (decoders.image(), transforms.resize(h=16, w=16), transforms.pad(top=2, left=3)),
    "rotate90": (decoders.image(), transforms.resize(h=16, w=24), transforms.rotate90(1)),
    "grayscale": (decoders.image(), transforms.grayscale(channels=3)),
    "to_dtype": (decoders.image(), transforms.to_dtype("float32", scale=True)),
    "standardize": (
        decoders.image(),
        transforms.resize(h=20, w=20),
        transforms.to_dtype("float32"),
        transforms.standardize(),
    ),
}


@pytest.mark.parametrize("name", sorted(OP_CHAINS))
def test_each_op_gives_the_slot_values(jpegs: list[bytes], name: str) -> None:
    ops = OP_CHAINS[name]
    table = pa.table({"jpeg": pa.array(jpegs[:3], pa.binary())})
    by_expr = dataio.sql("SELECT * FROM t", t=table).with_columns(x=chain("jpeg", ops)).collect()
    by_sql = dataio.sql("SELECT f(jpeg) AS x FROM t", t=table, functions={"f": ops}).collect()
    assert by_sql.column("x").equals(by_expr.column("x"))
    column = by_expr.column("x").combine_chunks()
    if isinstance(column.type, pa.FixedShapeTensorType):
        got = list(tensors(column))
    else:
        got = variable_rows(column)
    for value, want in zip(got, _pipeline_rows(jpegs[:3], ops), strict=True):
        assert value.dtype == want.dtype
        np.testing.assert_array_equal(value, want)


def test_audio_and_tensor_chains(tmp_path: Path) -> None:
    import soundfile

    waves, arrays = [], []
    for n in (800, 1300):
        buffer = io.BytesIO()
        soundfile.write(
            buffer, np.sin(np.arange(n) / 7).astype(np.float32) / 2, 8000, "FLOAT", format="WAV"
        )
        waves.append(buffer.getvalue())
        buffer = io.BytesIO()
        np.save(buffer, np.arange(n // 100, dtype=np.int16).reshape(-1, 1))
        arrays.append(buffer.getvalue())
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"wav": waves, "npy": arrays}))
    audio = (decoders.audio(), transforms.fix_length(1000))
    tensor = (decoders.numpy(), transforms.to_dtype("float32"))
    table = frame.with_columns(a=chain("wav", audio), n=chain("npy", tensor)).collect()
    got_audio, got_arrays = variable_rows(table.column("a")), variable_rows(table.column("n"))
    for i, (wave, data) in enumerate(zip(waves, arrays, strict=True)):
        expected, _ = soundfile.read(io.BytesIO(wave), dtype="float32", always_2d=True)
        start = max(0, (len(expected) - 1000) // 2)  # fix_length crops at the centre
        fixed = np.zeros((1000, 1), np.float32)  # and pads at the end
        fixed[: min(1000, len(expected))] = expected[start : start + 1000]
        np.testing.assert_array_equal(got_audio[i], fixed)
        np.testing.assert_array_equal(got_arrays[i], np.load(io.BytesIO(data)).astype(np.float32))
    with pytest.raises(PlanError, match="to_dtype"):
        frame.with_columns(n=chain("npy", (decoders.numpy(),)))


@pytest.mark.parametrize("ops", [IMAGENET, (decoders.image(),)], ids=["static", "variable"])
@pytest.mark.parametrize("kind", ["binary", "large_binary", "binary_view"])
def test_empty_and_all_null_batches(ops: tuple[Op, ...], kind: str) -> None:
    dtype = getattr(pa, kind)()
    chain_ = chain_kernel(ops)
    empty = run_batch(chain_, pa.array([], dtype))
    nulls = run_batch(chain_, pa.array([None, None], dtype))
    assert empty.type == nulls.type == chain_.arrow_type
    assert len(empty) == 0 and nulls.null_count == 2


def test_chains_read_only_bytes_or_paths() -> None:
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"n": [1, 2]}))
    with pytest.raises(dataio.QueryError, match="reads bytes or paths, but col\\('n'\\) is int64"):
        frame.with_columns(x=chain("n", IMAGENET))
    with pytest.raises(dataio.QueryError, match="f\\(Int64\\)"):
        dataio.sql("SELECT f(n) FROM t", t=frame, functions={"f": IMAGENET})


def test_registry_namespace_chains(parquet: Path, jpegs: list[bytes]) -> None:
    """``col(...).image...`` builds the chain; unaliased, it keeps (replaces) its column."""
    prep = dataio.col("jpeg").image.decode().resize(256).center_crop(224).normalize("imagenet")
    assert isinstance(prep, Expr) and tuple(prep.args[1]) == IMAGENET
    frame = dataio.scan_parquet(parquet)
    table = frame.select("key", prep).collect_arrow()
    assert table.column_names == ["key", "jpeg"]
    np.testing.assert_array_equal(tensors(table.column("jpeg")), pipeline_values(jpegs, IMAGENET))
    query = "SELECT prep(jpeg) AS x FROM t ORDER BY key"
    by_sql = dataio.sql(query, t=frame, functions={"prep": prep}).collect()
    assert by_sql.column("x").equals(table.column("jpeg"))


def test_branches_run_per_value(jpegs: list[bytes]) -> None:
    from dataio import cond

    wide = (
        dataio.col("jpeg")
        .image.decode()
        .when(cond.shape(axis=1).gt(400))
        .then(transforms.resize((40, 80)))
        .otherwise(transforms.resize((40, 40)))
    )
    ops = tuple(wide.args[1])
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"jpeg": jpegs}))
    column = frame.with_columns(x=wide).collect().column("x")
    got = variable_rows(column)
    assert [g.shape[1] for g in got] == [80 if w > 400 else 40 for w, _ in SIZES]
    for value, want in zip(got, _pipeline_rows(jpegs, ops), strict=True):
        np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize(
    ("index", "offset", "length"),
    [(5, 0, 40), (0, 10_000, 40), (0, 0, 1 << 30)],
    ids=["buffer-index", "offset", "length"],
)
def test_views_pointing_outside_their_buffers_are_decode_errors(
    jpegs: list[bytes], index: int, offset: int, length: int
) -> None:
    """A hostile binary_view array (never validated) fails as a DataioError, not a crash."""
    data = pa.py_buffer(jpegs[0][:100])
    views = np.zeros(4, np.int32)
    views[:] = (length, 0, index, offset)
    values = pa.Array.from_buffers(pa.binary_view(), 1, [None, pa.py_buffer(views), data])
    with pytest.raises(DecodeError, match="row 0 of the batch"):
        run_batch(chain_kernel(IMAGENET), values)


def test_image_size_reads_headers_in_place(jpegs: list[bytes]) -> None:
    from dataio.engine.udf_image import image_sizes

    values = pa.array([jpegs[0], None, jpegs[2]], pa.binary()).cast(pa.binary_view())
    sizes = image_sizes(values).to_pylist()
    assert sizes == [
        {"height": SIZES[0][1], "width": SIZES[0][0]},
        None,
        {"height": SIZES[2][1], "width": SIZES[2][0]},
    ]
    frame = dataio.sql("SELECT * FROM t", t=pa.table({"b": [jpegs[0], b"\xff\xd8\xff"]}))
    with pytest.raises(DecodeError, match=r"image_size: row 1 of the batch \(3 bytes\)"):
        frame.select(dataio.col("b").image_size()).collect()


def test_several_files_keep_their_order(tmp_path: Path, jpegs: list[bytes]) -> None:
    """Partitions call the function concurrently; rows come back in the scan's order."""
    for part in range(3):
        rows = list(range(part, len(jpegs), 3))
        table = pa.table({"key": rows, "jpeg": pa.array([jpegs[i] for i in rows], pa.binary())})
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=1)
    frame = dataio.scan_parquet(tmp_path).with_columns(x=chain("jpeg", IMAGENET[:3]))
    table = frame.collect()
    keys = table.column("key").to_pylist()
    expected = pipeline_values([jpegs[k] for k in keys], IMAGENET[:3])
    assert keys == [k for part in range(3) for k in range(part, len(jpegs), 3)]  # file order
    np.testing.assert_array_equal(tensors(table.column("x")), expected)
