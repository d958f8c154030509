"""Loader outputs: NumPy, torch (zero-copy), Arrow (tensor columns, C stream), Batch API."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import dataio
import dataio.loader
from dataio.udfs.image import DRAFT_GAP

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def load_rgb(path: str, mode: str = "RGB"):
    with Image.open(path) as image:
        return image.convert(mode)


def reference(path: str) -> np.ndarray:
    """torchvision's Resize(256)/CenterCrop(224)/ToTensor/Normalize, written with Pillow."""
    image = load_rgb(path)
    w, h = image.size
    nw, nh = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    image = image.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = round((nw - 224) / 2), round((nh - 224) / 2)
    pixels = np.asarray(image.crop((left, top, left + 224, top + 224)), np.float32) / 255
    return ((pixels - MEAN) / STD).transpose(2, 0, 1)


def first_example() -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image")
        .decode_image(mode="rgb")
        .resize_short(256)
        .center_crop(h=224, w=224)
        .normalize("imagenet"),
        dataio.slot("label").passthrough(),
        dataio.batch(8, prefetch=2),
    )


def test_first_example_matches_the_torchvision_recipe(records) -> None:
    import torch

    with first_example().bind(records).run("torch") as loader:
        batches = list(loader)
    assert [len(b) for b in batches] == [8, 8, 4]
    for batch in batches:
        images = batch["image"]
        assert isinstance(images, torch.Tensor)
        assert images.dtype == torch.float32 and tuple(images.shape[1:]) == (3, 224, 224)
        assert batch["label"].tolist() == [records[i]["label"] for i in batch.indices]
        for row, index in enumerate(batch.indices):
            expected = reference(records[index]["image"])
            # full decode vs DCT-scaled decode differ slightly: compare in pixel units
            error = np.abs(images[row].numpy() - expected) * STD[:, None, None] * 255
            assert error.mean() < 1.5, (index, error.mean())


def test_batch_metadata(records) -> None:
    batch = next(iter(first_example().bind(records).run()))
    assert batch.row_keys == [r["key"] for r in records[:8]]
    assert batch.indices == list(range(8))
    assert batch.slots == ["image", "label"]
    assert "image" in batch and "nope" not in batch
    assert batch.sizes["image"] == [load_rgb(r["image"]).size[::-1] for r in records[:8]]
    assert repr(batch) == "Batch(rows=8, image: float32[8, 3, 224, 224], label: int64[8])"
    with pytest.raises(dataio.FieldError, match="slot 'nope' is not in this batch"):
        batch["nope"]


def capture_numpy(monkeypatch) -> list[dataio.Batch]:
    seen: list[dataio.Batch] = []
    real = dataio.loader.assemble

    def spy(job, *args):
        batch = real(job, *args)
        seen.append(batch)
        return batch

    monkeypatch.setattr(dataio.loader, "assemble", spy)
    return seen


def test_torch_output_shares_the_engine_buffer(records, monkeypatch) -> None:
    seen = capture_numpy(monkeypatch)
    with first_example().bind(records).run("torch") as loader:
        for batch in loader:
            assert batch["image"].data_ptr() == seen[-1]["image"].ctypes.data


def test_arrow_output_has_tensor_columns_without_copies(records, monkeypatch) -> None:
    seen = capture_numpy(monkeypatch)
    with first_example().bind(records).run("arrow") as loader:
        batches = list(loader)
    first = batches[0]
    assert isinstance(first, pa.RecordBatch)
    assert first.schema.names == ["image", "label", "__index__", "__key__"]
    tensor_type = first.schema.field("image").type
    assert isinstance(tensor_type, pa.FixedShapeTensorType)
    assert tensor_type.shape == [3, 224, 224] and tensor_type.value_type == pa.float32()
    storage = first.column("image").storage.values
    assert storage.buffers()[1].address == seen[0]["image"].ctypes.data
    np.testing.assert_array_equal(first.column("image").to_numpy_ndarray(), seen[0]["image"])
    assert first.column("label").to_pylist() == list(range(8))
    assert first.column("__key__").to_pylist() == [r["key"] for r in records[:8]]


def uint8_pipe(h: int = 20, w: int = 30) -> dataio.Pipeline:
    return dataio.pipeline(
        dataio.slot("image").decode_image().resize(h=h, w=w).output(layout="CHW"),
        dataio.slot("label").passthrough(),
        dataio.batch(6),
    )


def test_loader_is_an_arrow_stream_for_pyarrow_and_polars(records) -> None:
    import polars as pl

    table = pa.table(uint8_pipe().bind(records).run("numpy"))
    assert table.num_rows == len(records)
    assert table.column("label").to_pylist() == list(range(len(records)))
    frame = pl.from_arrow(pa.table(uint8_pipe().bind(records).run("arrow")))
    assert frame["label"].to_list() == list(range(len(records)))
    reader = pa.RecordBatchReader.from_stream(uint8_pipe().bind(records).run("torch"))
    images = reader.read_all().column("image").combine_chunks().to_numpy_ndarray()
    assert images.shape == (len(records), 3, 20, 30) and images.dtype == np.uint8


def test_arrow_stream_refuses_opaque_batch_map_results(records) -> None:
    pipe = dataio.pipeline(
        dataio.slot("label").passthrough(), dataio.batch(4), dataio.map(lambda b: b["label"])
    )
    with pytest.raises(dataio.DataioError, match="Arrow export needs Batch"):
        pa.table(pipe.bind(records).run())


def test_uint8_output_matches_the_pillow_resize(records) -> None:
    batch = next(iter(uint8_pipe().bind(records).run()))
    for row, index in enumerate(batch.indices):
        image = load_rgb(records[index]["image"])
        expected = np.asarray(image.resize((30, 20), Image.Resampling.BILINEAR))
        got = batch["image"][row].transpose(1, 2, 0)
        if min(image.width / 30, image.height / 20) < 2 * DRAFT_GAP:
            np.testing.assert_array_equal(got, expected)
            continue
        # a reduced DCT-scale decode: another antialiasing filter, so close, not equal
        mse = np.mean((got.astype(np.float64) - expected) ** 2)
        assert 10 * np.log10(255**2 / max(mse, 1e-12)) >= 30


def test_bytes_fields_and_paths_give_the_same_result(records) -> None:
    as_bytes = [{**r, "image": Path(r["image"]).read_bytes()} for r in records]
    a = np.concatenate([b["image"] for b in uint8_pipe().bind(records).run()])
    b = np.concatenate([b["image"] for b in uint8_pipe().bind(as_bytes).run()])
    np.testing.assert_array_equal(a, b)


def test_record_maps_see_input_records(records) -> None:
    pipe = dataio.pipeline(
        dataio.map(lambda r: {"image": r["path"], "label": r["class_id"]}),
        dataio.slot("image").decode_image().resize(h=8, w=8),
        dataio.slot("label").passthrough(),
        dataio.batch(32),
    )
    raw = [{"path": r["image"], "class_id": r["label"] * 10} for r in records]
    batch = next(iter(pipe.bind(raw).run()))
    assert batch["label"].tolist() == [r["label"] * 10 for r in records]
    assert batch["image"].shape == (len(records), 8, 8, 3)


def test_python_collate_through_an_object_slot() -> None:
    def collate(samples):
        return {"x": np.stack([s["x"] for s in samples]), "n": len(samples)}

    pipe = dataio.pipeline(
        dataio.slot("sample").passthrough(),
        dataio.batch(3),
        dataio.map(lambda batch: collate(batch["sample"])),
    )
    records = [{"sample": {"x": np.full(2, i)}} for i in range(5)]
    out = list(pipe.bind(records).run())
    assert [o["n"] for o in out] == [3, 2]
    np.testing.assert_array_equal(out[0]["x"], [[0, 0], [1, 1], [2, 2]])


def test_gray_and_rgba_modes(records) -> None:
    for mode, channels in (("gray", 1), ("rgba", 4)):
        pipe = dataio.pipeline(
            dataio.slot("image").decode_image(mode=mode).center_crop(h=64, w=64), dataio.batch(4)
        )
        batch = next(iter(pipe.bind(records).run()))
        assert batch["image"].shape == (4, 64, 64, channels)


def test_read_image(records) -> None:
    pixels = dataio.read_image(records[0]["image"], mode="gray")
    with Image.open(records[0]["image"]) as image:
        image.draft("L", image.size)  # libjpeg's own grayscale (luma-only) decode
        expected = np.asarray(image.convert("L"))
    np.testing.assert_array_equal(pixels, expected[..., None])
    with pytest.raises(dataio.NotFoundError):
        dataio.read_image("/nonexistent/x.jpg")


def test_duckdb_reads_every_batch_of_a_loader() -> None:
    import duckdb

    pipe = dataio.pipeline(dataio.slot("v").passthrough(), dataio.batch(2))
    loader = pipe.bind([{"v": i} for i in range(10)]).run("arrow")  # noqa: F841 - duckdb finds it by name
    # duckdb asks for the stream twice (schema, then data): nothing may be lost
    rows = duckdb.sql("SELECT v FROM loader ORDER BY v").fetchall()
    assert [r[0] for r in rows] == list(range(10))
