"""The DALI backend (``run(..., backend="dali")``) against the native kernels and Pillow.

Everything here runs on DALI's CPU backend except the one GPU test, which needs an
NVIDIA GPU. Images are few and small to keep the file fast.
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.resume import check_resume
from PIL import Image

import dataio
from dataio import batch_transforms, transforms
from dataio import cond as c
from dataio._native import cuda
from dataio.exceptions import DecodeError, DeviceError, PlanError
from dataio.plan.ops import IMAGENET_MEAN, IMAGENET_STD
from dataio.testing import photo_like

MEAN = np.array(IMAGENET_MEAN)
STD = np.array(IMAGENET_STD)


def encode(width: int, height: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo_like(width, height, np.random.default_rng(seed))).save(
        buffer, format="JPEG", quality=90
    )
    return buffer.getvalue()


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    """Seven JPEGs of mixed sizes and aspects (portrait, landscape, square)."""
    sizes = [(120, 90), (90, 130), (100, 100), (160, 96), (88, 150), (140, 110), (96, 96)]
    return [encode(w, h, seed) for seed, (w, h) in enumerate(sizes)]


@pytest.fixture(scope="module")
def records(images: list[bytes]) -> list[dict[str, Any]]:
    return [{"image": data, "label": i, "key": f"img{i}"} for i, data in enumerate(images)]


def imagenet(size: int = 64, crop: int = 56) -> dataio.Slot:
    return (
        dataio.slot("image")
        .decode_image()
        .resize_short(size)
        .center_crop(crop)
        .normalize("imagenet")
    )


def plan(image: dataio.Slot, *stages: Any, size: int = 3) -> dataio.Pipeline:
    return dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(size), *stages)


def collect(pipe: dataio.Pipeline, source: Any, **options: Any) -> list[dataio.Batch]:
    with pipe.bind(source).run(**options) as loader:
        return list(loader)


def pixels(chw: np.ndarray) -> np.ndarray:
    """Normalized CHW floats back to 0..255 HWC."""
    return (chw.transpose(1, 2, 0) * STD + MEAN) * 255.0


def psnr(actual: np.ndarray, expected: np.ndarray) -> float:
    mse = float(np.mean((np.asarray(actual, np.float64) - np.asarray(expected, np.float64)) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(255.0**2 / mse)


def pillow_imagenet(data: bytes, size: int, crop: int) -> np.ndarray:
    """torchvision's Resize(size) + CenterCrop(crop) in Pillow, as 0..255 HWC floats."""
    im = Image.open(io.BytesIO(data)).convert("RGB")
    width, height = im.size
    if width <= height:
        new = (size, int(size * height / width))
    else:
        new = (int(size * width / height), size)
    im = im.resize(new, Image.Resampling.BILINEAR)
    left, top = round((new[0] - crop) / 2), round((new[1] - crop) / 2)
    return np.asarray(im.crop((left, top, left + crop, top + crop)), np.float64)


def assert_close(native: list[dataio.Batch], dali: list[dataio.Batch], *, normalized: bool) -> None:
    """Same batches, rows, keys and labels; images within 40 dB PSNR."""
    assert [b.row_keys for b in dali] == [b.row_keys for b in native]
    assert [list(b.indices) for b in dali] == [list(b.indices) for b in native]
    for got, want in zip(dali, native, strict=True):
        np.testing.assert_array_equal(got["label"], want["label"])
        assert got["image"].shape == want["image"].shape
        assert got["image"].dtype == want["image"].dtype
        for a, b in zip(got["image"], want["image"], strict=True):
            a, b = (pixels(a), pixels(b)) if normalized else (a, b)
            assert psnr(a, b) >= 40.0


# -- the ImageNet-style chain ------------------------------------------------------------


def test_imagenet_chain_matches_native_and_pillow(
    images: list[bytes], records: list[dict[str, Any]]
) -> None:
    pipe = plan(imagenet(64, 56))
    source = dataio.records(records).shuffle(seed=4)
    native = collect(pipe, source)
    dali = collect(pipe, source, backend="dali")
    assert [len(b) for b in dali] == [3, 3, 1]
    assert dali[0]["image"].shape == (3, 3, 56, 56) and dali[0]["image"].dtype == np.float32
    assert_close(native, dali, normalized=True)
    for batch in dali:
        for row, label in zip(batch["image"], batch["label"], strict=True):
            reference = pillow_imagenet(images[int(label)], 64, 56)
            assert psnr(pixels(row), reference) >= 40.0


def test_arrow_rows_and_paths_feed_dali(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    import pyarrow as pa

    pipe = plan(imagenet(48, 40))
    table = pa.table({key: [r[key] for r in records] for key in ("image", "label", "key")})
    paths = []
    for r in records:
        path = tmp_path / f"{r['key']}.jpg"
        path.write_bytes(r["image"])
        paths.append({**r, "image": str(path)})
    native = collect(pipe, records)
    assert_close(native, collect(pipe, table, backend="dali"), normalized=True)
    assert_close(native, collect(pipe, paths, backend="dali"), normalized=True)


@pytest.mark.parametrize(
    "image",
    [
        dataio.slot("image").decode_image().resize(h=40, w=50),
        dataio.slot("image").decode_image().center_crop(48),  # a plain crop: no resample
        dataio.slot("image").decode_image(mode="gray").resize_short(48).center_crop(40),
        dataio.slot("image")
        .decode_image()
        .resize(h=32, w=32)
        .output(dtype="float16", layout="CHW"),
    ],
    ids=["resize", "plain-crop", "gray", "float16-chw"],
)
def test_other_chains_match_native(records: list[dict[str, Any]], image: dataio.Slot) -> None:
    pipe = plan(image)
    native = collect(pipe, records)
    assert_close(native, collect(pipe, records, backend="dali"), normalized=False)


def test_plain_crop_is_exact(records: list[dict[str, Any]]) -> None:
    pipe = plan(dataio.slot("image").decode_image().center_crop(h=40, w=56))
    native = collect(pipe, records)
    for got, want in zip(collect(pipe, records, backend="dali"), native, strict=True):
        np.testing.assert_array_equal(got["image"], want["image"])


def test_random_ops_draw_dataio_seeds(records: list[dict[str, Any]]) -> None:
    """Random windows and flips come from (seed, epoch, record): DALI sees native's."""
    image = (
        dataio.slot("image")
        .decode_image()
        .random_resized_crop(40, scale=(0.3, 1.0))
        .random_flip()
        .random_flip(direction="vertical")
    )
    pipe = plan(image)
    options = {"seed": 11, "epoch": 2}
    dali = collect(pipe, records, backend="dali", **options)
    assert_close(collect(pipe, records, **options), dali, normalized=False)
    other = collect(pipe, records, backend="dali", seed=12, epoch=2)
    assert any(psnr(a["image"], b["image"]) < 30 for a, b in zip(dali, other, strict=True))


# -- the loader around it: resume, shards, failures, batch transforms --------------------


def test_resume_and_shards_as_native(records: list[dict[str, Any]]) -> None:
    image = (
        dataio.slot("image").decode_image().resize_short(48).random_crop(40).normalize("imagenet")
    )
    pipe = plan(image, size=2)
    source = dataio.records(records).shuffle(seed=2)

    def make_loader(**options: Any) -> dataio.Loader:
        return pipe.bind(source).run(backend="dali", seed=3, **options)

    check_resume(make_loader, after=1)
    check_resume(make_loader, after=1, shard={"id": 1, "of": 2})
    for shard in ({"id": 0, "of": 2}, {"id": 1, "of": 2}):
        native = collect(pipe, source, seed=3, shard=shard)
        assert_close(
            native, collect(pipe, source, backend="dali", seed=3, shard=shard), normalized=True
        )


def test_optional_rows_and_completion_order(records: list[dict[str, Any]]) -> None:
    """Rows without an image are inactive (never prepared nor sent to DALI)."""
    rows = [dict(r, image=None) if i % 3 == 0 else dict(r) for i, r in enumerate(records)]
    image = dataio.slot("image", optional=True).decode_image().resize(h=32, w=40)
    pipe = dataio.pipeline(image, dataio.slot("label").passthrough(), dataio.batch(3))
    native = collect(pipe, rows)
    dali = collect(pipe, rows, backend="dali", order="completion")
    by_index = {tuple(b.indices): b for b in dali}
    assert sorted(by_index) == sorted(tuple(b.indices) for b in native)
    for want in native:
        got = by_index[tuple(want.indices)]
        for a, b in zip(got["image"], want["image"], strict=True):
            assert (a is None) == (b is None)
            if b is not None:
                assert psnr(a, b) >= 40.0


def truncated_in_scan(data: bytes) -> bytes:
    """A JPEG whose header is whole but whose entropy-coded scan stops a third of the way."""
    scan = data.index(b"\xff\xda")
    return data[: scan + (len(data) - scan) // 3]


def test_corrupt_jpeg_skipped_like_native(records: list[dict[str, Any]]) -> None:
    bad = truncated_in_scan(records[1]["image"])
    # saved as fuzz/corpus/jpeg/baseline-truncated-in-scan
    rows = [dict(r) for r in records]
    rows[1]["image"] = bad
    rows[4]["image"] = b"\xff\xd8\xff\xe0 not a jpeg at all"  # fails dataio's header check
    pipe = plan(imagenet(48, 40))
    native = collect(pipe, rows, on_failure="skip")
    dali = collect(pipe, rows, on_failure="skip", backend="dali")
    assert [k for b in dali for k in b.row_keys] == ["img0", "img2", "img3", "img5", "img6"]
    assert_close(native, dali, normalized=True)
    with pytest.raises(DecodeError, match=r"key='img1'.*DALI could not decode"):
        collect(pipe, rows, backend="dali")


def test_batch_transforms_keep_working(records: list[dict[str, Any]]) -> None:
    mix = batch_transforms.mixup(alpha=0.4, label="label", num_classes=7)
    pipe = plan(imagenet(48, 40), batch_transforms.shuffle(), mix)
    native = collect(pipe, records, seed=1)
    dali = collect(pipe, records, seed=1, backend="dali")
    assert len(dali) == len(native) == 3
    for got, want in zip(dali, native, strict=True):
        assert got.mixed_by == want.mixed_by == "mixup"
        np.testing.assert_allclose(got["label"], want["label"])  # the same blend of rows
        for a, b in zip(got["image"], want["image"], strict=True):
            assert psnr(pixels(a), pixels(b)) >= 40.0


# -- what DALI cannot run ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "named"),
    [
        (dataio.slot("image").decode_image().then(transforms.rotate90()), "rotate90"),
        (
            dataio.slot("image").decode_image().then(transforms.color_jitter(brightness=0.2)),
            "color_jitter",
        ),
        (dataio.slot("image").decode_image().resize(h=8, w=8).then(transforms.pad(top=2)), "pad"),
        (dataio.slot("image").decode_image(mode="rgba"), "decode_image(mode='rgba')"),
        (dataio.slot("image").decode_image().output(dtype="bfloat16"), "output(dtype='bfloat16'"),
        (
            dataio.slot("image")
            .decode_image()
            .when(c.shape(axis=0).gt(90))
            .then(transforms.center_crop(8))
            .otherwise(transforms.resize(h=8, w=8)),
            "when",
        ),
        (dataio.slot("image").decode_numpy(), "decode_numpy"),
    ],
    ids=["rotate90", "color_jitter", "pad", "rgba", "bfloat16", "branch", "numpy"],
)
def test_unsupported_ops_refused(
    records: list[dict[str, Any]], image: dataio.Slot, named: str
) -> None:
    pipe = plan(image)
    with pytest.raises(PlanError, match="backend='dali' cannot run") as info:
        pipe.bind(records).run(backend="dali")
    assert named in str(info.value) and "'image'" in str(info.value)


def test_unknown_backend_refused(records: list[dict[str, Any]]) -> None:
    with pytest.raises(PlanError, match="backend must be 'native' or 'dali'"):
        plan(imagenet()).bind(records).run(backend="tensorrt")  # type: ignore[arg-type]


def test_absent_gpu_refused(records: list[dict[str, Any]]) -> None:
    with pytest.raises(DeviceError, match="cuda:99"):
        plan(imagenet()).bind(records).run("torch", backend="dali", device="cuda:99")


def test_dataio_works_without_dali() -> None:
    """``import dataio`` never imports DALI; without it backend='dali' names the package."""
    script = textwrap.dedent(
        """
        import sys
        import dataio
        pipe = dataio.pipeline(dataio.slot("x").passthrough(), dataio.batch(2))
        assert [len(b) for b in pipe.bind([{"x": 1}, {"x": 2}]).run()] == [2]
        assert "nvidia.dali" not in sys.modules
        sys.modules["nvidia.dali"] = None  # as if not installed
        try:
            pipe.bind([{"x": 1}]).run(backend="dali")
        except dataio.DeviceError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert "nvidia-dali-cuda120" in done.stdout and "not installed" in done.stdout


@pytest.mark.gpu
@pytest.mark.skipif(
    not cuda()["found"], reason=f"needs an NVIDIA GPU: {cuda().get('why', 'none found')}"
)
def test_gpu_pipeline_matches_cpu(records: list[dict[str, Any]]) -> None:
    """nvJPEG (``device="mixed"``, with libjpeg-turbo's fancy chroma upsampling) and GPU
    resize give the CPU backend's pixels (which are within 40 dB of the native kernels')."""
    pytest.importorskip("nvidia.dali", reason="DALI (nvidia-dali-cuda120) is not installed")
    pipe = plan(imagenet(64, 56))
    cpu = collect(pipe, records, backend="dali")
    gpu = collect(pipe, records, output="torch", backend="dali", device="cuda:0")
    assert len(gpu) == len(cpu) > 0
    for got, want in zip(gpu, cpu, strict=True):
        assert got.row_keys == want.row_keys
        assert got["image"].device.type == "cuda" and got["image"].dtype.is_floating_point
        for a, b in zip(got["image"].cpu().numpy(), want["image"], strict=True):
            assert psnr(pixels(a), pixels(b)) >= 40.0, psnr(pixels(a), pixels(b))


def test_dali_is_refused_in_a_process_forked_after_it_ran(
    records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """DALI is not fork-safe: in a child forked after DALI ran in the parent (the at-fork
    hook sets the flag), backend='dali' asks for the 'spawn' start method."""
    from dataio.engine import dali

    monkeypatch.setattr(dali, "_FORKED_AFTER_USE", True)
    with pytest.raises(DeviceError, match="spawn"):
        collect(plan(imagenet(48, 40)), records, backend="dali")
