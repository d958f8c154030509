"""SQL functions (``dataio/engine/sql.py``): dataio's kernels called from DataFusion SQL."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
from dataio.testing import photo_like

PIL_MODES = {"rgb": "RGB", "gray": "L", "rgba": "RGBA"}
CHANNELS = {"rgb": 3, "gray": 1, "rgba": 4}


def encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt)
    return buffer.getvalue()


def pillow_pixels(data: bytes, mode: str) -> np.ndarray:
    """The oracle: Pillow's full decode in ``mode``, as uint8 (height, width, channels)."""
    image = Image.open(io.BytesIO(data))
    if mode == "gray":
        image.draft("L", None)  # a JPEG's luma plane; no effect on other formats
    pixels = np.asarray(image.convert(PIL_MODES[mode]))
    return pixels[..., None] if pixels.ndim == 2 else pixels


@pytest.fixture(scope="module")
def images() -> list[bytes | None]:
    """Row values of the ``images`` table: JPEG, PNG, gray PNG, RGBA PNG and a null."""
    rng = np.random.default_rng(21)
    rgba = np.dstack([photo_like(30, 20, rng), rng.integers(0, 256, (20, 30), np.uint8)])
    return [
        encode(Image.fromarray(photo_like(96, 64, rng)), "JPEG"),
        encode(Image.fromarray(photo_like(80, 60, rng)), "PNG"),
        None,
        encode(Image.fromarray(photo_like(50, 40, rng)).convert("L"), "PNG"),
        encode(Image.fromarray(rgba), "PNG"),
    ]


def table(values: list[bytes | None], **columns: list[Any]) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(len(values)), pa.int64()), "bytes": pa.array(values, pa.binary())}
        | {name: pa.array(column) for name, column in columns.items()}
    )


@pytest.fixture
def ctx(images: list[bytes | None]) -> Any:
    """A dataio SQL context with ``images(id, bytes)`` registered."""
    context = dataio.sql_context()
    context.register_record_batches("images", [[table(images)]])
    return context


def query(ctx: Any, sql: str) -> pa.Table:
    return ctx.sql(sql).to_arrow_table()


@pytest.mark.parametrize("mode", ["rgb", "gray", "rgba"])
def test_decode_image_matches_pillow(ctx: Any, images: list[bytes | None], mode: str) -> None:
    result = query(
        ctx, f"SELECT id, decode_image(bytes, '{mode}') AS image FROM images ORDER BY id"
    )
    assert result.column("id").to_pylist() == list(range(len(images)))
    for data, row in zip(images, result.column("image").to_pylist(), strict=True):
        if data is None:
            assert row is None
            continue
        expected = pillow_pixels(data, mode)
        assert (row["height"], row["width"], row["channels"]) == expected.shape
        assert row["channels"] == CHANNELS[mode]
        pixels = np.frombuffer(row["pixels"], np.uint8).reshape(expected.shape)
        np.testing.assert_array_equal(pixels, expected)


def test_decode_image_result_type(ctx: Any) -> None:
    result = query(ctx, "SELECT decode_image(bytes, 'rgb') AS image FROM images")
    assert result.schema.field("image").type == pa.struct(
        [
            ("height", pa.int32()),
            ("width", pa.int32()),
            ("channels", pa.int32()),
            ("pixels", pa.binary()),
        ]
    )


def test_image_size_matches_pillow(ctx: Any, images: list[bytes | None]) -> None:
    result = query(ctx, "SELECT image_size(bytes) AS size FROM images ORDER BY id")
    column = result.column("size")
    assert column.type == pa.struct([("height", pa.int32()), ("width", pa.int32())])
    expected = []
    for data in images:
        if data is None:
            expected.append(None)
        else:
            width, height = Image.open(io.BytesIO(data)).size
            expected.append({"height": height, "width": width})
    assert column.to_pylist() == expected


@pytest.mark.parametrize("call", ["decode_image(bytes, 'rgb')", "image_size(bytes)"])
def test_null_bytes_give_null_rows(ctx: Any, images: list[bytes | None], call: str) -> None:
    result = query(ctx, f"SELECT {call} AS value FROM images ORDER BY id")
    column = result.column("value")
    assert column.is_null().to_pylist() == [data is None for data in images]
    nulls = query(ctx, f"SELECT count(*) AS n FROM images WHERE {call} IS NULL")
    assert nulls.column("n").to_pylist() == [1]


def test_image_size_fields_filter_rows(ctx: Any, images: list[bytes | None]) -> None:
    sql = (
        "SELECT id, image_size(bytes)['width'] AS width FROM images "
        "WHERE image_size(bytes)['width'] >= 50 ORDER BY id"
    )
    widths = {
        i: Image.open(io.BytesIO(data)).size[0] for i, data in enumerate(images) if data is not None
    }
    assert query(ctx, sql).to_pylist() == [
        {"id": i, "width": w} for i, w in sorted(widths.items()) if w >= 50
    ]


def test_mode_can_come_from_a_column(images: list[bytes | None]) -> None:
    data = [images[0], images[1], images[0]]
    modes = ["gray", "rgba", "rgb"]
    context = dataio.sql_context()
    context.register_record_batches("images", [[table(data, mode=modes)]])
    result = query(context, "SELECT decode_image(bytes, mode) AS image FROM images ORDER BY id")
    rows = result.column("image").to_pylist()
    assert [row["channels"] for row in rows] == [1, 4, 3]
    for value, mode, row in zip(data, modes, rows, strict=True):
        assert value is not None
        expected = pillow_pixels(value, mode)
        np.testing.assert_array_equal(
            np.frombuffer(row["pixels"], np.uint8).reshape(expected.shape), expected
        )


def test_kernels_run_over_several_batches_including_empty_ones(
    images: list[bytes | None],
) -> None:
    context = dataio.sql_context()
    batches = [table(images[:2]), table([]), table(images[2:])]
    context.register_record_batches("images", [batches])
    sizes = query(context, "SELECT image_size(bytes) AS size FROM images")
    decoded = query(context, "SELECT decode_image(bytes, 'gray') AS image FROM images")
    assert sizes.num_rows == decoded.num_rows == len(images)
    assert sizes.column("size").null_count == decoded.column("image").null_count == 1
    empty = query(context, "SELECT decode_image(bytes, 'rgb') AS image FROM images WHERE id < 0")
    assert empty.num_rows == 0


def test_register_kernels_on_an_existing_context(images: list[bytes | None]) -> None:
    from datafusion import SessionContext

    from dataio.engine.sql import register_kernels

    context = SessionContext()
    assert register_kernels(context) is context
    context.register_record_batches("images", [[table(images[:2])]])
    result = query(context, "SELECT image_size(bytes) AS size FROM images ORDER BY id")
    assert result.column("size").to_pylist() == [
        {"height": 64, "width": 96},
        {"height": 60, "width": 80},
    ]


def bad_rows(images: list[bytes | None]) -> dict[str, tuple[bytes, str]]:
    jpeg = images[0]
    assert jpeg is not None
    return {
        "empty": (b"", r"the image is empty \(0 bytes\)"),
        "truncated": (jpeg[: len(jpeg) // 2], r"(?i)corrupt or truncated"),
        "garbage": (np.random.default_rng(3).bytes(512), r"not a recognised image format"),
    }


@pytest.mark.parametrize("case", ["empty", "truncated", "garbage"])
def test_bad_bytes_fail_the_query_with_the_decode_error(
    images: list[bytes | None], case: str
) -> None:
    data, message = bad_rows(images)[case]
    context = dataio.sql_context()
    context.register_record_batches("images", [[table([images[1], data])]])
    with pytest.raises(Exception, match=message) as caught:
        query(context, "SELECT decode_image(bytes, 'rgb') AS image FROM images")
    assert "DecodeError" in str(caught.value)


@pytest.mark.parametrize("case", ["empty", "garbage"])
def test_image_size_of_bad_bytes_fails_the_query(images: list[bytes | None], case: str) -> None:
    data, message = bad_rows(images)[case]
    context = dataio.sql_context()
    context.register_record_batches("images", [[table([data])]])
    with pytest.raises(Exception, match=message):
        query(context, "SELECT image_size(bytes) AS size FROM images")


def test_unknown_mode_fails_the_query(ctx: Any) -> None:
    with pytest.raises(Exception, match=r"decode_image mode must be one of .*got 'cmyk'"):
        query(ctx, "SELECT decode_image(bytes, 'cmyk') AS image FROM images")
