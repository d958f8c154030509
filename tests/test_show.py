"""dataio.show: the grid's cells are the source images (Pillow decodes them as the
oracle) whatever normalization, layout, dtype or output the pipeline used; captions are
the row keys."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataio
from dataio import batch_transforms
from dataio.exceptions import DataioError, FieldError, PlanError
from dataio.pictures import pixel_formats

SIDE = 48
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("jpegs")
    return dataio.testing.make_jpegs(folder, 6, min_side=SIDE, max_side=SIDE, seed=3)


@pytest.fixture(scope="module")
def records(jpegs: list[Path]) -> list[dict[str, object]]:
    return [{"image": p.read_bytes(), "key": p.stem, "label": i} for i, p in enumerate(jpegs)]


def oracle(path: Path, mode: str = "RGB") -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert(mode))


def one_batch(slot: dataio.Slot, records: list[dict[str, object]], output: str = "numpy"):
    pipe = dataio.pipeline(slot, dataio.slot("label").passthrough(), dataio.batch(len(records)))
    with pipe.bind(records).run(output) as loader:  # type: ignore[arg-type]
        (batch,) = list(loader)
    return batch


def cells(grid: Image.Image) -> list[np.ndarray]:
    pixels = np.asarray(grid.convert("RGB"))
    return [pixels[top:bottom, left:right] for left, top, right, bottom in grid.info["boxes"]]


def assert_cells_match(grid: Image.Image, jpegs: list[Path], tolerance: float) -> None:
    got = cells(grid)
    assert len(got) == len(jpegs)
    for cell, path in zip(got, jpegs, strict=True):
        want = oracle(path)
        assert cell.shape == want.shape
        diff = np.abs(cell.astype(np.int16) - want.astype(np.int16))
        # JPEG decoders may differ by a step or two on a few pixels; undoing a float
        # normalization adds one rounding
        assert float(diff.mean()) < tolerance and int(diff.max()) <= 8, (diff.mean(), diff.max())


def test_uint8_hwc_cells_are_the_decoded_images(jpegs, records) -> None:
    batch = one_batch(dataio.slot("image").decode_image(), records)
    grid = dataio.show(batch, slot="image")
    assert isinstance(grid, Image.Image) and grid.mode == "RGB"
    assert_cells_match(grid, jpegs, tolerance=1.0)


def test_imagenet_normalized_chw_is_undone_from_the_pipeline(jpegs, records) -> None:
    batch = one_batch(dataio.slot("image").decode_image().normalize("imagenet"), records)
    assert batch["image"].dtype == np.float32 and batch["image"].shape[1] == 3  # CHW
    assert batch.pixels["image"] == {"layout": "CHW", "mean": MEAN, "std": STD}
    assert_cells_match(dataio.show(batch, slot="image"), jpegs, tolerance=1.5)


def test_custom_normalize_hwc_float16(jpegs, records) -> None:
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    slot = (
        dataio.slot("image")
        .decode_image()
        .normalize(mean=mean, std=std, layout="HWC")
        .output(dtype="float16")
    )
    batch = one_batch(slot, records)
    assert batch["image"].dtype == np.float16 and batch["image"].shape[-1] == 3
    assert_cells_match(dataio.show(batch, "image"), jpegs, tolerance=2.0)


def test_torch_tensors_chw(jpegs, records) -> None:
    torch = pytest.importorskip("torch")
    batch = one_batch(dataio.slot("image").decode_image().normalize("imagenet"), records, "torch")
    assert isinstance(batch["image"], torch.Tensor)
    assert_cells_match(dataio.show(batch, "image"), jpegs, tolerance=1.5)
    bf16 = batch["image"].to(torch.bfloat16)  # a dtype NumPy has not
    grid = dataio.show({"image": bf16}, "image", mean=MEAN, std=STD)
    assert_cells_match(grid, jpegs, tolerance=3.0)


def test_arrow_output_with_parameters(jpegs, records) -> None:
    slot = dataio.slot("image").decode_image().normalize("imagenet")
    batch = one_batch(slot, records, "arrow")  # a RecordBatch: nothing recorded on it
    grid = dataio.show(batch, "image", mean=MEAN, std=STD)
    assert_cells_match(grid, jpegs, tolerance=1.5)
    assert grid.info["captions"] == [p.stem for p in jpegs]
    with pytest.raises(FieldError, match="'picture' is not in this batch"):
        dataio.show(batch, "picture")


def test_parameters_undo_a_normalization_the_batch_does_not_know(jpegs) -> None:
    stack = np.stack([oracle(p) for p in jpegs]).astype(np.float32) / 255.0
    chw = np.moveaxis((stack - np.array(MEAN)) / np.array(STD), -1, 1).astype(np.float32)
    assert_cells_match(dataio.show(chw, mean=MEAN, std=STD), jpegs, tolerance=0.6)
    # floats in [0, 1] without normalization, and wider integers holding 0-255
    assert_cells_match(dataio.show(stack), jpegs, tolerance=0.6)
    ints = np.stack([oracle(p) for p in jpegs]).astype(np.int32)
    assert_cells_match(dataio.show(ints, layout="HWC"), jpegs, tolerance=0.01)
    with pytest.raises(PlanError, match="both mean= and std="):
        dataio.show(chw, mean=MEAN)
    with pytest.raises(PlanError, match="3 channels"):
        dataio.show(chw, mean=(0.5, 0.5), std=(0.2, 0.2))


def test_gray_images(jpegs, records) -> None:
    batch = one_batch(dataio.slot("image").decode_image(mode="gray"), records)
    grid = dataio.show(batch, "image")
    for cell, path in zip(cells(grid), jpegs, strict=True):
        want = oracle(path, "L")
        assert np.all(cell[..., 0] == cell[..., 1])  # gray drawn as gray
        assert np.abs(cell[..., 0].astype(int) - want).mean() < 1.5


def test_captions_are_the_row_keys_and_are_drawn(jpegs, records) -> None:
    batch = one_batch(dataio.slot("image").decode_image(), records)
    grid = dataio.show(batch, "image", columns=3)
    assert grid.info["captions"] == [p.stem for p in jpegs]
    pixels = np.asarray(grid)
    boxes = grid.info["boxes"]
    assert len({top for _, top, _, _ in boxes}) == 2  # 3 columns, 2 rows
    for left, _, right, bottom in boxes:
        strip = pixels[bottom : bottom + 12, left:right]
        assert (strip.min(axis=-1) < 100).any(), "no caption text under the image"
    custom = dataio.show(batch, "image", captions=list("abcdef"))
    assert custom.info["captions"] == list("abcdef")
    with pytest.raises(PlanError, match="2 captions for 6 images"):
        dataio.show(batch, "image", captions=["a", "b"])


def test_mixed_batches_fall_back_to_row_numbers(records) -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image(),
        dataio.batch(len(records)),
        batch_transforms.mixup(alpha=0.4),
    )
    with pipe.bind(records).run(seed=1) as loader:
        (batch,) = list(loader)
    grid = dataio.show(batch, "image")
    assert grid.info["captions"] == [f"#{i}" for i in range(len(records))]


def test_size_columns_limit_and_notebook_png(records) -> None:
    batch = one_batch(dataio.slot("image").decode_image(), records)
    grid = dataio.show(batch, "image", size=16, columns=2, limit=4)
    assert len(grid.info["boxes"]) == 4
    assert all(r - l <= 16 and b - t <= 16 for l, t, r, b in grid.info["boxes"])  # noqa: E741
    png = grid._repr_png_()  # what Jupyter displays inline
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert Image.open(io.BytesIO(png)).size == grid.size


def test_bad_inputs_are_dataio_errors(records) -> None:
    batch = one_batch(dataio.slot("image").decode_image(), records)
    with pytest.raises(FieldError, match="'picture' is not in this batch"):
        dataio.show(batch, "picture")
    with pytest.raises(DataioError, match="stacked as"):
        dataio.show(batch, "label")  # one number per row, not images
    with pytest.raises(DataioError, match="gray, RGB or RGBA"):
        dataio.show(np.zeros((2, 8, 8, 5), np.uint8), layout="HWC")
    with pytest.raises(PlanError, match="limit must be a positive integer"):
        dataio.show(batch, "image", limit=0)
    with pytest.raises(PlanError, match="layout must be"):
        dataio.show(np.zeros((2, 8, 8, 3), np.uint8), layout="WHC")  # type: ignore[arg-type]


def test_pixel_formats_forget_batch_statistics() -> None:
    pipe = dataio.pipeline(
        dataio.slot("image").decode_image().normalize("imagenet"),
        dataio.slot("mask").decode_image().output(layout="CHW"),
        dataio.batch(2),
        batch_transforms.normalization("image"),
    )
    assert pixel_formats(pipe) == {
        "image": {"layout": "CHW", "mean": None, "std": None},
        "mask": {"layout": "CHW", "mean": None, "std": None},
    }


def test_rows_without_an_image_keep_each_image_under_its_own_key() -> None:
    """An optional slot's ``None`` rows are not drawn, and the images after them keep
    their own rows' keys (a review found them shifted onto earlier keys)."""
    dark, light = np.full((8, 8, 3), 50, np.uint8), np.full((8, 8, 3), 200, np.uint8)
    keys = ["k0", "k1", "k2", "k3"]
    batch = dataio.Batch({"image": [None, dark, None, light]}, keys=keys, indices=range(4))
    grid = dataio.show(batch, "image")
    assert grid.info["captions"] == ["k1", "k3"]
    for (left, top, right, bottom), want in zip(grid.info["boxes"], (50, 200), strict=True):
        cell = np.asarray(grid.convert("RGB").crop((left, top, right, bottom)))
        assert abs(float(np.median(cell)) - want) <= 2
